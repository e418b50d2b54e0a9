r"""The tsGCN network trained on mini-batches of nodes."""
import weakref
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor
from torch.nn.parameter import is_lazy

from torch_geometric_regcn.distributed.collectives import processes
from torch_geometric_regcn.linalg.woodbury import WoodburyCore, woodbury_core
from torch_geometric_regcn.nn.conv import TSGCNConv
from torch_geometric_regcn.nn.conv.tsgcn_conv import check_saved_scales
from torch_geometric_regcn.nn.dropout import dropout
from torch_geometric_regcn.utils.fingerprint import fingerprint, row_checksums
from torch_geometric_regcn.utils.sparse import dense_rows, gather_rows
from torch_geometric_regcn.utils.validation import (
    check_channels,
    check_choice,
    check_factors,
    check_finite,
    check_index,
    check_int,
    check_layer_dtype,
    check_materialized,
    check_module_materialized,
    check_node_features,
    check_projection,
    check_real,
    check_tensor,
    solve_dtype,
)

#: How :class:`MiniBatchTSGCN` keeps the summaries :math:`\mathbf{V}^{\top}\mathbf{H}`.
SUMMARIES = ('refresh', 'history')

# How the errors of node indices name the graph of MiniBatchTSGCN.refresh().
_REFRESHED = 'the graph the model was refreshed with'

# Row checksums, computed in the rows' dtype d (solve_dtype: one matrix-vector
# product, no float64 copy) and converted to float64 exactly, both those kept at
# refresh() (chunk by chunk) and a batch's. Each differs from the exact weighted
# sum by at most (F + 2) eps_d M (row_checksums), M the exact weighted sum of the
# row's magnitudes, so the two differ by at most 2 (F + 2) eps_d M. The bound is
# taken of the kept magnitude M', itself computed in d: M' >= M (1 - a) with
# a = (F + 2) eps_d, and 2 a / (1 - a) <= 2 a (1 + 2 a) for a <= 1/2. The last
# term covers the float64 roundings of the bound, its product with M' and the
# difference (fewer than 16, each below eps of float64 times M').
def _row_tolerance(dtype: torch.dtype, columns: int) -> float:
    a = (columns + 2) * torch.finfo(dtype).eps
    return 2 * a * (1 + 2 * a) + 16 * torch.finfo(torch.float64).eps


def _row_checksums(rows: Tensor) -> Tensor:
    r"""The row checksums of :obj:`rows` and their magnitudes, :obj:`[B, 2]`
    float64, computed in the rows' dtype (see :func:`_row_tolerance`)."""
    return row_checksums(rows, magnitudes=True, dtype=solve_dtype(rows.dtype)).double()


