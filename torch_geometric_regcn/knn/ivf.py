r"""The approximate cosine kNN search by an inverted file (IVF) index:
spherical k-means cells, the number of probed cells tuned to a target recall,
and the search of each cell's queries among the nodes of its probed cells, in
one process or on row shards."""
import math
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import (
    Group,
    all_gather,
    all_reduce,
    rank_of,
)
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.knn.checks import Field, check_kmeans, check_search
from torch_geometric_regcn.knn.exact import normalize_rows
from torch_geometric_regcn.knn.ring import gather_shard_rows, owned_lookup, ring
from torch_geometric_regcn.knn.top_k import RunningTopK, merge_top_k
from torch_geometric_regcn.utils.progress import progress_bar
from torch_geometric_regcn.utils.validation import check_int, check_real

#: Similarities per block of the cell assignment (:func:`nearest`): a block
#: that stays in a core's cache, where the row maxima cost a third of those
#: of a block in main memory.
ASSIGN_BLOCK = 2**18
#: Similarities per block of the search of a cell's queries (on CPU; 8x more
#: on CUDA): a few MB, so the top-k pass reads them from cache.
SEARCH_BLOCK = 2**20


def nearest(x: Tensor, centroids: Tensor, block_size: Optional[int] = None) -> Tensor:
    r"""The index of the most similar centroid of every row of :obj:`x` (the
    first on ties), :obj:`block_size` rows at a time (default: about
    :math:`2^{18}` similarities, which stay in a core's cache)."""
    out = torch.empty(x.size(0), dtype=torch.long, device=x.device)
    if block_size is None:
        block_size = max(64, ASSIGN_BLOCK // max(1, centroids.size(0)))
    for i in range(0, x.size(0), block_size):
        out[i:i + block_size] = (x[i:i + block_size] @ centroids.T).max(dim=1).indices
    return out


def spherical_kmeans(x: Tensor, cells: int, iterations: int = 10,
                     generator: Optional[torch.Generator] = None,
                     block_size: Optional[int] = None) -> Tensor:
    r"""Unit-norm centroids of :obj:`cells` clusters of the unit rows of
    :obj:`x` under cosine similarity: :obj:`cells` random rows, then Lloyd
    iterations :math:`\mathbf{c}_j \leftarrow \sum_{i \in C_j} \mathbf{x}_i /
    \|\sum_{i \in C_j} \mathbf{x}_i\|` with :math:`C_j` the rows nearest to
    :math:`\mathbf{c}_j`; an empty cluster is re-seeded with a random row.
    Time :math:`O(\text{iterations} \cdot N \cdot \text{cells} \cdot F)`,
    memory :math:`O(\text{cells} \cdot F + \text{block\_size} \cdot
    \text{cells})` beyond :obj:`x`.

    Args:
        x (torch.Tensor): The rows to cluster, of unit L2 norm (see
            :func:`normalize_rows`).
        cells (int): The number of clusters, at most :math:`N`.
        iterations (int, optional): Lloyd iterations. (default: :obj:`10`)
        generator (torch.Generator, optional): The CPU generator of the
            initial rows and of the re-seeded ones. (default: :obj:`None`,
            the global one)
        block_size (int, optional): Rows compared with the centroids at a
            time. (default: :obj:`None`, about :math:`2^{18}` similarities)

    Shapes:
        - **x:** :obj:`[N, F]`, unit rows.
        - **output:** :obj:`[cells, F]`, unit rows.
    """
    cells, iterations, block_size = check_kmeans(x, cells, iterations, block_size,
                                                 generator)
    n = x.size(0)
    pick = torch.randperm(n, generator=generator, device='cpu')[:cells].to(x.device)
    centroids = x[pick].clone()
    for _ in range(iterations):
        assign = nearest(x, centroids, block_size)
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=cells)
        empty = counts == 0
        if bool(empty.any()):
            fresh = torch.randint(0, n, (int(empty.sum()),), generator=generator, device='cpu')
            sums[empty] = x[fresh.to(x.device)]
        centroids = sums / sums.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    return centroids


