r"""ElasticGNN's regulariser: :mod:`torch_geometric_regcn.regularizers.elastic`.

The reference is the elastic message passing of the official code
(``lxiaorui/ElasticGNN``, ``code/emp.py``: ``emp_forward``, ``L1_projection``,
``L21_projection``, the incidence of ``get_inc``/``inc_norm`` and the
propagation with ``gcn_norm``'s self loops), written again here on dense
float64 matrices."""
import warnings

import pytest
import torch

from tests.conftest import dense_normalized_adjacency, undirected_graph
from tests.regularizers.helpers import N, dense_incidence, dense_weights, h_in, operators
from torch_geometric_regcn import RegularizerConv
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.regularizers.graph import build_graph


def official_emp(x, w, ei, K, lambda1, lambda2, l21):
    a_hat = dense_normalized_adjacency(ei, N)
    inc = dense_incidence(w)
    gamma = 1 / (1 + lambda2)
    beta = 1 / (2 * gamma)
    hh, z = x, torch.zeros(inc.size(0), x.size(1), dtype=torch.float64)
    for _ in range(K):
        y = gamma * hh + (1 - gamma) * (a_hat @ x if lambda2 > 0 else x)
        if lambda1 > 0:
            x_bar = y - gamma * (inc.T @ z)
            z_bar = z + beta * (inc @ x_bar)
            if l21:
                norm = z_bar.norm(dim=1)
                scale = norm.clamp(max=lambda1)
                scale[norm > 0] = scale[norm > 0] / norm[norm > 0]
                z = scale.unsqueeze(1) * z_bar
            else:
                z = z_bar.clamp(-lambda1, lambda1)
            x = y - gamma * (inc.T @ z)
        else:
            x = y
    return x


@pytest.mark.parametrize('norm', ['l21', 'l1'])
@pytest.mark.parametrize('lambda1,lambda2', [(3.0, 3.0), (0.5, 0.0), (0.0, 9.0), (1.0, 1.0)])
def test_emp_reproduces_the_official_iteration(norm, lambda1, lambda2):
    w, ei, _ = dense_weights()
    reg = R.ElasticRegularizer(lambda1, lambda2, norm=norm, K=10)
    x = h_in(4)
    out = reg.propagate(x, operators(reg), 'emp')
    expected = official_emp(x, w, ei, 10, lambda1, lambda2, norm == 'l21')
    # 10 steps of O(1) operations in float64: agreement to ~1e-14; the issue asks 1e-6.
    assert torch.allclose(out, expected, atol=1e-12, rtol=0)


def test_without_trend_filtering_it_is_appnp():
    x = torch.randn(N, 3, dtype=torch.float64)
    ei = operators(R.get('gcn')).edge_index
    elastic = RegularizerConv(3, 3, regularizer='elastic', lambda1=0.0, lambda2=4.0,
                              K=7).double()
    appnp = RegularizerConv(3, 3, regularizer='appnp', solver='series', K=7,
                            alpha=1 / 5).double()
    appnp.lin.weight.data.copy_(elastic.lin.weight)
    assert torch.allclose(elastic(x, ei), appnp(x, ei), atol=1e-13)


@pytest.mark.parametrize('norm', ['l21', 'l1'])
def test_irls_and_emp_reach_the_same_minimum(norm):
    reg = R.ElasticRegularizer(1.0, 2.0, norm=norm, K=2000)
    graph, x = operators(reg), h_in(3)
    emp = reg.solve(x, graph, 'emp')
    with warnings.catch_warnings():  # the slow tail of IRLS on l1 (per-entry weights)
        warnings.simplefilter('ignore')
        irls = R.ElasticRegularizer(1.0, 2.0, norm=norm, K=300, eps=1e-6, irls_tol=1e-8).solve(
            x, graph, 'irls', tol=1e-12, max_iter=5000)
    e_emp, e_irls = reg.objective(emp.out, x, graph), reg.objective(irls.out, x, graph)
    # IRLS minimises the energy smoothed below eps, within lambda1 * eps / 2 per
    # edge (or entry) of the exact one: both minima agree to that and to the
    # iterations' own tolerance.
    gap = abs(float(e_emp - e_irls))
    assert gap <= 1e-5 * float(e_emp.abs())
    # The energy is 1-strongly convex (its 1/2 ||H - X||^2 term), so minimisers
    # of energies this close lie within sqrt(2 gap) plus the smoothing's reach.
    assert float((emp.out - irls.out).norm()) <= 2 * (2 * gap) ** 0.5 + 1e-3


