r"""The public helper functions (package root, datasets, transforms, linalg,
knn, utils) reject nonsense numbers, integers, strings and dtypes before any
work, with an error that names the argument; valid arguments, NumPy integers
included, keep the results the functions document."""
import math
import warnings

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
    block_lanczos,
    combine,
    factors_from_eigenpairs,
    laplacian_eigenpairs,
    normalized_adjacency,
    subspace_iteration,
    tall_qr,
    woodbury_apply,
    woodbury_core,
)
from torch_geometric_regcn.regularizers import GraphOperators, tsgcn_adjacency
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


def path_edges(n=6):
    return torch.stack([torch.arange(n - 1), torch.arange(1, n)])


def edges_of(n=6):
    r"""Two operators :obj:`(edge_index, edge_weight)` of a path of :obj:`n` nodes."""
    index = path_edges(n)
    return [(index, torch.ones(n - 1, dtype=torch.float64)),
            (index.flip(0), torch.full((n - 1,), 0.5, dtype=torch.float64))]


def a_graph(**kwargs):
    return GraphOperators(N, contextual_sbm(N, 2, F, seed=0).edge_index, **kwargs)


def orthonormal(n=N, r=3):
    gen = torch.Generator().manual_seed(0)
    return torch.linalg.qr(torch.randn(n, r, dtype=torch.float64, generator=gen))[0]


