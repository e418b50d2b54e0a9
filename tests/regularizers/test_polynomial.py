r"""The polynomial regulariser :math:`\mathbf{R} = g(\hat{\mathbf{A}})^{-1}`
(:mod:`torch_geometric_regcn.regularizers.polynomial`), against dense float64
references built from the eigendecomposition of :math:`\hat{\mathbf{A}}`, and
against APPNP's K-step rule."""
import math

import pytest
import torch

from tests.regularizers.helpers import N, h_in, operators
from torch_geometric_regcn import RegularizerConv, RegularizerGNN
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.datasets import contextual_sbm

# Low-pass (APPNP's), high-pass (1 - λ), and a signed band of degree 5.
GAMMAS = [None, (1.0, -1.0), (0.3, -0.8, 0.5, 1.2, -0.7, 0.4)]


def polynomial(gamma, lam):
    r""":math:`g(\lambda)` by Horner's rule (not the library's powers)."""
    out = torch.zeros_like(lam)
    for g in reversed(gamma):
        out = out * lam + g
    return out


def dense_response(graph, gamma, x):
    r""":math:`\mathbf{V}\,\mathrm{diag}(g(\lambda))\,\mathbf{V}^\top\mathbf{X}`."""
    lam, vec = torch.linalg.eigh(graph.adj.to_dense())
    return vec @ (polynomial(gamma, lam)[:, None] * (vec.T @ x))


def get(gamma):
    return R.get('polynomial') if gamma is None else R.get('polynomial', gamma=gamma)


@pytest.mark.parametrize('solver', ['series', 'closed'])
@pytest.mark.parametrize('gamma', GAMMAS)
def test_propagation_is_the_polynomial_on_the_eigendecomposition(gamma, solver):
    # K <= 10 products with ||Â||_2 = 1 and sum |γ_k| <= 4: rounding below 1e-13
    # (eigh adds a few N ε).
    reg = get(gamma)
    graph = operators(reg)
    x = h_in()
    expected = dense_response(graph, reg.gamma, x)
    torch.testing.assert_close(reg.propagate(x, graph, solver), expected, rtol=0, atol=1e-13)


@pytest.mark.parametrize('gamma', GAMMAS)
def test_frequency_response(gamma):
    reg = get(gamma)
    graph = operators(reg)
    lam, vec = torch.linalg.eigh(graph.adj.to_dense())
    want = polynomial(reg.gamma, lam)
    # A degree-K polynomial with |γ| and |λ| at most 1, summed in another order:
    # a few K ε of float64, on any CPU.
    torch.testing.assert_close(reg.frequency_response(lam), want, rtol=0, atol=1e-14)
    gains = (vec * reg.propagate(vec, graph)).sum(0)  # Rayleigh quotients
    torch.testing.assert_close(gains, want, rtol=0, atol=1e-13)


@pytest.mark.parametrize('K, alpha', [(10, 0.1), (3, 0.3), (7, 1.0)])
def test_ppr_start_is_appnps_k_step_rule(K, alpha):
    # The same numbers by another order of operations: APPNP's recursion against
    # the weighted sum of powers, a few ε apart.
    coefficients = {} if (K, alpha) == (10, 0.1) else {'K': K, 'alpha': alpha}
    reg = R.get('polynomial', **coefficients)
    appnp = R.get('appnp', K=K, alpha=alpha)
    graph = operators(reg)
    x = h_in()
    torch.testing.assert_close(reg.propagate(x, graph), appnp.propagate(x, graph, 'series'),
                               rtol=0, atol=1e-14)
    lam = torch.linspace(-1, 1, 101, dtype=torch.float64)
    torch.testing.assert_close(reg.frequency_response(lam), appnp.frequency_response(lam),
                               rtol=0, atol=1e-14)  # a few K ε, as above
    if alpha == 1.0:  # g ≡ 1: no propagation
        assert reg.gamma == (1.0,) + (0.0,) * K


