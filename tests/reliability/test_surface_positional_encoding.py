r"""``LaplacianEigenPE`` on degenerate graphs as a hostile user builds them:
isolated nodes, many components, a complete graph (one eigenvalue of
multiplicity N - 1), no edges at all, a single node, ``k`` too large or not an
integer, self loops, duplicate, directed and zero-weight edges, a component
smaller than ``k`` and one large enough for the Lanczos path
(``docs/positional_encoding.md``). The reference is a dense float64 Laplacian
built here from the documented rule and ``numpy.linalg.eigh``: eigenvalues,
eigenvector residuals, orthonormality, and projectors onto every eigenspace
that the encoding holds whole (the basis inside a repeated eigenvalue is the
solver's); where the documentation fixes the vectors themselves (the
components' ``z_C``, an isolated node's ``e_i``) they are compared as vectors."""
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from tests.conftest import undirected_graph
from torch_geometric_regcn import LaplacianEigenPE

SIGN_TIE = 0.999


def undirected(pairs):
    pairs = torch.tensor(pairs, dtype=torch.long).T
    return torch.cat([pairs, pairs.flip(0)], dim=1)


def dense_laplacian(edge_index, num_nodes, edge_weight=None):
    """The documented L: self loops dropped, duplicates summed, a_ij <- max(a_ij, a_ji),
    D^-1/2 = 0 for a node without edges."""
    a = np.zeros((num_nodes, num_nodes))
    weights = np.ones(edge_index.size(1)) if edge_weight is None \
        else edge_weight.double().numpy()
    for (i, j), w in zip(edge_index.T.tolist(), weights.tolist()):
        if i != j:
            a[i, j] += w
    a = np.maximum(a, a.T)
    d = a.sum(1)
    inv = np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 0.0)
    return np.eye(num_nodes) - inv[:, None] * a * inv[None, :], a


def z_vector(a, nodes):
    """D^1/2 1_C / ||D^1/2 1_C|| of component `nodes`."""
    z = np.zeros(a.shape[0])
    z[nodes] = np.sqrt(a[nodes].sum(1))
    return z / np.linalg.norm(z)


def check_against_dense(pe, values, laplacian, k, value_tol=1e-10, vector_tol=1e-8):
    """Eigenvalues, residuals, orthonormality, sign convention and the projectors of
    every eigenspace of λ_1..λ_k that the encoding holds whole."""
    pe, values = pe.double().numpy(), values.double().numpy()
    ref_values, ref_vectors = np.linalg.eigh(laplacian)
    assert pe.shape == (laplacian.shape[0], k)
    np.testing.assert_allclose(values, ref_values[1:k + 1], atol=value_tol, rtol=0)
    np.testing.assert_allclose(pe.T @ pe, np.eye(k), atol=vector_tol, rtol=0)
    np.testing.assert_allclose(laplacian @ pe, pe * values[None, :], atol=vector_tol, rtol=0)
    for column in pe.T:  # the first entry within 99.9 % of the largest magnitude is > 0
        first = np.nonzero(np.abs(column) >= SIGN_TIE * np.abs(column).max())[0][0]
        assert column[first] > 0
    start = 0  # groups of equal reference eigenvalues
    while start < len(ref_values):
        end = start + 1
        while end < len(ref_values) and ref_values[end] - ref_values[start] < 1e-8:
            end += 1
        if start >= 1 and end <= k + 1:  # the whole eigenspace is in the encoding
            mine = pe[:, start - 1:end - 1]
            ref = ref_vectors[:, start:end]
            np.testing.assert_allclose(mine @ mine.T, ref @ ref.T, atol=vector_tol, rtol=0)
        start = end


def encode(data, k, **kwargs):
    transform = LaplacianEigenPE(k, **kwargs)
    pairs = transform.eigenpairs(data)
    pe = transform(data.clone()).laplacian_eigenvector_pe
    # the transform stores the same vectors, cast (float32 by default: 2^-24 relative)
    torch.testing.assert_close(pe.double(), pairs.eigenvectors, atol=1e-6, rtol=0)
    return pe, pairs


# -- isolated nodes, components ---------------------------------------------------------


def test_isolated_nodes_between_components():
    # Isolated nodes 0, 4, 7 around a triangle (1, 2, 3) and an edge (5, 6). The
    # triangle's z is the skipped u_0 (components with edges, by lowest node); then
    # z of the edge, then eigenvalue 1 three times: e_0, e_4, e_7 (ordered by node),
    # then one vector of the triangle's eigenvalue 1.5 (the solver's choice in it).
    edge_index = undirected([[1, 2], [2, 3], [1, 3], [5, 6]])
    data = Data(edge_index=edge_index, num_nodes=8)
    pe, pairs = encode(data, 5)
    laplacian, a = dense_laplacian(edge_index, 8)
    check_against_dense(pairs.eigenvectors, pairs.eigenvalues, laplacian, 5)
    vectors = pairs.eigenvectors.numpy()
    np.testing.assert_allclose(vectors[:, 0], z_vector(a, [5, 6]), atol=1e-12)
    np.testing.assert_allclose(vectors[:, 1:4], np.eye(8)[:, [0, 4, 7]], atol=1e-12)