def factors(n=N, r=3):
    return factors_from_eigenpairs(torch.tensor([0.5, 0.1, -0.2], dtype=torch.float64)[:r],
                                   orthonormal(n, r))


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
    # normalized_adjacency: was torch's "result type Float can't be cast to ... Long"
    ('adjacency-fractional-nodes', lambda: normalized_adjacency(path_edges(), 60.5),
     ValueError, r"^'num_nodes' must be a non-negative integer \(got 60.5\)$"),
    ('adjacency-whole-float-nodes', lambda: normalized_adjacency(path_edges(), 60.0),
     ValueError, r"^'num_nodes' must be a non-negative integer \(got 60.0\); pass it as an "
                 r"int, e.g. 60$"),
    ('adjacency-negative-nodes', lambda: normalized_adjacency(path_edges(), -1), ValueError,
     r"^'num_nodes' must be a non-negative integer \(got -1\)$"),
    # was silently ignored: a float32 result for dtype=torch.long
    ('adjacency-integer-dtype', lambda: normalized_adjacency(path_edges(), 6,
                                                             dtype=torch.long),
     TypeError, r"^'dtype' must be a floating-point torch.dtype such as torch.float32 "
                r"\(got dtype torch.int64\)$"),
    ('adjacency-dtype-str', lambda: normalized_adjacency(path_edges(), 6, dtype='float64'),
     TypeError, r"^'dtype' must be a floating-point torch.dtype"),
    # combine: zip truncated silently; NaN was summed in; torch's raw errors for num_nodes
    ('combine-fewer-coefficients', lambda: combine(edges_of(), [1.0], 6), ValueError,
     r"^'operators' and 'coefficients' must have the same length, one coefficient per "
     r"operator \(got 2 and 1\)$"),
    ('combine-more-coefficients', lambda: combine(edges_of()[:1], [1.0, 2.0], 6), ValueError,
     r"\(got 1 and 2\)$"),
    ('combine-nan', lambda: combine(edges_of(), [1.0, math.nan], 6), ValueError,
     r"^'coefficients\[1\]' must be finite \(got nan\)$"),
    ('combine-inf-tensor', lambda: combine(edges_of(), [torch.tensor(math.inf), 1.0], 6),
     ValueError, r"^'coefficients\[0\]' must be finite \(got inf\)$"),
    ('combine-str', lambda: combine(edges_of(), [1.0, '2'], 6), TypeError,
     r"^'coefficients\[1\]' must be a real number \(got str '2'\)$"),
    ('combine-vector-tensor', lambda: combine(edges_of(), [1.0, torch.ones(2)], 6), TypeError,
     r"^'coefficients\[1\]' must be a real number or a one-element floating-point tensor "
     r"\(got a tensor of shape \[2\], torch.float32\)$"),
    ('combine-fractional-nodes', lambda: combine(edges_of(), [1.0, 1.0], 6.5), ValueError,
     r"^'num_nodes' must be a non-negative integer \(got 6.5\)$"),
    # tsgcn_adjacency: a negative weight built S silently; float('1') accepted a string
    ('tsgcn-alpha-negative', lambda: tsgcn_adjacency(a_graph(), -1.0, 0.5), ValueError,
     r"^'alpha' must be non-negative \(got -1.0\)$"),
    ('tsgcn-alpha-str', lambda: tsgcn_adjacency(a_graph(), '1', 0.0), TypeError,
     r"^'alpha' must be a real number \(got str '1'\)$"),
    ('tsgcn-beta-nan', lambda: tsgcn_adjacency(a_graph(x=features().float()), 1.0, math.nan),
     ValueError, r"^'beta' must be finite \(got nan\)$"),
    ('tsgcn-learned-alpha-negative', lambda: tsgcn_adjacency(
        a_graph(), torch.tensor(-0.5, requires_grad=True), 0.0), ValueError,
     r"^'alpha' must be non-negative \(got -0.5\)$"),
    ('tsgcn-both-zero', lambda: tsgcn_adjacency(a_graph(), 0, 0.0), ValueError,
     r"^'alpha' and 'beta' cannot both be zero"),
    ('tsgcn-k-fractional', lambda: tsgcn_adjacency(a_graph(x=features().float()), 1.0, 0.5,
                                                   k=2.5),
     ValueError, r"^'k' must be a positive integer \(got 2.5\)$"),
    # block_lanczos: was torch's "randn(): argument 'size' failed to unpack", True taken as 1
    ('lanczos-block-size-float', lambda: block_lanczos(symmetric(40), 2, block_size=1.5),
     ValueError, r"^'block_size' must be a positive integer \(got 1.5\)$"),
    ('lanczos-block-size-bool', lambda: block_lanczos(symmetric(40), 2, block_size=True),
     ValueError, r"^'block_size' must be a positive integer \(got True\)$"),
    ('lanczos-block-size-zero', lambda: block_lanczos(symmetric(40), 2, block_size=0),
     ValueError, r"^'block_size' must be a positive integer \(got 0\)$"),
    ('lanczos-basis-size-float', lambda: block_lanczos(symmetric(40), 2, block_size=2,
                                                       basis_size=5.5),
     ValueError, r"^'basis_size' must be a positive integer \(got 5.5\)$"),
    # was "(got 4)", the rounded value, for basis_size=3
    ('lanczos-basis-size-small', lambda: block_lanczos(symmetric(40), 2, block_size=2,
                                                       basis_size=3),
     ValueError, r"^'basis_size' must be at least k \+ 2 \* block_size = 6 once rounded up to "
                 r"a multiple of block_size \(got 3, rounded up to 4\)$"),
    # GraphOperators: -1 was accepted, 60.5 failed later with torch's cast error
    ('graph-negative-nodes', lambda: GraphOperators(-1, path_edges()), ValueError,
     r"^'num_nodes' must be a non-negative integer \(got -1\)$"),
    ('graph-fractional-nodes', lambda: GraphOperators(60.5, path_edges()), ValueError,
     r"^'num_nodes' must be a non-negative integer \(got 60.5\)$"),
    ('graph-dtype-long', lambda: GraphOperators(6, path_edges(), dtype=torch.long), TypeError,
     r"^'dtype' must be a floating-point torch.dtype such as torch.float32"),
    ('graph-seed-float', lambda: GraphOperators(6, path_edges(), seed=1.5), ValueError,
     r"^'seed' must be an integer in \[-2\*\*63, 2\*\*64\)"),
    # woodbury: were AttributeError ("'list' object has no attribute 'device'") and
    # torch's "size of tensor a (3) must match" or "mat1 and mat2 shapes cannot be multiplied"
    ('core-list', lambda: woodbury_core(factors()[0].tolist(), factors()[1]), TypeError,
     r"^'w' and 'v' must be tensors \[num_nodes, rank\] \(got list and torch.Tensor\); "
     r"convert it with 'torch.as_tensor\(w\)'$"),
    ('core-numpy', lambda: woodbury_core(factors()[0], factors()[1].numpy()), TypeError,
     r"^'w' and 'v' must be tensors \[num_nodes, rank\] \(got torch.Tensor and "
     r"numpy.ndarray\); convert it with 'torch.from_numpy\(v\)'$"),
    ('core-widths', lambda: woodbury_core(factors()[0], factors()[1][:, :2]), ValueError,
     r"^'w' and 'v' must both have shape \[num_nodes, rank\] \(got \[40, 3\] and \[40, 2\]\)$"),
    ('core-dtypes', lambda: woodbury_core(factors()[0], factors()[1].float()), TypeError,
     r"^'w' and 'v' must both be float32 or float64 \(got torch.float64 and "
     r"torch.float32\)"),
    ('apply-list', lambda: woodbury_apply(features().tolist(), *factors()), TypeError,
     r"^'x' must be a tensor of node features \[num_nodes, channels\] \(got list\)"),
    ('apply-rows', lambda: woodbury_apply(features()[:-1], *factors()), ValueError,
     r"^'x' must have shape \[num_rows, channels\] with the 40 rows of 'w' and 'v' "
     r"\(got \[39, 5\]\)$"),
    ('apply-widths', lambda: woodbury_apply(features(), factors()[0], factors()[1][:, :2]),
     ValueError, r"^'w' and 'v' must both have shape"),
    ('apply-summary-shape', lambda: woodbury_apply(
        features()[:4], factors()[0][:4], None, woodbury_core(*factors()),
        summary=torch.zeros(3, 4, dtype=torch.float64)), ValueError,
     r"^'summary' must have shape \[rank, channels\] = \[3, 5\], V\^T X of all rows "
     r"\(got \[3, 4\]\)$"),
    # factors_from_eigenpairs: an eigenvalue of one (infinite gain) and NaN were accepted
    ('eigenpairs-one', lambda: factors_from_eigenpairs(
        torch.tensor([1.0, 0.5], dtype=torch.float64), orthonormal(r=2)), ValueError,
     r"^I \+ V\^T W is numerically singular in torch.float64: its smallest pivot 0 is not "
     r"above the rounding level"),
    ('eigenpairs-nan', lambda: factors_from_eigenpairs(
        torch.tensor([math.nan, 0.5], dtype=torch.float64), orthonormal(r=2)), ValueError,
     r"^'eigenvalues' contains NaN or infinite values"),
    ('eigenpairs-list', lambda: factors_from_eigenpairs([0.5, 0.2], orthonormal(r=2)),
     TypeError, r"^'eigenvalues' must be a tensor \[rank\] \(got list\); convert it with "
                r"'torch.as_tensor\(eigenvalues\)'$"),
    ('eigenpairs-shapes', lambda: factors_from_eigenpairs(
        torch.tensor([0.5, 0.2, 0.1], dtype=torch.float64), orthonormal(r=2)), ValueError,
     r"^'eigenvalues' and 'eigenvectors' must have shapes \[rank\] and \[num_nodes, rank\], "
     r"one eigenvector per column \(got \[3\] and \[40, 2\]\)$"),
    # tall_qr: was torch's "linalg.qr: The input tensor A must have at least 2 dimensions"
    ('tall-qr-list', lambda: tall_qr([[1.0], [2.0]], None), TypeError,
     r"^'block' must be a matrix, a 2-D dense or sparse \(COO or CSR\) tensor \(got list\); "
     r"convert it with 'torch.as_tensor\(block\)'$"),
    ('tall-qr-1d', lambda: tall_qr(torch.ones(5), None), ValueError,
     r"^'block' must be a matrix \(a 2-D tensor\) \(got shape \[5\]\)$"),
    ('tall-qr-integer', lambda: tall_qr(torch.ones(5, 2, dtype=torch.long), None), TypeError,
     r"^'block' must be a dense float32, float64 or complex matrix \(got torch.int64, "
     r"torch.strided\)"),
    # tall_qr: was LAPACK's "geqrf_cpu" not implemented for 'Half'
    ('tall-qr-half', lambda: tall_qr(torch.ones(5, 2, dtype=torch.float16), None), TypeError,
     r"^'block' must be a dense float32, float64 or complex matrix \(got torch.float16, "
     r"torch.strided\); convert it with '.to_dense\(\)' and '.float\(\)' or '.double\(\)'$"),
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


