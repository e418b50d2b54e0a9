r"""The signed Laplacian regulariser :math:`\mathbf{I} + \alpha\tilde{\mathbf{L}}`
(:mod:`torch_geometric_regcn.regularizers.signed`), against dense float64
references built from the eigendecomposition of :math:`\hat{\mathbf{A}}`."""
import math

import pytest
import torch

from tests.conftest import undirected_graph
from tests.regularizers.helpers import N, h_in, operators
from torch_geometric_regcn import RegularizerConv, RegularizerGNN
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.datasets import contextual_sbm
from torch_geometric_regcn.regularizers.base import constrain
from torch_geometric_regcn.regularizers.graph import GraphOperators, build_graph

# High-pass near the guard, high-pass, low-pass, strongly low-pass. cond(M) <= 10
# for all four (max(1 + 2α, 1 / (1 + 2α))).
ALPHAS = [-0.45, -0.25, 0.5, 2.0]


def eigen(graph):
    return torch.linalg.eigh(graph.adj.to_dense())


def dense_response(graph, response, x):
    r""":math:`\mathbf{V}\,\mathrm{diag}(g(\lambda))\,\mathbf{V}^\top\mathbf{X}`."""
    lam, vec = eigen(graph)
    return vec @ (response(lam)[:, None] * (vec.T @ x))


def exact(alpha):
    return lambda lam: 1 / (1 + alpha * (1 - lam))


def truncated(alpha, K):
    r"""The K-term Neumann response :math:`\frac{1}{1+\alpha}\sum_{k<K} r^k`,
    :math:`r = \alpha\lambda/(1+\alpha)`."""
    def response(lam):
        r = alpha * lam / (1 + alpha)
        return (r.unsqueeze(-1) ** torch.arange(K, dtype=lam.dtype)).sum(-1) / (1 + alpha)
    return response


def bipartite(n):
    r"""The complete bipartite graph :math:`K_{n,n}`: :math:`\hat{\mathbf{A}} =
    (\mathbf{A} + \mathbf{I})/(n+1)` has the eigenvalue :math:`(1-n)/(n+1)`, so
    :math:`\mu_{\max} = 2n/(n+1)`, as close to 2 as :math:`n` is large."""
    left, right = torch.arange(n).repeat_interleave(n), torch.arange(n, 2 * n).repeat(n)
    edge_index = torch.stack([torch.cat([left, right]), torch.cat([right, left])])
    return GraphOperators(2 * n, edge_index, dtype=torch.float64)


@pytest.mark.parametrize('solver', ['closed', 'cg'])
@pytest.mark.parametrize('alpha', ALPHAS)
def test_propagation_is_the_inverse_on_the_eigendecomposition(alpha, solver):
    # The exact solvers against V diag(1 / (1 + α(1 - λ))) Vᵀ X. Backward error of
    # LU and of eigh is a few N ε; times cond(M) <= 10 that is ~1e-13. CG stops at a
    # relative residual of 1e-12, hence an error <= cond * 1e-12 = 1e-11.
    reg = R.get('signed', alpha=alpha)
    graph = operators(reg)
    x = h_in()
    expected = dense_response(graph, exact(alpha), x)
    out = reg.propagate(x, graph, solver, tol=1e-12)
    assert float((out - expected).norm() / expected.norm()) < 1e-10


@pytest.mark.parametrize('alpha', ALPHAS)
def test_frequency_response(alpha):
    reg = R.get('signed', alpha=alpha)
    graph = operators(reg)
    lam, vec = eigen(graph)
    want = 1 / (1 + alpha * (1 - lam))
    torch.testing.assert_close(reg.frequency_response(lam), want, rtol=1e-15, atol=0)
    out = reg.propagate(vec, graph, tol=1e-12)  # the default solver, CG
    torch.testing.assert_close((vec * out).sum(0), want, rtol=0, atol=1e-10)
    # Low-pass for α > 0, high-pass for α < 0: the gain at λ = -1 against 1 at λ = 1.
    ends = reg.frequency_response(torch.tensor([-1.0, 1.0], dtype=torch.float64))
    assert float(ends[1]) == 1.0
    assert float(ends[0]) == pytest.approx(1 / (1 + 2 * alpha), rel=1e-15)
    assert (ends[0] > 1) == (alpha < 0)


