r"""Sparse graph operators: the normalised adjacency, in one process or on
row shards, and linear combinations of sparse matrices."""
import math
from typing import Any, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.utils import coalesce

from torch_geometric_regcn.distributed.collectives import Group, agree, agree_arguments
from torch_geometric_regcn.distributed.halo import HaloPlan, reversed_edges
from torch_geometric_regcn.distributed.row_partition import (
    RowPartition,
    check_partition,
    check_shard_edges,
)
from torch_geometric_regcn.utils.deprecation import warn_deprecated
from torch_geometric_regcn.utils.sparse import compact_csr, csr_matrix, index_dtype, to_csr
from torch_geometric_regcn.utils.validation import (
    all_finite,
    check_choice,
    check_coefficient,
    check_dtype,
    check_edge_index,
    check_int,
)

Edges = Tuple[Tensor, Tensor]

#: How :func:`normalized_adjacency` combines duplicate edges.
REDUCE = ('max', 'sum')


def normalized_adjacency(
    edge_index: Tensor,
    num_nodes: int,
    edge_weight: Optional[Tensor] = None,
    dtype: torch.dtype = torch.float32,
    name: str = 'edge_index',
    weight_name: str = 'edge_weight',
    *,
    self_loops: bool = True,
    reduce: str = 'sum',
    partition: Optional[RowPartition] = None,
    group: Group = None,
    return_degree: bool = False,
) -> Union[Edges, Tuple[Tensor, Tensor, Tensor]]:
    r"""Returns the normalised adjacency of a graph as a pair
    :obj:`(edge_index, edge_weight)`: by default the renormalised adjacency
    of `Kipf and Welling (ICLR 2017) <https://arxiv.org/abs/1609.02907>`_,
    with :obj:`self_loops=False` that of PyG's symmetric normalised Laplacian
    (:func:`~torch_geometric.utils.get_laplacian`,
    :math:`\mathbf{L} = \mathbf{I} - \hat{\mathbf{A}}`),

    .. math::
        \hat{\mathbf{A}} = \hat{\mathbf{D}}^{-1/2} (\mathbf{A} + \mathbf{I})
        \hat{\mathbf{D}}^{-1/2}
        \quad\text{or}\quad
        \hat{\mathbf{A}} = \mathbf{D}^{-1/2} \mathbf{A} \mathbf{D}^{-1/2},
        \qquad
        \mathbf{A}_{ij} = \max(w_{ij}, w_{ji}).

    Self loops of the input are dropped, duplicate edges are combined by
    :obj:`reduce` (:obj:`"sum"`: their weights add up, as in PyG's
    :class:`~torch_geometric.nn.conv.GCNConv` and Laplacian; :obj:`"max"`:
    they count once), and the graph is made symmetric by
    the maximum, which leaves an undirected graph as it is. With
    :obj:`self_loops=True` unit self loops are added, so every node has
    degree at least one; without, edges of weight zero are dropped and a node
    without edges is isolated (no entry, degree zero).

    With a :obj:`partition` (and the process :obj:`group` whose ranks hold
    its parts) the edges are this rank's shard (first index among its nodes,
    global indices) and the result is this rank's rows of the same matrix:
    each reversed edge is sent to the owner of its new row and the degrees of
    the halo are fetched, each by one :func:`all_to_all`; the shard's checks
    are agreed across the ranks first, so a bad shard makes every rank raise.
    Without, the graph is one part of :math:`N` rows and every collective is
    the identity.

    Args:
        edge_index (torch.Tensor): The edge indices, shape :obj:`[2, E]`.
        num_nodes (int): The number of nodes :math:`N` (of the whole graph).
        edge_weight (torch.Tensor, optional): Non-negative edge weights, shape
            :obj:`[E]`; the result is in their dtype. (default: :obj:`None`,
            all ones)
        dtype (torch.dtype, optional): The floating-point dtype of the
            result when :obj:`edge_weight` is :obj:`None` (checked also when
            it is given). (default: :obj:`torch.float32`)
        name (str, optional): The name of :obj:`edge_index` in error messages.
            (default: :obj:`"edge_index"`)
        weight_name (str, optional): The name of :obj:`edge_weight` in error
            messages. (default: :obj:`"edge_weight"`)
        self_loops (bool, optional): Add unit self loops (Kipf and Welling);
            if :obj:`False`, PyG's Laplacian convention. (default: :obj:`True`)
        reduce (str, optional): :obj:`"sum"` or :obj:`"max"`, how duplicate
            edges combine. (default: :obj:`"sum"`)
        partition (RowPartition, optional): The row blocks, seen from this
            rank. (default: :obj:`None`, one process)
        group (torch.distributed.ProcessGroup, optional): The ranks holding
            the parts of :obj:`partition`. (default: :obj:`None`)
        return_degree (bool, optional): Also return the degrees
            :math:`\hat{d}_i` of this rank's nodes, shape :obj:`[n]`.
            (default: :obj:`False`)

    Shapes:
        - **output:** edge indices :obj:`[2, E']` (global, first index among
          this rank's :math:`n` nodes) and weights :obj:`[E']`, where
          :math:`E' \leq 2E + n`; with :obj:`self_loops=True` the unit self
          loops come last; otherwise the edges are sorted.

    Raises :class:`ValueError` naming :obj:`weight_name` where finite weights
    sum to infinity at a node in :obj:`dtype` (on shards, on every rank:
    one more all-gather).

    Cost: :math:`O(E \log E)` for the sorts, made by chunks of rows
    (:func:`normalized_rows`, which builds the matrix; with
    :obj:`reduce="sum"`, summing repeats is skipped after an :math:`O(E)`
    pass finds the edges sorted by row and column without a repeated pair,
    as PyG's datasets hold them); on shards, two all-to-alls of
    :math:`O(E_{\text{cut}} + h)` numbers (:math:`h` halo nodes). Repeats
    of a pair add up in the order they are given.
    """
    rows, degree = normalized_rows(edge_index, num_nodes, edge_weight, dtype, name,
                                   weight_name, self_loops=self_loops, reduce=reduce,
                                   partition=partition, group=group)
    start = 0 if partition is None else partition.start
    crow, col, weight = rows.crow_indices(), rows.col_indices(), rows.values()
    row = torch.repeat_interleave(
        torch.arange(start, start + rows.size(0), device=col.device), crow.diff())
    edge_index = torch.stack([row, col.long()])
    if self_loops:  # the unit self loops last, in the order of their rows
        loop = row == edge_index[1]
        edge_index = torch.cat([edge_index[:, ~loop], edge_index[:, loop]], dim=1)
        weight = torch.cat([weight[~loop], weight[loop]])
    if return_degree:
        return edge_index, weight, degree
    return edge_index, weight


