r"""Learned coefficients (``learn=('alpha', 'beta')``, ``docs/learnable.md``) as a
hostile user drives them: under ``torch.compile`` and ``torch.autocast``, with
weight decay and a cached graph, a coefficient gone NaN after a step, the
``state_dict`` round trip, and arguments that cannot be learned. The reference
is the dense float64 tsGCN propagation written here from the documentation,
differentiated by autograd with respect to the raw parameters."""
import io
import math

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import dense_normalized_adjacency
from torch_geometric_regcn import RegularizerConv, SemanticGraph
from torch_geometric_regcn.datasets import contextual_sbm

N, F_IN, C = 30, 4, 3
ALPHA, BETA = 1.0, 0.2


@pytest.fixture(scope='module')
def graph():
    data = contextual_sbm(num_nodes=N, num_classes=C, num_features=F_IN, seed=1)
    return SemanticGraph(k=3, progress=False)(data)


def inputs(graph, dtype=torch.float64):
    return graph.x.to(dtype), graph.edge_index, {
        'semantic_edge_index': graph.semantic_edge_index}


def make_conv(solver, learn=('alpha', 'beta'), dtype=torch.float64, **kwargs):
    torch.manual_seed(3)
    kwargs = {'alpha': ALPHA, 'beta': BETA, **kwargs}
    tol = {'tol': 1e-12} if solver == 'cg' else {}
    return RegularizerConv(F_IN, C, 'tsgcn', solver=solver, learn=learn, **tol,
                           **kwargs).to(dtype)


def dense_output(conv, graph, raw_alpha=None, raw_beta=None, dtype=torch.float64):
    r"""(I - S)⁻¹ X Θᵀ + b with S = (α Â_G + β Â_X) / (1 + α + β), α = softplus(raw_alpha)
    (or the fixed value), in float64 from the layer's parameters."""
    reg = conv.regularizer
    alpha = F.softplus(raw_alpha) if raw_alpha is not None else torch.tensor(
        float(reg.alpha), dtype=torch.float64)
    beta = F.softplus(raw_beta) if raw_beta is not None else torch.tensor(
        float(reg.beta), dtype=torch.float64)
    a_g = dense_normalized_adjacency(graph.edge_index, N)
    a_x = dense_normalized_adjacency(graph.semantic_edge_index, N)
    s = (alpha * a_g + beta * a_x) / (1 + alpha + beta)
    b = graph.x.double() @ conv.lin.weight.double().T
    out = torch.linalg.solve(torch.eye(N, dtype=torch.float64) - s, b)
    return out + conv.bias.double() if conv.bias is not None else out


def run(conv, graph, weight, dtype=torch.float64, module=None):
    """Output and gradients of <weight, conv(x)> for every parameter (of `module`,
    the layer that `conv` may compile) and x."""
    module = conv if module is None else module
    x, edge_index, kwargs = inputs(graph, dtype)
    x = x.clone().requires_grad_()
    module.zero_grad()
    out = conv(x, edge_index, **kwargs)
    (out.to(weight.dtype) * weight).sum().backward()
    grads = {name: p.grad.detach().clone() for name, p in module.named_parameters()}
    grads['x'] = x.grad.detach().clone()
    return out.detach(), grads


def loss_weight(dtype=torch.float64):
    return torch.randn(N, C, generator=torch.Generator().manual_seed(7), dtype=dtype)


# -- torch.compile ----------------------------------------------------------------------


@pytest.mark.parametrize('solver', ['closed', 'series', 'cg'])
def test_compiled_equals_eager(graph, solver):
    # torch.compile of a layer with learned coefficients: the same output and the
    # same gradients (weights, x, raw_alpha, raw_beta) as eager. Float64, the same
    # operations (the sparse solvers run eagerly behind a graph break, the dense
    # parts are traced): equal to rounding, 1e-10 leaves room; a coefficient the
    # traced graph froze at its first value would be off by O(1e-2) after the edit.
    # 'aot_eager' traces as inductor does without its C++ code generation.
    conv = make_conv(solver)
    weight = loss_weight()
    compiled = torch.compile(conv, backend='aot_eager')
    for _ in range(2):
        eager_out, eager_grads = run(conv, graph, weight)
        out, grads = run(compiled, graph, weight, module=conv)
        torch.testing.assert_close(out, eager_out, rtol=1e-10, atol=1e-10)
        for name, g in eager_grads.items():
            torch.testing.assert_close(grads[name], g, rtol=1e-10, atol=1e-10, msg=name)
        with torch.no_grad():  # a step moves the coefficients: no stale trace
            conv.regularizer.raw_alpha.add_(0.3)
            conv.regularizer.raw_beta.sub_(0.2)


