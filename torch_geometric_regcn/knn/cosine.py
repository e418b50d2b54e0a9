r"""Cosine k-nearest neighbours of node features: exact in row blocks, or
approximate by an inverted file (IVF) index for large graphs."""
import math
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import to_undirected
from tqdm.auto import tqdm

from torch_geometric_regcn.utils.sparse import to_csr

#: :obj:`"auto"` searches exactly on CUDA or up to this many nodes, else by IVF.
EXACT_LIMIT = 50_000
KNN_METHODS = ('auto', 'exact', 'ivf')


def normalize_rows(x: Tensor) -> Tensor:
    r"""The rows of :obj:`x` (dense, or sparse COO or CSR) scaled to unit L2
    norm; zero rows stay zero (never NaN). Sparse input gives coalesced COO."""
    if x.layout == torch.strided:
        return x / x.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    x = x.to_sparse_coo().coalesce()
    row, col = x.indices()
    norm = torch.zeros(x.size(0), dtype=x.dtype, device=x.device)
    norm.index_add_(0, row, x.values().square())
    values = x.values() / norm.sqrt().clamp_min(torch.finfo(x.dtype).tiny)[row]
    return torch.sparse_coo_tensor(x.indices(), values, x.shape, is_coalesced=True,
                                   check_invariants=False)


def _dense_rows(x: Tensor, start: int, end: int) -> Tensor:
    """Rows :obj:`start:end` of a dense or coalesced COO matrix, as a dense block."""
    if x.layout == torch.strided:
        return x[start:end]
    row, col = x.indices()
    lo, hi = torch.searchsorted(row, torch.tensor([start, end], device=row.device)).tolist()
    block = torch.zeros(end - start, x.size(1), dtype=x.dtype, device=x.device)
    block[row[lo:hi] - start, col[lo:hi]] = x.values()[lo:hi]
    return block


def _top_k_lowest_index(scores: Tensor, k: int) -> Tensor:
    """Column indices of each row's :obj:`k` largest scores, ascending; ties
    are broken towards the lower column index, so the result is deterministic.
    One :meth:`~torch.Tensor.topk` of :obj:`k + 1` settles every row whose
    :obj:`k`-th and :obj:`(k+1)`-th scores differ; only rows with a tie across
    that boundary (rare with real features) pay for full-width masks."""
    values, index = scores.topk(k + 1, dim=1)
    chosen = index[:, :k].sort(dim=1).values
    tied = (values[:, k - 1] == values[:, k]).nonzero().flatten()
    if tied.numel():
        rows = scores[tied]
        kth = values[tied, k - 1:k]
        above = rows > kth
        at_kth = rows == kth
        need = k - above.sum(dim=1, keepdim=True)
        mask = above | (at_kth & (at_kth.cumsum(dim=1) <= need))
        chosen[tied] = mask.nonzero()[:, 1].view(-1, k)
    return chosen