def normalized_rows(
    edge_index: Tensor,
    num_nodes: int,
    edge_weight: Optional[Tensor] = None,
    dtype: torch.dtype = torch.float32,
    name: str = 'edge_index',
    weight_name: str = 'edge_weight',
    *,
    self_loops: bool = True,
    reduce: str = 'sum',
    partition: Optional[RowPartition] = None,
    group: Group = None,
) -> Tuple[Tensor, Tensor]:
    r"""The matrix of :func:`normalized_adjacency` (the same arguments, the
    same checks), built directly as this rank's rows in sparse CSR form:
    returns :obj:`(rows, degree)`, :obj:`rows` of shape :obj:`[n, N]` with
    global, sorted column indices (32-bit where :math:`N` and the entries fit,
    see :func:`~torch_geometric_regcn.utils.sparse.index_dtype`), the self
    loops in their sorted place, and :obj:`degree` the :math:`\hat{d}_i` of
    this rank's :math:`n` nodes. In one process :obj:`rows` is the whole
    :math:`N \times N` matrix.

    The entries are the ones :func:`normalized_adjacency` returns (the same
    sums, maxima and products in the same order, so the same bits in one
    process and on shards; three or more repeats of a pair add up in the
    order they are given). They are
    built by chunks of rows of about :data:`CHUNK_ENTRIES` input entries:
    the edges are grouped by chunk once (a stable sort of 32-bit chunk
    numbers, skipped for an edge list sorted by row), and each chunk's edges,
    reversed edges and self loops are sorted, their repeats combined, and
    their weights normalised there, so no :math:`O(E)` copy of 64-bit pairs
    or sort keys is made.

    Memory: the result (8 bytes per entry with 32-bit indices, held twice
    while the chunks are joined) and, for each of the edges' two directions
    not sorted by row, 8 bytes per input edge (its place in chunk order),
    plus :math:`O(n)` (on shards an :math:`N`-byte mask of the halo) and
    :math:`O(\text{chunk})` work arrays.
    """
    part = _checked_partition(edge_index, num_nodes, edge_weight, name, weight_name,
                              reduce, partition, group, {
                                  "'self_loops'": bool(self_loops), "'reduce'": reduce,
                                  "whether 'edge_weight' is given": edge_weight is not None,
                                  "the dtype of the result": dtype if edge_weight is None
                                  else getattr(edge_weight, 'dtype', None)}, dtype)
    weight_dtype = dtype if edge_weight is None else edge_weight.dtype
    edge_index = edge_index.long()  # int32 (or narrower) indices, checked above, widened once
    sources = _sources(edge_index, edge_weight, part, group)
    # repeats add up (on shards received ones may repeat even where this one does not)
    summed = reduce == 'sum' and (part.num_parts > 1 or not _sorted_unique(edge_index))
    bounds = _chunk_bounds([s.row for s in sources], part)
    order = [_chunk_order(s.row, bounds) for s in sources]
    degree = torch.zeros(part.num_local, dtype=weight_dtype, device=edge_index.device)
    index = index_dtype(part.num_nodes, sum(s.row.numel() for s in sources) + part.num_local)
    cols, weights, counts = [], [], []
    for c in range(len(bounds) - 1):
        row, col, weight = _chunk_entries(sources, [o[c] for o in order], bounds[c],
                                          bounds[c + 1], part, self_loops, summed,
                                          weight_dtype)
        # the degree sums each row's entries in column order, the unit loop last
        off = bounds[c] - part.start
        mine = degree[off:off + bounds[c + 1] - bounds[c]]
        mine.scatter_add_(0, row, weight.masked_fill(row + bounds[c] == col, 0)
                          if self_loops else weight)
        counts.append(torch.bincount(row, minlength=bounds[c + 1] - bounds[c]))
        cols.append(col.to(index))  # kept at the result's index width
        weights.append(weight)
    del sources, order
    if self_loops:
        degree += 1
    error = None  # finite weights whose sum at a node overflows the dtype: every entry 0
    if part.num_local and not all_finite(degree):
        error = ValueError(f"'{weight_name}' overflows {weight_dtype}: a node's sum of weights "
                           f"is infinite there; rescale the weights")
    if group is not None:
        agree(error, group, 'normalized_adjacency')
    elif error is not None:
        raise error
    rows = _assembled(cols, weights, counts, (part.num_local, part.num_nodes), weight_dtype)
    return _normalize(rows, degree, bounds, part, group, self_loops), degree