def _same_numbers(kept: Optional[Tensor], t: Tensor) -> bool:
    r"""Whether :obj:`t` is the parameter :obj:`kept` or a view of all of
    its numbers (:obj:`kept.detach()`, what :func:`torch.func.functional_call`
    is given for the model's own parameters): the same memory, so the same
    numbers, not a copy that may hold others."""
    if kept is None or kept is t:
        return kept is t
    try:
        return (t.shape == kept.shape and t.dtype == kept.dtype and t.device == kept.device
                and t.stride() == kept.stride()
                and t.storage_offset() == kept.storage_offset()
                and t.untyped_storage().data_ptr() == kept.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # a wrapper without storage (torch.func)
        return False


class _Graph(NamedTuple):
    r"""What :class:`MiniBatchTSGCN` derives from one whole graph's data
    alone, and what identifies that data: the layout, shape, dtype and device
    of :obj:`x`, :obj:`w` and :obj:`v`, the model's device and the chunk size
    (:obj:`identity`), and the row checksums of the three
    (:obj:`checksums`, :obj:`[N, 3, 2]` float64 on the device of :obj:`x`:
    each row's weighted sum and sum of magnitudes; see
    :func:`~torch_geometric_regcn.utils.fingerprint.row_checksums`), and
    their exact :func:`~torch_geometric_regcn.utils.fingerprint.fingerprint`
    (:obj:`prints`), which sees an edit below the rounding of a row's sum."""
    identity: Tuple[Any, ...]
    checksums: Tensor
    prints: Tuple[Any, ...]
    core: WoodburyCore
    first: Tensor  # V^T X, r x F_in, in the factors' dtype on the model's device


class MiniBatchTSGCN(torch.nn.Module):
    r"""The tsGCN network of :class:`~torch_geometric_regcn.TSGCN` from the
    `"Beyond Graph Convolutional Network: An Interpretable Regularizer-centered
    Optimization Framework" <https://arxiv.org/abs/2301.04318>`_ paper
    (AAAI 2023), computed on the rows :math:`\mathcal{B}` of a mini-batch of
    nodes. Rows :math:`\mathcal{B}` of a layer with the low-rank propagation
    :math:`\mathbf{P} = \mathbf{I} - \mathbf{W}\mathbf{C}^{-1}
    \mathbf{V}^{\top}`, :math:`\mathbf{C} = \mathbf{I}_r +
    \mathbf{V}^{\top}\mathbf{W}`, need the batch's own rows and one global
    :math:`r \times F` summary of the layer's input:

    .. math::
        \mathbf{H}^{(l)}_{\mathcal{B}} = \sigma\Big(s\big(
        \mathbf{H}^{(l-1)}_{\mathcal{B}} \mathbf{\Theta}^{(l)} -
        \mathbf{W}_{\mathcal{B}} \mathbf{C}^{-1}
        (\mathbf{V}^{\top}\mathbf{H}^{(l-1)}) \mathbf{\Theta}^{(l)}\big)
        + \mathbf{b}^{(l)}\Big),
        \qquad \mathbf{H}^{(0)} = \mathbf{X},

    with ReLU as :math:`\sigma` in hidden layers and none after the last.
    Given the summaries :math:`\mathbf{V}^{\top}\mathbf{H}^{(l-1)}` of the
    current weights, this is exactly :class:`~torch_geometric_regcn.TSGCN`'s
    output on those rows, with the same parameters (the same
    :meth:`state_dict`). :math:`\mathbf{V}^{\top}\mathbf{X}` and
    :math:`\mathbf{C}` depend on the data only, so the first layer is exact;
    later summaries depend on the weights and are kept, computed with earlier
    weights (:obj:`summary`): :obj:`"refresh"` recomputes them in :meth:`refresh`
    (once per epoch), :obj:`"history"` also keeps every node's hidden rows
    and updates the summaries from each training batch (in one process: it
    refuses to train in a :obj:`torch.distributed` group of more than one,
    where each process's history would hold its own batches only). Summaries
    are constants of a step, so the gradient through the other nodes' rows is
    left out; :meth:`inference` gives exact outputs for the current weights.
    ``docs/minibatch.md`` describes both modes and the approximation.

    What is kept is refused rather than reused when in doubt: summaries
    computed with other weights than the current ones are used only after
    optimizer steps (the approximation above). :meth:`load_state_dict` and
    :meth:`reset_parameters` forget them, and a forward pass before the next
    :meth:`refresh` raises, as it does once a parameter changed its dtype,
    device or shape, or a layer's weights were replaced through the layer
    itself (its :meth:`~torch_geometric_regcn.TSGCNConv.reset_parameters` or
    :meth:`load_state_dict`); other writes into the weights count as steps.
    The data is identified by the row checksums of :obj:`x`, :obj:`w` and
    :obj:`v`
    (:func:`~torch_geometric_regcn.utils.fingerprint.row_checksums`), which
    see every write, also through :obj:`.data` or NumPy: :meth:`refresh` and
    :meth:`inference` reuse the core and :math:`\mathbf{V}^{\top}\mathbf{X}`
    only for unchanged data, and a forward pass given :obj:`n_id` checks the
    batch's rows against those of the refreshed graph (without :obj:`n_id`
    nothing can be checked); ``docs/minibatch.md`` gives the rules.

    Cost per layer and batch of :math:`B` nodes: :math:`O(B F F' + B r F' +
    r F F' + r^2 F')` time and :math:`O(B (F + r + F'))` memory beyond the
    parameters, the :math:`r \times F` summaries and (:obj:`"history"`) the
    :math:`N \times F_{hid}` history per hidden layer; checking the rows of
    :obj:`n_id` adds :math:`O(B (F + 2r))` and one synchronisation. A full
    :meth:`refresh` evaluates :math:`L (L - 1) / 2` layers on all nodes
    for :math:`L` layers (one for the paper's two, three for three: the
    summary of layer :math:`l` needs every node's rows of the layers
    before, which are recomputed from :obj:`x`, not kept), in chunks of
    :obj:`batch_size` rows, plus
    :math:`O(N r^2)` for the core and :math:`O(N (F + 2r))` for the
    checksums, kept in 48 bytes per node on the device of :obj:`x`; the
    whole graph's tensors may stay on another device, only chunks move.

    Args:
        in_channels (int): Size of each input sample, or :obj:`-1` for lazy
            initialisation.
        hidden_channels (int): Size of each hidden sample.
        out_channels (int): Size of each output sample.
        num_layers (int, optional): The number of layers. (default: :obj:`2`)
        dropout (float, optional): Dropout probability before each layer,
            applied to the batch's rows. (default: :obj:`0.0`)
        bias (bool, optional): Whether the layers learn a bias.
            (default: :obj:`False`)
        scale (float, optional): The factor :math:`s` of every layer's
            propagation; see :class:`~torch_geometric_regcn.TSGCNConv`.
            (default: :obj:`1.0`)
        summary (str, optional): :obj:`"refresh"` (mode A) or
            :obj:`"history"` (mode B). (default: :obj:`"refresh"`)
        history_dtype (torch.dtype, optional): The dtype of mode B's history
            rows, e.g. :obj:`torch.bfloat16` to halve its memory at about
            three significant digits per entry; the summaries stay those of
            the rows as stored. Mode A keeps no rows and refuses it.
            (default: :obj:`None`, the factors' dtype)

    Shapes:
        - **input:** the batch's node features :math:`(|\mathcal{B}|, F_{in})`
          and rows of the factors :math:`(|\mathcal{B}|, r)` and
          :math:`(|\mathcal{B}|, r)`, optionally the batch's node indices
          :math:`(|\mathcal{B}|)`
        - **output:** :math:`(|\mathcal{B}|, F_{out})`

    Example:
        .. code-block:: python

            import torch
            import torch.nn.functional as F
            from torch_geometric_regcn import LowRankInverse, MiniBatchTSGCN
            from torch_geometric_regcn.datasets import contextual_sbm

            data = contextual_sbm(num_nodes=500, num_classes=5, num_features=16)
            data = LowRankInverse(alpha=1.0, beta=0.2, rank=32)(data)
            x, w, v = data.x, data.lowrank_w, data.lowrank_v
            model = MiniBatchTSGCN(16, 32, 5)  # the paper's network, mode A
            optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
            train = torch.randperm(500)[:100]  # labelled nodes
            for epoch in range(5):
                model.refresh(x, w, v)  # summaries of this epoch's weights
                for batch in train[torch.randperm(train.numel())].split(32):
                    optimizer.zero_grad()
                    out = model(x[batch], w[batch], v[batch], batch)  # [32, 5]
                    F.cross_entropy(out, data.y[batch]).backward()
                    optimizer.step()
            logits = model.inference(x, w, v)  # [500, 5], exact for these weights
    """
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int = 2, dropout: float = 0.0, bias: bool = False,
                 scale: float = 1.0, summary: str = 'refresh',
                 history_dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        num_layers = check_int('num_layers', num_layers)
        in_channels, hidden_channels, out_channels = check_channels(
            in_channels=in_channels, hidden_channels=hidden_channels, out_channels=out_channels)
        check_choice('summary', summary, SUMMARIES,
                     "'refresh' recomputes the summaries once per epoch, 'history' updates "
                     "them from each batch's rows")
        sizes = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.convs = torch.nn.ModuleList(
            TSGCNConv(a, b, bias=bias, scale=scale) for a, b in zip(sizes[:-1], sizes[1:]))
        self.dropout = check_real('dropout', dropout, 0.0, 1.0, high_open=True)
        self.summary, self.history_dtype = summary, history_dtype
        self._check_history_dtype()
        # Derived from the data and the weights: moved by .to(), not saved.
        self.register_buffer('core_lu', None, persistent=False)
        self.register_buffer('core_pivots', None, persistent=False)
        for i in range(num_layers):
            self.register_buffer(f'summary_{i}', None, persistent=False)
            if i > 0:
                self.register_buffer(f'history_{i}', None, persistent=False)
        # Derived from this process's own graph: DistributedDataParallel (of this
        # model as its root) must not overwrite them with rank 0's before a pass.
        self._ddp_params_and_buffers_to_ignore = list(self._buffers)
        self._forget(None)

    @property
    def summaries(self) -> List[Optional[Tensor]]:
        r"""The summaries :math:`\mathbf{V}^{\top}\mathbf{H}^{(l)}`,
        :math:`l = 0, \dots, L-1` (:obj:`None` before :meth:`refresh`)."""
        return [getattr(self, f'summary_{i}') for i in range(len(self.convs))]

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module and forgets the
        summaries (call :meth:`refresh` again)."""
        for conv in self.convs:
            conv.reset_parameters()
        self._forget('reset_parameters()')

    def reset_summaries(self) -> None:
        r"""Forgets everything derived from the graph and the weights: the
        core, the summaries, the history and the checksums of the refreshed
        graph (call :meth:`refresh` again)."""
        self._forget('reset_summaries()')

    def _forget(self, reason: Optional[str]) -> None:
        r"""Forgets all derived state; :obj:`reason` names the call that did
        it in the error of a forward pass before the next :meth:`refresh`."""
        for name in list(self._buffers):
            self._buffers[name] = None
        self.num_nodes: Optional[int] = None
        self._cache: Optional[_Graph] = None  # of the last refresh() or inference()
        self._refreshed: Optional[Tensor] = None  # checksums of the refreshed graph
        self._parameters_at_refresh: Optional[Tuple[Any, ...]] = None
        self._identities_at_refresh: Optional[Tuple[Any, ...]] = None
        self._replaced_at_refresh: Optional[Tuple[int, ...]] = None
        self._scales_at_refresh: Optional[Tuple[float, ...]] = None
        self._summary_at_refresh: Optional[str] = None
        self._factors_at_refresh: Optional[Tuple[Tensor, ...]] = None
        self._forgotten_by = reason

    def _apply(self, fn: Any, recurse: bool = True) -> 'MiniBatchTSGCN':
        # .to(dtype), .half(), .double() ... cast the kept core and summaries
        # too: a round trip (float32 -> bfloat16 -> float32) would leave them
        # rounded with parameters of the dtypes of refresh(), so a cast of
        # any of them forgets them all (a move to another device keeps them).
        before = {name: b.dtype for name, b in self._buffers.items() if b is not None}
        super()._apply(fn, recurse)
        if any(self._buffers[name] is None or self._buffers[name].dtype != dtype
               for name, dtype in before.items()):
            self._forget('a dtype conversion of the model (.to(dtype), .half(), .double(), '
                         '...)')
        return self

    def to_empty(self, *, device: Any, recurse: bool = True) -> 'MiniBatchTSGCN':
        # Uninitialised storage of the same dtype: the summaries are garbage now.
        super().to_empty(device=device, recurse=recurse)
        self._forget('to_empty()')
        return self

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        check_saved_scales(self, state_dict, prefix)  # a refused scale loads no layer
        # New weights: the summaries of the old ones must not be reused.
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._forget('load_state_dict()')

    def __getstate__(self) -> Dict[str, Any]:
        # A cache: copies and pickles recompute it. Weak references do not
        # pickle and would name the original's parameters: kept as a flag,
        # taken anew from the copy's own parameters, unless one was replaced
        # already (the copy could not tell: it forgets its summaries).
        return {**self.__dict__, '_cache': None,
                '_identities_at_refresh': getattr(self, '_identities_at_refresh', None)
                is not None, '_replaced_before_copy': self._replaced_parameter()}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        earlier = '_parameters_at_refresh' not in state  # pickled by an earlier version
        for name in ('_woodbury', '_first'):  # its caches, keyed by version counters
            state.pop(name, None)
        replaced = state.pop('_replaced_before_copy', None)
        super().__setstate__(state)
        if earlier:
            self._forget('unpickling (it was saved by an earlier version)')
        elif replaced is not None:
            self._forget(f"a copy or pickle made after '{replaced}' was replaced by another "
                         f"Parameter")
        else:  # the copy's parameters and buffers, built before its state is set
            self._identities_at_refresh = (self._parameter_identities()
                                           if state.get('_identities_at_refresh') else None)

    def _device(self) -> torch.device:
        return self.convs[0].lin.weight.device

    def _parameter_signature(self) -> Tuple[Any, ...]:
        r"""The name, dtype, device and shape (:obj:`None` while lazy) of
        every parameter: what the summaries were computed for."""
        return tuple((name, p.dtype, p.device, None if is_lazy(p) else tuple(p.shape))
                     for name, p in self.named_parameters())

    def _parameter_identities(self) -> Tuple[Any, ...]:
        r"""A weak reference to every parameter: a :class:`~torch.nn.Parameter`
        assigned in place of another (of the same shape) is seen by its
        identity, which no value check could tell from an optimizer step."""
        return tuple(weakref.ref(p) for p in self.parameters())

    def _kept_factors(self) -> Tuple[Tensor, ...]:
        r"""What the factors and the features determine: the core and
        :math:`\mathbf{V}^{\top}\mathbf{X}`."""
        return self.core_lu, self.core_pivots, self.summary_0

    def _check_unwritten(self) -> None:
        r"""Checks that the core and :math:`\mathbf{V}^{\top}\mathbf{X}` hold
        the numbers of :meth:`refresh` (compared with a private copy,
        :math:`O(r (r + F))` and one synchronisation per pass), whoever wrote
        into them or rebound them since: a broadcast of equal buffers by
        :class:`~torch.nn.parallel.DistributedDataParallel` is accepted, one
        of another graph's or factorisation's raises. Version counters could
        not tell: DDP's broadcast before each pass preserves them."""
        kept = getattr(self, '_factors_at_refresh', None)  # None: an earlier pickle
        if kept is None:
            return
        now = self._kept_factors()
        if all(a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
               for a, b in zip(kept, now)) \
                and bool(torch.stack([torch.eq(a, b).all() for a, b in zip(kept, now)]).all()):
            return
        raise RuntimeError(
            f"The core or the summaries of {type(self).__name__} were overwritten since "
            f"refresh() with those of other factors or features (DistributedDataParallel "
            f"broadcasts rank 0's buffers into a model nested in the module it wraps): "
            f"wrap with broadcast_buffers=False, or name the model's buffers in the "
            f"wrapper's '_ddp_params_and_buffers_to_ignore', then call "
            f"'model.refresh(x, w, v)' again")

    def _changed_parameter(self) -> Optional[str]:
        r"""How the parameters differ from those the summaries were computed
        for (:obj:`None` if they do not; a lazy shape matches any)."""
        before, now = self._parameters_at_refresh, self._parameter_signature()
        if before is None or [a[0] for a in before] != [b[0] for b in now]:
            return 'the parameters were replaced'
        replaced = getattr(self, '_replaced_at_refresh', None)
        if replaced is not None and replaced != self._replacements():
            return ("a layer's weights were replaced (by its own reset_parameters() or "
                    "load_state_dict())")
        scales = getattr(self, '_scales_at_refresh', None)  # None: pickled before it was kept
        for i, (a, conv) in enumerate(zip(scales or (), self.convs)):
            if a != conv.scale:  # the hidden summaries hold the earlier layers' scale
                return f"'convs[{i}].scale' was {a:g} and is now {conv.scale:g}"

        def shape(entry: Tuple[Any, ...]) -> str:
            return 'uninitialised' if entry[3] is None else f'of shape {list(entry[3])}'

        for a, b in zip(before, now):
            if a[1:3] != b[1:3] or (a[3] is not None and a[3] != b[3]):
                return (f"'{b[0]}' was {a[1]} on {a[2]} {shape(a)} and is now {b[1]} on "
                        f"{b[2]} {shape(b)} (converted or moved since)")
        name = self._replaced_parameter()
        if name is not None:
            return (f"'{name}' is another Parameter than at refresh() (one assigned "
                    f"in its place, or swapped in by torch.func.functional_call; "
                    f"functional_call may pass the model's own, p.detach())")
        return None

    def _replaced_parameter(self) -> Optional[str]:
        r"""The name of the first parameter that is not the one (or a view of
        all of its numbers) that the summaries were computed with."""
        identities = getattr(self, '_identities_at_refresh', None)  # None: an earlier pickle
        for ref, (name, p) in zip(identities or (), self.named_parameters()):
            if not _same_numbers(ref(), p):
                return name
        return None

    def _replacements(self) -> Tuple[int, ...]:
        r"""How often each layer's weights were replaced rather than updated
        (:meth:`TSGCNConv.reset_parameters`, its :meth:`load_state_dict`)."""
        return tuple(getattr(conv, '_replaced', 0) for conv in self.convs)

    def _core(self) -> WoodburyCore:
        return WoodburyCore(self.core_lu, self.core_pivots)

    def _layer(self, i: int, h: Tensor, w: Tensor, summary: Tensor, core: WoodburyCore,
               training: bool, check: Optional[Tensor] = None) -> Tensor:
        r"""Layer :obj:`i` on rows :obj:`h` with factor rows :obj:`w`, before
        the activation; with :obj:`check`, the input features whose NaN and
        infinity the projection reveals (as :class:`TSGCNConv` checks them)."""
        conv = self.convs[i]
        z = conv.lin(dropout(h, self.dropout, training))
        if check is not None:
            check_projection(z, check)
        # The summary of the projection, (VᵀH) Θ = Vᵀ(HΘ): r x F'.
        projected = conv.lin(summary.to(z.dtype)).to(w.dtype)
        return conv.propagate(z, w, None, core, summary=projected)

    def _rows_forward(self, x: Tensor, w: Tensor, summaries: List[Tensor], core: WoodburyCore,
                      layers: int) -> Tensor:
        r"""The first :obj:`layers` layers on rows :obj:`x`, :obj:`w`, in
        evaluation mode (hidden layers with ReLU)."""
        h = x
        for i in range(layers):
            h = self._layer(i, h, w, summaries[i], core, training=False)
            if i < len(self.convs) - 1:
                h = h.relu()
        return h

    def _check_inputs(self, x: Tensor, w: Tensor, v: Tensor, rows: str,
                      **indices: Optional[Tensor]) -> None:
        r"""Checks rows of the node features and factors (the whole graph's
        or a batch's, named :obj:`rows` in the errors) but the values of
        :obj:`x`, and that neither they, :obj:`indices` nor the parameters are
        on the :obj:`meta` device. A NaN or infinity in :obj:`x` surfaces
        later at no extra pass: through the summary
        :math:`\mathbf{V}^{\top}\mathbf{X}` or the checksums of the whole
        graph's rows (whose entry is finite if and only if the row is), or
        through a batch's projection."""
        check_tensor('x', x, f'a tensor of node features [{rows}, channels]')
        check_materialized(x=x, w=w, v=v, **indices)
        check_module_materialized(self)
        check_node_features(x, finite=False)
        check_factors(w, v, x.size(0))
        check_layer_dtype('x', x, self.convs[0].lin.weight.dtype, type(self).__name__)

    def _check_history_dtype(self) -> None:
        r"""Checks :obj:`history_dtype` (also when assigned after construction):
        a floating-point dtype, and only in mode :obj:`"history"`, which
        alone keeps rows."""
        dtype = self.history_dtype
        if dtype is None:
            return
        if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
            raise TypeError(f"'history_dtype' must be a floating-point torch.dtype or None "
                            f"(got {dtype!r}), e.g. torch.bfloat16")
        if self.summary != 'history':
            raise ValueError(f"'history_dtype' ({dtype}) is the dtype of the rows of mode "
                             f"'history'; mode {self.summary!r} keeps none: use "
                             f"summary='history' or drop 'history_dtype'")

    def _check_graph(self, x: Tensor, w: Tensor, v: Tensor, batch_size: int) -> int:
        r"""Checks the whole graph's inputs (see :meth:`_check_inputs`) and
        returns :obj:`batch_size` as an :class:`int`."""
        self._check_inputs(x, w, v, 'num_nodes')
        return check_int('batch_size', batch_size)

    def _scan(self, x: Tensor, w: Tensor, v: Tensor, chunks: List[Tuple[int, int]],
              checksums: bool, first: bool) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        r"""One pass over :obj:`x`, :obj:`w` and :obj:`v`, chunk by chunk:
        with :obj:`checksums`, their row checksums with magnitudes, as one
        :obj:`[N, 3, 2]` float64 tensor on the device of :obj:`x` (each
        computed where its tensor lies, in its dtype, see
        :func:`_row_checksums`), and with :obj:`first`,
        :math:`\mathbf{V}^{\top}\mathbf{X}` from the same chunks of
        :obj:`x` (in the factors' dtype on the model's device)."""
        device, dtype = self._device(), w.dtype
        total = torch.zeros(v.size(1), x.size(1), dtype=dtype, device=device) if first else None
        parts = []
        for s, e in chunks:
            rows = dense_rows(x, s, e)
            if checksums:
                parts.append(torch.stack([_row_checksums(rows),
                                          _row_checksums(w[s:e]).to(x.device),
                                          _row_checksums(v[s:e]).to(x.device)], dim=1))
            if total is not None:
                with torch.autocast(device.type, enabled=False):  # in the factors' dtype
                    total += v[s:e].to(device).T @ rows.to(device, dtype)
        if not checksums:
            return None, total
        return torch.cat(parts) if parts else torch.zeros(
            0, 3, 2, dtype=torch.float64, device=x.device), total

    @torch.inference_mode(False)  # sets grad mode too: no_grad inside it
    @torch.no_grad()
    def _graph(self, x: Tensor, w: Tensor, v: Tensor, batch_size: int) -> _Graph:
        r"""The core :math:`\mathbf{C}` and :math:`\mathbf{V}^{\top}\mathbf{X}`
        of the whole graph: those of the last :meth:`refresh` or
        :meth:`inference` if :obj:`x`, :obj:`w` and :obj:`v` have their
        identity, row checksums and fingerprints (any write is seen, however
        small, also one through :obj:`.data` or a NumPy array), else computed
        anew. The checksums and fingerprints cost three passes over the three
        tensors, :math:`O(N (F + 2r))`, against :math:`O(N r (F + r))` for
        what they save; when the identity differs (nothing to reuse), the
        checksums are computed in the pass that computes
        :math:`\mathbf{V}^{\top}\mathbf{X}`. The checksums are compared bit for
        bit: a sum that depends on the number of threads (a matrix-vector
        product may) makes a change of the thread count only cost a
        recomputation. It runs outside :func:`torch.inference_mode` (as
        :func:`torch.no_grad`): what it keeps are normal tensors, which a
        later training step may save for its backward pass."""
        device, num_nodes = self._device(), x.size(0)
        chunks = [(s, min(s + batch_size, num_nodes)) for s in range(0, num_nodes, batch_size)]
        identity = (tuple((t.layout, tuple(t.shape), t.dtype, t.device) for t in (x, w, v)),
                    device, batch_size)
        cached = self._cache
        reusable = cached is not None and cached.identity == identity
        checksums, first = self._scan(x, w, v, chunks, checksums=True, first=not reusable)
        if not bool(checksums[:, 0].isfinite().all()):
            check_node_features(x)  # raises where x holds NaN or infinity (else: overflow)
        prints = tuple(fingerprint(t) for t in (x, w, v))
        if reusable and torch.equal(cached.checksums, checksums) and cached.prints == prints:
            return cached  # NaN: never equal
        core = WoodburyCore(*(t.to(device) for t in woodbury_core(w, v, from_eigenpairs=True)))
        if first is None:
            first = self._scan(x, w, v, chunks, checksums=False, first=True)[1]
        if not bool(first.isfinite().all()):
            raise ValueError(f"V^T x overflows {w.dtype}: the features are too large; scale "
                             f"them (e.g. normalise the rows)")
        return _Graph(identity, checksums, prints, core, first)

    @torch.inference_mode(False)  # sets grad mode too: no_grad inside it
    @torch.no_grad()
    def _fresh(self, x: Tensor, w: Tensor, v: Tensor, batch_size: int, history: bool
               ) -> Tuple[_Graph, List[Tensor], List[Tensor]]:
        r"""The graph's core and :math:`\mathbf{V}^{\top}\mathbf{X}`
        (:meth:`_graph`), fresh summaries of all later layers' inputs and
        (with :obj:`history`) the hidden rows of all nodes, in chunks. The
        history is written into the stored one when it has the same shape, so
        two are never held at once."""
        graph = self._graph(x, w, v, batch_size)
        device, num_nodes, dtype, core = self._device(), x.size(0), w.dtype, graph.core
        chunks = [(s, min(s + batch_size, num_nodes)) for s in range(0, num_nodes, batch_size)]
        summaries, rows = [graph.first], []
        if history:  # rows are written into the kept history in place: an interrupted
            # refresh() must not leave summaries that are no longer V^T (history)
            reusable = [getattr(self, f'history_{i}') for i in range(1, len(self.convs))]
            self._forget('an interrupted refresh()')
        for layer in range(1, len(self.convs)):
            total = None
            kept = None
            for s, e in chunks:
                h = self._rows_forward(dense_rows(x, s, e).to(device), w[s:e].to(device),
                                       summaries, core, layer)
                if history:  # the summary of the rows as stored
                    stored = self.history_dtype or dtype
                    if kept is None:
                        kept = reusable[layer - 1]
                        if kept is None or kept.shape != (num_nodes, h.size(1)) \
                                or kept.dtype != stored or kept.device != device:
                            kept = torch.empty(num_nodes, h.size(1), dtype=stored,
                                               device=device)
                    kept[s:e] = h
                    h = kept[s:e]
                with torch.autocast(device.type, enabled=False):  # in the factors' dtype
                    part = v[s:e].to(device).T @ h.to(dtype)
                total = part if total is None else total + part
            summaries.append(total)
            rows.append(kept)
        return graph, summaries, rows

    @torch.inference_mode(False)  # what it keeps may be saved for backward
    @torch.no_grad()
    def refresh(self, x: Tensor, w: Tensor, v: Tensor, index: Optional[Tensor] = None,
                batch_size: int = 16384) -> 'MiniBatchTSGCN':
        r"""Recomputes the summaries from the whole graph for the current
        weights, :obj:`batch_size` rows at a time, without gradients.

        Without :obj:`index`, everything is recomputed: the core
        :math:`\mathbf{C}` (checked to be that of one whole graph's factors,
        see :func:`~torch_geometric_regcn.linalg.woodbury_core`), every
        summary and, in mode :obj:`"history"`, the hidden rows of all nodes;
        the core and :math:`\mathbf{V}^{\top}\mathbf{X}` are reused only when
        the row checksums and fingerprints of :obj:`x`, :obj:`w` and :obj:`v`
        show the data unchanged (three passes, :math:`O(N (F + 2r))`; a
        change of the thread count may cause a recomputation). What it keeps
        are normal tensors also when called in :func:`torch.inference_mode`. The checksums
        are kept (48 bytes per node, on the device of :obj:`x`) to verify the
        rows of later batches.
        With :obj:`index` (mode :obj:`"history"` only, after a full refresh),
        only the hidden rows of the nodes :obj:`index` are recomputed, chunk by
        chunk, and the summaries updated by their change. Their rows of
        :obj:`x`, :obj:`w` and :obj:`v` are first checked to be those of the
        graph of the full refresh (finite, and equal to its checksums), so a
        changed graph raises before anything is written.

        Args:
            x (torch.Tensor): The whole graph's node features
                :obj:`[N, F_in]`, dense or sparse CSR.
            w (torch.Tensor): :obj:`data.lowrank_w`, :obj:`[N, r]`.
            v (torch.Tensor): :obj:`data.lowrank_v`, :obj:`[N, r]`.
            index (torch.Tensor, optional): Nodes whose rows to recompute.
                (default: :obj:`None`, all)
            batch_size (int, optional): Rows per chunk. (default: :obj:`16384`)
        """
        self._check_history_dtype()
        batch_size = self._check_graph(x, w, v, batch_size)
        if index is None:
            graph, summaries, rows = self._fresh(x, w, v, batch_size, self.summary == 'history')
            self._cache, self._refreshed = graph, graph.checksums
            # Copies: the kept buffers may be written in place (a broadcast of a
            # wrapper), which must not reach the verified cache inference() reuses.
            self.core_lu, self.core_pivots = (t.clone() for t in graph.core)
            self.num_nodes = x.size(0)
            for i, summary in enumerate(summaries):
                setattr(self, f'summary_{i}', summary.clone() if i == 0 else summary)
            for i, kept in enumerate(rows, 1):
                setattr(self, f'history_{i}', kept)
            self._parameters_at_refresh, self._forgotten_by = self._parameter_signature(), None
            self._identities_at_refresh = self._parameter_identities()
            self._replaced_at_refresh = self._replacements()
            self._scales_at_refresh = tuple(conv.scale for conv in self.convs)
            self._summary_at_refresh = self.summary
            # The refresh's own tensors, never written (the buffers are their copies
            # and inference() replaces the cache without touching them).
            self._factors_at_refresh = (*graph.core, graph.first)
            return self
        if self.summary != 'history':
            raise ValueError("refresh(index=...) updates the rows of mode 'history'; in mode "
                             "'refresh' there are no rows to update: call refresh(x, w, v) "
                             "without 'index' to recompute every summary")
        check_materialized(index=index)
        self._check_ready(w)
        if x.size(0) != self.num_nodes:
            raise ValueError(f"'x' has {x.size(0)} nodes but the model was refreshed with a "
                             f"graph of {self.num_nodes}; call refresh(x, w, v) without "
                             f"'index' for a new graph")
        # Each node once, in increasing order: the rows are read in memory order.
        index = torch.unique(check_index('index', index, self.num_nodes, graph=_REFRESHED))
        self.convs[0].lin.check_input(x)
        for part in index.split(batch_size):
            self._check_rows(part, 'index', x=gather_rows(x, part),
                             w=w.index_select(0, part.to(w.device)),
                             v=v.index_select(0, part.to(v.device)))
        device = self._device()
        with torch.no_grad():
            for layer in range(1, len(self.convs)):
                for part in index.split(batch_size):
                    h = self._rows_forward(
                        gather_rows(x, part).to(device),
                        w.index_select(0, part.to(w.device)).to(device), self.summaries,
                        self._core(), layer)
                    self._write(layer, h, v.index_select(0, part.to(v.device)).to(device),
                                part.to(device))
        return self

    def _check_ready(self, w: Tensor) -> None:
        r"""Checks that the stored summaries may be used with factors
        :obj:`w`: they exist (no :meth:`refresh` yet, or forgotten since),
        were computed for parameters of the current dtypes, devices and
        shapes, and for factors of :obj:`w`'s rank and dtype."""
        name = type(self).__name__
        check_choice('summary', self.summary, SUMMARIES,
                     "'refresh' recomputes the summaries once per epoch, 'history' updates "
                     "them from each batch's rows")
        refreshed = getattr(self, '_summary_at_refresh', None)
        if self.summary_0 is not None and self.summary == 'history' and refreshed == 'refresh':
            raise RuntimeError(f"{name} was refreshed in mode 'refresh', which keeps no rows, "
                               f"and its 'summary' is now 'history': call "
                               f"'model.refresh(x, w, v)' again to keep the rows it writes")
        if self.summary_0 is None:
            if self._forgotten_by is not None:
                raise RuntimeError(
                    f"{name} has no summaries since {self._forgotten_by} (they depend on the "
                    f"weights and are not saved): call 'model.refresh(x, w, v)' with the whole "
                    f"graph's features and factors before the next forward pass")
            raise RuntimeError(f"{name} has no summaries yet: call "
                               f"'model.refresh(x, w, v)' with the whole graph's features and "
                               f"factors first (and again after reset_parameters() or "
                               f"load_state_dict())")
        changed = self._changed_parameter()
        if changed is not None:
            raise RuntimeError(f"The summaries of {name} were computed for its parameters as "
                               f"they were at refresh(), but {changed}: call "
                               f"'model.refresh(x, w, v)' again")
        if w.size(1) != self.core_lu.size(0):
            raise ValueError(f"The factors have rank {w.size(1)}, but the model was refreshed "
                             f"with factors of rank {self.core_lu.size(0)}; pass rows of the "
                             f"same factors, or call refresh() with the new ones")
        if w.dtype != self.core_lu.dtype:
            raise ValueError(f"The factors are {w.dtype}, but the model was refreshed with "
                             f"{self.core_lu.dtype} factors; pass rows of the same factors, "
                             f"or call refresh() with these")
        self._check_unwritten()

    def _check_rows(self, n_id: Tensor, id_name: str, **rows: Tensor) -> None:
        r"""Checks that :obj:`rows` (of :obj:`x`, :obj:`w`, :obj:`v`) are
        those of nodes :obj:`n_id` in the graph of the last full
        :meth:`refresh`, by their row checksums, computed in the rows' dtype
        (one matrix-vector product each, :math:`O(|n_{id}| (F + 2r))`) and
        compared with those kept at :meth:`refresh`, computed the same way
        and stored in float64: one synchronisation. A row
        whose sum differs by more than the rounding of its dtype
        (:func:`_row_tolerance`) raises, naming the tensor, so an edit
        smaller than that rounding relative to the row is not seen; a
        non-finite row raises the error
        of :func:`~torch_geometric_regcn.utils.validation.check_finite`."""
        stored = self._refreshed.index_select(0, n_id.to(self._refreshed.device))
        agree = []
        for column, t in enumerate(rows.values()):
            expected, magnitudes = stored[:, column].to(t.device).unbind(1)
            checksums = row_checksums(t, dtype=solve_dtype(t.dtype)).to(torch.float64)
            bound = _row_tolerance(solve_dtype(t.dtype), t.size(1)) * magnitudes
            agree.append(((checksums - expected).abs() <= bound).logical_and(
                checksums.isfinite()).all())  # non-finite where the row is (or overflows)
        if not agree:
            return
        for (name, t), good in zip(rows.items(), torch.stack(agree).tolist()):
            if not good:
                check_finite(name, t)
                other = (f", or '{id_name}' does not list the rows' nodes in that graph (pass "
                         f"a loader's 'batch.n_id')" if id_name == 'n_id' else '')
                raise ValueError(
                    f"The rows of '{name}' are not those of the nodes '{id_name}' in the graph "
                    f"the model was refreshed with: '{name}' was changed since refresh() "
                    f"(call model.refresh(x, w, v) with the new data){other}")

    @torch.inference_mode(False)
    @torch.no_grad()
    def _write(self, layer: int, h: Tensor, v: Tensor, n_id: Tensor) -> None:
        r"""Mode B: writes the fresh hidden rows :obj:`h` of nodes :obj:`n_id`
        into the history of :obj:`layer` and updates its summary (out of
        place, as a summary may be saved for a pending backward pass; outside
        :func:`torch.inference_mode`, so that a pass under it keeps a normal
        tensor, which a later pass with gradients can use)."""
        history, summary = getattr(self, f'history_{layer}'), getattr(self, f'summary_{layer}')
        h = h.detach().to(history.dtype)  # the summary follows the rows as stored
        nodes, inverse = torch.unique(n_id, return_inverse=True)
        if nodes.numel() < n_id.numel():  # one row per node: its last occurrence
            position = torch.empty_like(nodes).scatter_(
                0, inverse, torch.arange(n_id.numel(), device=n_id.device))
            h, v, n_id = h[position], v[position], nodes
        change = h.to(summary.dtype) - history[n_id].to(summary.dtype)
        # The new summary first: an error in its product (out of memory) or an
        # interruption must not leave rows written that the summary lacks.
        updated = summary + v.to(summary.dtype).T @ change
        history[n_id] = h
        setattr(self, f'summary_{layer}', updated)

    def forward(self, x: Tensor, w: Tensor, v: Tensor, n_id: Optional[Tensor] = None) -> Tensor:
        r"""Runs the network on the rows of a mini-batch of nodes.

        With :obj:`n_id`, the rows of :obj:`x`, :obj:`w` and :obj:`v` are
        first checked to be those of these nodes in the graph of the last
        :meth:`refresh` (by their row checksums, :math:`O(B (F + 2r))` and one
        synchronisation); without, only their shapes and dtypes are. The kept
        core and :math:`\mathbf{V}^{\top}\mathbf{X}` are compared with those
        of :meth:`refresh` (:math:`O(r (r + F))`, one synchronisation).

        Args:
            x (torch.Tensor): The batch's node features
                :obj:`[B, F_in]` (e.g. :obj:`data.x[batch]`, or a loader's
                :obj:`batch.x`).
            w (torch.Tensor): The batch's rows of :obj:`data.lowrank_w`,
                :obj:`[B, r]`.
            v (torch.Tensor): The batch's rows of :obj:`data.lowrank_v`,
                :obj:`[B, r]`.
            n_id (torch.Tensor, optional): The batch's node indices in the
                whole graph :obj:`[B]` (a loader's :obj:`batch.n_id`); needed
                in mode :obj:`"history"` during training, whose rows it writes.
                (default: :obj:`None`)
        """
        self._check_inputs(x, w, v, 'batch_size', n_id=n_id)
        self._check_ready(w)
        write = self.summary == 'history' and self.training
        if write and n_id is None:
            raise ValueError("Mode 'history' writes the batch's rows during training, so "
                             "it needs their node indices: pass 'n_id' (e.g. the batch "
                             "of node indices, or a loader's 'batch.n_id')")
        if write and processes() > 1:
            # Each process would write its own batches' rows only (DDP leaves
            # the derived buffers to each rank: _ddp_params_and_buffers_to_ignore).
            raise RuntimeError(
                f"MiniBatchTSGCN(summary='history') trains in one process: in one of "
                f"{processes()} processes its history would hold its "
                f"own batches' rows only; use "
                f"summary='refresh', with refresh() on every process")
        if n_id is not None:
            n_id = check_index('n_id', n_id, self.num_nodes, x.size(0), _REFRESHED)
            self.convs[0].lin.check_input(x)  # before the rows' check, whose advice is refresh()
            self._check_rows(n_id, 'n_id', x=x, w=w, v=v)
            n_id = n_id.to(x.device)
        h = x
        # The rows written are those of evaluation mode, as the summaries are
        # (the expectation of dropout): one more pass of the batch, without
        # autograd, where dropout would make them differ.
        plain = x if write and self.dropout > 0 else None
        for i in range(len(self.convs)):
            summary, core = getattr(self, f'summary_{i}'), self._core()
            h = self._layer(i, h, w, summary, core, self.training, check=x if i == 0 else None)
            if plain is not None and i < len(self.convs) - 1:
                with torch.no_grad():
                    plain = self._layer(i, plain, w, summary, core, False).relu()
            if i < len(self.convs) - 1:
                h = h.relu()
                if write:
                    self._write(i + 1, h if plain is None else plain, v, n_id)
        return h

    @torch.no_grad()
    def inference(self, x: Tensor, w: Tensor, v: Tensor, index: Optional[Tensor] = None,
                  batch_size: int = 16384) -> Tensor:
        r"""The network's exact output for the current weights (that of
        :class:`~torch_geometric_regcn.TSGCN` in evaluation mode) on the
        nodes :obj:`index` (default: all), from fresh summaries computed in
        chunks of :obj:`batch_size` rows: nothing stored is trusted but the
        core and :math:`\mathbf{V}^{\top}\mathbf{X}` of data whose row
        checksums are unchanged (see :meth:`refresh`); the stored summaries
        and history are left as they are. Arguments as in :meth:`refresh`;
        returns :obj:`[len(index), F_out]` on the model's device."""
        batch_size = self._check_graph(x, w, v, batch_size)
        if index is not None:
            check_materialized(index=index)
            index = check_index('index', index, x.size(0))
        graph, summaries, _ = self._fresh(x, w, v, batch_size, history=False)
        self._cache = graph
        device, layers = self._device(), len(self.convs)
        if index is None:
            parts = ((dense_rows(x, s, min(s + batch_size, x.size(0))), w[s:s + batch_size])
                     for s in range(0, x.size(0), batch_size))
        else:
            parts = ((gather_rows(x, part), w.index_select(0, part.to(w.device)))
                     for part in index.split(batch_size))
        outs = [self._rows_forward(xs.to(device), ws.to(device), summaries, graph.core, layers)
                for xs, ws in parts]
        if not outs:
            return torch.zeros(0, self.convs[-1].out_channels, device=device)
        return torch.cat(outs)

    def __repr__(self) -> str:
        conv = self.convs[0]
        scale = f', scale={conv.scale:g}' if conv.scale != 1.0 else ''
        return (f'{self.__class__.__name__}({conv.in_channels}, '
                f'{self.convs[-1].out_channels}, num_layers={len(self.convs)}{scale}, '
                f'summary={self.summary!r})')
