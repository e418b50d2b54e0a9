r"""The graphs of a PyG mini-batch of graphs (a
:class:`~torch_geometric.data.Batch` and its :obj:`batch` vector) as dense
blocks of graphs of similar sizes, so that each graph's low-rank factors act
on its own rows only."""
from typing import Any, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.linalg.blocks import GRAM_CHUNK, local_gram
from torch_geometric_regcn.utils.compat import compiler_disable
from torch_geometric_regcn.utils.validation import check_int, type_name

#: Why a batch of graphs and a process group do not combine.
WITH_GROUP = ("'batch' (graphs each with their own factors) cannot be combined with "
              "'group' (the rows of one graph's factors split over ranks); with DDP each "
              "rank takes its own batches of whole graphs (group=None)")


#: The order of a batch vector's entries (checked by both functions below).
_ORDER = ("'batch' must be non-negative and non-decreasing, each graph's nodes "
          "contiguous, as PyG's Batch orders them (sort the nodes by graph, or pass "
          "'data.batch' unchanged)")


def _check_length(batch: Tensor, num_rows: int) -> None:
    if batch.numel() != num_rows:
        raise ValueError(f"'batch' must hold one graph index per node ({num_rows}), got "
                         f"{batch.numel()}: pass the 'batch' vector of the same Batch as "
                         f"'x' and the factors")


def check_batch(batch: Any, num_rows: int, batch_size: Optional[int] = None,
                device: Optional[torch.device] = None, *,
                contiguous: bool = True) -> Optional[int]:
    r"""Returns the number of graphs of the batch vector :obj:`batch`, which
    assigns each of the :obj:`num_rows` rows to its graph as PyG's
    :class:`~torch_geometric.data.Batch` does: a 1-D integer tensor of one
    non-negative entry per row, non-decreasing (the graphs' rows
    contiguous). :obj:`batch_size` is the number of graphs when the caller
    knows it (it may exceed the last graph with rows: graphs without rows
    are empty blocks); else :obj:`batch[-1] + 1` (one empty graph for no
    rows). :obj:`batch` must lie on :obj:`device` (that of the rows), when
    given. :obj:`None` for no :obj:`batch` (one graph), which refuses a
    :obj:`batch_size`. With :obj:`contiguous=False`, any numbering of the
    rows' blocks passes (e.g. connected components), not only PyG's
    non-decreasing one. One pass over :obj:`batch` and one synchronisation."""
    if batch is None:
        if batch_size is not None:
            raise ValueError("'batch_size' was given without 'batch': pass the Batch's "
                             "'batch' vector too (or neither, for one graph)")
        return None
    if not isinstance(batch, Tensor) or batch.dim() != 1 \
            or batch.dtype not in (torch.int32, torch.int64):
        got = (f'{batch.dtype} of shape {list(batch.shape)}' if isinstance(batch, Tensor)
               else type_name(batch))
        raise TypeError(f"'batch' must be a 1-D int64 (or int32) tensor that assigns each "
                        f"node to its graph, as 'data.batch' of a PyG Batch (got {got})")
    if device is not None and batch.device != device:
        raise ValueError(f"'batch' is on {batch.device} but the node features and factors "
                         f"on {device}; move it with 'batch.to(device)'")
    _check_length(batch, num_rows)
    if batch_size is not None:
        batch_size = check_int('batch_size', batch_size, minimum=1)
    if num_rows == 0:
        return batch_size or 1  # one empty graph: no batch of zero blocks
    low, high, unsorted = torch.stack([
        batch.min(), batch.max(), (batch[1:] < batch[:-1]).sum()]).tolist()
    if low < 0 or (unsorted and contiguous):
        raise ValueError(_ORDER if contiguous else "'batch' must be non-negative")
    if batch_size is not None and high >= batch_size:
        raise ValueError(f"'batch' refers to graph {high} but 'batch_size' is {batch_size}; "
                         f"pass the number of graphs (or omit 'batch_size')")
    return batch_size if batch_size is not None else high + 1


def graph_count(batch: Tensor, batch_size: Optional[int]) -> int:
    r"""The number of graphs of a batch vector, unchecked (where
    :func:`check_batch` does not run, under :func:`torch.compile`):
    :obj:`batch_size` if given, else :obj:`batch[-1] + 1` (one for no
    rows)."""
    if batch_size is not None:
        return batch_size
    return int(batch[-1]) + 1 if batch.numel() else 1