#: Input entries per chunk of rows while :func:`normalized_rows` and
#: :func:`combine` build a matrix: their sorts' work arrays, about 100 bytes
#: per entry, stay within a few tens of MiB.
CHUNK_ENTRIES = 2**18


class _Source(NamedTuple):
    r"""Entries :math:`(i, j, w)` of a matrix being built: the edges, their
    reverses, or the reverses received from other ranks."""
    row: Tensor
    col: Tensor
    weight: Optional[Tensor]  #: :obj:`None`: all ones


def _sources(edge_index: Tensor, edge_weight: Optional[Tensor], part: RowPartition,
             group: Group) -> List[_Source]:
    r"""The edges, their reverses that fall in this rank's rows (views, no
    copy), and, on more than one part, the reverses received from the ranks
    that hold their edges (one exchange, :func:`reversed_edges`)."""
    row, col = edge_index.contiguous()  # each read by sorts and searches: contiguous
    sources = [_Source(row, col, edge_weight), _Source(col, row, edge_weight)]
    if part.num_parts > 1:
        remote = part.owner(col) != part.rank  # reversed, they belong to other ranks
        received, weight = reversed_edges(edge_index[:, remote], part, group,
                                          None if edge_weight is None
                                          else edge_weight[remote])
        received = received.contiguous()
        sources.append(_Source(received[0], received[1], weight))
    return sources


