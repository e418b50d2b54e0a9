r"""The optional faiss backend of the approximate cosine kNN search: the
inverted file of :func:`~torch_geometric_regcn.knn.ivf_knn_cosine` (the same
centroids, cells and tuned probes) searched by faiss's ``IndexIVFFlat``,
which ranks the cells per query. Needs ``faiss-cpu`` (``pip install
torch_geometric_regcn[faiss]``); one process only."""
import math
from typing import Optional

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.knn.checks import check_search
from torch_geometric_regcn.knn.exact import normalize_rows
from torch_geometric_regcn.knn.ivf import ivf_cells, ivf_options, zero_row_neighbours
from torch_geometric_regcn.knn.top_k import top_k_lowest_index

#: Queries per faiss search call (bounds its distance and label buffers).
QUERY_BLOCK = 65536
#: The most float64 numbers of the [queries, 2k + 1, F] gather that re-scores candidates.
RESCORE_NUMBERS = 2**23


def faiss_knn_cosine(x: Tensor, k: int, cells: Optional[int] = None,
                     probes: Optional[int] = None, target_recall: float = 0.95,
                     sample: Optional[int] = None, iterations: int = 10,
                     generator: Optional[torch.Generator] = None) -> Tensor:
    r"""Approximate :obj:`k` nearest neighbours of every row of :obj:`x`
    under cosine similarity by faiss (a node is never its own neighbour).

    The cells, centroids and number of probes are those of
    :func:`~torch_geometric_regcn.knn.ivf_knn_cosine` with the same options
    and generator state; faiss then ranks the cells by each query's own
    similarity to the centroids (not by its cell's), so at the same probes
    the recall is at least about that of the pure-torch search. faiss
    scores in float32: float64 features get :math:`2k + 1` candidates per
    query, re-scored in float64 (ties among them to the lower node index),
    so that the neighbours are those of float64 similarities among the
    candidates (where more than :math:`2k` neighbours of a query lie closer
    together than float32 rounding, about :math:`10^{-7}`, the candidates
    may still miss the best of them: use the pure-torch search there).
    Unlike the pure-torch search, ties at the :obj:`k`-th place of float32
    features are broken by faiss (not always towards the lower node index),
    and it runs in one process only. Queries whose
    probed cells hold fewer than :obj:`k` other nodes are searched exactly.
    Measured against the pure-torch search in
    ``benchmarks/results/knn_scale.md``.

    Args:
        x (torch.Tensor): The dense node features :obj:`[N, F]`.
        k (int): Neighbours per node, less than :math:`N`.
        cells, probes, target_recall, sample, iterations, generator: As in
            :func:`~torch_geometric_regcn.knn.ivf_knn_cosine`.

    Shapes:
        - **output:** :obj:`[N, k]` node indices, ascending in each row.
    """
    settings = {}

    def options(num_nodes: int):
        settings.update(ivf_options(num_nodes, cells, probes, target_recall, sample,
                                    iterations))
        return []

    x, partition, _, k, _ = check_search(x, k, None, None, 'faiss_knn_cosine', 'faiss',
                                   generator=generator, options=options)
    return faiss_search(normalize_rows(x), k, partition, generator, **settings)


def faiss_search(xn: Tensor, k: int, partition: RowPartition,
                 generator: Optional[torch.Generator], cells: int, probes: Optional[int],
                 target_recall: float, sample: int, iterations: int) -> Tensor:
    r"""The search of :func:`faiss_knn_cosine` on checked unit rows
    :obj:`xn` (one part), with checked options."""
    import faiss

    centroids, cell, _, _, probes = ivf_cells(xn, k, partition, None, generator, cells,
                                              probes, target_recall, sample, iterations)
    data = xn.detach().to('cpu', torch.float32).contiguous().numpy()
    n, features = data.shape
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(torch.get_num_threads())
    try:
        quantizer = faiss.IndexFlatIP(features)
        quantizer.add(centroids.to('cpu', torch.float32).contiguous().numpy())
        index = faiss.IndexIVFFlat(quantizer, features, cells, faiss.METRIC_INNER_PRODUCT)
        assign = cell.to('cpu', torch.long).contiguous().numpy()
        index.add_core(n, faiss.swig_ptr(data), None, faiss.swig_ptr(assign))
        index.nprobe = probes
        out = torch.empty(n, k, dtype=torch.long)
        # faiss scores in float32: float64 rows get 2k + 1 candidates, re-scored in float64.
        wanted = k + 1 if xn.dtype == torch.float32 else 2 * k + 1
        for start in range(0, n, QUERY_BLOCK):
            _, found = index.search(data[start:start + QUERY_BLOCK], min(wanted, n))
            found = torch.from_numpy(found)
            rows = torch.arange(start, start + found.size(0))[:, None]
            if wanted > k + 1:
                out[start:start + found.size(0)] = rescored(xn, rows, found, k)
                continue
            keep = found != rows  # the node itself, found first unless a duplicate ties
            keep &= keep.cumsum(dim=1) <= k
            out[start:start + found.size(0)] = found[keep].view(-1, k)
    finally:
        faiss.omp_set_num_threads(threads)
    short = (out < 0).any(dim=1).nonzero().flatten()  # fewer than k candidates probed
    for part in short.split(max(1, QUERY_BLOCK * 256 // n)):  # exactly, in bounded blocks
        scores = xn[part.to(xn.device)] @ xn.T
        scores[torch.arange(part.numel(), device=xn.device), part.to(xn.device)] = -math.inf
        out[part] = top_k_lowest_index(scores, k).cpu()
    # Zero rows (similarity 0 to every node) exactly, as the tuned probes assume.
    out = zero_row_neighbours(out.sort(dim=1).values, xn.ne(0).any(dim=1).cpu(), 0, k)
    return out.to(xn.device)


def rescored(xn: Tensor, rows: Tensor, found: Tensor, k: int) -> Tensor:
    r"""The :obj:`k` best of the candidates :obj:`found` (:obj:`[B, c]` node
    indices of the queries :obj:`rows`, :obj:`-1` where faiss found none) by
    their similarities recomputed in the dtype of :obj:`xn`, ties to the
    lower node index; :obj:`-1` where fewer than :obj:`k` remain. As many
    queries at a time as keep the gather within :data:`RESCORE_NUMBERS`
    numbers: :math:`O(B c F)` time."""
    out = torch.empty(found.size(0), k, dtype=torch.long)
    block = max(1, RESCORE_NUMBERS // (found.size(1) * xn.size(1)))
    for lo in range(0, found.size(0), block):
        cand = found[lo:lo + block].to(xn.device)
        query = rows[lo:lo + block].to(xn.device)
        valid = (cand >= 0) & (cand != query)
        safe = cand.clamp(min=0)
        scores = (xn[query] * xn[safe]).sum(-1)  # [b, c], one pair per entry
        scores = scores.masked_fill(~valid, -math.inf)
        # Lower node index first among equal scores: order the candidates by index.
        order = torch.where(valid, safe, xn.size(0)).argsort(dim=1)
        best = top_k_lowest_index(scores.gather(1, order), k)
        picked = safe.gather(1, order).gather(1, best)
        missing = ~valid.gather(1, order).gather(1, best)
        out[lo:lo + block] = picked.masked_fill(missing, -1).cpu()
    return out