class GraphBlock(NamedTuple):
    r"""Graphs of a batch of similar sizes, as one dense block."""
    graphs: Tensor  #: the graphs, :obj:`[b]`
    rows: Tensor  #: the row of each graph's :obj:`n` slots, :obj:`[b, n]`; :math:`N` pads


@compiler_disable(reason="the graphs of a Batch ('batch=') are grouped by size on the host: "
                         "compile TSGCNConv/TSGCN without fullgraph=True (a graph break)")
def graph_blocks(batch: Tensor, batch_size: int,
                 num_rows: Optional[int] = None) -> List[GraphBlock]:
    r"""The non-empty graphs of the batch vector :obj:`batch` (checked by
    :func:`check_batch`), grouped by size up to the next power of two, each
    group a :class:`GraphBlock` of :math:`2^{\lceil\log_2 n\rceil}` slots
    per graph for its graphs of :math:`n \in (2^{j-1}, 2^j]` rows: together
    fewer than :math:`2N` slots for the :math:`N` rows (a batch that mixes
    one large graph with small ones pays for it once), in at most
    :math:`\lceil\log_2 n_{\max}\rceil + 1` blocks. Every row is in exactly
    one block. :math:`O(N + B \log N)` time, one synchronisation (the
    number of graphs in each group). :obj:`num_rows`, the rows the blocks
    index, must be :obj:`batch`'s length when given."""
    if num_rows is not None:  # check_batch's rules, where it does not run (compile)
        _check_length(batch, num_rows)
    num_rows, device, batch = batch.numel(), batch.device, batch.contiguous()
    graphs = torch.arange(batch_size, device=device, dtype=batch.dtype)
    starts = torch.searchsorted(batch, graphs)  # batch is sorted: no count to read back
    sizes = torch.searchsorted(batch, graphs, right=True) - starts
    bucket = torch.log2(sizes.clamp(min=1).double()).ceil().long().masked_fill_(sizes == 0, -1)
    order = torch.argsort(bucket, stable=True)  # the graphs by bucket, in order within one
    counts = torch.zeros(65, dtype=torch.long, device=device).index_add_(
        0, bucket + 1, torch.ones_like(bucket))
    # The rules of check_batch, in the same synchronisation: under torch.compile
    # check_batch does not run, and searchsorted on a batch vector that breaks them
    # would leave rows in no block (returned unpropagated) or in another graph's.
    broken = ((batch[1:] < batch[:-1]).any() | (batch[:1] < 0).any()
              | (batch[-1:] >= batch_size).any()).long()
    *counts, broken = torch.cat([counts, broken.reshape(1)]).tolist()
    if broken:
        raise ValueError(f"{_ORDER}, with entries below 'batch_size' "
                         f"('data.num_graphs')")
    blocks, offset = [], counts[0]  # bucket -1 first: the empty graphs
    for value, count in enumerate(counts[1:]):
        if count:
            members = order[offset:offset + count]
            offset += count
            slots = torch.arange(1 << value, device=device)
            rows = starts[members, None] + slots
            blocks.append(GraphBlock(members, rows.masked_fill_(
                slots >= sizes[members, None], num_rows)))
    return blocks


class Slots(NamedTuple):
    r"""Where the rows of a batch lie in the slots of its blocks of
    :func:`graph_blocks`, both ways (:func:`slots_of`): the slots of all
    blocks together are their slots in order, block by block, each block's
    :obj:`[b, n]` slots row-major."""
    rows: Tensor  #: the row of each slot, :obj:`[S]`; :math:`N` for a padding slot
    position: Tensor  #: the slot of each row, :obj:`[N]`
    sizes: List[int]  #: the slots of each block


def slots_of(blocks: List[GraphBlock], num_rows: int) -> Slots:
    r"""The :class:`Slots` of :obj:`blocks` (:func:`graph_blocks` of
    :obj:`num_rows` rows, at least one block): :math:`O(S)`, no
    synchronisation."""
    rows = torch.cat([block.rows.flatten() for block in blocks])
    position = torch.empty(num_rows + 1, dtype=rows.dtype, device=rows.device)
    # Every row is in exactly one slot; the padding slots all write row N, cut off.
    position.index_copy_(0, rows, torch.arange(rows.numel(), device=rows.device))
    return Slots(rows, position[:num_rows], [block.rows.numel() for block in blocks])


