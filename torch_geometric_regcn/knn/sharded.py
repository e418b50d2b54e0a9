r"""The cosine k-nearest-neighbour graph of node features split into row
shards over :mod:`torch.distributed`: each rank holds the features of its
block of nodes and gets the neighbours (and the symmetrised edges) of its own
rows, the same as :func:`~torch_geometric_regcn.utils.knn_graph_cosine`
computes from all the features in one process.

The feature blocks travel around a ring of the ranks, one block at a time, so
no rank ever holds all :math:`N \times F` features, and no :math:`N \times N`
matrix is formed anywhere."""
import math
import zlib
from typing import Iterator, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.utils import coalesce
from tqdm.auto import tqdm

from torch_geometric_regcn.distributed.collectives import (
    Group,
    agree,
    all_gather,
    all_gather_ints,
    all_reduce,
    all_to_all,
    check_group,
    rank_of,
    size_of,
)
from torch_geometric_regcn.distributed.row_partition import RowPartition, check_partition
from torch_geometric_regcn.knn.cosine import (
    EXACT_LIMIT,
    KNN_METHODS,
    _dense_rows,
    _nearest,
    _top_k_lowest_index,
    normalize_rows,
    spherical_kmeans,
)
from torch_geometric_regcn.utils.sparse import to_csr
from torch_geometric_regcn.utils.validation import check_int, check_node_features

#: Similarities per block of the search on CPU (on CUDA 8x more), as in
#: :func:`~torch_geometric_regcn.utils.exact_knn_cosine`.
_BLOCK = 2**24

Payload = Tuple[Tensor, ...]


def sharded_knn_cosine(x_local: Tensor, k: int, partition: RowPartition, group: Group,
                       method: str = 'exact', block_size: Optional[int] = None,
                       generator: Optional[torch.Generator] = None,
                       progress: bool = False) -> Tensor:
    r"""The :obj:`k` nearest neighbours under cosine similarity of this
    rank's rows of a row-sharded feature matrix, as an :obj:`[n_local, k]`
    tensor of global node indices, ascending in each row: this rank's rows of
    what :func:`~torch_geometric_regcn.utils.exact_knn_cosine` (or, with
    :obj:`method="ivf"`, :func:`~torch_geometric_regcn.utils.ivf_knn_cosine`
    with the same :obj:`generator`) returns for all the features in one
    process. A node is never its own neighbour, and ties go to the lower node
    index.

    The exact search passes the unit feature blocks around a ring: at step
    :math:`s` rank :math:`r` holds the block of rank :math:`(r - s) \bmod P`,
    scores its own rows against it :obj:`block_size` rows at a time, and
    merges the best :obj:`k` of each row into a running top-:obj:`k` in the
    order of the single process (similarity descending, then node index
    ascending). The IVF search draws the same random numbers as the single
    process on every rank: the k-means sample and the 256 queries that tune
    the number of probed cells are gathered from their owners, the centroids
    are trained identically on every rank, and the ring then compares each
    query with the visiting rows of the cells its own cell probes.

    With :math:`n = N / P` rows per rank, the exact search takes time
    :math:`O(n N F)` per rank, memory :math:`O(n F + n k + \text{block\_size}
    \cdot n)` (this rank's block, the visiting one, the scores of a row block
    against it and the running top-:obj:`k`), and each rank sends every block
    but one once: :math:`(P - 1) / P \cdot N F` values (the non-zeros with
    their indices for sparse features). The IVF search scores about
    :math:`\text{probes} / \text{cells}` of the pairs, moves the same ring
    (plus the cell of each row), and every rank also holds and trains on the
    k-means sample of :math:`\min(N, 64 \lceil \sqrt{N}\,\rceil)` rows (all of
    them only while :math:`N \le 4096`).

    The neighbours are those of the single process wherever both compute the
    same similarity scores, ties included (they go to the lower index on
    both): always for sparse features, whose products do not depend on the
    block shapes, and for dense scores that are exact (zero rows score 0).
    Other dense scores are matrix products whose last bit the BLAS may round
    differently for other block shapes (as it does between two
    :obj:`block_size` of the single process), so two candidates whose
    similarities differ by one rounding error only may trade the :obj:`k`-th
    place. The IVF centroids are the single process's bit for bit (the same
    sample, the same k-means on every rank).

    Args:
        x_local (torch.Tensor): This rank's rows of the node features,
            :obj:`[partition.num_local, F]`: dense, or sparse COO or CSR
            (exact search only).
        k (int): Neighbours per node, less than :math:`N`.
        partition (RowPartition): The row blocks, as on this rank's shard.
        group (torch.distributed.ProcessGroup, optional): The ranks that hold
            the shards; :obj:`None` for a single process.
        method (str, optional): :obj:`"exact"`, :obj:`"ivf"`, or
            :obj:`"auto"` (as :func:`~torch_geometric_regcn.utils.knn_graph_cosine`
            chooses from :math:`N`). (default: :obj:`"exact"`)
        block_size (int, optional): Query rows per block of the exact search.
            (default: :obj:`None`, about :math:`2^{24}` similarities per block)
        generator (torch.Generator, optional): The IVF search's random numbers;
            the same state on every rank. (default: :obj:`None`, torch's
            default generator)
        progress (bool, optional): Show a progress bar on rank 0.
            (default: :obj:`False`)
    """
    x, partition, method = _prepare(x_local, k, partition, group, method, block_size,
                                    generator, 'sharded_knn_cosine')
    return _search(x, k, partition, group, method, block_size, generator, progress)