def _chunk_bounds(rows: Sequence[Tensor], part: RowPartition) -> List[int]:
    r"""Global row bounds of the chunks: consecutive rows of this rank with
    about :data:`CHUNK_ENTRIES` entries of :obj:`rows` each (see :func:`_bounds`)."""
    counts = torch.zeros(part.num_local, dtype=torch.long, device=rows[0].device)
    for row in rows:  # by slices: O(slice) work arrays, not O(E) or O(N)
        for lo in range(0, row.numel(), CHUNK_ENTRIES):
            local = row[lo:lo + CHUNK_ENTRIES] - part.start
            local = local[(local >= 0) & (local < part.num_local)]
            counts.index_add_(0, local, torch.ones_like(local))
    return [part.start + b for b in _bounds(counts)]


def _bounds(counts: Tensor) -> List[int]:
    r"""Row bounds :obj:`[0, ..., n]` of chunks of consecutive rows with
    :obj:`counts` entries per row, about :data:`CHUNK_ENTRIES` per chunk (a
    row with more is a chunk of its own)."""
    n = counts.numel()
    if n == 0:
        return [0]
    cumulative = counts.cumsum(0)
    total = int(cumulative[-1])
    marks = torch.arange(CHUNK_ENTRIES, max(total, CHUNK_ENTRIES), CHUNK_ENTRIES,
                         device=counts.device)
    inner = torch.searchsorted(cumulative, marks, right=True).add_(1).clamp_(max=n)
    return sorted({0, n, *inner.tolist()})


def _chunk_order(row: Tensor, bounds: List[int]) -> List[Union[slice, Tensor]]:
    r"""For each chunk, where its entries are in :obj:`row`: a slice of a
    sorted :obj:`row`; otherwise positions, each chunk's in their order in
    :obj:`row` (a stable sort of the 32-bit chunk numbers, 8 bytes per entry
    kept)."""
    edges = torch.tensor(bounds, dtype=row.dtype, device=row.device)
    if row.numel() < 2 or bool((row[1:] >= row[:-1]).all()):
        at = torch.searchsorted(row, edges).tolist()
        return [slice(at[c], at[c + 1]) for c in range(len(bounds) - 1)]
    chunk = torch.bucketize(row, edges, right=True, out_int32=True)  # 0: before, C + 1: after
    order = torch.argsort(chunk, stable=True)
    at = torch.bincount(chunk, minlength=len(bounds) + 1).cumsum(0).tolist()
    del chunk
    return [order[at[c]:at[c + 1]] for c in range(len(bounds) - 1)]


def _chunk_entries(sources: Sequence[_Source], where: Sequence[Union[slice, Tensor]], r0: int,
                   r1: int, part: RowPartition, self_loops: bool, summed: bool,
                   dtype: torch.dtype) -> Tuple[Tensor, Tensor, Tensor]:
    r"""The entries of rows :obj:`r0:r1` of :math:`\max(\mathbf{A},
    \mathbf{A}^{\top})` (with :obj:`summed`, the repeats within each source
    added up first, in their order), input self loops dropped, unit ones
    added with :obj:`self_loops`, zeros dropped without; sorted:
    :obj:`(row - r0, col, weight)`. One stable sort of the keys
    :math:`4((i - r_0) N + j) + s` for source :math:`s`."""
    n = part.num_nodes
    keys, weights = [], []
    for s, (source, at) in enumerate(zip(sources, where)):
        row, col = source.row[at], source.col[at]
        weight = (torch.ones(row.numel(), dtype=dtype, device=row.device)
                  if source.weight is None else source.weight[at])
        keep = row != col
        keys.append((row[keep] - r0).mul_(n).add_(col[keep]).mul_(4).add_(s))
        weights.append(weight[keep])
    if self_loops:  # no input loop is left to meet them
        loop = torch.arange(r0, r1, device=keys[0].device)
        keys.append((loop - r0).mul_(n).add_(loop).mul_(4))
        weights.append(torch.ones(r1 - r0, dtype=dtype, device=loop.device))
    key, order = torch.cat(keys).sort(stable=True)
    del keys
    weight = torch.cat(weights)[order]
    del weights, order
    if summed:  # repeats within a source add up
        key, inverse = torch.unique_consecutive(key, return_inverse=True)
        if key.numel() < weight.numel():
            weight = weight.new_zeros(key.numel()).scatter_add_(0, inverse, weight)
    key, inverse = torch.unique_consecutive(key.div_(4, rounding_mode='floor'),
                                            return_inverse=True)
    if key.numel() < weight.numel():  # the graph's both directions (or a repeat): the max
        # Started from -inf, which every key's first weight replaces: torch's
        # backward shares the gradient with a starting value equal to the max
        # even where include_self=False leaves it out (a third of it, lost,
        # for a pair of zero weights started from zeros).
        weight = weight.new_full((key.numel(),), -math.inf).scatter_reduce_(
            0, inverse, weight, 'amax', include_self=False)
    if not self_loops:
        keep = weight > 0
        key, weight = key[keep], weight[keep]
    row = torch.div(key, n, rounding_mode='floor')
    return row, key.sub_(row * n), weight


