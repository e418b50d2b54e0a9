import pytest
import torch
from torch_geometric.utils import coalesce

from tests.conftest import brute_force, clustered
from torch_geometric_regcn.knn.cosine import (
    _top_k_lowest_index,
    exact_knn_cosine,
    ivf_knn_cosine,
    knn_graph_cosine,
    normalize_rows,
)


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


def test_ivf_probing_every_cell_is_exact():
    x = torch.randn(200, 6, generator=torch.Generator().manual_seed(2))
    got = ivf_knn_cosine(x, 4, cells=6, probes=6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(got, exact_knn_cosine(x, 4))


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


def test_knn_graph_cosine_is_symmetric_brute_force():
    x = torch.randn(40, 5, generator=torch.Generator().manual_seed(6))
    assert torch.equal(coalesce(knn_graph_cosine(x, 3)), brute_force(x, 3))


def test_normalize_rows_dense_and_sparse():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0], [0.0, 2.0]])
    expected = torch.tensor([[0.6, 0.8], [0.0, 0.0], [0.0, 1.0]])
    torch.testing.assert_close(normalize_rows(x), expected)
    for sparse in (x.to_sparse(), x.to_sparse_csr()):
        torch.testing.assert_close(normalize_rows(sparse).to_dense(), expected)
