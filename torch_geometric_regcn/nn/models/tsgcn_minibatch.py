r"""The tsGCN network trained on mini-batches of nodes."""
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.linalg.woodbury import WoodburyCache, WoodburyCore
from torch_geometric_regcn.nn.conv import TSGCNConv
from torch_geometric_regcn.nn.dropout import dropout
from torch_geometric_regcn.utils.sparse import dense_rows, gather_rows
from torch_geometric_regcn.utils.validation import (
    check_channels,
    check_choice,
    check_factors,
    check_index,
    check_int,
    check_node_features,
    check_projection,
    check_real,
)

#: How :class:`MiniBatchTSGCN` keeps the summaries :math:`\mathbf{V}^{\top}\mathbf{H}`.
SUMMARIES = ('refresh', 'history')

# How the errors of node indices name the graph of MiniBatchTSGCN.refresh().
_REFRESHED = 'the graph the model was refreshed with'


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
    and updates the summaries from each training batch. Summaries are
    constants of a step, so the gradient through the other nodes' rows is
    left out; :meth:`inference` gives exact outputs for the current weights.
    ``docs/minibatch.md`` describes both modes and the approximation.

    Cost per layer and batch of :math:`B` nodes: :math:`O(B F F' + B r F' +
    r F F' + r^2 F')` time and :math:`O(B (F + r + F'))` memory beyond the
    parameters, the :math:`r \times F` summaries and (:obj:`"history"`) the
    :math:`N \times F_{hid}` history per hidden layer. A full :meth:`refresh`
    costs one pass over all nodes per hidden layer (two layers: one pass), in
    chunks of :obj:`batch_size` rows, plus :math:`O(N r^2)` for the core; the
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
            the rows as stored. (default: :obj:`None`, the factors' dtype)

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
        if history_dtype is not None and not (isinstance(history_dtype, torch.dtype)
                                              and history_dtype.is_floating_point):
            raise TypeError(f"'history_dtype' must be a floating-point torch.dtype or None "
                            f"(got {history_dtype!r}), e.g. torch.bfloat16")
        self.summary, self.history_dtype = summary, history_dtype
        self.num_nodes: Optional[int] = None
        self._woodbury = WoodburyCache()  # the core, kept while the same factors return
        self._first: Optional[Tuple[Any, ...]] = None  # V^T X, kept likewise
        # Derived from the data and the weights: moved by .to(), not saved.
        self.register_buffer('core_lu', None, persistent=False)
        self.register_buffer('core_pivots', None, persistent=False)
        for i in range(num_layers):
            self.register_buffer(f'summary_{i}', None, persistent=False)
            if i > 0:
                self.register_buffer(f'history_{i}', None, persistent=False)

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
        self.reset_summaries()

    def reset_summaries(self) -> None:
        r"""Forgets the core, the summaries and the history."""
        self.num_nodes = None
        for name in list(self._buffers):
            self._buffers[name] = None

    def _device(self) -> torch.device:
        return self.convs[0].lin.weight.device

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
                      layers: int, check: bool = False) -> Tensor:
        r"""The first :obj:`layers` layers on rows :obj:`x`, :obj:`w`, in
        evaluation mode (hidden layers with ReLU); with :obj:`check`, NaN and
        infinity in :obj:`x` raise (through the projection)."""
        h = x
        for i in range(layers):
            h = self._layer(i, h, w, summaries[i], core, training=False,
                            check=x if check and i == 0 else None)
            if i < len(self.convs) - 1:
                h = h.relu()
        return h

    def _check_graph(self, x: Tensor, w: Tensor, v: Tensor, batch_size: int) -> int:
        r"""Checks the whole graph's inputs but the values of :obj:`x`:
        :meth:`_fresh` finds NaN and infinity there through the summary
        :math:`\mathbf{V}^{\top}\mathbf{X}`, whose column :math:`j` is finite
        if and only if column :math:`j` of :obj:`x` is (for finite :obj:`v`,
        which the core checks), with no pass over :obj:`x` of its own."""
        if not isinstance(x, Tensor):
            raise TypeError(f"'x' must be a tensor of node features [num_nodes, channels] "
                            f"(got {type(x).__name__})")
        check_node_features(x, finite=False)
        check_factors(w, v, x.size(0))
        return check_int('batch_size', batch_size)

    @torch.no_grad()
    def _fresh(self, x: Tensor, w: Tensor, v: Tensor, batch_size: int, history: bool
               ) -> Tuple[WoodburyCore, List[Tensor], List[Tensor]]:
        r"""The core, fresh summaries of all layers' inputs and (with
        :obj:`history`) the hidden rows of all nodes, in chunks. The history
        is written into the stored one when it has the same shape, so two
        are never held at once."""
        device, num_nodes = self._device(), x.size(0)
        core = WoodburyCore(*(t.to(device) for t in self._woodbury(w, v, from_eigenpairs=True)))
        dtype = w.dtype
        chunks = [(s, min(s + batch_size, num_nodes)) for s in range(0, num_nodes, batch_size)]
        summaries, rows = [self._first_summary(x, v, chunks, device, dtype)], []
        for layer in range(1, len(self.convs)):
            total = None
            kept = None
            for s, e in chunks:
                h = self._rows_forward(dense_rows(x, s, e).to(device), w[s:e].to(device),
                                       summaries, core, layer)
                if history:  # the summary of the rows as stored
                    stored = self.history_dtype or dtype
                    if kept is None:
                        kept = getattr(self, f'history_{layer}')
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
        return core, summaries, rows

    def _first_summary(self, x: Tensor, v: Tensor, chunks: List[Tuple[int, int]],
                       device: torch.device, dtype: torch.dtype) -> Tensor:
        r""":math:`\mathbf{V}^{\top}\mathbf{X}`, kept while the same dense
        :obj:`x` and :obj:`v` come back unmodified (their version counters),
        as they do every epoch: it depends on the data only. A NaN or an
        infinity anywhere in column :math:`j` of :obj:`x` makes column
        :math:`j` of it non-finite, which raises the error of
        :func:`~torch_geometric_regcn.utils.validation.check_node_features`."""
        key = (device, dtype, len(chunks), *(
            (t._version, t.data_ptr(), t.shape, t.dtype, t.device) for t in (x, v))) \
            if x.layout == torch.strided else None
        cached = self._first
        if key is not None and cached is not None and cached[0]() is x \
                and cached[1]() is v and cached[2] == key:
            return cached[3]
        first = torch.zeros(v.size(1), x.size(1), dtype=dtype, device=device)
        with torch.autocast(device.type, enabled=False):  # in the factors' dtype
            for s, e in chunks:
                first += v[s:e].to(device).T @ dense_rows(x, s, e).to(device, dtype)
        if not bool(first.isfinite().all()):
            check_node_features(x)  # raises where x holds NaN or infinity
            raise ValueError(f"V^T x overflows {dtype}: the features are too large; scale "
                             f"them (e.g. normalise the rows)")
        if key is not None:
            self._first = (weakref.ref(x), weakref.ref(v), key, first)
        return first

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, '_first': None}  # a cache: copies and pickles recompute it

    def refresh(self, x: Tensor, w: Tensor, v: Tensor, index: Optional[Tensor] = None,
                batch_size: int = 16384) -> 'MiniBatchTSGCN':
        r"""Recomputes the summaries from the whole graph for the current
        weights, :obj:`batch_size` rows at a time, without gradients.

        Without :obj:`index`, everything is recomputed: the core
        :math:`\mathbf{C}` (checked to be that of one whole graph's factors,
        see :func:`~torch_geometric_regcn.linalg.woodbury_core`), every
        summary and, in mode :obj:`"history"`, the hidden rows of all nodes.
        With :obj:`index` (mode :obj:`"history"` only, after a full refresh),
        only the hidden rows of the nodes :obj:`index` are recomputed, chunk by
        chunk, and the summaries updated by their change (a chunk whose
        features hold NaN or infinity raises before it is written; the chunks
        before it stay written, the summaries consistent with them).

        Args:
            x (torch.Tensor): The whole graph's node features
                :obj:`[N, F_in]`, dense or sparse CSR.
            w (torch.Tensor): :obj:`data.lowrank_w`, :obj:`[N, r]`.
            v (torch.Tensor): :obj:`data.lowrank_v`, :obj:`[N, r]`.
            index (torch.Tensor, optional): Nodes whose rows to recompute.
                (default: :obj:`None`, all)
            batch_size (int, optional): Rows per chunk. (default: :obj:`16384`)
        """
        batch_size = self._check_graph(x, w, v, batch_size)
        if index is None:
            core, summaries, rows = self._fresh(x, w, v, batch_size, self.summary == 'history')
            self.core_lu, self.core_pivots, self.num_nodes = *core, x.size(0)
            for i, summary in enumerate(summaries):
                setattr(self, f'summary_{i}', summary)
            for i, kept in enumerate(rows, 1):
                setattr(self, f'history_{i}', kept)
            return self
        if self.summary != 'history':
            raise ValueError("refresh(index=...) updates the rows of mode 'history'; in mode "
                             "'refresh' there are no rows to update: call refresh(x, w, v) "
                             "without 'index' to recompute every summary")
        self._check_ready(w.size(1))
        if x.size(0) != self.num_nodes:
            raise ValueError(f"'x' has {x.size(0)} nodes but the model was refreshed with a "
                             f"graph of {self.num_nodes}; call refresh(x, w, v) without "
                             f"'index' for a new graph")
        # Each node once, in increasing order: the rows are read in memory order.
        index = torch.unique(check_index('index', index, self.num_nodes, graph=_REFRESHED))
        device = self._device()
        with torch.no_grad():
            for layer in range(1, len(self.convs)):
                for part in index.split(batch_size):
                    h = self._rows_forward(
                        gather_rows(x, part).to(device),
                        w.index_select(0, part.to(w.device)).to(device), self.summaries,
                        self._core(), layer, check=layer == 1)
                    self._write(layer, h, v.index_select(0, part.to(v.device)).to(device),
                                part.to(device))
        return self

    def _check_ready(self, rank: int) -> None:
        if self.summary_0 is None:
            raise RuntimeError(f"{type(self).__name__} has no summaries yet: call "
                               f"'model.refresh(x, w, v)' with the whole graph's features and "
                               f"factors first (and again after reset_parameters() or "
                               f"load_state_dict())")
        if rank != self.core_lu.size(0):
            raise ValueError(f"The factors have rank {rank}, but the model was refreshed with "
                             f"factors of rank {self.core_lu.size(0)}; pass rows of the same "
                             f"factors, or call refresh() with the new ones")

    @torch.no_grad()
    def _write(self, layer: int, h: Tensor, v: Tensor, n_id: Tensor) -> None:
        r"""Mode B: writes the fresh hidden rows :obj:`h` of nodes :obj:`n_id`
        into the history of :obj:`layer` and updates its summary (out of
        place, as a summary may be saved for a pending backward pass)."""
        history, summary = getattr(self, f'history_{layer}'), getattr(self, f'summary_{layer}')
        h = h.detach().to(history.dtype)  # the summary follows the rows as stored
        nodes, inverse = torch.unique(n_id, return_inverse=True)
        if nodes.numel() < n_id.numel():  # one row per node: its last occurrence
            position = torch.empty_like(nodes).scatter_(
                0, inverse, torch.arange(n_id.numel(), device=n_id.device))
            h, v, n_id = h[position], v[position], nodes
        change = h.to(summary.dtype) - history[n_id].to(summary.dtype)
        history[n_id] = h
        setattr(self, f'summary_{layer}', summary + v.to(summary.dtype).T @ change)

    def forward(self, x: Tensor, w: Tensor, v: Tensor, n_id: Optional[Tensor] = None) -> Tensor:
        r"""Runs the network on the rows of a mini-batch of nodes.

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
        if not isinstance(x, Tensor):
            raise TypeError(f"'x' must be a tensor of node features [batch_size, channels] "
                            f"(got {type(x).__name__})")
        check_node_features(x, finite=False)  # values: through the projection below
        check_factors(w, v, x.size(0))
        self._check_ready(w.size(1))
        write = self.summary == 'history' and self.training
        if write:
            if n_id is None:
                raise ValueError("Mode 'history' writes the batch's rows during training, so "
                                 "it needs their node indices: pass 'n_id' (e.g. the batch "
                                 "of node indices, or a loader's 'batch.n_id')")
            n_id = check_index('n_id', n_id, self.num_nodes, x.size(0), _REFRESHED).to(x.device)
        h = x
        for i in range(len(self.convs)):
            h = self._layer(i, h, w, getattr(self, f'summary_{i}'), self._core(), self.training,
                            check=x if i == 0 else None)
            if i < len(self.convs) - 1:
                h = h.relu()
                if write:
                    self._write(i + 1, h, v, n_id)
        return h

    @torch.no_grad()
    def inference(self, x: Tensor, w: Tensor, v: Tensor, index: Optional[Tensor] = None,
                  batch_size: int = 16384) -> Tensor:
        r"""The network's exact output for the current weights (that of
        :class:`~torch_geometric_regcn.TSGCN` in evaluation mode) on the
        nodes :obj:`index` (default: all), from fresh summaries computed in
        chunks of :obj:`batch_size` rows; the stored summaries and history are
        left as they are. Arguments as in :meth:`refresh`; returns
        :obj:`[len(index), F_out]` on the model's device."""
        batch_size = self._check_graph(x, w, v, batch_size)
        core, summaries, _ = self._fresh(x, w, v, batch_size, history=False)
        device, layers = self._device(), len(self.convs)
        if index is None:
            parts = ((dense_rows(x, s, min(s + batch_size, x.size(0))), w[s:s + batch_size])
                     for s in range(0, x.size(0), batch_size))
        else:
            index = check_index('index', index, x.size(0))
            parts = ((gather_rows(x, part), w.index_select(0, part.to(w.device)))
                     for part in index.split(batch_size))
        outs = [self._rows_forward(xs.to(device), ws.to(device), summaries, core, layers)
                for xs, ws in parts]
        if not outs:
            return torch.zeros(0, self.convs[-1].out_channels, device=device)
        return torch.cat(outs)

    def __repr__(self) -> str:
        conv = self.convs[0]
        return (f'{self.__class__.__name__}({conv.in_channels}, '
                f'{self.convs[-1].out_channels}, num_layers={len(self.convs)}, '
                f'summary={self.summary!r})')