def test_errors():
    with pytest.raises(ValueError, match='lambda1'):
        R.ElasticRegularizer(lambda1=-1.0)
    with pytest.raises(ValueError, match="'norm'"):
        R.ElasticRegularizer(norm='l2')
    with pytest.raises(ValueError, match="cannot use solver='cg'"):
        RegularizerConv(4, 4, regularizer='elastic', solver='cg')
    with pytest.raises(NotImplementedError, match='not a linear filter'):
        R.ElasticRegularizer().frequency_response(torch.zeros(3))


@pytest.mark.parametrize('norm', ['l21', 'l1'])
def test_float32_emp_and_its_gradients_are_the_float64_ones(norm):
    # Float32 projects each dual row by its norm summed in float64 and keeps
    # B0's rows as sparse matrices; float64 takes the scaled-row route and the
    # same sparse rows. Reference: float64, with edge weights (one of them 0,
    # where the radius is 0). Float32 rounding (6e-8) over 10 steps of a few
    # O(1) operations per edge and node, values and gradients of size ~1:
    # 1e-5 with a margin of about 10.
    ei, weight = undirected_graph(0, weighted=True)
    weight = weight.to(torch.float64)
    weight[0] = weight[(ei[0] == ei[1, 0]) & (ei[1] == ei[0, 0])] = 0.0  # both directions
    reg = R.ElasticRegularizer(1.0, 2.0, norm=norm, K=10)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(N, 4, dtype=torch.float64, generator=gen)
    c = torch.randn(N, 4, dtype=torch.float64, generator=gen)
    results = {}
    for dtype in (torch.float64, torch.float32):
        xd = x.to(dtype).requires_grad_(True)
        wd = weight.to(dtype, copy=True).requires_grad_(True)
        out = reg.propagate(xd, build_graph(reg, ei, N, wd, dtype), 'emp')
        grads = torch.autograd.grad((out * c.to(dtype)).sum(), (xd, wd))
        results[dtype] = [t.double() for t in (out, *grads)]
    for ours, expected in zip(results[torch.float32], results[torch.float64]):
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    # And without a gradient in the weights, through the sparse rows of B0.
    graph = build_graph(reg, ei, N, weight.float(), torch.float32)
    xd = x.float().requires_grad_(True)
    grad, = torch.autograd.grad((reg.propagate(xd, graph, 'emp') * c.float()).sum(), xd)
    assert reg.incidence(graph).csr is not None
    torch.testing.assert_close(grad.double(), results[torch.float64][1], rtol=1e-5, atol=1e-5)


def test_float32_projection_gradient_far_outside_the_ball():
    # Rows of the dual far outside their ball (features of 1e25): the
    # projection's term q (q . g) / ||q||^2 underflowed float32 when scaled by
    # s = r / ||q|| first, and the edge weights' gradient (lambda2 = 0, where
    # no other path dominates it) came out ~5x too large. Reference: float64,
    # where nothing underflows; float32 rounding over 3 steps: 1e-5.
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    weight = torch.tensor([1.0, 1.0, 0.5, 0.5, 2.0, 2.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    x, c = (torch.randn(4, 3, dtype=torch.float64, generator=gen) for _ in range(2))
    reg = R.ElasticRegularizer(1.0, 0.0, norm='l21', K=3)
    grads = {}
    for dtype in (torch.float64, torch.float32):
        xd = (1e25 * x).to(dtype).requires_grad_(True)
        wd = weight.to(dtype).requires_grad_(True)
        out = reg.propagate(xd, build_graph(reg, ei, 4, wd, dtype), 'emp')
        grads[dtype] = torch.autograd.grad((out * c.to(dtype)).sum(), wd)[0].double()
    torch.testing.assert_close(grads[torch.float32], grads[torch.float64], rtol=1e-5, atol=1e-6)


def test_float32_second_derivative_through_the_projection():
    # create_graph=True: the written-out backward is constant to autograd, so a
    # Hessian-vector product silently lost the projection's part (1% off here).
    # Reference: float64 (autograd through the scaled-row route); float32
    # rounding of 4 steps: 1e-5.
    ei, _ = undirected_graph(0)
    gen = torch.Generator().manual_seed(1)
    x = 3 * torch.randn(N, 3, dtype=torch.float64, generator=gen)
    v = torch.randn(N, 3, dtype=torch.float64, generator=gen)
    reg = R.ElasticRegularizer(0.2, 1.0, norm='l21', K=4)
    hv = {}
    for dtype in (torch.float64, torch.float32):
        xd = x.to(dtype).requires_grad_(True)
        out = reg.propagate(xd, build_graph(reg, ei, N, None, dtype), 'emp')
        g, = torch.autograd.grad(out.square().sum(), xd, create_graph=True)
        hv[dtype] = torch.autograd.grad((g * v.to(dtype)).sum(), xd)[0].double()
    torch.testing.assert_close(hv[torch.float32], hv[torch.float64], rtol=1e-5, atol=1e-5)