def ivf_knn_cosine(x: Tensor, k: int, cells: Optional[int] = None,
                   probes: Optional[int] = None, target_recall: float = 0.95,
                   sample: Optional[int] = None, iterations: int = 10,
                   generator: Optional[torch.Generator] = None,
                   progress: bool = True, *, partition: Optional[RowPartition] = None,
                   group: Group = None, node_id: Optional[Tensor] = None) -> Tensor:
    r"""Approximate :obj:`k` nearest neighbours of every row of :obj:`x`
    under cosine similarity (a node is never its own neighbour; ties go to
    the lower node index, or the lower :obj:`node_id`; a zero row, at
    similarity 0 to every node, gets the :obj:`k` lowest other indices, as in
    the exact search).

    The unit rows are clustered by :func:`spherical_kmeans` into :obj:`cells`
    cells (trained on :obj:`sample` random rows); the queries of a cell are
    then compared exactly with every node of the :obj:`probes` cells whose
    centroids are nearest to its own. Unless :obj:`probes` is given, it is
    tuned to the data: the exact neighbours of 256 random queries are found
    by brute force, and :obj:`probes` is the smallest number of cells (ranked
    by centroid similarity to the query's cell) that holds a fraction
    :obj:`target_recall` of them plus two standard errors of that estimate,
    so noisy or high-dimensional features get more probes (up to the exact
    search). Time is about :math:`\text{probes} / \text{cells}` of the exact
    search, memory :math:`O(N k + \text{probes} \cdot N / \text{cells}
    \cdot F + \text{cells}^2)` beyond the unit rows (the cells' ranking
    by centroid similarity, about 20 bytes per pair of cells: 80 MB at
    2,000 cells, so keep :obj:`cells` near its default :math:`\sqrt{N}`
    rather than at faiss-style :math:`16\sqrt{N}`): a cell's queries are scored against its
    candidates in blocks of :data:`SEARCH_BLOCK` similarities, and the best
    :obj:`k` of each block taken through group maxima
    (:func:`~torch_geometric_regcn.knn.top_k.top_k_lowest_index`).

    On row shards every rank draws the same random numbers as one process:
    the k-means sample and the tuning queries are gathered from their owners,
    the centroids are trained identically on every rank (bit for bit those
    of one process), and the feature blocks and their cells pass around a
    ring (see ``docs/distributed.md``).

    Args:
        x (torch.Tensor): This rank's rows of the dense node features
            :obj:`[n, F]` (all :math:`N` rows without a :obj:`group`).
        k (int): Neighbours per node, less than :math:`N`.
        cells (int, optional): Number of cells. (default: :math:`\lceil
            \sqrt{N}\,\rceil`)
        probes (int, optional): Cells searched per cell; a value above
            :obj:`cells` searches every cell, the exact search. (default:
            :obj:`None`, tuned for :obj:`target_recall`)
        target_recall (float, optional): The recall@k that the tuned
            :obj:`probes` reaches on the sampled queries. (default: :obj:`0.95`)
        sample (int, optional): Rows used to train the centroids, taken
            into :math:`[\text{cells}, N]` (one row per cell at least, every
            row at most). (default: :obj:`64 * cells`)
        iterations (int, optional): k-means iterations. (default: :obj:`10`)
        generator (torch.Generator, optional): For reproducible centroids;
            the same state on every rank. (default: torch's default generator)
        progress (bool, optional): Show a progress bar (on rank 0) when the
            search takes longer than a second. (default: :obj:`True`)
        partition (RowPartition, optional): The row blocks, as on this rank's
            shard; required with a :obj:`group`. (default: one part)
        group (torch.distributed.ProcessGroup, optional): The ranks that hold
            the shards; every rank must call. (default: :obj:`None`, one
            process)
        node_id (torch.Tensor, optional): The index of each row in the
            graph's original numbering, :obj:`[n]` (:obj:`data.node_id` of a
            METIS shard), on every rank or on none: the random rows (the
            k-means sample, the tuning queries) are drawn by it, and ties go
            to the lower original index, so that shards that renumber the
            nodes search as one process on the original numbering (an
            all-reduce of the indices of each set of drawn rows: the k-means
            sample, the tuning queries, the :math:`k + 1` lowest nodes for
            zero rows). (default: :obj:`None`)

    Shapes:
        - **output:** :obj:`[n, k]` global node indices, ascending in each row.
    """
    settings = {}

    def options(num_nodes: int) -> List[Field]:
        settings.update(ivf_options(num_nodes, cells, probes, target_recall, sample,
                                    iterations))
        return [(f"'{name}'", value) for name, value in settings.items()]

    x, partition, _, k, _ = check_search(x, k, partition, group, 'ivf_knn_cosine', 'ivf',
                                   generator=generator, options=options, node_id=node_id)
    return ivf_search(normalize_rows(x), k, partition, group, generator,
                      progress and rank_of(group) == 0, **settings, node_id=node_id)


