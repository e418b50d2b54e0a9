r"""The exact cosine kNN search: similarities in row blocks against each
block of nodes in turn (on row shards, the feature blocks pass around a ring
of the ranks), merged into a running top-:math:`k`."""
import math
from typing import Optional

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, rank_of
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.knn.checks import check_search
from torch_geometric_regcn.knn.ring import pack, ring, unpack
from torch_geometric_regcn.knn.top_k import RunningTopK
from torch_geometric_regcn.utils.progress import progress_bar
from torch_geometric_regcn.utils.sparse import dense_rows, to_csr
from torch_geometric_regcn.utils.validation import check_node_features

#: Similarities per block of the search on CPU (on CUDA 8x more): with the
#: top-k masks about 300 MB; a GPU has the memory for more, and fewer, larger
#: blocks keep it busy.
BLOCK = 2**24


def normalize_rows(x: Tensor) -> Tensor:
    r"""The rows of :obj:`x` scaled to unit L2 norm, :math:`\mathbf{x}_i /
    \|\mathbf{x}_i\|_2`, each row divided by its largest magnitude first so
    that no finite row's norm overflows or underflows; zero rows stay zero
    (never NaN).

    Args:
        x (torch.Tensor): :obj:`[N, F]`, dense or sparse COO or CSR.

    Shapes:
        - **output:** :obj:`[N, F]`, dense for dense :obj:`x`, else
          coalesced COO.
    """
    check_node_features(x, 'x', finite=False)
    tiny = torch.finfo(x.dtype).tiny
    if x.size(1) == 0:  # no features: every row a zero row
        return x.clone()
    if x.layout == torch.strided:
        norm = x.norm(dim=1, keepdim=True)
        # Rows whose norm overflowed, or whose squares went below the smallest
        # normal number (zero rows among them): those alone, scaled first.
        odd = (~torch.isfinite(norm) | (norm < tiny ** 0.5)).view(-1)
        out = x / norm.clamp_min(tiny)
        if bool(odd.any()):
            rows = odd.nonzero().view(-1)
            part = x[rows] / x[rows].abs().amax(dim=1, keepdim=True).clamp_min(tiny)
            out[rows] = part / part.norm(dim=1, keepdim=True).clamp_min(tiny)
        return out
    x = x.to_sparse_coo().coalesce()
    row, col = x.indices()
    largest = torch.zeros(x.size(0), dtype=x.dtype, device=x.device).scatter_reduce(
        0, row, x.values().abs(), 'amax')
    values = x.values() / largest.clamp_min(tiny)[row]
    norm = torch.zeros(x.size(0), dtype=x.dtype, device=x.device)
    norm.index_add_(0, row, values.square())
    values = values / norm.sqrt().clamp_min(tiny)[row]
    return torch.sparse_coo_tensor(x.indices(), values, x.shape, is_coalesced=True,
                                   check_invariants=False)