# -- the checked functions keep their results on valid arguments ---------------------

def dense(edge_index, weight, n):
    out = torch.zeros(n, n, dtype=weight.dtype)
    out.index_put_(tuple(edge_index), weight, accumulate=True)
    return out


@pytest.mark.parametrize('kind', INTEGERS)
def test_normalized_adjacency_with_numpy_integers_keeps_its_result(kind):
    edge_index = contextual_sbm(N, 2, F, seed=0).edge_index
    for dtype in (torch.float32, torch.float64):
        ref = normalized_adjacency(edge_index, N, dtype=dtype)
        got = normalized_adjacency(edge_index, kind(N), dtype=dtype)
        assert all(torch.equal(a, b) for a, b in zip(got, ref))
        assert got[1].dtype == dtype
    # Against the dense definition D^-1/2 (A + I) D^-1/2, float64: sums of at most N
    # terms below one, so 1e-14 bounds the rounding.
    adjacency = dense(edge_index, torch.ones(edge_index.size(1), dtype=torch.float64), N)
    adjacency = (adjacency > 0).double() + torch.eye(N, dtype=torch.float64)
    root = adjacency.sum(1).rsqrt()
    expected = root[:, None] * adjacency * root[None, :]
    got = dense(*normalized_adjacency(edge_index, np.int64(N), dtype=torch.float64), N)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-14)