def test_graph_without_edges():
    # No edge at all: L = I, every node its own component with eigenvalue 1; ordered
    # by node, e_0 is skipped and the encoding is [e_1, e_2, e_3].
    data = Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=5)
    pe, pairs = encode(data, 3)
    check_against_dense(pairs.eigenvectors, pairs.eigenvalues, np.eye(5), 3)
    np.testing.assert_allclose(pairs.eigenvectors.numpy(), np.eye(5)[:, 1:4], atol=1e-12)


# Six components with interleaved node numbers; lowest nodes 0..5 in the order A..F.
COMPONENTS = {'A': [0, 6, 11], 'B': [1, 7], 'C': [2, 8, 12, 14], 'D': [3, 9],
              'E': [4, 13, 15], 'F': [5, 10]}
COMPONENT_EDGES = [[0, 6], [6, 11], [1, 7], [2, 8], [8, 12], [12, 14], [14, 2], [3, 9],
                   [4, 13], [13, 15], [15, 4], [5, 10]]


def test_many_components_follow_the_documented_basis():
    # Path A (0-6-11), edges B, D, F, 4-cycle C, triangle E: six zero eigenvalues.
    # "z_C of the first is the skipped u_0, and the encoding starts with z_C of
    # components 2, 3, ..., c"; then the smallest non-zero eigenvalues: 1 on A
    # ((e_0 - e_11)/√2, positive at the lowest node) and twice on C (projector).
    edge_index = undirected(COMPONENT_EDGES)
    data = Data(edge_index=edge_index, num_nodes=16)
    pe, pairs = encode(data, 8)
    laplacian, a = dense_laplacian(edge_index, 16)
    check_against_dense(pairs.eigenvectors, pairs.eigenvalues, laplacian, 8)
    vectors = pairs.eigenvectors.numpy()
    for column, name in enumerate('BCDEF'):
        np.testing.assert_allclose(vectors[:, column], z_vector(a, COMPONENTS[name]),
                                   atol=1e-12)
    expected = np.zeros(16)
    expected[[0, 11]] = [2 ** -0.5, -2 ** -0.5]
    np.testing.assert_allclose(vectors[:, 5], expected, atol=1e-12)


def test_more_components_than_k():
    # c >= k + 1: "the encoding is made of the known z_C", components 2..k+1.
    edge_index = undirected(COMPONENT_EDGES)
    data = Data(edge_index=edge_index, num_nodes=16)
    pe, pairs = encode(data, 3)
    _, a = dense_laplacian(edge_index, 16)
    expected = np.stack([z_vector(a, COMPONENTS[name]) for name in 'BCD'], axis=1)
    np.testing.assert_allclose(pairs.eigenvectors.numpy(), expected, atol=1e-12)
    np.testing.assert_allclose(pairs.eigenvalues.numpy(), np.zeros(3), atol=1e-12)


def test_component_smaller_than_k():
    # A 3-node path, a 12-node cycle with a chord and 2 isolated nodes, k = 9: the
    # small component has fewer eigenpairs than k and its eigenvalues interleave
    # with the large one's.
    pairs_ = [[0, 1], [1, 2]] + [[3 + i, 3 + (i + 1) % 12] for i in range(12)] + [[3, 9]]
    edge_index = undirected(pairs_)
    data = Data(edge_index=edge_index, num_nodes=17)
    pe, pairs = encode(data, 9)
    laplacian, _ = dense_laplacian(edge_index, 17)
    check_against_dense(pairs.eigenvectors, pairs.eigenvalues, laplacian, 9)


# -- degenerate spectra -------------------------------------------------------------------


def test_complete_graph_has_one_repeated_eigenvalue():
    # K_7: eigenvalue 0 once, 7/6 six times. k = 3 takes three vectors of the
    # six-dimensional eigenspace: orthonormal, orthogonal to 1, eigenvectors of 7/6,
    # positive at their first maximal entry, and the same on every call.
    n = 7
    edge_index = undirected([[i, j] for i in range(n) for j in range(i + 1, n)])
    data = Data(edge_index=edge_index, num_nodes=n)
    pe, pairs = encode(data, 3)
    laplacian, _ = dense_laplacian(edge_index, n)
    check_against_dense(pairs.eigenvectors, pairs.eigenvalues, laplacian, 3)
    np.testing.assert_allclose(pairs.eigenvalues.numpy(), np.full(3, 7 / 6), atol=1e-12)
    np.testing.assert_allclose(pe.double().numpy().sum(0), np.zeros(3), atol=1e-6)
    assert torch.equal(LaplacianEigenPE(3)(data.clone()).laplacian_eigenvector_pe, pe)