def _assembled(cols: List[Tensor], weights: List[Tensor], counts: List[Tensor],
               shape: Tuple[int, int], dtype: torch.dtype, compact: bool = True) -> Tensor:
    r"""The chunks' entries as one CSR matrix, each chunk freed once copied
    (so the copy never doubles them; out of place when the weights carry a
    gradient)."""
    device = counts[0].device if counts else torch.device('cpu')
    counts = torch.cat(counts) if counts else torch.zeros(0, dtype=torch.long)
    total = int(counts.sum())
    index = index_dtype(shape[1], total) if compact else torch.long
    crow = torch.zeros(shape[0] + 1, dtype=index, device=device)
    crow[1:] = counts.cumsum(0)
    if any(w.requires_grad for w in weights):
        return csr_matrix(crow, torch.cat(cols).to(index), torch.cat(weights), shape)
    col = torch.empty(total, dtype=index, device=device)
    value = torch.empty(total, dtype=dtype, device=device)
    at = 0
    for c in range(len(cols)):
        size = cols[c].numel()
        col[at:at + size] = cols[c]
        value[at:at + size] = weights[c]
        cols[c] = weights[c] = None
        at += size
    return csr_matrix(crow, col, value, shape)


def _normalize(rows: Tensor, degree: Tensor, bounds: List[int], part: RowPartition,
               group: Group, self_loops: bool) -> Tensor:
    r"""Scales :obj:`rows`' weights by the degrees, in place (out of place,
    into a new matrix, when they carry a gradient):
    :math:`\hat{d}_i^{-1/2} w_{ij} \hat{d}_j^{-1/2}` or, without self
    loops, :math:`w_{ij} / (d_i^{1/2} d_j^{1/2})`, the halo's degrees
    fetched by one exchange."""
    crow, col, value = rows.crow_indices(), rows.col_indices(), rows.values()
    plan = HaloPlan.build(remote_columns(col, part), part, group)
    root = degree.rsqrt() if self_loops else degree.sqrt()
    root_ext = plan.extended(root[:, None])[:, 0]
    out = [] if value.requires_grad else None
    for c in range(len(bounds) - 1):
        first, last = bounds[c] - part.start, bounds[c + 1] - part.start
        lo, hi = int(crow[first]), int(crow[last])
        local = torch.repeat_interleave(torch.arange(first, last, device=col.device),
                                        crow[first:last + 1].diff())
        columns = col[lo:hi].long()
        columns = columns - part.start if part.num_parts == 1 else plan.compact(columns)
        if self_loops:  # every degree is at least one
            scaled = root[local] * value[lo:hi] * root_ext[columns]
        else:  # an isolated node has degree zero and no entry
            scaled = value[lo:hi] / (root[local] * root_ext[columns])
        if out is None:
            value[lo:hi] = scaled
        else:
            out.append(scaled)
    if out is None:
        return rows
    return csr_matrix(crow, col, torch.cat(out) if out else value[:0], rows.shape)


def remote_columns(col: Tensor, part: RowPartition) -> Tensor:
    r"""The distinct columns of :obj:`col` that other ranks own (the halo of
    a matrix with these columns), ascending: marked in an :math:`N`-byte
    mask by slices, so no sort and no :math:`O(\mathrm{nnz})` copy."""
    if part.num_parts == 1:
        return torch.zeros(0, dtype=torch.long, device=col.device)
    seen = torch.zeros(part.num_nodes, dtype=torch.bool, device=col.device)
    for lo in range(0, col.numel(), CHUNK_ENTRIES):
        chunk = col[lo:lo + CHUNK_ENTRIES]
        seen[chunk.long()] = True
    seen[part.start:part.end] = False
    return seen.nonzero().view(-1)