def test_combine_keeps_its_result_and_a_learned_coefficient_its_gradient():
    operators = edges_of()
    dense_terms = [dense(index, weight, 6) for index, weight in operators]
    # Exact: c * w and the sum of two terms per entry at most, which are exact here.
    got = combine(operators, [np.float64(2.0), 3], np.int64(6)).to_dense()
    assert torch.equal(got, 2 * dense_terms[0] + 3 * dense_terms[1])
    alpha = torch.tensor(0.25, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # no "Converting a tensor with requires_grad=True"
        out = combine(operators, [alpha, 1.0], 6)
    assert torch.equal(out.detach().to_dense(), 0.25 * dense_terms[0] + dense_terms[1])
    out.values().sum().backward()
    assert float(alpha.grad) == float(dense_terms[0].sum())  # d/dalpha sum = sum of M_0
    assert torch.equal(combine(operators, [0.0, 1.0], 6).to_dense(), dense_terms[1])


def test_tsgcn_adjacency_with_a_learned_coefficient_matches_the_float_one():
    graph = a_graph(dtype=torch.float64)
    expected = tsgcn_adjacency(graph, 0.75, 0.0).to_dense()
    alpha = torch.tensor(0.75, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # was a UserWarning from float() of a grad tensor
        got = tsgcn_adjacency(graph, alpha, 0.0)
    assert torch.equal(got.detach().to_dense(), expected)
    assert torch.equal(tsgcn_adjacency(graph, np.float64(0.75), 0).to_dense(), expected)
    # S = alpha / (1 + alpha) A_hat: dS/dalpha = A_hat / (1 + alpha)^2, summed over entries.
    got.values().sum().backward()
    a_hat = expected * (1 + 0.75) / 0.75
    torch.testing.assert_close(alpha.grad, a_hat.sum() / 1.75 ** 2, rtol=1e-14, atol=0)


@pytest.mark.parametrize('kind', INTEGERS)
def test_block_lanczos_with_numpy_integers_keeps_its_result(kind):
    m = symmetric(60)
    g = torch.Generator
    ref = block_lanczos(m, 3, block_size=2, basis_size=12, generator=g().manual_seed(0))
    got = block_lanczos(m, 3, block_size=kind(2), basis_size=kind(12),
                        generator=g().manual_seed(0))
    assert torch.equal(got.eigenvalues, ref.eigenvalues)
    # tol=1e-4 relative to ||S||_2, against the dense spectrum
    top = torch.linalg.eigvalsh(m).flip(0)[:3]
    torch.testing.assert_close(ref.eigenvalues, top, rtol=0, atol=1e-4 * float(top[0]))


@pytest.mark.parametrize('kind', INTEGERS)
def test_graph_operators_with_numpy_integers_keep_their_result(kind):
    edge_index = contextual_sbm(N, 2, F, seed=0).edge_index
    ref = GraphOperators(N, edge_index, dtype=torch.float64).adj.to_dense()
    graph = GraphOperators(kind(N), edge_index, dtype=torch.float64, seed=kind(3))
    assert type(graph.num_nodes) is int and graph.seed == 3
    assert torch.equal(graph.adj.to_dense(), ref)
    assert torch.equal(ref, dense(*normalized_adjacency(edge_index, N, dtype=torch.float64), N))


def test_woodbury_helpers_keep_their_results():
    w, v = factors()
    x = features()
    # Against the dense inverse of I + W V^T, float64, condition below 3: 1e-13 is loose.
    expected = torch.linalg.solve(torch.eye(N, dtype=torch.float64) + w @ v.T, x)
    core = woodbury_core(w, v)
    torch.testing.assert_close(woodbury_apply(x, w, v, core), expected, rtol=0, atol=1e-13)
    summary = v.T @ x  # a batch's rows with the whole graph's summary
    rows = woodbury_apply(x[:7], w[:7], None, core, summary=summary)
    torch.testing.assert_close(rows, expected[:7], rtol=0, atol=1e-13)
    # factors_from_eigenpairs: W V^T = -U diag(lambda) U^T
    lam = torch.tensor([0.5, 0.1, -0.2], dtype=torch.float64)
    u = orthonormal()
    torch.testing.assert_close(w @ v.T, -(u * lam) @ u.T, rtol=0, atol=1e-15)
    q, r = tall_qr(x, None)
    torch.testing.assert_close(q @ r, x, rtol=0, atol=1e-14)
