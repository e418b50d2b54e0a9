r"""The public helper functions (package root, datasets, transforms, linalg,
knn, utils) reject nonsense numbers, integers, strings and dtypes before any
work, with an error that names the argument; valid arguments, NumPy integers
included, keep the results the functions document."""
import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from torch_geometric_regcn import LaplacianEigenPE, LowRankInverse, SemanticGraph, paper_rank
from torch_geometric_regcn.datasets import (
    PAPER_SETTINGS,
    contextual_sbm,
    contextual_sbm_shard,
    paper_split,
)
from torch_geometric_regcn.knn import ivf_knn_cosine, normalize_rows, spherical_kmeans
from torch_geometric_regcn.linalg import (
    laplacian_eigenpairs,
    normalized_adjacency,
    subspace_iteration,
)
from torch_geometric_regcn.utils import (
    compact_csr,
    diagonal,
    sparse_identity,
    spectral_bound,
    to_csr,
)

N, F = 40, 5
#: The node counts of the paper's datasets (Table 2), for paper_rank's formula.
NODES = {'Cora': 2708, 'CiteSeer': 3327, 'PubMed': 19717, 'ACM': 3025, 'BlogCatalog': 5196,
         'CoraFull': 19793, 'Flickr': 7575, 'UAI': 3067}