def _sorted_unique(edge_index: Tensor) -> bool:
    r"""Whether the edges are sorted by row, then column, without a repeated
    pair: what :func:`~torch_geometric.utils.coalesce` returns unchanged, so
    its :math:`O(E \log E)` sort can be skipped. One :math:`O(E)` pass and
    one synchronisation."""
    if edge_index.size(1) < 2:
        return True
    row, col = edge_index
    same = row[1:] == row[:-1]
    return bool(((row[1:] > row[:-1]) | (same & (col[1:] > col[:-1]))).all())


def _checked_partition(edge_index: Tensor, num_nodes: int, edge_weight: Optional[Tensor],
                       name: str, weight_name: str, reduce: str,
                       partition: Optional[RowPartition], group: Group,
                       arguments: Mapping[str, Any],
                       dtype: torch.dtype = torch.float32) -> RowPartition:
    r"""Checks the input of :func:`normalized_adjacency` (on shards: on
    every rank, agreed, with the :obj:`arguments` and the row blocks the
    same on every rank) and returns the row blocks: one part without a
    :obj:`partition`."""
    if partition is None:
        if group is not None:  # the ranks given a partition are at the agreement below
            agree_arguments(group, 'normalized_adjacency', {}, ValueError(
                "'group' needs the 'partition' of the shards (a RowPartition, as "
                "torch_geometric_regcn.distributed.partition() gives it)"))
        check_choice('reduce', reduce, REDUCE)
        num_nodes = _check_size(num_nodes, dtype)
        check_edge_index(edge_index, num_nodes, edge_weight, name, weight_name)
        return RowPartition((0, num_nodes), 0)
    error, same = None, {}
    try:
        check_choice('reduce', reduce, REDUCE)
        num_nodes = _check_size(num_nodes, dtype)
        partition = check_partition(partition, group, 'partition')
        if num_nodes != partition.num_nodes:
            raise ValueError(f"'num_nodes' ({num_nodes}) must be the number of nodes of the "
                             f"whole graph, {partition.num_nodes} in 'partition'")
        check_shard_edges(edge_index, partition, edge_weight, name)
        same = {**arguments, "the row blocks of 'partition'": partition.bounds}
    except (TypeError, ValueError) as failure:
        error = failure
    agree_arguments(group, 'normalized_adjacency', same, error)
    return partition


def _check_size(num_nodes: Any, dtype: Any) -> int:
    r"""The checks of :func:`normalized_adjacency`'s :obj:`num_nodes` (a
    non-negative integer, returned as :class:`int`) and :obj:`dtype` (a
    floating-point one: the normalisation divides)."""
    check_dtype('dtype', dtype)
    return check_int('num_nodes', num_nodes, minimum=0)


def sharded_normalized_adjacency(edge_index: Tensor, partition: RowPartition, group: Group,
                                 edge_weight: Optional[Tensor] = None,
                                 dtype: torch.dtype = torch.float32) -> Edges:
    r"""Deprecated: :func:`normalized_adjacency` with :obj:`partition` and
    :obj:`group` (the weights cast to :obj:`dtype`)."""
    warn_deprecated("'sharded_normalized_adjacency' is deprecated; use normalized_adjacency("
                    "edge_index, partition.num_nodes, edge_weight, dtype, partition=partition, "
                    "group=group)")
    if edge_weight is not None:
        edge_weight = edge_weight.to(dtype)
    edge_index, edge_weight = normalized_adjacency(edge_index, partition.num_nodes, edge_weight,
                                                   dtype, partition=partition, group=group)
    return coalesce(edge_index, edge_weight, partition.num_nodes)  # sorted, as it returned


def linear_combination(matrices: Sequence[Tensor], coefficients: Sequence[float]) -> Tensor:
    r"""Returns :math:`\sum_i c_i \mathbf{M}_i` of sparse matrices (COO or CSR)
    of one shape, as sparse CSR."""
    return combine([coo_entries(matrix) for matrix in matrices], coefficients,
                   matrices[0].size(0))