def test_complete_graph_with_k_equal_to_n_minus_one():
    # K_6, k = 5 = N - 1 (the largest k allowed): the encoding spans the whole
    # eigenspace of 6/5, its projector is I - 11ᵀ/6.
    n = 6
    edge_index = undirected([[i, j] for i in range(n) for j in range(i + 1, n)])
    data = Data(edge_index=edge_index, num_nodes=n)
    pe, pairs = encode(data, n - 1)
    vectors = pairs.eigenvectors.numpy()
    np.testing.assert_allclose(vectors @ vectors.T, np.eye(n) - np.ones((n, n)) / n,
                               atol=1e-12)
    np.testing.assert_allclose(pairs.eigenvalues.numpy(), np.full(n - 1, 1.2), atol=1e-12)


def test_large_component_on_the_lanczos_path():
    # A 17 x 17 grid (289 nodes, above DENSE_THRESHOLD = 256: block Lanczos) and two
    # isolated nodes. The square's symmetry makes eigenvalues repeat in pairs, and
    # k = 5 cuts one pair in half. With tol=1e-10 the residuals are ~1e-10 and an
    # eigenspace separated by a gap g is within ~1e-10 / g of the exact one (the
    # gaps here are >= 1e-3): 1e-6 for vectors and projectors, 1e-9 for eigenvalues
    # (quadratic in the residual). Two calls give the identical encoding.
    side, n = 17, 17 * 17 + 2
    grid = [[r * side + c, r * side + c + 1] for r in range(side) for c in range(side - 1)]
    grid += [[r * side + c, (r + 1) * side + c] for r in range(side - 1) for c in range(side)]
    edge_index = undirected(grid)
    data = Data(edge_index=edge_index, num_nodes=n)
    pe, pairs = encode(data, 5, tol=1e-10)
    laplacian, _ = dense_laplacian(edge_index, n)
    check_against_dense(pairs.eigenvectors, pairs.eigenvalues, laplacian, 5, value_tol=1e-9,
                        vector_tol=1e-6)
    assert torch.equal(LaplacianEigenPE(5, tol=1e-10)(data.clone()).laplacian_eigenvector_pe,
                       pe)


# -- edges: self loops, duplicates, direction, weights ----------------------------------


def test_self_loops_are_dropped():
    # conftest's graph has self loops on 5 and 6 (and isolated nodes 0-2): the
    # encoding is that of the same graph without them.
    edge_index, _ = undirected_graph(seed=1, n=30)
    assert bool((edge_index[0] == edge_index[1]).any())
    data = Data(edge_index=edge_index, num_nodes=30)
    pe, pairs = encode(data, 6)
    laplacian, _ = dense_laplacian(edge_index, 30)
    check_against_dense(pairs.eigenvectors, pairs.eigenvalues, laplacian, 6)
    without = Data(edge_index=edge_index[:, edge_index[0] != edge_index[1]], num_nodes=30)
    _, reference = encode(without, 6)
    torch.testing.assert_close(pairs.eigenvalues, reference.eigenvalues, atol=1e-12, rtol=0)


def test_duplicate_edges_are_summed():
    # Edges listed two and three times weigh two and three ("duplicate edges
    # summed"): the encoding of the dense reference with summed entries, and of the
    # same graph given as coalesced edges with those weights.
    edge_index, _ = undirected_graph(seed=2, n=24)
    extra = edge_index[:, edge_index[0] < edge_index[1]][:, :8]
    extra = torch.cat([extra, extra.flip(0)], dim=1)
    multi = torch.cat([edge_index, extra, extra[:, :4], extra[:, 8:12]], dim=1)
    data = Data(edge_index=multi, num_nodes=24)
    pe, pairs = encode(data, 5)
    laplacian, a = dense_laplacian(multi, 24)
    check_against_dense(pairs.eigenvectors, pairs.eigenvalues, laplacian, 5)
    plain, _ = dense_laplacian(edge_index, 24)
    assert np.abs(np.linalg.eigvalsh(plain) - np.linalg.eigvalsh(laplacian)).max() > 1e-3
    rows, cols = np.nonzero(a)
    weighted = Data(edge_index=torch.tensor(np.stack([rows, cols])),
                    edge_weight=torch.tensor(a[rows, cols]), num_nodes=24)
    _, reference = encode(weighted, 5)
    torch.testing.assert_close(pairs.eigenvalues, reference.eigenvalues, atol=1e-12, rtol=0)


