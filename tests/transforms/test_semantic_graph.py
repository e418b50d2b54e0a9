import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce

from torch_geometric_regcn import SemanticGraph
from torch_geometric_regcn.transforms.cosine_knn import (
    _top_k_lowest_index,
    exact_knn_cosine,
    ivf_knn_cosine,
)


def brute_force(x, k):
    """Dense float64 cosine kNN, ties to the lower index, then symmetrised."""
    x = x.double()
    xn = x / x.norm(dim=1, keepdim=True).clamp_min(1e-300)
    sim = xn @ xn.T
    sim.fill_diagonal_(-float('inf'))
    edges = set()
    for i, row in enumerate(sim.tolist()):
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))[:k]
        edges |= {(i, j) for j in order} | {(j, i) for j in order}
    return torch.tensor(sorted(edges)).T


@pytest.mark.parametrize('block_size', [None, 1, 7])
def test_matches_brute_force(block_size):
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(0))
    out = SemanticGraph(4, block_size=block_size)(Data(x=x)).semantic_edge_index
    assert torch.equal(coalesce(out), brute_force(x, 4))


def test_sparse_features_equal_dense():
    x = torch.randn(60, 20, generator=torch.Generator().manual_seed(1))
    x[x.abs() < 1.0] = 0
    dense = SemanticGraph(5)(Data(x=x)).semantic_edge_index
    for sparse in (x.to_sparse(), x.to_sparse_csr()):
        got = SemanticGraph(5, block_size=13)(Data(x=sparse)).semantic_edge_index
        assert torch.equal(coalesce(got), coalesce(dense))
    assert torch.equal(coalesce(dense), brute_force(x, 5))


def test_zero_rows_and_ties_are_deterministic():
    x = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    first = SemanticGraph(2)(Data(x=x)).semantic_edge_index
    assert torch.equal(coalesce(first), brute_force(x, 2))
    for block_size in (1, 2, 4):
        again = SemanticGraph(2, block_size=block_size)(Data(x=x)).semantic_edge_index
        assert torch.equal(again, first)


@pytest.mark.parametrize('levels', [3, 50, None])
def test_top_k_ties_go_to_the_lower_index(levels):
    # Few score levels make ties across the k-th place common (the mask
    # fallback); None gives distinct scores (the top-(k+1) fast path).
    scores = torch.randn(40, 30, generator=torch.Generator().manual_seed(2))
    if levels is not None:
        scores = (scores * levels / 4).round()
    scores[torch.arange(30), torch.arange(30)] = -float('inf')
    for k in (1, 5, 29):
        expected = [sorted(sorted(range(30), key=lambda j: (-row[j], j))[:k])
                    for row in scores.tolist()]
        assert _top_k_lowest_index(scores, k).tolist() == expected


def test_no_self_loops_and_symmetric():
    x = torch.randn(30, 3)
    ei = SemanticGraph(3)(Data(x=x)).semantic_edge_index
    assert bool((ei[0] != ei[1]).all())
    assert torch.equal(coalesce(ei), coalesce(ei.flip(0)))


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="'k' must be a positive"):
        SemanticGraph(0)
    with pytest.raises(ValueError, match="'k' must lie in"):
        SemanticGraph(5)(Data(x=torch.randn(5, 2)))
    with pytest.raises(ValueError, match='NaN'):
        SemanticGraph(1)(Data(x=torch.tensor([[1.0], [float('nan')], [2.0]])))
    with pytest.raises(ValueError, match="needs node features"):
        SemanticGraph(1)(Data(num_nodes=3))
    with pytest.raises(ValueError, match="'method' must be one of"):
        SemanticGraph(3, method='hnsw')
    with pytest.raises(ValueError, match='needs dense features'):
        SemanticGraph(2, method='ivf')(Data(x=torch.eye(5).to_sparse()))
    with pytest.raises(ValueError, match="'probes'"):
        ivf_knn_cosine(torch.randn(10, 2), 2, probes=0)
    assert repr(SemanticGraph(7)) == "SemanticGraph(k=7, method='auto')"


def test_ivf_probing_every_cell_is_exact():
    x = torch.randn(200, 6, generator=torch.Generator().manual_seed(2))
    got = ivf_knn_cosine(x, 4, cells=6, probes=6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(got, exact_knn_cosine(x, 4))


def clustered(n=3000, clusters=30, d=16, seed=3):
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(clusters, d, generator=gen)
    return centers[torch.randint(0, clusters, (n,), generator=gen)] + \
        0.6 * torch.randn(n, d, generator=gen)


@pytest.mark.parametrize('features', ['clustered', 'noise'])
def test_ivf_recall_against_exact(features):
    # Clustered features need few probes; structureless noise needs many: the
    # tuned number of probes reaches the target recall on both.
    x = clustered() if features == 'clustered' else torch.randn(
        3000, 32, generator=torch.Generator().manual_seed(5))
    exact = exact_knn_cosine(x, 10)
    approx = ivf_knn_cosine(x, 10, generator=torch.Generator().manual_seed(0))
    assert approx.shape == exact.shape and bool((approx != torch.arange(3000)[:, None]).all())
    hits = sum(len(set(a) & set(e)) for a, e in zip(approx.tolist(), exact.tolist()))
    assert hits / exact.numel() >= 0.95


def test_ivf_is_reproducible_and_auto_is_exact_on_small_graphs():
    x = clustered(n=500)
    runs = [SemanticGraph(5, method='ivf', seed=1)(Data(x=x)).semantic_edge_index
            for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    auto = SemanticGraph(5)(Data(x=x)).semantic_edge_index
    assert torch.equal(coalesce(auto), coalesce(SemanticGraph(5, method='exact')(
        Data(x=x)).semantic_edge_index))


def test_ivf_handles_zero_duplicate_and_integer_rows():
    x = torch.cat([torch.zeros(20, 4), torch.eye(4).repeat(30, 1), torch.randn(40, 4)])
    exact = exact_knn_cosine(x, 3)
    # Every cell probed: exactly the exact search, ties included.
    every = ivf_knn_cosine(x, 3, cells=8, probes=8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(every, exact)
    # Degenerate centroids (zero, duplicated) still search their own cell.
    few = ivf_knn_cosine(x, 3, cells=8, probes=2, generator=torch.Generator().manual_seed(0))
    assert bool((few != torch.arange(x.size(0))[:, None]).all())
    counts = torch.randint(0, 3, (50, 6), generator=torch.Generator().manual_seed(4))
    assert torch.equal(ivf_knn_cosine(counts, 2, cells=3, probes=3),
                       exact_knn_cosine(counts.float(), 2))