def test_ppr_response_sign_on_minus_one_as_documented():
    # Positive on [-1, 1] for even K; negative at λ = -1 for odd K < 28 (α = 0.1).
    lam = torch.linspace(-1, 1, 2001, dtype=torch.float64)
    for K in range(1, 32):
        response = R.get('polynomial', K=K).frequency_response(lam)
        if K % 2 == 0 or K >= 28:
            assert float(response.min()) > 0, K
        else:
            assert float(response[0]) < 0, K


def test_output_is_the_minimum_of_the_energy_where_the_response_is_positive():
    reg = R.get('polynomial')
    graph = operators(reg)
    x = h_in()
    h = reg.propagate(x, graph).requires_grad_()
    lam, vec = torch.linalg.eigh(graph.adj.to_dense())
    r = vec @ torch.diag(1 / polynomial(reg.gamma, lam)) @ vec.T  # R = g(Â)^-1 by eigh
    energy = reg.energy(h, x, graph)
    want = -(h * x).sum() + 0.5 * (h * (r @ h)).sum()
    # R's norm is 1 / min g <= 10 here: the two routes to R agree to ~1e-13.
    torch.testing.assert_close(energy, want, rtol=1e-12, atol=1e-12)
    (grad,) = torch.autograd.grad(energy, h)
    assert grad.abs().max() < 1e-12
    h = h.detach()
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        delta = 1e-3 * torch.randn(h.shape, dtype=h.dtype, generator=gen)
        assert reg.energy(h + delta, x, graph) > energy


def test_a_sign_changing_response_gives_a_saddle_point():
    # APPNP's 1-step rule, g(λ) = 0.1 + 0.9 λ, is negative below λ = -1/9, where
    # this graph has eigenvalues: R is indefinite, the output a stationary point.
    reg = R.get('polynomial', K=1)
    graph = operators(reg)
    lam, vec = torch.linalg.eigh(graph.adj.to_dense())
    assert float(reg.frequency_response(lam).min()) < 0
    x = h_in()
    h = reg.propagate(x, graph).requires_grad_()
    (grad,) = torch.autograd.grad(reg.energy(h, x, graph), h)
    assert grad.abs().max() < 1e-9  # R has norm up to 1 / min |g| ~ 1e2 here
    h = h.detach()
    down = vec[:, :1].expand(-1, 3)  # the eigenvector of the most negative eigenvalue
    assert reg.energy(h + 1e-2 * down, x, graph) < reg.energy(h, x, graph)
    assert reg.energy(h + 1e-2 * vec[:, -1:].expand(-1, 3), x, graph) > \
        reg.energy(h, x, graph)


def test_a_vanishing_response_has_no_regulariser_matrix():
    # g(λ) = λ - 1 vanishes on λ = 1, an eigenvalue of Â on every graph.
    reg = R.get('polynomial', gamma=(-1.0, 1.0))
    graph = operators(reg)
    # (B = g(Â) is singular, R = B^-1 M does not exist: the base class's rule.)
    with pytest.raises(ValueError, match=r"no regulariser matrix on this graph: B .*singular.*"
                                         r"R = B\^-1 M does not exist"):
        reg.energy(h_in(), h_in(), graph)
    x = h_in()  # the propagation is still defined: (Â - I) X
    torch.testing.assert_close(reg.propagate(x, graph), graph.adj.to_dense() @ x - x,
                               rtol=0, atol=1e-15)