def features(n=N, f=F, seed=0):
    return torch.randn(n, f, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def unit_rows(n=N, f=F):
    x = features(n, f)
    return x / x.norm(dim=1, keepdim=True)


def symmetric(n=12):
    a = torch.rand(n, n, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    return a + a.T


def laplacian_inputs():
    data = contextual_sbm(N, 2, F, seed=0)
    edge_index, weight, degree = normalized_adjacency(
        data.edge_index, N, None, torch.float64, self_loops=False, reduce='sum',
        return_degree=True)
    return edge_index, weight, degree


def eigenpairs(**kwargs):
    return laplacian_eigenpairs(*laplacian_inputs(), 3, **kwargs)


# (id, call, exception type, regex that names the argument)
NONSENSE = [
    # paper_rank: r = floor(N / p) only for positive integers
    ('paper-rank-negative-nodes', lambda: paper_rank(-2708, 16), ValueError,
     r"^'num_nodes' must be a positive integer \(got -2708\)$"),
    ('paper-rank-zero-nodes', lambda: paper_rank(0, 1), ValueError,
     r"^'num_nodes' must be a positive integer \(got 0\)$"),
    ('paper-rank-fractional-nodes', lambda: paper_rank(2708.5, 16), ValueError,
     r"^'num_nodes' must be a positive integer \(got 2708.5\)$"),
    ('paper-rank-fractional-p', lambda: paper_rank(2708, 16.5), ValueError,
     r"^'p' must be a positive integer \(got 16.5\)$"),
    ('paper-rank-whole-float-p', lambda: paper_rank(2708, 16.0), ValueError,
     r"^'p' must be a positive integer \(got 16.0\); pass it as an int, e.g. 16$"),
    ('paper-rank-negative-p', lambda: paper_rank(2708, -16), ValueError,
     r"^'p' must be a positive integer \(got -16\)$"),
    ('paper-rank-nan', lambda: paper_rank(math.nan, 16), ValueError, r"^'num_nodes' must be"),
    ('paper-rank-inf-p', lambda: paper_rank(2708, math.inf), ValueError, r"^'p' must be"),
    ('paper-rank-bool', lambda: paper_rank(True, 1), ValueError,
     r"^'num_nodes' must be a positive integer \(got True\)$"),
    ('paper-rank-str', lambda: paper_rank('2708', 16), TypeError,
     r"^'num_nodes' must be an integer \(got str '2708'\)$"),
    ('paper-rank-float-tensor', lambda: paper_rank(torch.tensor(2708.0), 16), TypeError,
     r"^'num_nodes' must be an integer"),
    # seeds: integers that torch.Generator.manual_seed accepts
    ('csbm-seed-overflow', lambda: contextual_sbm(N, seed=2**64), ValueError,
     r"^'seed' must be an integer in \[-2\*\*63, 2\*\*64\)"),
    ('csbm-seed-float', lambda: contextual_sbm(N, seed=1.5), ValueError,
     r"^'seed' must be an integer in \[-2\*\*63, 2\*\*64\)"),
    ('csbm-shard-seed-overflow', lambda: contextual_sbm_shard(N, 2, 0, seed=-2**63 - 1),
     ValueError, r"^'seed' must be an integer in \[-2\*\*63, 2\*\*64\)"),
    ('split-seed-float', lambda: paper_split(contextual_sbm(N, 2, F), 2, 5, 5, seed=0.5),
     ValueError, r"^'seed' must be an integer"),
    ('semantic-seed-overflow', lambda: SemanticGraph(3, seed=2**64), ValueError,
     r"^'seed' must be an integer in \[-2\*\*63, 2\*\*64\)"),
    ('pe-seed-overflow', lambda: LaplacianEigenPE(3, seed=2**64), ValueError,
     r"^'seed' must be an integer in \[0, 2\*\*64\)"),
    ('lowrank-seed-overflow', lambda: LowRankInverse(1.0, 0.2, 4, seed=2**64), ValueError,
     r"^'seed' must be an integer in \[-2\*\*63, 2\*\*64\)"),
    ('pe-dtype-str', lambda: LaplacianEigenPE(3, dtype='float32'), TypeError,
     r"^'dtype' must be a floating-point torch.dtype such as torch.float32 \(got str"),
    # linalg
    ('laplacian-seed-float', lambda: eigenpairs(seed=1.5), ValueError, r"^'seed' must be"),
    ('laplacian-dense-threshold', lambda: eigenpairs(dense_threshold=-1), ValueError,
     r"^'dense_threshold' must be a non-negative integer \(got -1\)$"),
    ('laplacian-dense-threshold-float', lambda: eigenpairs(dense_threshold=2.5), ValueError,
     r"^'dense_threshold' must be a non-negative integer \(got 2.5\)$"),
    ('laplacian-dense-fallback', lambda: eigenpairs(dense_fallback=-4096), ValueError,
     r"^'dense_fallback' must be a non-negative integer"),
    ('subspace-oversample-negative', lambda: subspace_iteration(symmetric(), 2, oversample=-1),
     ValueError, r"^'oversample' must be a non-negative integer \(got -1\)$"),
    ('subspace-oversample-float', lambda: subspace_iteration(symmetric(), 2, oversample=1.5),
     ValueError, r"^'oversample' must be a non-negative integer \(got 1.5\)$"),
    # knn
    ('kmeans-cells-zero', lambda: spherical_kmeans(unit_rows(), 0), ValueError,
     r"^'cells' must lie in \[1, 40\]"),
    ('kmeans-cells-negative', lambda: spherical_kmeans(unit_rows(), -3), ValueError,
     r"^'cells' must lie in \[1, 40\]"),
    ('kmeans-cells-too-many', lambda: spherical_kmeans(unit_rows(), N + 1), ValueError,
     r"^'cells' must lie in \[1, 40\], at most one cluster per row of 'x' \(got 41\)$"),
    ('kmeans-cells-float', lambda: spherical_kmeans(unit_rows(), 2.5), ValueError,
     r"^'cells' must be an integer \(got 2.5\)$"),
    ('kmeans-iterations-negative', lambda: spherical_kmeans(unit_rows(), 3, iterations=-1),
     ValueError, r"^'iterations' must be a non-negative integer \(got -1\)$"),
    ('kmeans-block-size-zero', lambda: spherical_kmeans(unit_rows(), 3, block_size=0),
     ValueError, r"^'block_size' must be a positive integer \(got 0\)$"),
    ('kmeans-block-size-float', lambda: spherical_kmeans(unit_rows(), 3, block_size=1.5),
     ValueError, r"^'block_size' must be a positive integer \(got 1.5\)$"),
    ('kmeans-x-nan', lambda: spherical_kmeans(unit_rows() / 0, 3), ValueError,
     r"^'x' contains NaN or infinite values"),
    ('kmeans-x-1d', lambda: spherical_kmeans(unit_rows()[:, 0], 3), ValueError,
     r"^'x' must be a node feature matrix"),
    ('ivf-cells-float', lambda: ivf_knn_cosine(features(), 2, cells=1.5, progress=False),
     ValueError, r"^'cells' must be an integer \(got 1.5\)$"),
    ('normalize-rows-1d', lambda: normalize_rows(features()[:, 0]), ValueError,
     r"^'x' must be a node feature matrix"),
    ('normalize-rows-int', lambda: normalize_rows(features().long()), TypeError,
     r"^'x' must be floating point \(got torch.int64\); use 'x.float\(\)'$"),
    ('normalize-rows-list', lambda: normalize_rows([[1.0, 0.0]]), TypeError,
     r"^'x' must be a tensor of node features"),
    # utils
    ('identity-negative', lambda: sparse_identity(-1), ValueError,
     r"^'num_nodes' must be a non-negative integer \(got -1\)$"),
    ('identity-float', lambda: sparse_identity(3.0), ValueError,
     r"^'num_nodes' must be a non-negative integer \(got 3.0\); pass it as an int, e.g. 3$"),
    ('identity-bool', lambda: sparse_identity(True), ValueError,
     r"^'num_nodes' must be a non-negative integer \(got True\)$"),
    ('identity-dtype-str', lambda: sparse_identity(3, 'float32'), TypeError,
     r"^'dtype' must be a torch.dtype such as torch.float32 \(got str 'float32'\)$"),
    ('to-csr-list', lambda: to_csr([[1.0]]), TypeError, r"^'matrix' must be a matrix"),
    ('to-csr-3d', lambda: to_csr(torch.zeros(2, 2, 2).to_sparse()), ValueError,
     r"^'matrix' must be a matrix \(a 2-D tensor\) \(got shape \[2, 2, 2\]\)$"),
    ('to-csr-dense', lambda: to_csr(torch.eye(3)), TypeError,
     r"^'matrix' must be a sparse COO or CSR matrix .*'matrix.to_sparse_csr\(\)'$"),
    ('compact-csr-list', lambda: compact_csr([[1.0]]), TypeError, r"^'matrix' must be a"),
    ('diagonal-rectangular', lambda: diagonal(torch.ones(3, 4).to_sparse_csr()), ValueError,
     r"^'matrix' must be a square matrix \(got shape \[3, 4\]\)$"),
    ('diagonal-1d', lambda: diagonal(torch.ones(3)), ValueError,
     r"^'matrix' must be a square matrix \(got shape \[3\]\)$"),
    ('spectral-bound-rectangular', lambda: spectral_bound(torch.ones(3, 4)), ValueError,
     r"^'matrix' must be a square matrix"),
    ('spectral-bound-nan', lambda: spectral_bound(torch.full((3, 3), math.nan)), ValueError,
     r"^'matrix' contains NaN values"),
    ('spectral-bound-nan-csr', lambda: spectral_bound(
        torch.tensor([[1.0, math.nan], [0.0, 1.0]]).to_sparse_csr()), ValueError,
     r"^'matrix' contains NaN values"),
]


@pytest.mark.parametrize('call, error, match', [case[1:] for case in NONSENSE],
                         ids=[case[0] for case in NONSENSE])
def test_nonsense_argument_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_kmeans_rejects_before_drawing_from_the_generator():
    # The check comes before any work: the generator has not moved.
    generator = torch.Generator().manual_seed(7)
    state = generator.get_state()
    for cells in (0, N + 1, 2.5):
        with pytest.raises(ValueError, match="'cells'"):
            spherical_kmeans(unit_rows(), cells, generator=generator)
    assert torch.equal(generator.get_state(), state)


INTEGERS = (int, np.int64, np.int32, np.uint16)


@pytest.mark.parametrize('kind', INTEGERS)
def test_paper_rank_is_the_floor_of_nodes_over_p(kind):
    # The paper's formula r = floor(N / p), on its eight datasets and settings.
    for name, setting in PAPER_SETTINGS.items():
        num_nodes = NODES[name]
        assert paper_rank(kind(num_nodes), kind(setting.p)) == num_nodes // setting.p
        assert type(paper_rank(kind(num_nodes), kind(setting.p))) is int
    assert paper_rank(kind(2708), kind(16)) == 169  # the docstring's example
    assert paper_rank(torch.tensor(2708), kind(16)) == 169
    assert paper_rank(kind(16), kind(16)) == 1
    with pytest.raises(ValueError, match=r"num_nodes // p = 10 // 16 = 0; choose p <= 10"):
        paper_rank(kind(10), kind(16))


@pytest.mark.parametrize('kind', INTEGERS)
def test_sparse_helpers_keep_their_results(kind):
    eye = sparse_identity(kind(5), torch.float64)
    assert eye.is_coalesced() and torch.equal(eye.to_dense(), torch.eye(5, dtype=torch.float64))
    assert sparse_identity(kind(0)).shape == (0, 0)
    assert torch.equal(sparse_identity(3, torch.long).to_dense(), torch.eye(3, dtype=torch.long))
    m = symmetric() - 1  # negative entries too
    for layout in (m, m.to_sparse(), m.to_sparse_csr()):
        torch.testing.assert_close(diagonal(layout), m.diagonal(), rtol=0, atol=0)
        # ||M||_inf = max_i sum_j |m_ij|, in float64: sums of 12 numbers, rounding ~1e-15.
        assert spectral_bound(layout) == pytest.approx(float(m.abs().sum(1).max()), rel=1e-13)
    torch.testing.assert_close(to_csr(m.to_sparse()).to_dense(), m, rtol=0, atol=0)
    assert compact_csr(m) is m  # dense: returned as it is, as documented
    assert spectral_bound(torch.zeros(0, 0)) == 0.0


def test_spherical_kmeans_with_numpy_integers_keeps_its_result():
    x = unit_rows()
    # iterations=0 is documented as 'cells random rows': the rows of randperm.
    got = spherical_kmeans(x, np.int64(4), np.int32(0), torch.Generator().manual_seed(3))
    pick = torch.randperm(N, generator=torch.Generator().manual_seed(3))[:4]
    assert torch.equal(got, x[pick])
    ref = spherical_kmeans(x, 4, 5, torch.Generator().manual_seed(3), 16)
    got = spherical_kmeans(x, np.int64(4), np.int64(5), torch.Generator().manual_seed(3),
                           np.int16(16))
    assert torch.equal(got, ref)
    assert torch.allclose(got.norm(dim=1), torch.ones(4, dtype=torch.float64))


def test_normalize_rows_keeps_its_result():
    x = features()
    x[3] = 0
    out = normalize_rows(x)
    expected = x / x.norm(dim=1, keepdim=True)
    expected[3] = 0  # a zero row stays zero, never NaN
    torch.testing.assert_close(out, expected, rtol=1e-15, atol=0)
    torch.testing.assert_close(normalize_rows(x.to_sparse()).to_dense(), expected,
                               rtol=1e-15, atol=0)


def test_linalg_helpers_with_numpy_integers_keep_their_results():
    ref = eigenpairs(seed=3, dense_threshold=0, dense_fallback=8)
    got = eigenpairs(seed=np.int64(3), dense_threshold=np.int32(0), dense_fallback=np.int64(8))
    assert torch.equal(got.eigenvectors, ref.eigenvectors)
    # Dense reference: the 3 smallest eigenvalues after the first of L = I - A_hat.
    edge_index, weight, _ = laplacian_inputs()
    adjacency = torch.zeros(N, N, dtype=torch.float64)
    adjacency[edge_index[0], edge_index[1]] = weight
    expected = torch.linalg.eigvalsh(torch.eye(N, dtype=torch.float64) - adjacency)[1:4]
    torch.testing.assert_close(ref.eigenvalues, expected, rtol=0, atol=1e-8)  # tol=1e-6
    m = symmetric()
    g = torch.Generator
    ref = subspace_iteration(m, 2, oversample=3, generator=g().manual_seed(0))
    got = subspace_iteration(m, 2, oversample=np.int64(3), generator=g().manual_seed(0))
    assert torch.equal(got.eigenvalues, ref.eigenvalues)
    top = torch.linalg.eigvalsh(m).flip(0)[:2]
    torch.testing.assert_close(ref.eigenvalues, top, rtol=1e-4, atol=0)  # tol=1e-4


def test_seeds_at_both_ends_of_the_range_are_accepted():
    assert torch.equal(contextual_sbm(N, 2, F, seed=np.uint64(2**64 - 1)).x,
                       contextual_sbm(N, 2, F, seed=2**64 - 1).x)
    assert torch.equal(contextual_sbm(N, 2, F, seed=-2**63).edge_index,
                       contextual_sbm(N, 2, F, seed=np.int64(-2**63)).edge_index)
    assert SemanticGraph(3, seed=2**64 - 1).seed == 2**64 - 1
    assert LaplacianEigenPE(3, seed=np.int64(5)).seed == 5
    data = contextual_sbm(N, 2, F)
    masks = paper_split(data.clone(), 2, 5, 5, seed=np.int64(9))
    again = paper_split(data.clone(), 2, 5, 5, seed=9)
    assert torch.equal(masks.train_mask, again.train_mask)
    assert torch.equal(masks.test_mask, again.test_mask)
    a = SemanticGraph(3, seed=np.uint64(2**64 - 1), progress=False)(Data(x=data.x))
    b = SemanticGraph(3, seed=2**64 - 1, progress=False)(Data(x=data.x))
    assert torch.equal(a.semantic_edge_index, b.semantic_edge_index)