def _padded(t: Tensor) -> Tensor:
    return torch.cat([t, t.new_zeros(1, t.size(1))])


class _ToSlots(torch.autograd.Function):
    r""":obj:`t [N, c]` to :obj:`[S, c]` (padding slots zero) and back
    (:obj:`back=True`: the rows' slots of :obj:`[S, c]`): each the other's
    adjoint, so that both directions and their backward passes are
    gathers (:meth:`~torch.Tensor.index_select`), never an indexed sum:
    every row has exactly one slot."""
    @staticmethod
    def forward(ctx: Any, t: Tensor, slots: Slots, back: bool) -> Tensor:
        ctx.slots, ctx.back = slots, back
        if back:
            return t.index_select(0, slots.position)
        return _padded(t).index_select(0, slots.rows)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Tensor, None, None]:
        return _ToSlots.apply(grad, ctx.slots, not ctx.back), None, None


def gather_blocks(t: Tensor, blocks: List[GraphBlock], slots: Slots) -> List[Tensor]:
    r"""The rows of :obj:`t` :obj:`[N, c]` in the slots of each block of
    :obj:`blocks`, :obj:`[b, n, c]` each (padding slots zero): one gather
    for all blocks, differentiable in :obj:`t` (its backward pass one
    gather too)."""
    parts = _ToSlots.apply(t, slots, False).split(slots.sizes)
    return [part.view(*block.rows.shape, t.size(1)) for part, block in zip(parts, blocks)]


def scatter_blocks(parts: List[Tensor], slots: Slots) -> Tensor:
    r"""The rows :obj:`[N, c]` of :obj:`parts`, each :obj:`[b, n, c]` on
    the slots of its block (the inverse of :func:`gather_blocks`; the
    padding slots dropped): one gather, differentiable."""
    return _ToSlots.apply(torch.cat([part.flatten(0, 1) for part in parts]), slots, True)


def blocks_gram(a: Tensor, b: Tensor, blocks: List[GraphBlock], slots: Slots) -> Tensor:
    r""":math:`\mathbf{A}_g^{\top}\mathbf{B}_g` of the graphs of
    :obj:`blocks` in their order (:obj:`torch.cat` of their
    :obj:`graphs`), :obj:`[G, k, m]`, of :obj:`a` :obj:`[N, k]` and
    :obj:`b` :obj:`[N, m]`: one batched product per block of the padded
    slots, or, for graphs of more than :data:`GRAM_CHUNK
    <torch_geometric_regcn.linalg.blocks.GRAM_CHUNK>` rows (at most
    :math:`N / 2^{12}` of them, one synchronisation), :func:`local_gram
    <torch_geometric_regcn.linalg.blocks.local_gram>` of each graph's rows,
    whose float32 sums in float64 chunks are those of the graph alone."""
    if all(block.rows.size(1) <= GRAM_CHUNK for block in blocks):
        return torch.cat([x.transpose(1, 2) @ y for x, y in
                          zip(gather_blocks(a, blocks, slots), gather_blocks(b, blocks, slots))])
    out = []  # a large graph among them: no copy of its padded rows, each small block its own
    for block in blocks:
        if block.rows.size(1) <= GRAM_CHUNK:
            padded_a, padded_b = _padded(a)[block.rows], _padded(b)[block.rows]
            out.append(padded_a.transpose(1, 2) @ padded_b)
            continue
        first, size = torch.stack([block.rows[:, 0], (block.rows < a.size(0)).sum(1)]).tolist()
        out.append(torch.stack([local_gram(a[s:s + n], b[s:s + n]) for s, n in zip(first, size)]))
    return torch.cat(out)


def graph_gram(a: Tensor, b: Tensor, blocks: List[GraphBlock], batch_size: int) -> Tensor:
    r""":math:`\mathbf{A}_g^{\top}\mathbf{B}_g` for every graph :math:`g` of
    the batch, :obj:`[batch_size, k, m]` (zero for an empty graph), of
    :obj:`a` :obj:`[N, k]` and :obj:`b` :obj:`[N, m]`: :func:`blocks_gram`,
    :math:`O(N k m)` time (at most :math:`2N` rows with the padding)."""
    out = a.new_zeros(batch_size, a.size(1), b.size(1))
    if not blocks:
        return out
    graphs = torch.cat([block.graphs for block in blocks])
    return out.index_copy(0, graphs, blocks_gram(a, b, blocks, slots_of(blocks, a.size(0))))