def sharded_knn_graph_cosine(x_local: Tensor, k: int, partition: RowPartition,
                             group: Group, method: str = 'auto',
                             block_size: Optional[int] = None,
                             generator: Optional[torch.Generator] = None,
                             progress: bool = False) -> Tensor:
    r"""This rank's rows of the symmetrised cosine :obj:`k`-nearest-neighbour
    graph of a row-sharded feature matrix (:math:`j \in \mathcal{N}_k(i)` or
    :math:`i \in \mathcal{N}_k(j)`), as an :obj:`edge_index` of global node
    indices whose first index is one of this rank's nodes, sorted and without
    duplicates or self loops. Concatenated in rank order, the shards' edges
    are exactly what :func:`~torch_geometric_regcn.utils.knn_graph_cosine`
    returns for all the features in one process, up to the rounding caveat of
    :func:`sharded_knn_cosine`.

    The neighbours come from :func:`sharded_knn_cosine`; each edge
    :math:`(i, j)` found here is then sent, reversed, to the owner of
    :math:`j` in one all-to-all of :math:`2 \cdot 8` bytes per edge (at most
    :math:`n k` edges per rank), and every rank coalesces its rows.
    :obj:`method="auto"` searches exactly on CUDA, for sparse features or up
    to :obj:`EXACT_LIMIT` nodes in all, else by IVF.

    Args:
        x_local (torch.Tensor): This rank's rows of the node features.
        k (int): Neighbours per node, less than :math:`N`.
        partition (RowPartition): The row blocks, as on this rank's shard.
        group (torch.distributed.ProcessGroup, optional): The ranks that hold
            the shards; :obj:`None` for a single process.
        method (str, optional): :obj:`"auto"`, :obj:`"exact"` or
            :obj:`"ivf"`. (default: :obj:`"auto"`)
        block_size (int, optional): Query rows per block of the exact search.
        generator (torch.Generator, optional): The IVF search's random
            numbers; the same state on every rank.
        progress (bool, optional): Show a progress bar on rank 0.
            (default: :obj:`False`)
    """
    x, partition, method = _prepare(x_local, k, partition, group, method, block_size,
                                    generator, 'sharded_knn_graph_cosine')
    col = _search(x, k, partition, group, method, block_size, generator, progress)
    return _symmetrise(col, partition, group)