def exact_knn_cosine(x: Tensor, k: int, block_size: Optional[int] = None,
                     progress: bool = True, *, partition: Optional[RowPartition] = None,
                     group: Group = None, node_id: Optional[Tensor] = None) -> Tensor:
    r"""The :obj:`k` nearest neighbours of every row of :obj:`x` under cosine
    similarity,

    .. math::
        \mathcal{N}_k(i) = \operatorname{top-}k_{j \neq i}\;
        \frac{\mathbf{x}_i^{\top}\mathbf{x}_j}{\|\mathbf{x}_i\|\,\|\mathbf{x}_j\|},

    ties (similarities equal as computed) to the lower node index (or the
    lower :obj:`node_id`, when given); a zero
    row has similarity 0 to every node. Duplicate rows may get similarities
    one rounding error apart from the BLAS (``docs/reliability.md``,
    *Determinism*).

    The similarities of :obj:`block_size` query rows at a time are scored
    against each block of nodes and merged into a running top-:math:`k` in
    the order (similarity descending, node index ascending). On row shards
    (:obj:`group` given) the unit feature blocks pass around a ring of the
    ranks, so no rank holds all the features (see ``docs/distributed.md``);
    with :obj:`group=None` there is one block and no merge.

    Row shards and other block sizes give the same neighbours, except where
    two dense similarities one rounding error apart compete for the
    :math:`k`-th place (see ``docs/reliability.md``, *Determinism*).

    With :math:`n = N / P` rows per rank, time is :math:`O(n N F)` per rank,
    memory :math:`O(n F + n k + \text{block\_size} \cdot (n + F))` (a block
    of sparse features is scored dense), and each rank
    sends :math:`(P - 1) / P \cdot N F` values (non-zeros with their indices
    for sparse features).

    Args:
        x (torch.Tensor): This rank's rows of the node features
            :obj:`[n, F]` (all :math:`N` rows without a :obj:`group`): dense,
            or sparse COO or CSR.
        k (int): Neighbours per node, less than :math:`N`.
        block_size (int, optional): Query rows per block. (default:
            :obj:`None`, about :math:`2^{24}` similarities per block, and as
            many dense feature values for sparse features, 8x more on CUDA)
        progress (bool, optional): Show a progress bar (on rank 0) when the
            search takes longer than a second. (default: :obj:`True`)
        partition (RowPartition, optional): The row blocks, as on this rank's
            shard; required with a :obj:`group`. (default: one part)
        group (torch.distributed.ProcessGroup, optional): The ranks that hold
            the shards; every rank must call. (default: :obj:`None`, one
            process)
        node_id (torch.Tensor, optional): The index of each row in the
            graph's original numbering, :obj:`[n]` (:obj:`data.node_id` of a
            shard of :func:`~torch_geometric_regcn.distributed.partition`),
            given on every rank or on none: ties go to the lower original
            index, so that METIS shards, which renumber the nodes, find the
            neighbours of one process on the original numbering. It travels
            the ring with the features (8 bytes per row). (default:
            :obj:`None`, ties by the indices of the shards' numbering)

    Shapes:
        - **output:** :obj:`[n, k]` global node indices, ascending in each row.
    """
    x, partition, _, k, block_size = check_search(x, k, partition, group, 'exact_knn_cosine',
                                                  'exact', block_size, node_id=node_id)
    return exact_search(normalize_rows(x), k, partition, group, block_size,
                        progress and rank_of(group) == 0, node_id)


def exact_search(xn: Tensor, k: int, partition: RowPartition, group: Group,
                 block_size: Optional[int], progress: bool,
                 node_id: Optional[Tensor] = None) -> Tensor:
    r"""The search of :func:`exact_knn_cosine` on checked unit rows
    :obj:`xn`, ties by the checked :obj:`node_id` when given."""
    n_local, bounds = partition.num_local, partition.bounds
    widest = max(max(b - a for a, b in zip(bounds, bounds[1:])), 1)
    if block_size is None:
        # A block holds its scores [b, widest] and, for sparse features, its dense rows [b, F].
        per_row = widest + (xn.size(1) if xn.layout != torch.strided else 0)
        block_size = max(1, min(n_local, (BLOCK * 8 if xn.is_cuda else BLOCK) // per_row))
    own_keys = xn if xn.layout == torch.strided else to_csr(xn)
    top = RunningTopK(n_local, k, partition.num_nodes, xn, merges=partition.num_parts > 1,
                      keyed=node_id is not None)
    bar = progress_bar(n_local * partition.num_parts, 'semantic kNN (exact)', 'node',
                       progress)
    # The features of this rank's rows, and their tie keys, travel the ring.
    outgoing = () if partition.num_parts == 1 else (
        pack(xn) if node_id is None else (*pack(xn), node_id))
    for src, received in ring(outgoing, group):
        ties = node_id
        if src == partition.rank:
            keys = own_keys
        else:
            if node_id is not None:
                received, ties = received[:-1], received[-1]
            keys = unpack(received, bounds[src + 1] - bounds[src], xn.size(1))
        columns = torch.arange(bounds[src], bounds[src + 1], device=xn.device)
        for start in range(0, n_local, block_size):
            end = min(start + block_size, n_local)
            block = dense_rows(xn, start, end)
            if keys.layout == torch.strided:
                scores = block @ keys.T
            else:
                scores = (keys @ block.T).T.contiguous()  # a row-major top-k: several times faster
            if src == partition.rank:
                own = torch.arange(start, end, device=xn.device)
                scores[own - start, own] = -math.inf
            top.add(slice(start, end), scores, columns, ties)
            bar.update(end - start)
    bar.close()
    return top.result()