def test_compiled_training_follows_eager(graph):
    # Five Adam steps of a compiled model follow the eager ones (same initial state):
    # the coefficients' trajectories agree to 1e-8 (float64, CG to 1e-12).
    y = graph.y

    def train(compile_it):
        conv = make_conv('cg')
        model = torch.compile(conv, backend='aot_eager') if compile_it else conv
        optimizer = torch.optim.Adam(conv.parameters(), lr=0.1)
        x, edge_index, kwargs = inputs(graph)
        path = []
        for _ in range(5):
            optimizer.zero_grad()
            F.cross_entropy(model(x, edge_index, **kwargs), y).backward()
            optimizer.step()
            path.append((float(conv.regularizer.alpha.detach()),
                         float(conv.regularizer.beta.detach())))
        return torch.tensor(path, dtype=torch.float64)

    eager = train(False)
    assert (eager[-1] - eager[0]).abs().max() > 1e-3  # the coefficients did move
    torch.testing.assert_close(train(True), eager, rtol=1e-8, atol=1e-8)


# -- against the dense float64 reference ------------------------------------------------


@pytest.mark.parametrize('solver, learn', [('closed', ('alpha', 'beta')),
                                           ('cg', ('alpha', 'beta')), ('cg', ('beta',))])
def test_gradients_match_the_dense_reference(graph, solver, learn):
    # The output and the raw parameters' gradients are those of the dense
    # (I - S)⁻¹ X Θ differentiated by autograd. CG to a relative residual of 1e-12 on
    # an operator of condition <= 1 + 2(α + β) = 3.4: solution and implicit gradient
    # within ~1e-11 relative; 1e-8 leaves room.
    conv = make_conv(solver, learn=learn)
    weight = loss_weight()
    out, grads = run(conv, graph, weight)
    raw = {name: conv.regularizer.get_parameter(f'raw_{name}').detach().double()
           .clone().requires_grad_() for name in learn}
    reference = dense_output(conv, graph, raw.get('alpha'), raw.get('beta'))
    torch.testing.assert_close(out, reference.detach(), rtol=1e-8, atol=1e-8)
    (reference * weight).sum().backward()
    for name, r in raw.items():
        torch.testing.assert_close(grads[f'regularizer.raw_{name}'].double(), r.grad,
                                   rtol=1e-8, atol=1e-10, msg=name)
    if 'alpha' not in learn:
        assert isinstance(conv.regularizer.alpha, float) or not conv.regularizer.alpha \
            .requires_grad


