r"""The tsGCN layer."""

from typing import Any, Dict, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.nn.inits import zeros

from torch_geometric_regcn.distributed.collectives import (
    Group,
    SharesGroup,
    agree_arguments,
    check_group,
)
from torch_geometric_regcn.linalg.graph_batch import WITH_GROUP, check_batch, graph_count
from torch_geometric_regcn.linalg.woodbury import (
    WoodburyCache,
    WoodburyCore,
    factor_arguments,
    woodbury_apply,
)
from torch_geometric_regcn.nn.linear import Linear
from torch_geometric_regcn.utils.compat import is_compiling
from torch_geometric_regcn.utils.validation import (
    check_channels,
    check_factors,
    check_flag,
    check_layer_dtype,
    check_materialized,
    check_module_materialized,
    check_node_features,
    check_projection,
    check_real,
    check_same_device,
    check_tensor,
)


class TSGCNConv(SharesGroup, torch.nn.Module):
    r"""The topological and semantic regularised graph convolution from the
    `"Beyond Graph Convolutional Network: An Interpretable Regularizer-centered
    Optimization Framework" <https://arxiv.org/abs/2301.04318>`_ paper
    (AAAI 2023)

    .. math::
        \mathbf{X}^{\prime} = s \left(\mathbf{I} - \mathbf{W}(\mathbf{I}_r +
        \mathbf{V}^{\top}\mathbf{W})^{-1}\mathbf{V}^{\top}\right)
        \mathbf{X} \mathbf{\Theta} + \mathbf{b}
        \approx s\,(\mathbf{I} - \mathbf{S})^{-1} \mathbf{X} \mathbf{\Theta}
        + \mathbf{b}
        = s\,(1 + \alpha + \beta)(\mathbf{I} + \alpha \tilde{\mathbf{L}}_G +
        \beta \tilde{\mathbf{L}}_X)^{-1} \mathbf{X} \mathbf{\Theta} + \mathbf{b},

    the minimiser of :math:`-\mathrm{Tr}(\mathbf{H}^{\top}\mathbf{X}
    \mathbf{\Theta}) + \frac{1}{2}\mathrm{Tr}(\mathbf{H}^{\top}\mathbf{R}
    \mathbf{H})` with :math:`\mathbf{R} = (\mathbf{I} + \alpha
    \tilde{\mathbf{L}}_G + \beta \tilde{\mathbf{L}}_X) / (s(1 + \alpha +
    \beta))`, where the factors :math:`\mathbf{W}, \mathbf{V} \in
    \mathbb{R}^{N \times r}` come from
    :class:`~torch_geometric_regcn.LowRankInverse`. :math:`s = 1` is the
    library's convention, shared with
    :class:`~torch_geometric_regcn.regularizers.TSGCNRegularizer`;
    :math:`s = 1 / (1 + \alpha + \beta)` is the authors' scaling. Apply the
    activation (ReLU in the paper's hidden layers) outside the layer.

    Cost: :math:`O(N r F_{out})` time and :math:`O(N r)` memory per call
    through the Woodbury identity, no :math:`N \times N` matrix formed; the
    :math:`r \times r` core is factorised in :math:`O(N r^2 + r^3)` once per
    set of factors (:class:`~torch_geometric_regcn.linalg.WoodburyCache`).
    The propagation runs in the factors' dtype; half-precision inputs are
    propagated in float32 and cast back. Only the whole graph's factors are
    accepted: rows sliced from them (by a loader or
    :meth:`~torch_geometric.data.Data.subgraph`) raise an error. A
    :class:`~torch_geometric.data.Batch` of graphs that each carry their own
    factors takes its :obj:`batch` vector: each graph is then propagated
    with its own factors, :math:`(\mathbf{I} + \mathbf{W}_g
    \mathbf{V}_g^{\top})^{-1}\mathbf{X}_g\mathbf{\Theta}`. The layer is
    a plain :class:`torch.nn.Module` that reads dense factors, not edges;
    :obj:`RegularizerConv('tsgcn', solver='cg')` gives the same propagation
    through message passing.

    ``docs/tsgcn.md`` (*The low-rank factors*) gives the scaling and when the
    core is recomputed; ``docs/distributed.md`` what :obj:`group` exchanges.

    Args:
        in_channels (int): Size of each input sample, or :obj:`-1` to derive the
            size from the first input(s) to the forward method.
        out_channels (int): Size of each output sample.
        bias (bool, optional): If set to :obj:`False`, the layer will not learn
            an additive bias. (default: :obj:`True`, as PyG's convolutions;
            the paper's network, :class:`~torch_geometric_regcn.TSGCN`, has
            none)
        scale (float, optional): The factor :math:`s` of the propagation;
            saved in the state dict, and a state loads its own.
            (default: :obj:`1.0`)
        group (ProcessGroup, optional): A :mod:`torch.distributed` process
            group over which the nodes are split by rows: the inputs and the
            output are this rank's rows, and each forward pass all-reduces
            the :math:`r \times F_{out}` matrix
            :math:`\mathbf{V}^{\top}\mathbf{X}\mathbf{\Theta}` (the backward
            pass its gradient). :func:`copy.deepcopy` shares it (an EMA or
            best-model copy runs on the same ranks); pickling raises (see
            :class:`~torch_geometric_regcn.distributed.collectives.SharesGroup`).
            (default: :obj:`None`, one process)

    Shapes:
        - **input:**
          node features :math:`(|\mathcal{V}|, F_{in})`,
          factors :math:`(|\mathcal{V}|, r)` and :math:`(|\mathcal{V}|, r)`,
          batch vector :math:`(|\mathcal{V}|)` *(optional)*
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})`

    Example:
        .. code-block:: python

            from torch_geometric_regcn import LowRankInverse, TSGCNConv
            from torch_geometric_regcn.datasets import contextual_sbm

            data = contextual_sbm(num_nodes=500, num_features=16)
            data = LowRankInverse(alpha=1.0, beta=0.2, rank=32)(data)
            conv = TSGCNConv(16, 8)
            out = conv(data.x, data.lowrank_w, data.lowrank_v)  # [500, 8]
    """
    def __init__(self, in_channels: int, out_channels: int, bias: bool = True,
                 scale: float = 1.0, group: Group = None) -> None:
        super().__init__()
        self.group = check_group(group)
        scale = check_real('scale', scale, 0.0, low_open=True)
        in_channels, out_channels = check_channels(in_channels=in_channels,
                                                   out_channels=out_channels)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.scale = float(scale)
        self.lin = Linear(in_channels, out_channels, bias=False, weight_initializer='glorot')
        if check_flag('bias', bias):
            self.bias = torch.nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter('bias', None)
        self._woodbury = WoodburyCache()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module."""
        self.lin.reset_parameters()
        zeros(self.bias)
        self._replaced = getattr(self, '_replaced', 0) + 1

    def get_extra_state(self) -> Dict[str, float]:
        # The output scale the weights were trained with (it changes the output).
        return {'scale': self.scale}

    def set_extra_state(self, state: Dict[str, float]) -> None:
        self.scale = _saved_scale(state)

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        # A checkpoint saved before the scale was (its layer's own scale, as then)
        state = state_dict.setdefault(prefix + '_extra_state', self.get_extra_state())
        _saved_scale(state)  # before any parameter is copied: a refused state changes nothing
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        # How often the weights were replaced, not updated by a step: what a
        # model holding summaries of them (MiniBatchTSGCN) must not reuse.
        self._replaced = getattr(self, '_replaced', 0) + 1

    def forward(self, x: Tensor, w: Tensor, v: Tensor,
                core: Optional[WoodburyCore] = None, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None) -> Tensor:
        r"""Runs the forward pass of the module.

        Args:
            x (torch.Tensor): The node features, shape :obj:`[N, F_in]`.
            w (torch.Tensor): The factor :math:`\mathbf{W}`, shape
                :obj:`[N, r]` (:obj:`data.lowrank_w` of
                :class:`~torch_geometric_regcn.LowRankInverse`).
            v (torch.Tensor): The factor :math:`\mathbf{V}`, shape
                :obj:`[N, r]` (:obj:`data.lowrank_v`).
            core (WoodburyCore, optional): The core of :obj:`w` and
                :obj:`v` when the caller holds it already, as
                :class:`~torch_geometric_regcn.TSGCN` does for its later
                layers; it is not checked against them. (default:
                :obj:`None`, from the layer's cache)
            batch (torch.Tensor, optional): The graph of each node,
                :obj:`[N]` (:obj:`data.batch` of a
                :class:`~torch_geometric.data.Batch`), when the graphs carry
                their own factors (:class:`LowRankInverse` applied to each
                graph before batching); not with :obj:`group`. The graphs
                are grouped by size on the host, so under
                :func:`torch.compile` it breaks the graph (no
                :obj:`fullgraph=True`). (default: :obj:`None`, one graph)
            batch_size (int, optional): The number of graphs in
                :obj:`batch`. (default: :obj:`None`, :obj:`batch[-1] + 1`)
        """
        h, batch_size = self._project(x, w, v, batch, batch_size)
        if core is None:
            core = self._core(x, w, v, batch, batch_size)
        elif self.group is not None and not is_compiling():  # this layer's widths, before
            self._agree(x, w, v, None, True, True, given=True)  # its all-reduce
        return self.propagate(h, w, v, core, agreed=True, batch=batch, batch_size=batch_size)

    def _project(self, x: Tensor, w: Tensor, v: Tensor, batch: Optional[Tensor] = None,
                 batch_size: Optional[int] = None) -> Tuple[Tensor, Optional[int]]:
        r"""The checks of :meth:`forward` and the projection
        :math:`\mathbf{X}\mathbf{\Theta}`, with the number of graphs of
        :obj:`batch`. With a :obj:`group`, a failed check raises on every rank
        through :meth:`_agree`; a rank whose checks passed must call
        :meth:`_agree` next (:meth:`_core` does)."""
        h, error = None, None
        try:  # on ranks agreed below, before any collective: none waits for one that raised
            if not is_compiling():
                _check_factors(x, w, v)
                if batch is not None and self.group is not None:
                    raise ValueError(WITH_GROUP)
                batch_size = check_batch(batch, x.size(0), batch_size, x.device)
                check_module_materialized(self)
                check_layer_dtype('x', x, self.lin.weight.dtype, self.__class__.__name__)
            h = self.lin(x)
            if not is_compiling():
                check_projection(h, x)
        except Exception as failure:
            if self.group is None or is_compiling():
                raise
            error = failure
        if error is not None:
            self._agree(x, w, v, error, False, False)  # raises, as on every rank
        if batch is not None and is_compiling():  # unchecked above
            batch_size = graph_count(batch, batch_size)
        return h, batch_size

    def _core(self, x: Tensor, w: Tensor, v: Tensor, batch: Optional[Tensor] = None,
              batch_size: Optional[int] = None) -> WoodburyCore:
        r"""The Woodbury core of :obj:`w` and :obj:`v` from the layer's
        :class:`WoodburyCache` (fingerprinting both, :math:`O(N r)`), the
        ranks agreed in the same collective (:meth:`_agree`).
        :class:`~torch_geometric_regcn.TSGCN` passes the core its first layer
        found (:attr:`WoodburyCache.last`) to the later ones."""
        return self._woodbury(w, v, from_eigenpairs=True, group=self.group,
                              agree=lambda fresh, keeps: self._agree(x, w, v, None, fresh,
                                                                     keeps),
                              batch=batch, batch_size=batch_size)

    def _agree(self, x: Tensor, w: Tensor, v: Tensor, error: Optional[Exception],
               fresh: bool, keeps: bool, given: bool = False) -> Tuple[bool, bool]:
        r"""With a :obj:`group`: the one collective of :meth:`forward` before
        the all-reduce of :math:`\mathbf{V}^{\top}\mathbf{X}\mathbf{\Theta}`
        (it replaces the :class:`WoodburyCache` vote): every rank's checks
        passed, the ranks hold factors of one width, dtype and device, inputs
        of one width and dtype, layers of one output width, dtype and
        :obj:`scale`, and a core passed in (:obj:`given`) on all or none;
        returns whether every rank's cache holds its core and would keep a
        new one."""
        same = {} if error is not None else {
            **factor_arguments(w, v, True), "the number of columns of 'x'": x.size(1),
            "the dtype of 'x' and of the layer's weights": (x.dtype, self.lin.weight.dtype),
            "'out_channels'": self.out_channels, "'scale'": self.scale,
            "whether 'core' is given": given}
        votes = agree_arguments(self.group, self.__class__.__name__, same, error,
                                share=[fresh, keeps])
        return all(f for f, _ in votes), all(k for _, k in votes)

    def propagate(self, h: Tensor, w: Tensor, v: Optional[Tensor], core: WoodburyCore,
                  summary: Optional[Tensor] = None, *, agreed: bool = False,
                  batch: Optional[Tensor] = None,
                  batch_size: Optional[int] = None) -> Tensor:
        r"""The layer after its projection, :math:`s\,(\mathbf{I} +
        \mathbf{W}\mathbf{V}^{\top})^{-1}\mathbf{H} + \mathbf{b}`, of the
        projected features :obj:`h`
        (:func:`~torch_geometric_regcn.linalg.woodbury_apply`). With
        :obj:`summary`, :math:`\mathbf{V}^{\top}\mathbf{H}` of all rows, :obj:`h`
        and :obj:`w` may be any rows, as
        :class:`~torch_geometric_regcn.MiniBatchTSGCN` passes a batch's. With
        a :obj:`group` the ranks first agree on the shapes (see
        :func:`~torch_geometric_regcn.linalg.woodbury_apply`), unless
        :obj:`agreed` says the caller did. With :obj:`batch`, each graph's
        rows with its own factors and core."""
        out = woodbury_apply(h, w, v, core, self.group, summary=summary, agreed=agreed,
                             batch=batch, batch_size=batch_size)
        if self.scale != 1.0:
            out = out * self.scale
        if self.bias is not None:
            out = out + self.bias
        return out

    def __repr__(self) -> str:
        scale = f', scale={self.scale:g}' if self.scale != 1.0 else ''
        return f'{self.__class__.__name__}({self.in_channels}, {self.out_channels}{scale})'


def _check_factors(x: Tensor, w: Tensor, v: Tensor) -> None:
    check_tensor('x', x, 'a torch.Tensor [num_nodes, in_channels]')
    check_tensor('w', w, 'a torch.Tensor [num_nodes, rank]')
    check_tensor('v', v, 'a torch.Tensor [num_nodes, rank]')
    check_materialized(x=x, w=w, v=v)
    check_same_device(x=x, w=w, v=v)
    check_node_features(x, finite=False)
    check_factors(w, v, x.size(0))


def _saved_scale(state: Any) -> float:
    r"""The :obj:`scale` of a :class:`TSGCNConv` state's extra state."""
    try:
        return float(check_real('scale', state['scale'], 0.0, low_open=True))
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"The checkpoint's extra state of TSGCNConv must hold its "
                         f"'scale', a positive number (got {state!r}: {error})") from None


def check_saved_scales(module: torch.nn.Module, state_dict: Dict[str, Any],
                       prefix: str) -> None:
    r"""Refuses, before any of them is loaded, a state dict in which one of
    the :class:`TSGCNConv` layers of :obj:`module` would refuse its scale:
    a model's earlier layers would otherwise be loaded already."""
    for name, child in module.named_modules():
        key = f'{prefix}{name}._extra_state'
        if isinstance(child, TSGCNConv) and key in state_dict:
            _saved_scale(state_dict[key])
