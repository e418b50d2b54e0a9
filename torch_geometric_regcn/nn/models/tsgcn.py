r"""The tsGCN network."""
from typing import Any, Dict, Optional

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group
from torch_geometric_regcn.nn.conv import TSGCNConv
from torch_geometric_regcn.nn.conv.tsgcn_conv import check_saved_scales
from torch_geometric_regcn.nn.dropout import dropout
from torch_geometric_regcn.utils.validation import check_channels, check_int, check_real


class TSGCN(torch.nn.Module):
    r"""The tsGCN network from the `"Beyond Graph Convolutional Network: An
    Interpretable Regularizer-centered Optimization Framework"
    <https://arxiv.org/abs/2301.04318>`_ paper (AAAI 2023): a stack of
    :class:`~torch_geometric_regcn.TSGCNConv` layers,

    .. math::
        \mathbf{H}^{(l)} = \mathrm{ReLU}\left(\mathbf{P} \mathbf{H}^{(l-1)}
        \mathbf{\Theta}^{(l)}\right), \qquad
        \mathbf{P} = s\left(\mathbf{I} - \mathbf{W}(\mathbf{I}_r +
        \mathbf{V}^{\top}\mathbf{W})^{-1}\mathbf{V}^{\top}\right),

    with no activation after the last layer (apply softmax in the loss). The
    paper's network has two layers, 32 hidden units, no bias and no dropout.

    Args:
        in_channels (int): Size of each input sample, or :obj:`-1` for lazy
            initialisation.
        hidden_channels (int): Size of each hidden sample.
        out_channels (int): Size of each output sample.
        num_layers (int, optional): The number of layers. (default: :obj:`2`)
        dropout (float, optional): Dropout probability before each layer.
            (default: :obj:`0.0`)
        bias (bool, optional): Whether the layers learn a bias.
            (default: :obj:`False`)
        scale (float, optional): The factor :math:`s` of every layer's
            propagation; see :class:`~torch_geometric_regcn.TSGCNConv`.
            (default: :obj:`1.0`)
        group (ProcessGroup, optional): A :mod:`torch.distributed` process
            group over which the nodes are split by rows: every layer works
            on this rank's rows (see :class:`~torch_geometric_regcn.TSGCNConv`),
            one all-reduce of :math:`r \times F` per layer and pass. Wrap the
            model in :class:`~torch.nn.parallel.DistributedDataParallel`.
            :func:`copy.deepcopy` of the model shares the group; pickling
            it raises (save its :meth:`state_dict` instead).
            (default: :obj:`None`, one process)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`,
          factors :math:`(|\mathcal{V}|, r)` and :math:`(|\mathcal{V}|, r)`
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})`

    Example:
        .. code-block:: python

            from torch_geometric_regcn import TSGCN, LowRankInverse
            from torch_geometric_regcn.datasets import contextual_sbm

            data = contextual_sbm(num_nodes=500, num_classes=5, num_features=16)
            data = LowRankInverse(alpha=1.0, beta=0.2, rank=32)(data)
            model = TSGCN(16, 32, 5)  # the paper's network: two layers, no bias
            out = model(data.x, data.lowrank_w, data.lowrank_v)  # [500, 5], logits
    """
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.0, bias: bool = False,
                 scale: float = 1.0, group: Group = None) -> None:
        super().__init__()
        num_layers = check_int('num_layers', num_layers)
        in_channels, hidden_channels, out_channels = check_channels(
            in_channels=in_channels, hidden_channels=hidden_channels, out_channels=out_channels)
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(
            TSGCNConv(a, b, bias=bias, scale=scale, group=group)
            for a, b in zip(sizes[:-1], sizes[1:]))
        self.dropout = check_real('dropout', dropout, 0.0, 1.0, high_open=True)

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        for conv in self.convs:
            conv.reset_parameters()

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        check_saved_scales(self, state_dict, prefix)  # a refused scale loads no layer
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: Tensor, w: Tensor, v: Tensor, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None) -> Tensor:
        r"""Runs the forward pass of the module; the arguments are those of
        :meth:`TSGCNConv.forward <torch_geometric_regcn.TSGCNConv.forward>`
        (:obj:`batch` for a :class:`~torch_geometric.data.Batch` of graphs
        that carry their own factors: each is propagated with its own).
        The Woodbury core of :obj:`w` and :obj:`v` is looked up once, in the
        first layer's cache, and passed to the later layers (one fingerprint
        of the factors per pass, not one per layer); factors the cache does
        not keep (that require gradients) are factorised by every layer."""
        core = None
        for i, conv in enumerate(self.convs):
            if i > 0 or isinstance(x, Tensor):  # else the first layer names x, on every rank
                x = dropout(x, self.dropout, self.training)
            x = conv(x, w, v, core=core, batch=batch, batch_size=batch_size)
            if core is None:
                core = conv._woodbury.last
            if i < len(self.convs) - 1:
                x = x.relu()
        return x

    def __repr__(self) -> str:
        conv = self.convs[0]
        scale = f', scale={conv.scale:g}' if conv.scale != 1.0 else ''
        return (f'{self.__class__.__name__}({conv.in_channels}, '
                f'{self.convs[-1].out_channels}, num_layers={len(self.convs)}{scale})')