# CG in float32 cannot reach the layer's tol of 1e-12 and says so (it stops at
# float32's floor, about 1e-7, which the bound below allows for).
@pytest.mark.filterwarnings('ignore:Conjugate gradient stopped:UserWarning')
@pytest.mark.parametrize('solver', ['closed', 'cg'])
def test_autocast_bfloat16_stays_within_its_rounding(graph, solver):
    # Under torch.autocast(bfloat16) the projection XΘ runs in bfloat16 (inputs and
    # output rounded, 2^-9 relative each: <= 3 * 2^-9 |X||Θ|ᵀ entrywise) and the
    # propagation in float32 ("propagated in float32 and the result cast back"). The
    # propagation P = (I - S)⁻¹ = Σ Sᵏ is entrywise non-negative, so the output's
    # error is at most P (3 * 2^-9 |X||Θ|ᵀ) plus the final cast, 2^-9 |out|; float32
    # adds ~1e-6 of the largest entry. The gradient of raw_alpha is a sum whose terms
    # carry a few such roundings each: within 8 * 2^-9 of the sum of the terms'
    # magnitudes, Σ |w| ∘ |∂P/∂raw| |B| (∂P/∂α = P (∂S/∂α) P).
    conv = make_conv(solver, dtype=torch.float32)
    weight = loss_weight(torch.float32)
    exact, exact_grads = run(conv, graph, weight, torch.float32)
    x, edge_index, kwargs = inputs(graph, torch.float32)
    conv.zero_grad()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = conv(x, edge_index, **kwargs)
    (out.float() * weight).sum().backward()
    assert out.dtype in (torch.bfloat16, torch.float32)
    out = out.detach().double()

    raw_alpha = conv.regularizer.raw_alpha.detach().double()
    alpha, beta = F.softplus(raw_alpha), float(conv.regularizer.beta.detach())
    a_g = dense_normalized_adjacency(graph.edge_index, N)
    a_x = dense_normalized_adjacency(graph.semantic_edge_index, N)
    s = (alpha * a_g + beta * a_x) / (1 + alpha + beta)
    p = torch.linalg.inv(torch.eye(N, dtype=torch.float64) - s)
    magnitude_b = graph.x.double().abs() @ conv.lin.weight.detach().double().abs().T
    bound = p.abs() @ (3 * 2.0 ** -9 * magnitude_b) + 2.0 ** -9 * exact.double().abs() \
        + 1e-6 * float(exact.abs().max())
    assert bool(((out - exact.double()).abs() <= bound).all())

    ds = (a_g * (1 + beta) - beta * a_x) / (1 + alpha + beta) ** 2
    dp = torch.sigmoid(raw_alpha) * (p @ ds @ p)  # ∂P/∂raw_alpha
    terms = (weight.double().abs() * (dp.abs() @ magnitude_b)).sum()
    grad = conv.regularizer.raw_alpha.grad.double()
    assert torch.isfinite(grad).all()
    assert float((grad - exact_grads['regularizer.raw_alpha'].double()).abs()) \
        <= 8 * 2.0 ** -9 * float(terms)


# -- weight decay, caching, the coefficient map -----------------------------------------