@pytest.mark.parametrize('alpha', ALPHAS)
@pytest.mark.filterwarnings('ignore:SignedLaplacianRegularizer with alpha')  # short K on purpose
def test_series_is_the_truncated_neumann_series_within_its_bound(alpha):
    # The series solver is V diag(s_K(λ)) Vᵀ X with the K-term geometric sum s_K
    # (rounding ~1e-15 per product, K <= 20 products), and its error against the
    # exact solution is at most q^K with q = |α| / (1 + α) < 1, the docstring's bound.
    x = h_in()
    q = abs(alpha) / (1 + alpha)
    for K in (5, 10, 20):
        reg = R.get('signed', alpha=alpha, K=K)
        graph = operators(reg)
        out = reg.propagate(x, graph, 'series')
        torch.testing.assert_close(out, dense_response(graph, truncated(alpha, K), x),
                                   rtol=0, atol=1e-13)
        solution = dense_response(graph, exact(alpha), x)
        error = float((out - solution).norm() / solution.norm())
        assert error <= q**K + 1e-13
        assert error > 0.01 * q**K  # the bound is tight: Â has eigenvalues near ±1


@pytest.mark.parametrize('alpha', ALPHAS)
def test_output_is_the_minimum_of_the_energy(alpha):
    reg = R.get('signed', alpha=alpha)
    graph = operators(reg)
    x = h_in()
    h = reg.propagate(x, graph, 'closed').requires_grad_()
    # The energy against its definition with the dense M = I + α(I - Â).
    m = torch.eye(N, dtype=torch.float64) + alpha * (torch.eye(N, dtype=torch.float64)
                                                     - graph.adj.to_dense())
    energy = reg.energy(h, x, graph)
    want = -(h * x).sum() + 0.5 * (h * (m @ h)).sum()
    torch.testing.assert_close(energy, want, rtol=1e-14, atol=1e-14)
    (grad,) = torch.autograd.grad(energy, h)  # M H - X: rounding ~1e-15
    assert grad.abs().max() < 1e-12
    h = h.detach()
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):  # a minimum: M ≻ 0 for every α > -1/2
        delta = 1e-3 * torch.randn(h.shape, dtype=h.dtype, generator=gen)
        assert reg.energy(h + delta, x, graph) > energy


@pytest.mark.parametrize('alpha', [-0.5, -0.5 - 1e-12, -1.0, -3.0])
def test_the_guard_refuses_alpha_at_or_below_minus_one_half(alpha):
    with pytest.raises(ValueError, match=r"needs alpha > -1/2 \(got alpha=.*positive definite "
                                         r"on every graph.*Use alpha in \(-0.5, 0\)"):
        R.get('signed', alpha=alpha)


@pytest.mark.parametrize('alpha, error', [(math.nan, ValueError), (math.inf, ValueError),
                                          ('0.1', TypeError), (True, TypeError)])
def test_alpha_must_be_a_finite_number(alpha, error):
    with pytest.raises(error, match="'alpha'"):
        R.get('signed', alpha=alpha)


