r"""The normalised incidence matrix: :mod:`torch_geometric_regcn.linalg.incidence`."""
import pytest
import torch

from tests.conftest import dense_normalized_adjacency
from tests.regularizers.helpers import N, dense_incidence, dense_weights
from torch_geometric_regcn.linalg import normalized_adjacency
from torch_geometric_regcn.linalg.incidence import normalized_incidence
from torch_geometric_regcn.regularizers.graph import adjacency_edges


def dense(inc):
    b = torch.zeros(inc.num_edges, N, dtype=torch.float64)
    rows = torch.arange(inc.num_edges)
    b[rows, inc.src] = inc.src_coef
    b[rows, inc.dst] = -inc.dst_coef
    return b


@pytest.mark.parametrize('weighted', [False, True])
@pytest.mark.parametrize('self_loops', [True, False])
def test_incidence_is_the_square_root_of_the_laplacian(weighted, self_loops):
    w, ei, weight = dense_weights(weighted=weighted)
    index, value = adjacency_edges(ei, N, weight, torch.float64)
    inc = normalized_incidence(index, value, N, self_loops)
    b = dense(inc)
    # Up to the sign of each row (the orientation of an edge), the definition.
    reference = dense_incidence(w, self_loops)
    assert torch.allclose(b.T @ b, reference.T @ reference, atol=1e-13)
    if self_loops:  # B^T B = I - Â, the paper's Laplacian L~
        eye = torch.eye(N, dtype=torch.float64)
        assert torch.allclose(b.T @ b, eye - dense_normalized_adjacency(ei, N, weight),
                              atol=1e-13)
    x = torch.randn(N, 3, dtype=torch.float64)
    z = torch.randn(inc.num_edges, 3, dtype=torch.float64)
    assert torch.allclose(inc.gradient(x), b @ x, atol=1e-13)
    assert torch.allclose(inc.divergence(z), b.T @ z, atol=1e-13)
    u = torch.rand(inc.num_edges, dtype=torch.float64)
    assert torch.allclose(inc.weighted_diagonal(u), ((b.T * u) @ b).diagonal(), atol=1e-13)
    assert inc.num_edges == int((w > 0).sum()) // 2  # one row per undirected edge, no loops


def test_bad_entries_are_named():
    # Raw torch errors before (a float index: IndexError), or a message about
    # diagonal entries for an index out of range.
    edge_index, weight = normalized_adjacency(torch.tensor([[0, 1], [1, 2]]), 3,
                                              dtype=torch.float64)
    with pytest.raises(TypeError, match="'edge_index' must hold integer node indices"):
        normalized_incidence(edge_index.float(), weight, 3)
    with pytest.raises(ValueError, match="'edge_index' refers to nodes outside \\[0, 1\\]"):
        normalized_incidence(edge_index, weight, 2)
    nan = weight.clone()
    nan[0] = float('nan')
    with pytest.raises(ValueError, match="'edge_weight' contains NaN"):
        normalized_incidence(edge_index, nan, 3)


def test_entries_that_are_not_symmetric_are_refused_and_duplicates_summed():
    # It read the upper triangle and the last of repeated diagonal entries: a
    # lone entry (1, 0) gave B^T B = 0 where I - A^ is not, a diagonal entry
    # split in two read 1/d~ as its last part (0.25 for 0.5). Reference: B^T B
    # = I - A^ of the summed entries, dense, to float64 rounding.
    directed = torch.tensor([[0, 1, 1], [0, 1, 0]])
    half = torch.full((3,), 0.5, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"needs the symmetric entries .*\(an entry \(i, j\) "
                                         r"without an equal \(j, i\)"):
        normalized_incidence(directed, half, 2)
    split = torch.tensor([[0, 0, 1, 1, 0], [0, 1, 0, 1, 0]])
    weight = torch.tensor([0.25, 0.5, 0.5, 0.5, 0.25], dtype=torch.float64)
    inc = normalized_incidence(split, weight, 2)
    b = torch.zeros(inc.num_edges, 2, dtype=torch.float64)
    b[torch.arange(inc.num_edges), inc.src] += inc.src_coef
    b[torch.arange(inc.num_edges), inc.dst] -= inc.dst_coef
    expected = torch.tensor([[0.5, -0.5], [-0.5, 0.5]], dtype=torch.float64)
    torch.testing.assert_close(b.T @ b, expected, atol=1e-15, rtol=0)


@pytest.mark.parametrize('weighted', [False, True])
def test_the_sparse_rows_give_the_products_and_their_gradients(weighted):
    # Reference: the dense B0 (the rows without the weights) and autograd
    # through its products, in float64 (sums of a few O(1) terms: 1e-13).
    w, ei, weight = dense_weights(weighted=weighted)
    index, value = adjacency_edges(ei, N, weight, torch.float64)
    inc = normalized_incidence(index, value, N).with_csr()
    base, _ = inc.split()
    assert inc.csr is not None and base.csr is inc.csr
    b0 = torch.zeros(inc.num_edges, N, dtype=torch.float64)
    rows = torch.arange(inc.num_edges)
    b0[rows, inc.src], b0[rows, inc.dst] = inc.src_norm, -inc.dst_norm
    assert torch.equal(inc.csr[0].to_dense(), b0) and torch.equal(inc.csr[1].to_dense(), b0.T)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    z = torch.randn(inc.num_edges, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    g_edges = torch.randn(inc.num_edges, 3, dtype=torch.float64, generator=gen)
    g_nodes = torch.randn(N, 3, dtype=torch.float64, generator=gen)
    for ours, dense_product, point, seed in ((base.gradient, lambda t: b0 @ t, x, g_edges),
                                             (base.divergence, lambda t: b0.T @ t, z, g_nodes)):
        out = ours(point)
        assert torch.allclose(out, dense_product(point), atol=1e-13)
        grad, = torch.autograd.grad(out, point, seed, create_graph=True)
        expected, = torch.autograd.grad(dense_product(point), point, seed)
        assert torch.allclose(grad, expected, atol=1e-13)
    # The weighted rows keep the index path (their weights are not in csr).
    assert torch.allclose(inc.gradient(x), dense(inc) @ x, atol=1e-13)


def test_sparse_rows_are_not_built_from_coefficients_that_want_a_gradient():
    # Their values would be constants: the gradient in the edge weights lost.
    _, ei, weight = dense_weights(weighted=True)
    weight = weight.clone().requires_grad_(True)
    index, value = adjacency_edges(ei, N, weight, torch.float64)
    inc = normalized_incidence(index, value, N)
    assert inc.with_csr().csr is None
    with torch.no_grad():
        index, value = adjacency_edges(ei, N, weight, torch.float64)
    assert normalized_incidence(index, value, N).with_csr().csr is not None
