r"""Products with a known transpose:
:mod:`torch_geometric_regcn.linalg.adjoint_product`."""
import torch

from tests.conftest import dense_normalized_adjacency, undirected_graph
from torch_geometric_regcn.linalg.adjoint_product import symmetric_matmul
from torch_geometric_regcn.regularizers.graph import adjacency

N = 30


def test_its_gradient_is_the_dense_products():
    # Reference: autograd through the dense symmetric matrix, float64 (sums of
    # a few O(1) terms: 1e-13), a first and a second derivative.
    ei, weight = undirected_graph(0, N, weighted=True)
    a = adjacency(ei, N, weight, torch.float64)
    dense = dense_normalized_adjacency(ei, N, weight)
    assert torch.allclose(a.to_dense(), a.to_dense().T, atol=1e-15)  # symmetric, as required
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    seed = torch.randn(N, 4, dtype=torch.float64, generator=gen)
    out = symmetric_matmul(a, x)
    assert torch.allclose(out, dense @ x, atol=1e-13)
    grad, = torch.autograd.grad((out * out).sum(), x, create_graph=True)
    expected, = torch.autograd.grad(((dense @ x) ** 2).sum(), x, create_graph=True)
    assert torch.allclose(grad, expected, atol=1e-13)
    second, = torch.autograd.grad(grad, x, seed)
    assert torch.allclose(second, torch.autograd.grad(expected, x, seed)[0], atol=1e-13)


def test_values_that_want_a_gradient_take_torchs_product():
    # The shortcut would drop their gradient: torch's product differentiates
    # them. Reference: central differences (torch's gradcheck, float64).
    ei, weight = undirected_graph(0, N, weighted=True)
    weight = weight.to(torch.float64).requires_grad_(True)
    x = torch.randn(N, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1),
                    requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda w, y: symmetric_matmul(adjacency(ei, N, w, torch.float64), y), (weight, x))


def test_a_given_product_forms_the_forward_pass_only():
    # A layer's message passing forms the forward product (its hooks see it);
    # the backward pass is the plain product. Reference: dense float64, 1e-13.
    ei, weight = undirected_graph(1, N, weighted=True)
    a = adjacency(ei, N, weight, torch.float64)
    calls = []

    def product(matrix, x):
        calls.append(x.shape)
        return matrix @ x

    x = torch.randn(N, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(2),
                    requires_grad=True)
    out = symmetric_matmul(a, x, product)
    grad, = torch.autograd.grad(out.square().sum(), x)
    dense = dense_normalized_adjacency(ei, N, weight)
    assert len(calls) == 1
    assert torch.allclose(out, dense @ x, atol=1e-13)
    assert torch.allclose(grad, 2 * dense @ (dense @ x), atol=1e-13)