def ivf_options(n: int, cells: Optional[int] = None, probes: Optional[int] = None,
                target_recall: float = 0.95, sample: Optional[int] = None,
                iterations: int = 10) -> Dict[str, Any]:
    r"""The checked options of :func:`ivf_knn_cosine` for :obj:`n` nodes in
    all, the defaults filled in."""
    cells = max(1, math.ceil(math.sqrt(n))) if cells is None else \
        check_int('cells', cells, minimum=None)
    if not 0 < cells <= n:
        raise ValueError(f"'cells' must lie in [1, {n}] (got {cells})")
    if probes is not None:
        probes = check_int('probes', probes)
    target_recall = check_real('target_recall', target_recall, 0.0, 1.0, low_open=True)
    sample = 64 * cells if sample is None else check_int('sample', sample)
    iterations = check_int('iterations', iterations, minimum=0)
    return dict(cells=cells, probes=probes, target_recall=target_recall,
                sample=min(n, max(cells, sample)), iterations=iterations)


def ivf_search(xn: Tensor, k: int, partition: RowPartition, group: Group,
               generator: Optional[torch.Generator], progress: bool,
               cells: int, probes: Optional[int], target_recall: float, sample: int,
               iterations: int, node_id: Optional[Tensor] = None) -> Tensor:
    r"""The search of :func:`ivf_knn_cosine` on checked unit rows
    :obj:`xn`, with checked options (and tie keys :obj:`node_id`)."""
    n, device = partition.num_nodes, xn.device
    _, cell, counts, ranking, probes = ivf_cells(xn, k, partition, group, generator, cells,
                                                 probes, target_recall, sample, iterations,
                                                 node_id)
    near = ranking[:, :probes]
    everywhere = (counts[near].sum(dim=1) <= k).tolist()  # too few candidates: search all
    near = near.tolist()
    order, offsets = cell_order(cell, cells)

    merges = partition.num_parts > 1
    nonzero = xn.ne(0).any(dim=1)  # unit rows: a zero row stays zero
    block = SEARCH_BLOCK * 8 if xn.is_cuda else SEARCH_BLOCK
    top = RunningTopK(partition.num_local, k, n, xn, merges=merges,
                      keyed=node_id is not None)
    bar = progress_bar(partition.num_local * partition.num_parts, 'semantic kNN (IVF)',
                       'node', progress)
    outgoing = (xn, cell) if node_id is None else (xn, cell, node_id)
    for src, (keys, key_cell, *key_ids) in ring(outgoing, group):
        key_order, key_offsets = cell_order(key_cell, cells) if merges else (order, offsets)
        own = src == partition.rank
        offset = partition.bounds[src]
        for c in range(cells):
            queries = order[offsets[c]:offsets[c + 1]]
            kept = nonzero[queries]  # zero rows are answered exactly below
            bar.update(queries.numel() - int(kept.sum()))
            queries = queries[kept]
            if queries.numel() == 0:
                continue
            if everywhere[c]:
                candidates = torch.arange(keys.size(0), device=device)
            else:
                candidates = torch.cat([key_order[key_offsets[p]:key_offsets[p + 1]]
                                        for p in near[c]]).sort().values
            if candidates.numel() == 0:
                bar.update(queries.numel())
                continue
            candidate_keys = keys[candidates]
            if own:  # a query's own column: its cell is always searched (first)
                self_column = torch.searchsorted(candidates, queries)
            chunk = max(1, block // candidates.numel())
            for i in range(0, queries.numel(), chunk):
                part = queries[i:i + chunk]
                scores = xn[part] @ candidate_keys.T
                if own:
                    scores[torch.arange(part.numel(), device=device),
                           self_column[i:i + chunk]] = -math.inf
                top.add(part, scores, offset + candidates,
                        key_ids[0][candidates] if key_ids else None)
                bar.update(part.numel())
    bar.close()
    lowest = None
    if node_id is not None:  # the k + 1 lowest original indices, in the shards' numbering
        lowest = new_index_of(torch.arange(min(k + 1, n), device=device), node_id, partition,
                              group)
    return zero_row_neighbours(top.result(), nonzero, partition.start, k, lowest, node_id)


def new_index_of(ids: Tensor, node_id: Tensor, partition: RowPartition,
                 group: Group) -> Tensor:
    r"""The global indices, in the shards' numbering, of the nodes of
    original indices :obj:`ids` (:obj:`node_id` holding this rank's rows'
    original indices, a permutation over the ranks): each rank looks up
    those it holds, one all-reduce of :obj:`ids.numel()` integers.
    :math:`O(n \log n + |\text{ids}| \log n)`."""
    if node_id.numel() == 0:  # an empty shard holds none of them
        return all_reduce(torch.zeros_like(ids), group)
    order = node_id.argsort()
    held = node_id[order]
    at = torch.searchsorted(held, ids).clamp(max=held.numel() - 1)
    mine = torch.where(held[at] == ids, partition.start + order[at], torch.zeros_like(ids))
    return all_reduce(mine, group)


def zero_row_neighbours(index: Tensor, nonzero: Tensor, start: int, k: int,
                        lowest: Optional[Tensor] = None,
                        node_id: Optional[Tensor] = None) -> Tensor:
    r""":obj:`index` with the rows of zero features (similarity 0 to every
    node) set to their exact neighbours, the :obj:`k` lowest other node
    indices (:obj:`start` is the global index of the first row); with tie
    keys :obj:`node_id`, the :obj:`k` lowest other original indices, whose
    global indices :obj:`lowest` gives (of the :math:`k + 1` lowest)."""
    rows = (~nonzero).nonzero().flatten()
    if rows.numel():
        first = torch.arange(k, device=index.device).expand(rows.numel(), -1)
        own = (start + rows) if node_id is None else node_id[rows]
        chosen = first + (first >= own[:, None]).long()
        index[rows] = chosen if lowest is None else lowest[chosen].sort(dim=1).values
    return index


def ivf_cells(xn: Tensor, k: int, partition: RowPartition, group: Group,
              generator: Optional[torch.Generator], cells: int, probes: Optional[int],
              target_recall: float, sample: int, iterations: int,
              node_id: Optional[Tensor] = None,
              ) -> Tuple[Tensor, Tensor, Tensor, Tensor, int]:
    r"""The inverted file of :func:`ivf_knn_cosine`: the unit centroids
    :obj:`[cells, F]`, this rank's rows' cells :obj:`[n]`, every cell's count
    :obj:`[cells]`, the cells ranked by the similarity of their centroids to
    each cell's, own cell first :obj:`[cells, cells]`, and the probes (tuned
    unless given, at most :obj:`cells`); with :obj:`node_id`, the random rows
    drawn by original index."""
    n = partition.num_nodes
    rows = torch.randperm(n, generator=generator, device='cpu')[:sample].to(xn.device)
    if node_id is not None:
        rows = new_index_of(rows, node_id, partition, group)
    centroids = spherical_kmeans(gather_shard_rows(xn, rows, partition, group), cells, iterations,
                                 generator)
    cell = nearest(xn, centroids)
    counts = all_reduce(torch.bincount(cell, minlength=cells), group)
    affinity = centroids @ centroids.T
    affinity.fill_diagonal_(float('inf'))  # a cell always searches itself first
    ranking = affinity.argsort(dim=1, descending=True, stable=True)
    if probes is None:
        probes = probes_for_recall(xn, k, cell, ranking, target_recall, partition, group,
                                   generator, node_id=node_id)
    return centroids, cell, counts, ranking, min(probes, cells)


def cell_order(cell: Tensor, cells: int) -> Tuple[Tensor, List[int]]:
    r"""The rows sorted by cell (ascending within a cell) and the offsets of
    the cells in that order: the rows of cell :math:`c` are
    :obj:`order[offsets[c]:offsets[c + 1]]`."""
    counts = torch.bincount(cell, minlength=cells)
    return cell.argsort(stable=True), [0] + counts.cumsum(0).tolist()


def probes_for_recall(xn: Tensor, k: int, cell: Tensor, ranking: Tensor, target: float,
                      partition: RowPartition, group: Group,
                      generator: Optional[torch.Generator], queries: int = 256,
                      node_id: Optional[Tensor] = None) -> int:
    r"""The fewest probed cells that hold a fraction :obj:`target` (plus two
    standard errors of the mean over the queries) of the exact neighbours of
    :obj:`queries` random nodes (their recalls at every number of probes,
    :math:`O(\text{cells} \cdot \text{queries})` numbers).
    The queries are gathered on every rank; each rank finds their best
    candidates among its own rows, and the ranks' candidates are merged
    (with :obj:`node_id`: the queries drawn by original index, ties by
    it)."""
    n, cells = partition.num_nodes, ranking.size(0)
    q = torch.randperm(n, generator=generator, device='cpu')[:min(queries, n)].to(xn.device)
    if node_id is not None:
        q = new_index_of(q, node_id, partition, group)
    features = gather_shard_rows(xn, q, partition, group)
    merges = partition.num_parts > 1
    # Keyed by the rows' original indices (their global ones without node_id): the
    # ranks' candidates then merge in one way, carrying the global indices.
    top = RunningTopK(q.numel(), k, n, xn, merges=True, keyed=True)
    rows = torch.arange(q.numel(), device=xn.device)
    local = q - partition.start
    mine = (local >= 0) & (local < partition.num_local)
    width = max(1, (SEARCH_BLOCK * 16) // q.numel())  # 256 queries: blocks of 64 MiB
    for start in range(0, partition.num_local, width):
        end = min(start + width, partition.num_local)
        scores = features @ xn[start:end].T
        own = mine & (local >= start) & (local < end)
        scores[rows[own], local[own] - start] = -math.inf
        columns = torch.arange(partition.start + start, partition.start + end,
                               device=xn.device)
        top.add(rows, scores, columns, columns if node_id is None else node_id[start:end])
    index = top.index
    if merges:
        assert top.keys is not None
        candidates = zip(all_gather(top.values, group), all_gather(top.keys, group),
                         all_gather(index, group))
        values, keys, index = next(candidates)  # rank 0's, then the others' merged in
        for other_values, other_keys, other_index in candidates:
            values, keys, index = merge_top_k(values, keys, other_values, other_keys, k,
                                              (index,), (other_index,))
    exact_cell = all_reduce(owned_lookup(cell, index, partition), group)
    query_cell = all_reduce(owned_lookup(cell, q, partition), group)
    place = torch.empty_like(ranking)  # place[c, d]: position of cell d in cell c's ranking
    place.scatter_(1, ranking, torch.arange(cells, device=xn.device).expand(cells, -1))
    needed = place[query_cell[:, None], exact_cell]  # [queries, k]: cells each neighbour needs
    # The recall of each query at 1..cells probes; aim two standard errors (of
    # the mean over the queries, whose neighbours are correlated within a
    # query, not over the Q k neighbours as if independent) above the target,
    # so that the recall over all nodes reaches it with high probability.
    probes = torch.arange(1, cells + 1, device=needed.device).expand(needed.size(0), -1)
    recall = torch.searchsorted(needed.sort(dim=1).values.contiguous(),
                                probes.contiguous()).double() / k  # [queries, cells]
    # A zero row's neighbours are answered exactly (the k lowest other indices,
    # all at similarity 0), whatever the probes: counted as found.
    recall[~features.ne(0).any(dim=1)] = 1.0
    error = recall.std(dim=0, correction=1) / math.sqrt(recall.size(0)) \
        if recall.size(0) > 1 else torch.zeros_like(recall[0])
    enough = recall.mean(0) >= (target + 2 * error).clamp(max=1.0)
    return int(enough.nonzero()[0]) + 1 if bool(enough.any()) else cells