def _prepare(x: Tensor, k: int, partition: RowPartition, group: Group, method: str,
             block_size: Optional[int], generator: Optional[torch.Generator],
             what: str) -> Tuple[Tensor, RowPartition, str]:
    r"""Checks this rank's arguments, agrees with the other ranks that all
    passed, and checks that every rank searches the same way; returns the
    floating-point features, the partition and the resolved method."""
    check_group(group)
    error = None
    try:
        partition = check_partition(partition, group, 'partition')
        if isinstance(x, Tensor) and not x.is_floating_point():
            x = x.to(torch.get_default_dtype())
        check_node_features(x, 'x')
        if x.size(0) != partition.num_local:
            raise ValueError(f"'x' has {x.size(0)} rows, but rank {partition.rank} owns "
                             f"{partition.num_local} nodes of the partition (nodes "
                             f"{partition.start} to {partition.end - 1})")
        k = check_int('k', k)
        num_nodes = partition.num_nodes
        if not k < num_nodes:
            raise ValueError(f"'k' must lie in [1, {num_nodes - 1}] for a graph of "
                             f"{num_nodes} nodes (got {k})")
        if block_size is not None:
            check_int('block_size', block_size)
        method = _resolve(method, x, num_nodes)
    except (TypeError, ValueError) as exc:
        error = exc
    agree(error, group, what)
    state = torch.default_generator if generator is None else generator
    _check_same_on_every_rank(group, what, [
        ("'k'", k, True),
        ("the number of columns of 'x'", x.size(1), True),
        ('the search method', KNN_METHODS.index(method), False),
        ("the dtype, layout (dense or sparse) and device of 'x'",
         _digest(x.dtype, x.layout == torch.strided, x.device.type), False),
        ("the row blocks of 'partition'", _digest(partition.bounds), False),
        ("the state of 'generator'",
         _digest(state.get_state().numpy().tobytes()) if method == 'ivf' else 0, False),
    ])
    return x, partition, method


def _resolve(method: str, x: Tensor, num_nodes: int) -> str:
    r"""The search that :obj:`method` names, chosen from the whole graph's
    :obj:`num_nodes` for :obj:`"auto"` as the single process chooses."""
    if method not in KNN_METHODS:
        raise ValueError(f"'method' must be one of {KNN_METHODS} (got {method!r})")
    if method == 'auto':
        exact = x.is_cuda or x.layout != torch.strided or num_nodes <= EXACT_LIMIT
        method = 'exact' if exact else 'ivf'
    if method == 'ivf' and x.layout != torch.strided:
        raise ValueError("ivf_knn_cosine needs dense features; use the exact search "
                         "(method='exact') for sparse 'x'")
    return method


def _digest(*values: object) -> int:
    return zlib.crc32(repr(values).encode())


def _check_same_on_every_rank(group: Group, what: str,
                              fields: List[Tuple[str, int, bool]]) -> None:
    r"""Raises the same error on every rank if a field differs between the
    ranks (its values shown where :obj:`fields` says they are readable)."""
    table = all_gather_ints([value for _, value, _ in fields], group)
    for i, (name, _, readable) in enumerate(fields):
        values = [row[i] for row in table]
        if len(set(values)) > 1:
            ranks = {v: [r for r, u in enumerate(values) if u == v] for v in values}
            seen = (', '.join(f'{v} on ranks {rs}' for v, rs in ranks.items()) if readable
                    else ' and '.join(f'ranks {rs}' for rs in ranks.values()) + ' differ')
            raise ValueError(f"{what}: {name} must be the same on every rank ({seen})")


def _search(x: Tensor, k: int, partition: RowPartition, group: Group, method: str,
            block_size: Optional[int], generator: Optional[torch.Generator],
            progress: bool) -> Tensor:
    xn = normalize_rows(x)
    show = progress and rank_of(group) == 0
    if method == 'exact':
        index = _exact(xn, k, partition, group, block_size, show)
    else:
        index = _ivf(xn, k, partition, group, generator, show)
    return index.sort(dim=1).values