def exact_knn_cosine(x: Tensor, k: int, block_size: Optional[int] = None,
                     progress: bool = True) -> Tensor:
    r"""The :obj:`k` nearest neighbours of every row of :obj:`x` under cosine
    similarity, as an :obj:`[N, k]` index tensor (a node is never its own
    neighbour; ties go to the lower node index). Similarities are computed
    :obj:`block_size` rows at a time: memory :math:`O(N \cdot
    \text{block\_size} + N k)`, time :math:`O(N^2 d)`."""
    n = x.size(0)
    if block_size is None:  # 2**24 similarities per block (with the top-k masks ~300 MB);
        # a GPU has the memory for 8x more, and fewer, larger blocks keep it busy
        block_size = max(1, min(n, (2**27 if x.is_cuda else 2**24) // n))
    xn = normalize_rows(x)
    if xn.layout != torch.strided:
        xn_csr = to_csr(xn)
    neighbours = []
    bar = tqdm(total=n, desc='semantic kNN (exact)', unit='node', delay=1.0,
               disable=not progress)
    for start in range(0, n, block_size):
        end = min(start + block_size, n)
        block = _dense_rows(xn, start, end)
        if xn.layout == torch.strided:
            scores = block @ xn.T
        else:
            scores = (xn_csr @ block.T).T
        own = torch.arange(start, end, device=x.device)
        scores[own - start, own] = -float('inf')
        neighbours.append(_top_k_lowest_index(scores, k))
        bar.update(end - start)
    bar.close()
    return torch.cat(neighbours)


def _nearest(x: Tensor, centroids: Tensor, block_size: int) -> Tensor:
    """Index of the most similar centroid of every row of :obj:`x`, in row blocks."""
    return torch.cat([(x[i:i + block_size] @ centroids.T).argmax(dim=1)
                      for i in range(0, x.size(0), block_size)])


def spherical_kmeans(x: Tensor, cells: int, iterations: int = 10,
                     generator: Optional[torch.Generator] = None,
                     block_size: int = 8192) -> Tensor:
    r"""Unit-norm centroids of :obj:`cells` clusters of the unit rows of
    :obj:`x` under cosine similarity (Lloyd iterations; an empty cluster is
    re-seeded with a random row)."""
    n = x.size(0)
    pick = torch.randperm(n, generator=generator, device='cpu')[:cells].to(x.device)
    centroids = x[pick].clone()
    for _ in range(iterations):
        assign = _nearest(x, centroids, block_size)
        sums = torch.zeros_like(centroids).index_add_(0, assign, x)
        counts = torch.bincount(assign, minlength=cells)
        empty = counts == 0
        if bool(empty.any()):
            fresh = torch.randint(0, n, (int(empty.sum()),), generator=generator, device='cpu')
            sums[empty] = x[fresh.to(x.device)]
        centroids = sums / sums.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    return centroids


def _probes_for_recall(xn: Tensor, k: int, cell: Tensor, ranking: Tensor, target: float,
                       generator: Optional[torch.Generator], queries: int = 256) -> int:
    """The fewest probed cells that hold a fraction :obj:`target` of the exact
    neighbours of random queries (brute force for those queries only)."""
    n, cells = xn.size(0), ranking.size(0)
    q = torch.randperm(n, generator=generator, device='cpu')[:min(queries, n)].to(xn.device)
    exact = []
    chunk = max(1, 2**24 // n)  # bounded memory, as in the exact search
    for i in range(0, q.numel(), chunk):
        part = q[i:i + chunk]
        scores = xn[part] @ xn.T
        scores[torch.arange(part.numel(), device=xn.device), part] = -float('inf')
        exact.append(_top_k_lowest_index(scores, k))
    exact = torch.cat(exact)
    rank = torch.empty_like(ranking)  # rank[c, d]: position of cell d in cell c's ranking
    rank.scatter_(1, ranking, torch.arange(cells, device=xn.device).expand(cells, -1))
    needed = rank[cell[q][:, None], cell[exact]].flatten().sort().values
    # Aim two standard errors above the target, so the recall over all nodes
    # (not only the sampled queries) reaches it with high probability.
    aim = min(1.0, target + 2 * math.sqrt(target * (1 - target) / needed.numel()))
    return int(needed[math.ceil(aim * needed.numel()) - 1]) + 1


def ivf_knn_cosine(x: Tensor, k: int, cells: Optional[int] = None,
                   probes: Optional[int] = None, target_recall: float = 0.95,
                   sample: Optional[int] = None, iterations: int = 10,
                   generator: Optional[torch.Generator] = None,
                   progress: bool = True) -> Tensor:
    r"""Approximate :obj:`k` nearest neighbours of every row of :obj:`x` under
    cosine similarity, as a :obj:`[N, k]` index tensor (a node is never its
    own neighbour; ties go to the lower node index).

    The unit rows are clustered by spherical k-means into :obj:`cells` cells
    (trained on :obj:`sample` rows); the queries of a cell are then compared
    exactly with every node of the :obj:`probes` cells whose centroids are
    nearest to its own (an inverted file index probed per cell). Unless
    :obj:`probes` is given, it is tuned to the data: the exact neighbours of
    256 random queries are found by brute force, and :obj:`probes` is the
    smallest number of cells (ranked by centroid similarity to the query's
    cell) that holds a fraction :obj:`target_recall` of them (plus two
    standard errors of that estimate), so noisy or
    high-dimensional features get more probes (up to the exact search). Time is
    :math:`O(N \cdot \text{probes} \cdot N / \text{cells} \cdot d)`, about
    :math:`\text{probes} / \text{cells}` of the exact search, and memory
    :math:`O(N k + (N / \text{cells})^2 \cdot \text{probes})`.

    Args:
        x (torch.Tensor): Dense node features :obj:`[N, d]`.
        k (int): Neighbours per node.
        cells (int, optional): Number of cells. (default: :math:`\lceil
            \sqrt{N}\,\rceil`)
        probes (int, optional): Cells searched per cell. (default: :obj:`None`,
            tuned for :obj:`target_recall`)
        target_recall (float, optional): The recall@k that the tuned
            :obj:`probes` reaches on the sampled queries. (default: :obj:`0.95`)
        sample (int, optional): Rows used to train the centroids.
            (default: :obj:`64 * cells`)
        iterations (int, optional): k-means iterations. (default: :obj:`10`)
        generator (torch.Generator, optional): For reproducible centroids.
        progress (bool, optional): Show a progress bar with ETA when the
            search takes longer than a second. (default: :obj:`True`)
    """
    if x.layout != torch.strided:
        raise ValueError("ivf_knn_cosine needs dense features; use the exact search "
                         "(method='exact') for sparse 'x'")
    n = x.size(0)
    if not 0 < k < n:
        raise ValueError(f"'k' must lie in [1, {n - 1}] for a graph of {n} nodes (got {k})")
    cells = max(1, math.ceil(math.sqrt(n))) if cells is None else cells
    if not 0 < cells <= n:
        raise ValueError(f"'cells' must lie in [1, {n}] (got {cells})")
    if probes is not None and probes < 1:
        raise ValueError(f"'probes' must be a positive integer (got {probes})")
    if not 0 < target_recall <= 1:
        raise ValueError(f"'target_recall' must lie in (0, 1] (got {target_recall})")
    if not x.is_floating_point():
        x = x.to(torch.get_default_dtype())
    xn = x / x.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)

    sample = min(n, max(cells, 64 * cells if sample is None else sample))
    rows = torch.randperm(n, generator=generator, device='cpu')[:sample].to(x.device)
    centroids = spherical_kmeans(xn[rows], cells, iterations, generator)
    cell = _nearest(xn, centroids, 8192)
    order = cell.argsort(stable=True)  # members of each cell, ascending node index
    offsets = torch.cumsum(torch.bincount(cell, minlength=cells), 0).tolist()
    starts = [0] + offsets[:-1]
    affinity = centroids @ centroids.T
    affinity.fill_diagonal_(float('inf'))  # a cell always searches itself first
    ranking = affinity.argsort(dim=1, descending=True, stable=True)
    if probes is None:
        probes = _probes_for_recall(xn, k, cell, ranking, target_recall, generator)
    near = ranking[:, :min(probes, cells)].tolist()

    neighbours = torch.empty(n, k, dtype=torch.long, device=x.device)
    bar = tqdm(total=n, desc='semantic kNN (IVF)', unit='node', delay=1.0,
               disable=not progress)
    for c in range(cells):
        queries = order[starts[c]:offsets[c]]
        if queries.numel() == 0:
            continue
        candidates = torch.cat([order[starts[p]:offsets[p]] for p in near[c]]).sort().values
        if candidates.numel() <= k:  # too few candidates: search everything
            candidates = torch.arange(n, device=x.device)
        # Queries in chunks of about 2**24 similarities: uneven cells stay bounded.
        chunk = max(1, 2**24 // candidates.numel())
        for i in range(0, queries.numel(), chunk):
            part = queries[i:i + chunk]
            scores = xn[part] @ xn[candidates].T
            scores[part[:, None] == candidates[None, :]] = -float('inf')
            neighbours[part] = candidates[_top_k_lowest_index(scores, k)]
            bar.update(part.numel())
    bar.close()
    return neighbours


def knn_graph_cosine(x: Tensor, k: int, block_size: Optional[int] = None,
                     method: str = 'auto', progress: bool = True,
                     generator: Optional[torch.Generator] = None) -> Tensor:
    r"""Returns the symmetrised :obj:`k`-nearest-neighbour graph of the rows
    of :obj:`x` under cosine similarity, as :obj:`edge_index` without self
    loops. :obj:`method="exact"` uses :func:`exact_knn_cosine`,
    :obj:`"ivf"` the approximate :func:`ivf_knn_cosine`, and :obj:`"auto"`
    the exact search on CUDA, for sparse :obj:`x` or up to
    :obj:`EXACT_LIMIT` nodes, else IVF."""
    n = x.size(0)
    if not 0 < k < n:
        raise ValueError(f"'k' must lie in [1, {n - 1}] for a graph of {n} nodes (got {k})")
    if method not in KNN_METHODS:
        raise ValueError(f"'method' must be one of {KNN_METHODS} (got {method!r})")
    if method == 'auto':
        exact = x.is_cuda or x.layout != torch.strided or n <= EXACT_LIMIT
        method = 'exact' if exact else 'ivf'
    if method == 'exact':
        col = exact_knn_cosine(x, k, block_size, progress)
    else:
        col = ivf_knn_cosine(x, k, generator=generator, progress=progress)
    row = torch.arange(n, device=x.device).repeat_interleave(k)
    return to_undirected(torch.stack([row, col.view(-1)]), num_nodes=n)
