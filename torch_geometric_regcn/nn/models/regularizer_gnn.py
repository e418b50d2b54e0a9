r"""A network of the regularizer-centred framework for any regulariser."""
import copy
from typing import Any, Optional, Sequence, Type, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from torch_geometric_regcn.nn.conv.regularizer_conv import RegularizerConv
from torch_geometric_regcn.nn.dropout import dropout
from torch_geometric_regcn.nn.linear import Linear
from torch_geometric_regcn.regularizers.base import Regularizer
from torch_geometric_regcn.regularizers.graph import check_graph_types
from torch_geometric_regcn.regularizers.registry import get
from torch_geometric_regcn.utils.compat import is_compiling
from torch_geometric_regcn.utils.validation import (
    check_channels,
    check_int,
    check_layer_dtype,
    check_materialized,
    check_module_materialized,
    check_node_features,
    check_real,
)


class RegularizerGNN(torch.nn.Module):
    r"""A network of :class:`~torch_geometric_regcn.RegularizerConv` layers:
    the regulariser chooses the model of Table 1 of the `"Beyond Graph
    Convolutional Network" <https://arxiv.org/abs/2301.04318>`_ paper.

    Layer-wise models (GCN, SGC, JKNet, tsGCN, the signed regulariser)
    propagate in every layer,

    .. math::
        \mathbf{H}^{(l)} = \mathrm{proj}_{\mathcal{S}}\left(\mathbf{R}^{-1}
        \mathbf{H}^{(l-1)}\mathbf{\Theta}^{(l)}\right),

    with the regulariser's projection (:obj:`regularizer.projection`) between
    layers and none after the last. Decoupled models (APPNP, DAGNN, GNN-LF,
    GNN-HF, the polynomial response and the non-quadratic regularisers:
    :obj:`regularizer.decoupled`) transform first and propagate once,
    :math:`\mathbf{R}^{-1}\,\mathrm{MLP}(\mathbf{X})`.

    Args:
        in_channels (int): Size of each input sample, or :obj:`-1`.
        hidden_channels (int): Size of each hidden sample.
        out_channels (int): Size of each output sample.
        num_layers (int, optional): Number of layers. (default: :obj:`2`)
        regularizer (str or Regularizer, optional): The regulariser: a
            registered name, a class, or an instance (copied into every
            layer). (default: :obj:`"gcn"`)
        dropout (float, optional): Dropout probability before each layer.
            (default: :obj:`0.0`)
        bias (bool, optional): Whether layers learn a bias. (default: :obj:`True`)
        solver (str, optional): The solver of every layer. (default: :obj:`None`)
        cached (bool, optional): Cache the graph operators (transductive).
            (default: :obj:`False`)
        tol (float, optional): Relative residual of :obj:`"cg"`.
            (default: :obj:`1e-6`)
        max_iter (int, optional): Iteration cap of :obj:`"cg"`.
            (default: :obj:`1000`)
        learn (Sequence[str], optional): Coefficients each layer learns (see
            :class:`~torch_geometric_regcn.RegularizerConv`). (default: :obj:`()`)
        root_weight (bool, optional): Ego/neighbour separation in every
            regulariser layer: each adds its transformed input
            :math:`\mathbf{H}^{(l-1)}\mathbf{\Theta}_{\mathrm{root}}` (see
            :class:`~torch_geometric_regcn.RegularizerConv`). (default: :obj:`False`)
        directed (bool, optional): Read the graph as directed, one weight
            per direction in every regulariser layer (see
            :class:`~torch_geometric_regcn.RegularizerConv`). (default: :obj:`False`)
        **coefficients (optional): The regulariser's coefficients.

    Shapes:
        - **input:**
          node features :math:`(|\mathcal{V}|, F_{in})`,
          edge indices :math:`(2, |\mathcal{E}|)` or a sparse adjacency
          :math:`(|\mathcal{V}|, |\mathcal{V}|)`, and the optional graph
          inputs of :meth:`RegularizerConv.forward
          <torch_geometric_regcn.RegularizerConv.forward>` by keyword
          (edge weights :math:`(|\mathcal{E}|)`, a semantic graph
          :math:`(2, |\mathcal{E}_X|)`, factors :math:`(|\mathcal{V}|, r)`)
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})`

    Example:
        .. code-block:: python

            from torch_geometric_regcn import RegularizerGNN
            from torch_geometric_regcn.datasets import contextual_sbm

            data = contextual_sbm(num_nodes=500, num_classes=5, num_features=16)
            model = RegularizerGNN(16, 32, 5, regularizer='gnn_hf', alpha=0.1, beta=1.0,
                                   dropout=0.5)
            out = model(data.x, data.edge_index)  # [500, 5], logits
    """
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2,
                 regularizer: Union[str, Regularizer, Type[Regularizer]] = 'gcn',
                 dropout: float = 0.0,
                 bias: bool = True, solver: Optional[str] = None, cached: bool = False,
                 tol: float = 1e-6, max_iter: int = 1000, learn: Sequence[str] = (),
                 root_weight: bool = False, directed: bool = False,
                 **coefficients: Any) -> None:
        super().__init__()
        num_layers = check_int('num_layers', num_layers)
        in_channels, hidden_channels, out_channels = check_channels(
            in_channels=in_channels, hidden_channels=hidden_channels, out_channels=out_channels)
        self.in_channels, self.out_channels = in_channels, out_channels
        template = get(regularizer, **coefficients)
        self.dropout = check_real('dropout', dropout, 0.0, 1.0, high_open=True)
        self.decoupled = template.decoupled
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        pairs = list(zip(sizes[:-1], sizes[1:]))
        self.lins = torch.nn.ModuleList(
            Linear(a, b, bias=bias, weight_initializer='glorot')
            for a, b in (pairs[:-1] if self.decoupled else []))
        # Each layer owns its regulariser (a copy, also of an instance passed in,
        # which two models would share otherwise), so trainable parts are per layer.
        self.convs = torch.nn.ModuleList(
            RegularizerConv(a, b, copy.deepcopy(template), bias=bias, solver=solver,
                            cached=cached, tol=tol, max_iter=max_iter, learn=learn,
                            root_weight=root_weight, directed=directed)
            for a, b in (pairs[-1:] if self.decoupled else pairs))

    @property
    def regularizer(self) -> Regularizer:
        r"""The regulariser of the first layer (each layer holds a copy)."""
        return self.convs[0].regularizer

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        for module in [*self.lins, *self.convs]:
            module.reset_parameters()

    def reset_cache(self) -> None:
        r"""Forgets the graph cached by :obj:`cached=True` in every layer."""
        for conv in self.convs:
            conv.reset_cache()

    def forward(self, x: Tensor, edge_index: Any, **kwargs: Any) -> Tensor:
        r"""Keyword arguments go to every
        :meth:`~torch_geometric_regcn.RegularizerConv.forward`, whose checks
        of the inputs (tensors, named with their conversion where they are
        NumPy arrays; :obj:`x`'s dtype against the parameters'; tensors on
        the :obj:`meta` device) run here first, before the first layer."""
        if not is_compiling():
            check_node_features(x, finite=False)
            check_graph_types(edge_index, kwargs.get('edge_weight'),
                              kwargs.get('semantic_edge_index'))
            check_materialized(x=x, edge_index=edge_index)
            check_module_materialized(self)
            first = self.lins[0] if len(self.lins) else self.convs[0].lin
            check_layer_dtype('x', x, first.weight.dtype, self.__class__.__name__)
        project = F.relu if self.regularizer.projection == 'relu' else (lambda t: t)
        for lin in self.lins:
            x = F.relu(lin(dropout(x, self.dropout, self.training)))
        for i, conv in enumerate(self.convs):
            x = conv(dropout(x, self.dropout, self.training), edge_index, **kwargs)
            if i < len(self.convs) - 1:
                x = project(x)
        return x

    def __repr__(self) -> str:
        conv = self.convs[0]
        options = ''.join(f', {name}=True' for name in ('root_weight', 'directed')
                          if getattr(conv, name))
        # As PyG's networks: (in_channels, out_channels, num_layers=...); a
        # model pickled before they were stored reads them from its layers.
        first = self.lins[0] if len(self.lins) else conv
        in_channels = getattr(self, 'in_channels', first.in_channels)
        out_channels = getattr(self, 'out_channels', self.convs[-1].out_channels)
        return (f'{self.__class__.__name__}({in_channels}, {out_channels}, '
                f'num_layers={len(self.lins) + len(self.convs)}, '
                f'regularizer={self.regularizer}, solver={conv.solver!r}{options})')