def coo_entries(matrix: Tensor) -> Edges:
    r"""The coalesced :obj:`(indices, values)` of a sparse (COO or CSR)
    matrix."""
    coo = matrix.to_sparse_coo().coalesce()
    return coo.indices(), coo.values()


def combine(operators: Sequence[Union[Edges, Tensor]], coefficients: Sequence[float],
            num_nodes: int, *, compact: bool = False) -> Tensor:
    r"""Returns :math:`\sum_i c_i \mathbf{M}_i` as a sparse CSR matrix, where each
    :math:`\mathbf{M}_i` is given as a pair :obj:`(edge_index, edge_weight)`
    or as sparse CSR rows :obj:`[n, N]` with sorted, distinct columns per row
    (as :func:`normalized_rows` and :func:`~torch_geometric_regcn.utils.sparse.to_csr`
    give them; the result then has their shape). Terms whose coefficient is
    zero are skipped. Before any work: one coefficient per operator, each a
    finite real number or a one-element floating-point tensor (a learned
    coefficient, whose gradient flows), and a non-negative integer
    :obj:`num_nodes`.

    Given as CSR, the terms are added by chunks of rows of about
    :data:`CHUNK_ENTRIES` entries into a result allocated once: beside the
    terms and the result, only :math:`O(\text{chunk})` work arrays. With
    :obj:`compact`, the result has 32-bit indices where they fit
    (:func:`~torch_geometric_regcn.utils.sparse.index_dtype`), else 64-bit
    ones, as from pairs."""
    operators, coefficients = list(operators), list(coefficients)
    if len(operators) != len(coefficients):
        raise ValueError(f"'operators' and 'coefficients' must have the same length, one "
                         f"coefficient per operator (got {len(operators)} and "
                         f"{len(coefficients)})")
    values = [check_coefficient(f'coefficients[{i}]', c) for i, c in enumerate(coefficients)]
    num_nodes = check_int('num_nodes', num_nodes, minimum=0)
    terms = [(op, c) for op, c, value in zip(operators, coefficients, values) if value != 0]
    if not terms:
        raise ValueError('combine() needs at least one non-zero coefficient')
    if all(isinstance(op, Tensor) and op.layout == torch.sparse_csr for op, _ in terms):
        return _combined_rows(terms, compact)
    terms = [(coo_entries(op) if isinstance(op, Tensor) else op, c) for op, c in terms]
    index = torch.cat([ei for (ei, _), _ in terms], dim=1)
    value = torch.cat([c * ew for (_, ew), c in terms])
    matrix = torch.sparse_coo_tensor(index, value, (num_nodes, num_nodes),
                                     check_invariants=False)
    return compact_csr(matrix) if compact else to_csr(matrix)


def _combined_rows(terms: Sequence[Tuple[Tensor, Any]], compact: bool) -> Tensor:
    r""":func:`combine` of CSR rows, by chunks of rows. One or two terms (the
    operators of tsGCN) are merged into a result allocated once at its exact
    size: a first pass counts each chunk's entries (the second term's columns
    searched among the first's), a second writes them, each chunk's two
    sorted runs merged by their ranks in each other, shared entries added.
    More terms: each chunk's entries sorted together and the repeats added."""
    n, width = terms[0][0].shape
    counts = sum(m.crow_indices().diff().long() for m, _ in terms)
    bounds = _bounds(counts)
    if len(terms) > 2:
        return _sorted_sum(terms, bounds, compact)
    sizes = [_merged_chunk(terms, bounds[c], bounds[c + 1], width, None)
             for c in range(len(bounds) - 1)]
    total = sum(sizes)
    index = index_dtype(width, total) if compact else torch.long
    device = terms[0][0].values().device
    crow = torch.zeros(n + 1, dtype=index, device=device)
    col = torch.empty(total, dtype=index, device=device)
    dtype = torch.result_type(terms[0][1], terms[0][0].values())
    value = torch.empty(total, dtype=dtype, device=device)
    at = 0
    for c in range(len(bounds) - 1):
        r0, r1 = bounds[c], bounds[c + 1]
        out = (crow[r0 + 1:r1 + 1], col[at:at + sizes[c]], value[at:at + sizes[c]])
        _merged_chunk(terms, r0, r1, width, out)
        at += sizes[c]
    crow[1:] = crow[1:].cumsum(0)
    return csr_matrix(crow, col, value, (n, width))