@pytest.mark.parametrize('is_undirected', [False, True])
def test_directed_weighted_graph_is_symmetrised_by_the_maximum(is_undirected):
    # One-way edges and two-way edges of different weights: a_ij <- max(a_ij, a_ji),
    # whatever is_undirected says ("so is_undirected changes nothing here").
    gen = torch.Generator().manual_seed(4)
    edge_index = torch.randint(0, 20, (2, 45), generator=gen)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    edge_index = torch.unique(edge_index, dim=1)
    weight = 0.1 + torch.rand(edge_index.size(1), generator=gen, dtype=torch.float64)
    data = Data(edge_index=edge_index, edge_weight=weight, num_nodes=20)
    pe, pairs = encode(data, 4, is_undirected=is_undirected)
    assert pe.dtype == torch.float64  # that of edge_weight
    laplacian, _ = dense_laplacian(edge_index, 20, weight)
    check_against_dense(pairs.eigenvectors, pairs.eigenvalues, laplacian, 4)


def test_zero_weight_edge_is_dropped():
    # Node 4's only edge has weight 0 ("edges of weight zero dropped"): it is
    # isolated, eigenvalue 1 with e_4, between the path's 0.5 and 1.5.
    edge_index = undirected([[0, 1], [1, 2], [2, 3], [3, 4]])
    weight = torch.tensor([1.0, 1.0, 1.0, 0.0] * 2, dtype=torch.float64)
    data = Data(edge_index=edge_index, edge_weight=weight, num_nodes=5)
    pe, pairs = encode(data, 3)
    laplacian, _ = dense_laplacian(edge_index, 5, weight)
    check_against_dense(pairs.eigenvectors, pairs.eigenvalues, laplacian, 3)
    np.testing.assert_allclose(pairs.eigenvalues.numpy(), [0.5, 1.0, 1.5], atol=1e-12)
    np.testing.assert_allclose(pairs.eigenvectors[:, 1].numpy(), np.eye(5)[4], atol=1e-12)


@pytest.mark.parametrize('bad', [float('nan'), -1.0])
def test_bad_edge_weight_is_named(bad):
    # A NaN or negative weight: a ValueError naming edge_weight, not a NaN encoding.
    edge_index = undirected([[0, 1], [1, 2], [2, 3]])
    weight = torch.ones(edge_index.size(1))
    weight[2] = bad
    data = Data(edge_index=edge_index, edge_weight=weight, num_nodes=4)
    with pytest.raises(ValueError, match='edge_weight'):
        LaplacianEigenPE(2)(data)


def test_concatenated_to_x_in_its_dtype():
    # attr_name=None: the encoding is appended to x, cast to x's dtype (float64 here,
    # from float32 by default: edge_weight's dtype), x's own columns untouched.
    edge_index = undirected([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [4, 5]])
    x = torch.randn(6, 3, dtype=torch.float64)
    data = Data(x=x.clone(), edge_index=edge_index,
                edge_weight=torch.ones(edge_index.size(1)), num_nodes=6)
    transform = LaplacianEigenPE(2, attr_name=None)
    pairs = transform.eigenpairs(data)
    out = transform(data.clone())
    assert out.x.shape == (6, 5) and out.x.dtype == torch.float64
    assert torch.equal(out.x[:, :3], x)
    torch.testing.assert_close(out.x[:, 3:], pairs.eigenvectors, atol=1e-6, rtol=0)
    laplacian, _ = dense_laplacian(edge_index, 6)
    check_against_dense(out.x[:, 3:], pairs.eigenvalues, laplacian, 2, vector_tol=1e-6)


# -- k ---------------------------------------------------------------------------------


def test_single_node_graph_is_refused():
    # One node: no k satisfies 1 <= k < N, an error naming k.
    data = Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=1)
    with pytest.raises(ValueError, match=r'\bk\b'):
        LaplacianEigenPE(1)(data)


@pytest.mark.parametrize('extra', [0, 3])
def test_k_not_smaller_than_the_number_of_nodes_is_named(extra):
    # k = N or more: an error naming k (PyG's transform would hand ARPACK k >= N).
    edge_index = undirected([[0, 1], [1, 2], [2, 3], [3, 4]])
    data = Data(edge_index=edge_index, num_nodes=5)
    with pytest.raises(ValueError, match=r'\bk\b'):
        LaplacianEigenPE(5 + extra)(data)


@pytest.mark.parametrize('k', [0, 2.5, True])
def test_k_that_is_not_a_positive_integer_is_named(k):
    # "k must be a positive integer smaller than the number of nodes; anything else
    # raises an error that names k" (a bool is not a number here).
    edge_index = undirected([[0, 1], [1, 2], [2, 3], [3, 4]])
    data = Data(edge_index=edge_index, num_nodes=5)
    with pytest.raises((ValueError, TypeError), match=r'\bk\b'):
        LaplacianEigenPE(k)(data)