@pytest.mark.parametrize('alpha', [-0.5 + 1e-9, -0.45, 2.0])
def test_positive_definite_just_inside_the_guard_with_the_stated_condition(alpha):
    # On K_{10,10}, μ_max = 20/11: the eigenvalues of M are 1 + αμ (μ = 0 and
    # μ_max among them), λ_min(M) >= min(1, 1 + 2α) > 0, and cond(M) is the
    # docstring's 1 + αμ_max (α >= 0) or 1 / (1 + αμ_max) (α < 0), below
    # max(1 + 2α, 1 / (1 + 2α)).
    graph = bipartite(10)
    reg = R.get('signed', alpha=alpha)
    eigenvalues = torch.linalg.eigvalsh(reg.operator(graph).to_dense())
    mu_max = 20 / 11
    smallest, largest = float(eigenvalues.min()), float(eigenvalues.max())
    assert smallest >= min(1.0, 1 + 2 * alpha) > 0
    cond = largest / smallest
    want = 1 + alpha * mu_max if alpha >= 0 else 1 / (1 + alpha * mu_max)
    assert cond == pytest.approx(want, rel=1e-12)
    assert cond < max(1 + 2 * alpha, 1 / (1 + 2 * alpha))
    x = torch.randn(20, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(reg.propagate(x, graph, 'cg', tol=1e-12),
                               reg.propagate(x, graph, 'closed'), rtol=0, atol=1e-10)


def test_learned_alpha_lives_above_minus_one_half():
    reg = R.get('signed', alpha=-0.3).learn('alpha')
    assert tuple(reg.raw_alpha.shape) == ()
    assert float(reg.alpha.detach()) == pytest.approx(-0.3, abs=1e-7)  # float32 raw
    raw = torch.tensor([-30.0, -5.0, 0.0, 5.0, 30.0], dtype=torch.float64)
    values = constrain(raw, *R.SignedLaplacianRegularizer.learnable['alpha'])
    assert bool((values > -0.5).all())
    torch.testing.assert_close(values, -0.5 + torch.nn.functional.softplus(raw), rtol=0, atol=0)


@pytest.mark.parametrize('solver', ['cg', 'closed', 'series'])
def test_a_learned_alpha_rounded_onto_the_guard_is_refused(solver):
    # In float32, -1/2 + softplus(raw) is exactly -1/2 for raw < -18.1, where M
    # is singular: the series' own message divided by log(q) = log(1) = 0.
    x, ei = h_in(3).float(), operators(R.get('gcn')).edge_index
    conv = RegularizerConv(3, 3, 'signed', alpha=-0.45, solver=solver, learn=('alpha',))
    with torch.no_grad():
        conv.regularizer.raw_alpha.fill_(-20.0)
    assert float(conv.regularizer.alpha.detach()) == -0.5
    with pytest.raises(ValueError, match=r"'alpha' = -0.5 has reached an end of its interval "
                                         r"\(-0.5, inf\) by rounding \(raw_alpha = -20.0\)"):
        conv(x, ei)
    # learn() refuses a start that its float32 parameter would put on the end.
    with pytest.raises(ValueError, match=r"'alpha' = -0.4999999999 cannot be learned: its "
                                         r"parameter in torch.float32 puts it on an end"):
        R.get('signed', alpha=-0.4999999999).learn('alpha')


@pytest.mark.parametrize('solver', ['cg', 'closed', 'series'])
@pytest.mark.filterwarnings('ignore:SignedLaplacianRegularizer with alpha')  # short K on purpose
def test_learned_alpha_gradient_against_finite_differences(solver):
    # d/d raw of a weighted sum of the layer's output, by autograd through the
    # solver (CG: implicit differentiation), against central differences of the
    # dense float64 computation (a solve with M, or the truncated series). Step
    # 1e-5: truncation h² f''' / 6 ~ 1e-11 and rounding ε |f| / h ~ 1e-11 against a
    # gradient of order 1; CG at tol 1e-13 adds ~1e-12.
    gen = torch.Generator().manual_seed(0)
    graph_ops = operators(R.get('signed'))
    edge_index = graph_ops.edge_index
    x = torch.randn(N, 4, dtype=torch.float64, generator=gen)
    conv = RegularizerConv(4, 2, 'signed', alpha=-0.3, K=15, solver=solver, tol=1e-13,
                           learn=('alpha',), bias=False).double()
    weights = torch.randn(N, 2, dtype=torch.float64, generator=gen)
    out = conv(x, edge_index)
    (grad,) = torch.autograd.grad((out * weights).sum(), conv.regularizer.raw_alpha)
    h = conv.lin(x).detach()

    def dense(raw):
        alpha = -0.5 + torch.nn.functional.softplus(torch.tensor(raw, dtype=torch.float64))
        response = truncated(alpha, 15) if solver == 'series' else exact(alpha)
        return float((dense_response(graph_ops, response, h) * weights).sum())

    raw, step = float(conv.regularizer.raw_alpha.detach()), 1e-5
    expected = (dense(raw + step) - dense(raw - step)) / (2 * step)
    assert float(grad) == pytest.approx(expected, rel=1e-7, abs=1e-9)
    torch.testing.assert_close(out, dense_response(
        graph_ops, truncated(float(conv.regularizer.alpha.detach()), 15) if solver == 'series'
        else exact(float(conv.regularizer.alpha.detach())), h), rtol=0, atol=1e-10)


def test_state_dict_round_trip():
    x = h_in(4)
    edge_index = operators(R.get('signed')).edge_index
    conv = RegularizerConv(4, 3, 'signed', alpha=-0.3, learn=('alpha',), tol=1e-12).double()
    with torch.no_grad():
        conv.regularizer.raw_alpha.add_(0.4)
    state = conv.state_dict()
    assert 'regularizer.raw_alpha' in state
    fresh = RegularizerConv(4, 3, 'signed', learn=('alpha',), tol=1e-12).double()
    fresh.load_state_dict(state)
    assert torch.equal(fresh.regularizer.alpha, conv.regularizer.alpha)
    torch.testing.assert_close(fresh(x, edge_index), conv(x, edge_index), rtol=0, atol=0)
    # A fixed alpha travels as extra state, through the constructor's guard.
    fixed = RegularizerConv(4, 3, 'signed', alpha=-0.4).double()
    other = RegularizerConv(4, 3, 'signed').double()
    other.load_state_dict(fixed.state_dict())
    assert other.regularizer.alpha == -0.4
    bad = fixed.state_dict()
    bad['regularizer._extra_state'] = {**bad['regularizer._extra_state'], 'alpha': -0.6}
    with pytest.raises(ValueError, match=r'needs alpha > -1/2'):
        other.load_state_dict(bad)
    assert other.regularizer.alpha == -0.4  # unchanged


@pytest.mark.parametrize('learn', [(), ('alpha',)])
def test_regularizer_gnn_trains_one_step(learn):
    data = contextual_sbm(num_nodes=60, num_classes=3, num_features=8, homophily=0.2, seed=0)
    torch.manual_seed(0)
    model = RegularizerGNN(8, 16, 3, regularizer='signed', alpha=-0.3, learn=learn)
    assert not model.decoupled and len(model.convs) == 2  # layer-wise, ReLU between
    assert model.regularizer.projection == 'relu'
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.Adam(R.param_groups(model, weight_decay=5e-4), lr=0.01)
    out = model(data.x, data.edge_index)
    assert out.shape == (60, 3) and bool(out.isfinite().all())
    loss = torch.nn.functional.cross_entropy(out, data.y)
    loss.backward()
    optimizer.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    if learn:
        assert all(float(conv.regularizer.alpha.detach()) != pytest.approx(-0.3, abs=1e-9)
                   for conv in model.convs)
    assert bool(model(data.x, data.edge_index).isfinite().all())


def test_series_warns_once_when_its_bound_exceeds_the_tolerance():
    import warnings

    from torch_geometric_regcn.regularizers.signed import SERIES_TOLERANCE

    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    x = torch.randn(3, 2, dtype=torch.float64)
    quiet = R.SignedLaplacianRegularizer(alpha=-0.25, K=10)  # (1/3)^10 = 1.7e-5
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        quiet.propagate(x, GraphOperators(3, edge_index, dtype=torch.float64), 'series')
    loud = R.SignedLaplacianRegularizer(alpha=-0.45, K=10)  # (0.45/0.55)^10 = 0.13
    assert (0.45 / 0.55) ** 10 > SERIES_TOLERANCE
    with pytest.warns(UserWarning, match=r'relative error of up to 0\.13.*at least 35'):
        loud.propagate(x, GraphOperators(3, edge_index, dtype=torch.float64), 'series')
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # once per regulariser
        loud.propagate(x, GraphOperators(3, edge_index, dtype=torch.float64), 'series')


def test_the_series_warning_at_a_huge_alpha_advises_cg():
    # q = alpha / (1 + alpha) rounds to 1 at alpha = 1e17: the advice was 'keep alpha above
    # -1/2', which it is.
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    reg = R.SignedLaplacianRegularizer(alpha=1e17, K=10)
    with pytest.warns(UserWarning, match=r"use solver='cg' \(q rounds to 1"):
        reg.propagate(torch.ones(3, 1, dtype=torch.float64),
                      GraphOperators(3, edge_index, dtype=torch.float64), 'series')


@pytest.mark.parametrize('solver', ['cg', 'series', 'closed'])
def test_an_alpha_beyond_the_dtype_is_named(solver):
    # alpha = 1e39 is finite in float64, not in a float32 layer: 'cg' blamed its
    # matrix ("clean or impute them"), 'series' returned exact zeros.
    reg = R.SignedLaplacianRegularizer(alpha=1e39)
    ei, _ = undirected_graph(0)
    graph = build_graph(reg, ei, N, None, torch.float32)
    with pytest.raises(ValueError, match=r"coefficients \(1e\+39, -1e\+39\), beyond the range "
                                         r"of torch\.float32"):
        reg.propagate(h_in(2).float(), graph, solver)


def test_energy_refuses_a_directed_graph():
    # A directed layer's operators are not symmetric: energy() returned a number
    # (-9.27) whose gradient at the layer's output was not zero.
    reg = R.SignedLaplacianRegularizer(alpha=0.5)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    graph = GraphOperators(3, edge_index, dtype=torch.float64, direction='in')
    h = torch.ones(3, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"energy\(\) needs an undirected graph"):
        reg.energy(h, h, graph)