def _ring(payload: Payload, group: Group) -> Iterator[Tuple[int, Payload]]:
    r"""Yields :obj:`(src, payload)` for the tensors of every rank :obj:`src`,
    this rank's first; between two steps each rank passes what it holds to
    the next rank and receives from the previous one (one block in flight per
    rank, so each rank sends every block but the next rank's once)."""
    size, rank = size_of(group), rank_of(group)
    for step in range(size):
        yield (rank - step) % size, payload
        if step < size - 1:
            payload = tuple(_pass_on(tensor, group) for tensor in payload)


def _pass_on(tensor: Tensor, group: Group) -> Tensor:
    size, rank = size_of(group), rank_of(group)
    chunks = [tensor if q == (rank + 1) % size else tensor[:0] for q in range(size)]
    return all_to_all(chunks, group)[(rank - 1) % size]


def _merge(values: Tensor, index: Tensor, new_values: Tensor, new_index: Tensor,
           k: int) -> Tuple[Tensor, Tensor]:
    r"""The best :obj:`k` of two candidate lists of each row (distinct node
    indices) in the total order of the single process: score descending, then
    node index ascending."""
    values = torch.cat([values, new_values], dim=1)
    index = torch.cat([index, new_index], dim=1)
    by_index = index.argsort(dim=1, stable=True)
    values, index = values.gather(1, by_index), index.gather(1, by_index)
    by_score = values.argsort(dim=1, descending=True, stable=True)[:, :k]
    return values.gather(1, by_score), index.gather(1, by_score)


def _merge_block(values: Tensor, index: Tensor, rows: Union[slice, Tensor], scores: Tensor,
                 columns: Tensor, k: int) -> None:
    r"""Merges the :obj:`scores` of :obj:`rows` against candidates of
    ascending node indices :obj:`columns` into the running top-:obj:`k`
    :obj:`(values, index)`, in place."""
    if scores.size(1) > k:
        best = _top_k_lowest_index(scores, k)
    else:
        best = torch.arange(scores.size(1), device=scores.device).expand(scores.size(0), -1)
    values[rows], index[rows] = _merge(values[rows], index[rows], scores.gather(1, best),
                                       columns[best], k)


def _running_top_k(rows: int, k: int, num_nodes: int, like: Tensor) -> Tuple[Tensor, Tensor]:
    r"""An empty running top-:obj:`k`: score :math:`-\infty` at node index
    :math:`N`, which every real candidate beats (each node has at least
    :obj:`k` finite-scored candidates, so none of these is left at the end)."""
    values = torch.full((rows, k), -math.inf, dtype=like.dtype, device=like.device)
    index = torch.full((rows, k), num_nodes, dtype=torch.long, device=like.device)
    return values, index


def _similarities(queries: Tensor, keys: Tensor) -> Tensor:
    r"""Cosine similarities of dense unit :obj:`queries` to unit :obj:`keys`
    (dense or CSR), computed as the single process computes them."""
    if keys.layout == torch.strided:
        return queries @ keys.T
    return (keys @ queries.T).T


def _pack(xn: Tensor) -> Payload:
    r"""The unit rows as tensors that travel: dense, or the coalesced COO
    indices (local rows) and values."""
    if xn.layout == torch.strided:
        return (xn,)
    return xn.indices().T.contiguous(), xn.values()


def _unpack(payload: Payload, rows: int, cols: int) -> Tensor:
    if len(payload) == 1:
        return payload[0]
    indices, values = payload  # (to_sparse_csr misreads non-contiguous COO indices)
    coo = torch.sparse_coo_tensor(indices.T.contiguous(), values, (rows, cols),
                                  is_coalesced=True, check_invariants=False)
    return to_csr(coo)