@pytest.mark.parametrize('solver', ['series', 'closed'])
def test_learned_gamma_gradient_against_finite_differences(solver):
    # d/dγ_k of a weighted sum of the layer's output, by autograd, against central
    # differences of the dense float64 computation V diag(g(λ)) Vᵀ H. The output is
    # linear in γ, so the differences are exact up to rounding: ε |f| / step ~ 1e-13.
    gen = torch.Generator().manual_seed(0)
    graph = operators(R.get('polynomial'))
    x = torch.randn(N, 4, dtype=torch.float64, generator=gen)
    conv = RegularizerConv(4, 2, 'polynomial', K=4, solver=solver, learn=('gamma',),
                           bias=False).double()
    reg = conv.regularizer
    assert tuple(reg.raw_gamma.shape) == (5,) and reg.gamma is reg.raw_gamma  # (-inf, inf)
    weights = torch.randn(N, 2, dtype=torch.float64, generator=gen)
    out = conv(x, graph.edge_index)
    (grad,) = torch.autograd.grad((out * weights).sum(), reg.raw_gamma)
    h = conv.lin(x).detach()
    gamma = reg.raw_gamma.detach().clone()

    def dense(g):
        return float((dense_response(graph, g.tolist(), h) * weights).sum())

    step = 1e-3
    expected = torch.stack([torch.tensor((dense(gamma + step * e) - dense(gamma - step * e))
                                         / (2 * step), dtype=torch.float64)
                            for e in torch.eye(5, dtype=torch.float64)])
    torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-10)


def test_state_dict_round_trip():
    x = h_in(4)
    edge_index = operators(R.get('polynomial')).edge_index
    conv = RegularizerConv(4, 3, 'polynomial', K=3, learn=('gamma',)).double()
    with torch.no_grad():
        conv.regularizer.raw_gamma.mul_(-2.0)
    state = conv.state_dict()
    assert 'regularizer.raw_gamma' in state and state['regularizer.raw_gamma'].shape == (4,)
    fresh = RegularizerConv(4, 3, 'polynomial', K=3, learn=('gamma',)).double()
    fresh.load_state_dict(state)
    assert torch.equal(fresh.regularizer.gamma, conv.regularizer.gamma)
    torch.testing.assert_close(fresh(x, edge_index), conv(x, edge_index), rtol=0, atol=0)
    assert 'gamma=learned([' in repr(conv.regularizer)
    # Fixed coefficients (given as a tensor) travel as extra state, K with them.
    fixed = RegularizerConv(4, 3, 'polynomial',
                            gamma=torch.tensor([0.5, -0.25, 0.125])).double()
    assert fixed.regularizer.gamma == (0.5, -0.25, 0.125) and fixed.regularizer.K == 2
    other = RegularizerConv(4, 3, 'polynomial').double()
    other.load_state_dict(fixed.state_dict())
    assert other.regularizer.K == 2 and other.regularizer.gamma == (0.5, -0.25, 0.125)
    torch.testing.assert_close(other(x, edge_index), fixed(x, edge_index), rtol=0, atol=0)


@pytest.mark.parametrize('coefficients, error, message', [
    (dict(gamma=(1.0, 0.5), init='ppr'), ValueError, "either 'gamma'"),
    (dict(gamma=(1.0, 0.5), alpha=0.2), ValueError, "either 'gamma'"),
    (dict(gamma=(1.0, 0.5), K=3), ValueError, r"'gamma' has 2 coefficients.*K=3"),
    (dict(init='gpr'), ValueError, "Unknown init 'gpr'"),
    (dict(init='uniform', alpha=0.2), ValueError, "'alpha' is the teleport"),
    (dict(alpha=0.0), ValueError, "'alpha'"),
    (dict(K=-1), ValueError, "'K'"),
    (dict(gamma=()), ValueError, 'at least one coefficient'),
    (dict(gamma=(1.0, math.nan)), ValueError, r"'gamma\[1\]' must be finite"),
    (dict(gamma=torch.ones(2, 2)), ValueError, "1-D"),
    (dict(gamma='1, 2'), TypeError, "'gamma'"),
])
def test_coefficient_errors(coefficients, error, message):
    with pytest.raises(error, match=message):
        R.get('polynomial', **coefficients)


def test_uniform_start():
    reg = R.get('polynomial', K=4, init='uniform')
    assert reg.gamma == (0.2,) * 5
    assert float(reg.frequency_response(torch.ones(1, dtype=torch.float64))) == \
        pytest.approx(1.0, rel=1e-15)


