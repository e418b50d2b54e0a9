import pytest
import torch

from tests.conftest import clustered
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.knn import exact_knn_cosine, ivf_knn_cosine, spherical_kmeans


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
    # Integer rows with four ones: the unit rows hold 1/2, so every similarity is a
    # multiple of 1/4, computed exactly in any summation order, and ties stay ties on
    # every BLAS kernel (rows of 0, 1, 2 tie only mathematically: 2/sqrt(5) twice
    # rounds differently in GEMMs of different shapes on AVX2 kernels).
    gen = torch.Generator().manual_seed(4)
    counts = torch.zeros(50, 6, dtype=torch.long)
    counts.scatter_(1, torch.rand(50, 6, generator=gen).argsort(dim=1)[:, :4], 1)
    assert torch.equal(ivf_knn_cosine(counts, 2, cells=3, probes=3,
                                      generator=torch.Generator().manual_seed(0)),
                       exact_knn_cosine(counts.float(), 2))


def test_ivf_is_reproducible_and_one_part_is_the_default():
    x = clustered(n=800)
    runs = [ivf_knn_cosine(x, 5, cells=12, target_recall=0.8, sample=200, iterations=3,
                           generator=torch.Generator().manual_seed(1), progress=False,
                           **extra)
            for extra in ({}, {}, {'partition': RowPartition.even(800, 1)})]
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])


def test_spherical_kmeans_gives_unit_centroids_of_separated_clusters():
    # Two antipodal directions: the centroids are the directions themselves.
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.tensor([[1.0, 0.0]]).repeat(30, 1),
                   torch.tensor([[-1.0, 0.0]]).repeat(30, 1)])
    x = x + 1e-3 * torch.randn(60, 2, generator=gen)
    x = x / x.norm(dim=1, keepdim=True)
    centroids = spherical_kmeans(x, 2, generator=gen)
    torch.testing.assert_close(centroids.norm(dim=1), torch.ones(2))
    assert sorted(centroids[:, 0].round().tolist()) == [-1.0, 1.0]