def _exact(xn: Tensor, k: int, partition: RowPartition, group: Group,
           block_size: Optional[int], progress: bool) -> Tensor:
    r"""The exact search over the ring of feature blocks."""
    n_local, bounds = partition.num_local, partition.bounds
    widest = max(max(b - a for a, b in zip(bounds, bounds[1:])), 1)
    if block_size is None:
        block_size = max(1, min(n_local, (_BLOCK * 8 if xn.is_cuda else _BLOCK) // widest))
    values, index = _running_top_k(n_local, k, partition.num_nodes, xn)
    bar = tqdm(total=partition.num_parts, desc='semantic kNN (exact)', unit='block',
               delay=1.0, disable=not progress)
    for src, payload in _ring(_pack(xn), group):
        keys = _unpack(payload, bounds[src + 1] - bounds[src], xn.size(1))
        columns = torch.arange(bounds[src], bounds[src + 1], device=xn.device)
        for start in range(0, n_local, block_size):
            end = min(start + block_size, n_local)
            scores = _similarities(_dense_rows(xn, start, end), keys)
            if src == partition.rank:
                own = torch.arange(start, end, device=xn.device)
                scores[own - start, own] = -math.inf
            _merge_block(values, index, slice(start, end), scores, columns, k)
        bar.update(1)
    bar.close()
    return index


def _gather_rows(local: Tensor, rows: Tensor, partition: RowPartition,
                 group: Group) -> Tensor:
    r"""The rows :obj:`rows` (global node indices) of a row-sharded tensor on
    every rank, in the order of :obj:`rows`: each owner sends its own."""
    owner = partition.owner(rows)
    mine = rows[owner == partition.rank] - partition.start
    out = local.new_empty((rows.numel(), *local.shape[1:]))
    out[owner.argsort(stable=True)] = torch.cat(all_gather(local[mine], group))
    return out


def _ivf(xn: Tensor, k: int, partition: RowPartition, group: Group,
         generator: Optional[torch.Generator], progress: bool) -> Tensor:
    r"""The IVF search of :func:`~torch_geometric_regcn.utils.ivf_knn_cosine`
    with its default settings, the random numbers drawn in the same order."""
    n, device = partition.num_nodes, xn.device
    cells = max(1, math.ceil(math.sqrt(n)))
    sample = min(n, 64 * cells)
    rows = torch.randperm(n, generator=generator, device='cpu')[:sample].to(device)
    centroids = spherical_kmeans(_gather_rows(xn, rows, partition, group), cells, 10,
                                 generator)
    cell = _nearest(xn, centroids, 8192) if len(xn) else torch.zeros_like(rows[:0])
    counts = all_reduce(torch.bincount(cell, minlength=cells), group)
    affinity = centroids @ centroids.T
    affinity.fill_diagonal_(float('inf'))  # a cell always searches itself first
    ranking = affinity.argsort(dim=1, descending=True, stable=True)
    probes = _probes_for_recall(xn, k, cell, ranking, partition, group, generator)
    near = ranking[:, :min(probes, cells)]
    everywhere = (counts[near].sum(dim=1) <= k).tolist()  # too few candidates: search all
    near = near.tolist()
    members = _members(cell, cells)

    values, index = _running_top_k(partition.num_local, k, partition.num_nodes, xn)
    bar = tqdm(total=partition.num_parts, desc='semantic kNN (IVF)', unit='block',
               delay=1.0, disable=not progress)
    for src, (keys, key_cell) in _ring((xn, cell), group):
        key_members = _members(key_cell, cells)
        offset = partition.bounds[src]
        for c, queries in enumerate(members):
            if queries.numel() == 0:
                continue
            if everywhere[c]:
                candidates = torch.arange(keys.size(0), device=device)
            else:
                candidates = torch.cat([key_members[p] for p in near[c]]).sort().values
            if candidates.numel() == 0:
                continue
            chunk = max(1, _BLOCK // candidates.numel())
            candidate_keys = keys[candidates]
            for i in range(0, queries.numel(), chunk):
                part = queries[i:i + chunk]
                scores = xn[part] @ candidate_keys.T
                if src == partition.rank:
                    scores[part[:, None] == candidates[None, :]] = -math.inf
                _merge_block(values, index, part, scores, offset + candidates, k)
        bar.update(1)
    bar.close()
    return index


def _members(cell: Tensor, cells: int) -> List[Tensor]:
    r"""The rows of each cell, ascending."""
    order = cell.argsort(stable=True)
    return list(order.split(torch.bincount(cell, minlength=cells).tolist()))


def _probes_for_recall(xn: Tensor, k: int, cell: Tensor, ranking: Tensor,
                       partition: RowPartition, group: Group,
                       generator: Optional[torch.Generator], target: float = 0.95,
                       queries: int = 256) -> int:
    r"""The probes of :func:`~torch_geometric_regcn.utils.knn._probes_for_recall`
    on row shards: the same random queries, gathered on every rank, whose
    exact neighbours each rank finds among its own rows before the ranks'
    candidates are merged."""
    n, cells = partition.num_nodes, ranking.size(0)
    q = torch.randperm(n, generator=generator, device='cpu')[:min(queries, n)].to(xn.device)
    features = _gather_rows(xn, q, partition, group)
    values, index = _running_top_k(q.numel(), k, n, xn)
    columns = torch.arange(partition.start, partition.end, device=xn.device)
    chunk = max(1, _BLOCK // max(1, partition.num_local))
    for i in range(0, q.numel(), chunk):
        part = slice(i, i + chunk)
        scores = features[part] @ xn.T
        scores[q[part, None] == columns[None, :]] = -math.inf
        _merge_block(values, index, part, scores, columns, k)
    candidates = zip(all_gather(values, group), all_gather(index, group))
    values, index = next(candidates)  # rank 0's, then the others' merged in
    for other_values, other_index in candidates:
        values, index = _merge(values, index, other_values, other_index, k)
    exact_cell = all_reduce(_local_lookup(cell, index, partition), group)
    query_cell = all_reduce(_local_lookup(cell, q, partition), group)
    place = torch.empty_like(ranking)  # place[c, d]: position of cell d in cell c's ranking
    place.scatter_(1, ranking, torch.arange(cells, device=xn.device).expand(cells, -1))
    needed = place[query_cell[:, None], exact_cell].flatten().sort().values
    # Aim two standard errors above the target, as the single process does.
    aim = min(1.0, target + 2 * math.sqrt(target * (1 - target) / needed.numel()))
    return int(needed[math.ceil(aim * needed.numel()) - 1]) + 1


def _local_lookup(local: Tensor, index: Tensor, partition: RowPartition) -> Tensor:
    r""":obj:`local[index - start]` where this rank owns :obj:`index`, else 0
    (summed over the ranks, every entry is looked up by its owner)."""
    owned = (index >= partition.start) & (index < partition.end)
    out = torch.zeros_like(index)
    out[owned] = local[index[owned] - partition.start]
    return out


def _symmetrise(col: Tensor, partition: RowPartition, group: Group) -> Tensor:
    r"""This rank's rows of the union of the kNN edges and their reverses:
    each reversed edge goes to the owner of its first index."""
    k = col.size(1)
    row = torch.arange(partition.start, partition.end, device=col.device).repeat_interleave(k)
    col = col.reshape(-1)
    owner = partition.owner(col)
    order = owner.argsort(stable=True)
    reverse = torch.stack([col, row], dim=1)[order]
    sizes = torch.bincount(owner, minlength=partition.num_parts).tolist()
    received = all_to_all(list(reverse.split(sizes)), group)
    edge_index = torch.cat([torch.stack([row, col]), torch.cat(received).T], dim=1)
    return coalesce(edge_index, num_nodes=partition.num_nodes)