@pytest.mark.parametrize('cached', [False, True])
def test_output_follows_the_coefficients_after_decayed_steps(graph, cached):
    # Weight decay pulls raw_alpha towards 0, α towards softplus(0) = ln 2 (the docs'
    # warning). After such steps, cached or not, the layer propagates with the current
    # α = softplus(raw_alpha), β = softplus(raw_beta): its output is the dense float64
    # output at those values (CG to 1e-12: 1e-8 leaves room).
    conv = make_conv('cg', cached=cached)
    x, edge_index, kwargs = inputs(graph)
    conv(x, edge_index, **kwargs)  # builds the cache, if any, at the initial α
    raw = list(conv.regularizer.learned_parameters())
    optimizer = torch.optim.SGD([{'params': raw, 'weight_decay': 1.0}], lr=0.2)
    for step in range(10):
        with torch.no_grad():
            conv(x, edge_index, **kwargs)  # a forward at every α on the way
        for p in raw:  # no data gradient: the step is weight decay alone
            p.grad = torch.zeros_like(p)
        if step == 0:  # decaying the coefficients is deliberate here: the package warns
            with pytest.warns(UserWarning, match='applies weight_decay'):
                optimizer.step()
        else:
            optimizer.step()
    alpha = float(conv.regularizer.alpha.detach())
    # raw_alpha = softplus⁻¹(1) * 0.8^10: α moved most of the way towards ln 2
    expected_raw = math.log(math.expm1(ALPHA)) * 0.8 ** 10
    assert alpha == pytest.approx(math.log1p(math.exp(expected_raw)), rel=1e-6)
    with torch.no_grad():
        out = conv(x, edge_index, **kwargs)
        reference = dense_output(conv, graph, conv.regularizer.raw_alpha.double(),
                                 conv.regularizer.raw_beta.double())
    torch.testing.assert_close(out, reference, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize('regularizer, value, extra', [
    ('tsgcn', 1e-6, {'beta': 0.2}), ('tsgcn', 80.0, {'beta': 0.2}),
    ('appnp', 0.1, {'K': 5}), ('appnp', 0.999, {'K': 5})])
def test_learning_starts_from_the_given_value(regularizer, value, extra):
    # "The raw parameters start at the inverse of that function at the given values,
    # so training starts from the model with fixed α": tiny, large and (APPNP's α in
    # (0, 1), through the logistic sigmoid) values near the ends of the range. The
    # raw parameter is float32: α = f(raw) carries a relative error of at most
    # |raw f'(raw) / f(raw)| * 2^-24 (<= 1e-5 for these values).
    conv = RegularizerConv(F_IN, C, regularizer, alpha=value, learn=('alpha',), **extra)
    alpha = float(conv.regularizer.alpha.detach())
    assert math.isfinite(alpha)
    assert alpha == pytest.approx(value, rel=1e-5)


# -- NaN coefficients after a step ------------------------------------------------------


@pytest.mark.parametrize('solver, bad, compiled', [
    ('cg', math.nan, False), ('closed', math.nan, False), ('series', math.nan, False),
    ('cg', math.inf, False), ('cg', math.nan, True)])
def test_non_finite_coefficient_after_a_step_is_named(graph, solver, bad, compiled):
    # A diverged step leaves raw_alpha NaN (or +inf, α = inf): the next forward
    # raises a ValueError naming alpha ("NaN or infinite ... coefficients raise
    # ValueError"), also under torch.compile, where the sparse solvers run eagerly
    # and "still check", never a NaN output or a CG that "converged" on NaN.
    conv = make_conv(solver)
    with torch.no_grad():
        conv.regularizer.raw_alpha.fill_(bad)
    model = torch.compile(conv, backend='aot_eager') if compiled else conv
    x, edge_index, kwargs = inputs(graph)
    with pytest.raises(ValueError, match='alpha'):
        model(x, edge_index, **kwargs)


# -- state_dict ------------------------------------------------------------------------


def _trained(graph):
    conv = make_conv('cg')
    optimizer = torch.optim.Adam(conv.parameters(), lr=0.1)
    x, edge_index, kwargs = inputs(graph)
    for _ in range(3):
        optimizer.zero_grad()
        F.cross_entropy(conv(x, edge_index, **kwargs), graph.y).backward()
        optimizer.step()
    return conv


@pytest.mark.parametrize('through_file', [False, True])
def test_state_dict_round_trip_restores_the_learned_coefficients(graph, through_file):
    # A trained layer's state_dict loads into a fresh layer built with other starting
    # values (alpha=3, beta=0.5): the same α, β and bit for bit the same output, also
    # through torch.save and torch.load(weights_only=True), torch's default.
    conv = _trained(graph)
    state = conv.state_dict()
    if through_file:
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        state = torch.load(buffer, weights_only=True)
    fresh = make_conv('cg', alpha=3.0, beta=0.5)
    fresh.load_state_dict(state)
    assert float(fresh.regularizer.alpha.detach()) == float(conv.regularizer.alpha.detach())
    assert float(fresh.regularizer.beta.detach()) == float(conv.regularizer.beta.detach())
    assert float(conv.regularizer.alpha.detach()) != ALPHA  # training moved it
    x, edge_index, kwargs = inputs(graph)
    with torch.no_grad():
        assert torch.equal(fresh(x, edge_index, **kwargs), conv(x, edge_index, **kwargs))


# -- what cannot be learned ------------------------------------------------------------


def test_lowrank_solver_cannot_learn(graph):
    # "lowrank cannot learn the coefficients, as its factors are computed for fixed
    # ones": refused when the layer is built, with an error naming learn or lowrank.
    with pytest.raises(ValueError, match='learn|lowrank'):
        RegularizerConv(F_IN, C, 'tsgcn', solver='lowrank', alpha=ALPHA, beta=BETA,
                        learn=('alpha',))


@pytest.mark.parametrize('regularizer, name, extra', [
    ('tsgcn', 'gamma', {'alpha': ALPHA, 'beta': BETA}), ('appnp', 'K', {'alpha': 0.1, 'K': 5})])
def test_a_coefficient_that_cannot_be_learned_is_named(regularizer, name, extra):
    # An unknown coefficient, or an integer one (APPNP's K), in learn=: a ValueError
    # naming it at construction.
    with pytest.raises(ValueError, match=name):
        RegularizerConv(F_IN, C, regularizer, learn=(name,), **extra)