def _merged_chunk(terms: Sequence[Tuple[Tensor, Any]], r0: int, r1: int, width: int,
                  out: Optional[Tuple[Tensor, Tensor, Tensor]]) -> int:
    r"""Rows :obj:`r0:r1` of :math:`c_1 \mathbf{M}_1 (+ c_2 \mathbf{M}_2)`:
    the number of their entries, and with :obj:`out` (the rows' counts, the
    columns and values) written there."""
    keys, values = [], []
    for matrix, coefficient in terms:
        crow = matrix.crow_indices()
        lo, hi = int(crow[r0]), int(crow[r1])
        local = torch.repeat_interleave(torch.arange(r1 - r0, device=crow.device),
                                        crow[r0:r1 + 1].diff())
        keys.append(local.mul_(width).add_(matrix.col_indices()[lo:hi]))
        values.append((coefficient, matrix.values(), lo, hi))
    key = keys[0]
    shared = None
    if len(terms) == 2:  # where the second term's entries go among the first's
        at = torch.searchsorted(key, keys[1])
        shared = key[at.clamp(max=max(key.numel() - 1, 0))] == keys[1] if key.numel() else \
            torch.zeros_like(at, dtype=torch.bool)
        if out is None:
            return key.numel() + keys[1].numel() - int(shared.sum())
        fresh = ~shared
        new, before = keys[1][fresh], at[fresh]  # new entries, how many of the first's precede
        # the merged places: the first's entries move by the new ones before them
        first = torch.bincount(before, minlength=key.numel() + 1)[:key.numel()].cumsum(0)
        first += torch.arange(key.numel(), device=key.device)
        second = before + torch.arange(new.numel(), device=key.device)
        key = torch.empty(first.numel() + second.numel(), dtype=key.dtype, device=key.device)
        key[first], key[second] = keys[0], new
    elif out is None:
        return key.numel()
    counts, col, value = out
    row = torch.div(key, width, rounding_mode='floor')
    counts.copy_(torch.bincount(row, minlength=r1 - r0))
    col.copy_(key.sub_(row.mul_(width)))
    coefficient, entries, lo, hi = values[0]
    if shared is None:
        value.copy_(coefficient * entries[lo:hi])
        return value.numel()
    value[first] = coefficient * entries[lo:hi]
    coefficient, entries, lo, hi = values[1]
    scaled = coefficient * entries[lo:hi]
    value[second] = scaled[fresh]
    value.index_put_((first[at[shared]],), scaled[shared], accumulate=True)
    return value.numel()


def _sorted_sum(terms: Sequence[Tuple[Tensor, Any]], bounds: List[int],
                compact: bool) -> Tensor:
    r""":func:`combine` of three or more CSR terms: each chunk's entries
    sorted together, the repeats added."""
    n, width = terms[0][0].shape
    cols, weights, chunk_counts = [], [], []
    for c in range(len(bounds) - 1):
        r0, r1 = bounds[c], bounds[c + 1]
        keys, parts = [], []
        for matrix, coefficient in terms:
            crow = matrix.crow_indices()
            lo, hi = int(crow[r0]), int(crow[r1])
            local = torch.repeat_interleave(torch.arange(r1 - r0, device=crow.device),
                                            crow[r0:r1 + 1].diff())
            keys.append(local.mul_(width).add_(matrix.col_indices()[lo:hi]))
            parts.append(coefficient * matrix.values()[lo:hi])
        key, value = torch.cat(keys), torch.cat(parts)
        if len(terms) > 1:  # one term's rows are sorted and distinct already
            key, order = key.sort(stable=True)
            value = value[order]
            key, inverse = torch.unique_consecutive(key, return_inverse=True)
            if key.numel() < value.numel():
                value = value.new_zeros(key.numel()).index_add_(0, inverse, value)
        row = torch.div(key, width, rounding_mode='floor')
        cols.append(key - row * width)
        weights.append(value)
        chunk_counts.append(torch.bincount(row, minlength=r1 - r0))
    dtype = torch.result_type(terms[0][1], terms[0][0].values())
    return _assembled(cols, weights, chunk_counts, (n, width), dtype, compact)