def test_regularizer_gnn_learns_gamma_in_one_step():
    data = contextual_sbm(num_nodes=60, num_classes=3, num_features=8, homophily=0.2, seed=0)
    torch.manual_seed(0)
    model = RegularizerGNN(8, 16, 3, regularizer='polynomial', learn=('gamma',))
    assert model.decoupled and len(model.lins) == 1 and len(model.convs) == 1  # MLP, then g(Â)
    reg = model.regularizer
    start = reg.gamma.detach().clone()
    groups = R.param_groups(model, weight_decay=5e-4)
    assert groups[-1] == {'params': [reg.raw_gamma], 'weight_decay': 0.0}
    optimizer = torch.optim.Adam(groups, lr=0.01)
    out = model(data.x, data.edge_index)
    assert out.shape == (60, 3)
    torch.nn.functional.cross_entropy(out, data.y).backward()
    assert bool(reg.raw_gamma.grad.abs().gt(0).all())
    optimizer.step()
    # Adam's first step moves every coefficient by the learning rate, in either direction.
    torch.testing.assert_close((reg.gamma.detach() - start).abs(),
                               torch.full_like(start, 0.01), rtol=1e-3, atol=0)
    assert bool(model(data.x, data.edge_index).isfinite().all())


def test_frequency_response_of_integer_eigenvalues():
    # gamma was cast to the eigenvalues' dtype: int64 made every coefficient 0.
    reg = get((0.1, 0.2, 0.7))
    lam = torch.tensor([-1, 0, 1])
    want = polynomial(reg.gamma, lam.double())
    torch.testing.assert_close(reg.frequency_response(lam).double(), want, rtol=1e-6, atol=0)


@pytest.mark.parametrize('solver', ['series', 'closed'])
def test_a_coefficient_beyond_the_dtype_is_refused(solver):
    # 1e39 is finite in float64 but infinite in float32: the layer returned inf
    # and NaN (review s45/quad), where the affine regularisers name the coefficient.
    layer = RegularizerConv(4, 2, 'polynomial', gamma=[1.0, 1e39, -1e39], solver=solver)
    x = torch.randn(N, 4, generator=torch.Generator().manual_seed(0))
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    with pytest.raises(ValueError, match=r'gamma\[1, 2\] lie beyond the range of torch.float32'):
        layer(x, ei)
    with pytest.raises(ValueError, match='beyond the range'):
        layer.regularizer.frequency_response(torch.zeros(3))
    out = layer.double()(x.double(), ei)  # float64 holds them
    assert bool(out.isfinite().all())


def test_a_checkpoint_of_another_degree_names_both_sides():
    # The error read as constructor advice ("but K=2; pass K=3") without saying
    # that K=2 is the checkpoint's and the 4 coefficients this module's.
    from torch_geometric_regcn import RegularizerGNN
    src = RegularizerGNN(4, 8, 3, regularizer='polynomial', K=2, learn=('gamma',))
    dst = RegularizerGNN(4, 8, 3, regularizer='polynomial', K=3, learn=('gamma',))
    with pytest.raises(ValueError, match=r"The checkpoint's coefficients \(K\) do not fit this "
                                         r"module's regulariser PolynomialRegularizer\(K=3.*"
                                         r"but K=2.*Build the module with the checkpoint's"):
        dst.load_state_dict(src.state_dict())


def test_reprs_differ_wherever_the_coefficients_do():
    # Printed to 4 digits, gamma 0.12341 and 0.12344 (and a frozen learned alpha
    # 0.1 and 0.10003) had one repr, so PyG's pre_transform check served the
    # other's processed features (review s55/transforms2).
    from torch_geometric_regcn import regularizers as R
    assert repr(R.get('polynomial', gamma=[0.5, 0.12341])) != \
        repr(R.get('polynomial', gamma=[0.5, 0.12344]))
    reprs = set()
    for alpha in (0.1, 0.10003):
        reg = R.get('appnp', alpha=alpha)
        reg.learn('alpha')
        reprs.add(repr(reg))
    assert len(reprs) == 2 and 'APPNPRegularizer(K=10, alpha=learned(0.1))' in reprs  # shortest
