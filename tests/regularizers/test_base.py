r"""The contract of :class:`~torch_geometric_regcn.regularizers.base.Regularizer`
(energy, propagation by every solver, frequency response, solver checks), on every
built-in regulariser."""
import dataclasses
import math

import pytest
import torch

from tests.conftest import undirected_graph
from tests.regularizers.helpers import EXACT, N, h_in, neumann, operators
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.regularizers.graph import build_graph


@pytest.mark.parametrize('name', EXACT)
def test_output_is_a_stationary_point_of_the_energy(name):
    reg = neumann(name)
    graph = operators(reg)
    x = h_in()
    h = reg.propagate(x, graph, 'closed').requires_grad_()
    (grad,) = torch.autograd.grad(reg.energy(h, x, graph), h)
    assert grad.abs().max() < 1e-9


@pytest.mark.parametrize('name', EXACT)
def test_output_is_the_minimum_of_the_energy(name):
    reg = neumann(name)
    # JKNet's R = Â⁻¹(I + βL̃) is positive definite only where Â is: use small weights.
    graph = operators(reg, weighted=name == 'jknet')
    if name == 'jknet':
        assert torch.linalg.eigvalsh(graph.adj.to_dense()).min() > 0
    x = h_in()
    h = reg.propagate(x, graph, 'closed')
    best = reg.energy(h, x, graph)
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        delta = 1e-3 * torch.randn(h.shape, dtype=h.dtype, generator=gen)
        assert reg.energy(h + delta, x, graph) > best


@pytest.mark.parametrize('name', ['appnp', 'jknet', 'dagnn', 'gnn_lf', 'gnn_hf', 'tsgcn'])
def test_series_converges_geometrically_to_closed(name):
    x = h_in()
    errors = []
    for K in (10, 20, 40, 80):  # the slowest default rate is 0.9 per term
        reg = neumann(name, K=K)
        graph = operators(reg)
        exact = reg.propagate(x, graph, 'closed')
        errors.append(float((reg.propagate(x, graph, 'series') - exact).norm() / exact.norm()))
    assert errors[-1] < 1e-3
    for coarse, fine in zip(errors, errors[1:]):  # doubling K at least halves the error
        assert fine < 0.5 * coarse


@pytest.mark.parametrize('name', ['gcn', 'sgc', 'appnp', 'jknet', 'dagnn', 'gnn_lf', 'gnn_hf',
                                  'tsgcn'])
def test_frequency_response_matches_propagation(name):
    reg = neumann(name)
    ei, _ = undirected_graph()
    graph = build_graph(reg, ei, N, None, torch.float64, semantic_edge_index=ei)
    lam, vec = torch.linalg.eigh(graph.adj.to_dense())
    out = reg.propagate(vec, graph)  # the default solver, column by column
    gains = (vec * out).sum(0)  # Rayleigh quotients
    torch.testing.assert_close(out, vec * gains, atol=1e-5, rtol=0)  # eigenvectors stay put
    torch.testing.assert_close(gains, reg.frequency_response(lam), atol=1e-5, rtol=0)


@pytest.mark.parametrize('name, coefficients, formula', [
    # The papers' own rules on an eigenvalue lam of A^, written out here rather
    # than taken from the regulariser's M and B (which propagate() also uses).
    ('gnn_lf', dict(alpha=0.2, mu=0.7),  # Zhu et al.: {mu + (1-mu) lam + (1/a - 1)(1-lam)}^-1
     lambda lam, alpha, mu: (mu + (1 - mu) * lam)
     / (mu + (1 - mu) * lam + (1 / alpha - 1) * (1 - lam))),
    ('gnn_hf', dict(alpha=0.2, beta=0.6),  # {(b + 1/a) + (1 - b - 1/a) lam}^-1 (1 + b(1-lam))
     lambda lam, alpha, beta: (1 + beta * (1 - lam))
     / (beta + 1 / alpha + (1 - beta - 1 / alpha) * lam)),
    ('appnp', dict(alpha=0.2, K=6),  # K steps h <- (1-a) lam h + a, from h = 1
     lambda lam, alpha, K: alpha * sum(((1 - alpha) * lam) ** k for k in range(K))
     + ((1 - alpha) * lam) ** K),
    ('jknet', dict(beta=0.5, K=4),  # sum_{k=1..K} b^(k-1) / (1+b)^k lam^k
     lambda lam, beta, K: sum(beta ** (k - 1) / (1 + beta) ** k * lam ** k
                              for k in range(1, K + 1))),
    ('dagnn', dict(beta=0.5, K=6, adaptive=False),  # K + 1 Neumann terms of (1 + b(1-lam))^-1
     lambda lam, beta, K, adaptive: sum(beta ** k / (1 + beta) ** (k + 1) * lam ** k
                                      for k in range(K + 1))),
])
def test_frequency_response_is_the_papers_rule(name, coefficients, formula):
    lam = torch.linspace(-0.9, 1.0, 39, dtype=torch.float64)
    expected = formula(lam, **coefficients)
    # float64 sums of at most 11 terms of magnitude <= 1: far below 1e-12.
    torch.testing.assert_close(R.get(name, **coefficients).frequency_response(lam), expected,
                               rtol=0, atol=1e-12)


class _Shifted(R.Regularizer):
    """A user's regulariser as the docs write one: operator() alone, M = I + L~."""
    solvers = ('closed', 'series', 'cg')

    def __init__(self, K: int = 5) -> None:
        self.K = K

    def operator(self, graph):
        return (2.0 * graph.identity().to_dense() - graph.adj.to_dense()).to_sparse_csr()


@pytest.mark.parametrize('K', [1, 2, 3, 5])
def test_the_default_series_is_its_documented_sum_at_every_k(K):
    # omega * sum_{k<K} (I - omega M)^k X with omega = 1 / ||M||_inf, dense:
    # the truncation itself, not only its limit (a missing term at K = 80 was
    # below the other tests' tolerance). float64, K <= 5 products: 1e-12.
    reg = _Shifted(K)
    ei, _ = undirected_graph()
    graph = build_graph(reg, ei, N, None, torch.float64)
    m = reg.operator(graph).to_dense()
    omega = 1.0 / float(m.abs().sum(1).max())
    step = torch.eye(N, dtype=torch.float64) - omega * m
    x = h_in()
    expected = omega * sum(torch.linalg.matrix_power(step, k) @ x for k in range(K))
    torch.testing.assert_close(reg.propagate(x, graph, 'series'), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize('solver', ['closed', 'series', 'cg'])
def test_a_users_regularizer_propagates_a_graph_of_no_nodes(solver):
    # The default series divided by ||M||_inf = 0: ZeroDivisionError (review s45/quad).
    reg = _Shifted()
    graph = build_graph(reg, torch.empty(2, 0, dtype=torch.long), 0, None, torch.float64)
    out = reg.propagate(torch.empty(0, 3, dtype=torch.float64), graph, solver)
    assert out.shape == (0, 3)


def test_solver_a_regularizer_cannot_use():
    with pytest.raises(ValueError, match="'gcn' cannot use solver='cg'.*'series'"):
        R.get('gcn').check_solver('cg')
    with pytest.raises(ValueError, match="cannot use solver='lowrank'"):
        R.get('appnp').check_solver('lowrank')
    with pytest.raises(ValueError, match="Unknown solver 'lu'"):
        R.get('appnp').check_solver('lu')
    reg = R.get('tsgcn')
    with pytest.raises(ValueError, match="needs the factors"):
        reg.propagate(h_in(), operators(reg), 'lowrank')


@pytest.mark.parametrize('solver', ['closed', 'series', 'cg'])
@pytest.mark.parametrize('name, coefficients, bad, value', [
    ('tsgcn', {'learn': 'beta', 'alpha': 1.0, 'beta': 0.2}, math.nan, 'nan'),
    ('tsgcn', {'learn': 'alpha', 'alpha': 1.0, 'beta': 0.2}, math.inf, 'inf'),
    ('appnp', {'learn': 'alpha', 'alpha': 0.1}, -math.inf, '-inf'),
    ('jknet', {'learn': 'beta'}, math.nan, 'nan')])
def test_non_finite_learned_coefficient_is_named_before_the_solve(solver, name, coefficients,
                                                                  bad, value):
    # A diverged step leaves one raw parameter non-finite (the others finite): every
    # sparse solver raises the same ValueError, naming that coefficient, its raw value
    # and the fix, before it solves (no NaN output, no "singular" or "matrix" verdict of
    # the solver's own).
    coefficients = dict(coefficients)
    bad_name = coefficients.pop('learn')
    reg = R.get(name, **coefficients).learn(*R.get(name).learnable)
    graph = operators(reg)
    with torch.no_grad():
        reg.get_parameter(f'raw_{bad_name}').fill_(bad)
    pattern = (rf"learned coefficient '{bad_name}' has a non-finite raw parameter "
               rf"raw_{bad_name} = {value} .*optimizer step diverged; lower the learning rate, "
               rf"clip the gradients or reload a checkpoint")
    with pytest.raises(ValueError, match=pattern) as info:
        reg.propagate(h_in(), graph, solver)
    assert 'singular' not in str(info.value)


@pytest.mark.parametrize('solver', ['closed', 'series', 'cg'])
def test_finite_learned_coefficients_propagate_as_fixed_ones(solver):
    # The check only reads the raw parameters: with finite learned coefficients the
    # output is the fixed-coefficient regulariser's at the same values. In float64 the
    # two routes build M in a different order (a few ε per entry) and the solve
    # amplifies that by at most cond(M) <= 1 + 2(α + β) = 3.4: 1e-12 holds with a
    # wide margin; CG stops at a relative residual of 1e-10 on both routes, hence an
    # error of at most cond(M) * 1e-10 * ||Y|| (~1e-9 here) for it.
    learned = R.get('tsgcn', alpha=1.0, beta=0.2).learn('alpha', 'beta').double()
    fixed = R.get('tsgcn', alpha=float(learned.alpha.detach()),
                  beta=float(learned.beta.detach()))
    graph = operators(fixed)
    x = h_in()
    expected = fixed.propagate(x, graph, solver, tol=1e-10)
    torch.testing.assert_close(learned.propagate(x, graph, solver, tol=1e-10), expected,
                               rtol=1e-12, atol=1e-9 if solver == 'cg' else 1e-12)


def test_a_loaded_state_is_checked_key_by_key():
    # A value of the wrong type raised TypeError inside the constructor's
    # check, which the loader took for a key the constructor lacks and let
    # through unchecked.
    from torch_geometric_regcn import RegularizerConv
    layer = RegularizerConv(2, 2, regularizer='elastic')
    state = layer.state_dict()
    for bad, error in [({'lambda1': torch.tensor(-1.0)}, "'lambda1' must be a real number"),
                       ({'K': '3'}, "'K' must be an integer"),
                       ({'lambda1': -1.0}, "'lambda1' must be non-negative")]:
        other = RegularizerConv(2, 2, regularizer='elastic')
        extra = {**state['regularizer._extra_state'], **bad}
        with pytest.raises((TypeError, ValueError), match=error):
            other.load_state_dict({**state, 'regularizer._extra_state': extra})
        assert other.regularizer.coefficients() == layer.regularizer.coefficients()
    # A key the constructor does not take (an older version's) still loads.
    other = RegularizerConv(2, 2, regularizer='elastic', lambda1=1.0)
    other.load_state_dict({**state, 'regularizer._extra_state': {
        **state['regularizer._extra_state'], 'legacy': 1}})
    assert other.regularizer.lambda1 == 3.0


def test_a_coefficient_assigned_after_construction_is_checked():
    # reg.alpha = -0.7 made the signed system indefinite without a word.
    reg = R.get('signed', alpha=0.5)
    built = reg.assignments
    with pytest.raises(ValueError, match=r'needs alpha > -1/2 \(got alpha=-0.7\)'):
        reg.alpha = -0.7
    assert reg.alpha == 0.5 and reg.assignments == built
    reg.alpha = -0.25  # inside its range
    assert reg.alpha == -0.25 and reg.assignments == built + 1
    # The constructor's joint checks see the other coefficients' values,
    # the learned ones included.
    reg = R.get('tsgcn', alpha=1.0, beta=0.0)
    with pytest.raises(ValueError, match="'alpha' and 'beta' cannot both be zero"):
        reg.alpha = 0.0
    reg = R.get('polynomial', K=10).learn('gamma')  # K must match the learned gamma's 11
    with pytest.raises(ValueError, match='gamma'):
        reg.K = 3
    assert reg.K == 10
    reg = R.get('tsgcn', alpha=1.0, beta=0.5).learn('alpha')
    reg.beta = 2.0
    assert reg.beta == 2.0


def test_coefficients_that_must_agree_change_together():
    reg = R.get('polynomial', K=3)
    with pytest.raises(ValueError, match='together with set_coefficients'):
        reg.gamma = [0.2] * 5  # alone it disagrees with K = 3
    assert reg.set_coefficients(K=4, gamma=[0.2] * 5) is reg
    assert reg.K == 4 and list(reg.gamma) == [0.2] * 5
    with pytest.raises(ValueError):
        reg.set_coefficients(K=2, gamma=[0.2] * 5)
    assert reg.K == 4  # nothing changed


def test_a_failed_set_coefficients_changes_nothing():
    # A learned vector's shape is checked by its own assignment: K changed
    # first, then gamma raised, and the layer ran with K = 3 of 11 coefficients.
    reg = R.get('polynomial', K=10).learn('gamma')
    raw = reg.raw_gamma.detach().clone()
    with pytest.raises(ValueError, match="'gamma' is learned with shape"):
        reg.set_coefficients(K=3, gamma=[0.25] * 4)
    assert reg.K == 10 and torch.equal(reg.raw_gamma.detach(), raw)
    reg = R.get('signed', alpha=-0.3, K=10).learn('alpha')
    with pytest.raises(ValueError, match="cannot be learned"):
        reg.set_coefficients(K=5, alpha=-0.4999999999)  # on -1/2 by rounding
    assert reg.K == 10 and float(reg.alpha.detach()) == pytest.approx(-0.3)


class _Mixin:
    def __init__(self, alpha: float = 1.0) -> None:
        if alpha <= 0:
            raise ValueError(f"'alpha' must be positive (got {alpha})")
        self.alpha = alpha


class _MixedIn(_Mixin, R.Regularizer):
    name = ''

    def operator(self, graph):
        return graph.identity()


@dataclasses.dataclass(eq=False)
class _Declared(R.Regularizer):
    name = ''
    alpha: float = 1.0

    def operator(self, graph):
        return graph.identity()


class _PositionalOnly(R.Regularizer):
    name = ''

    def __init__(self, alpha: float = 1.0, /) -> None:
        self.alpha = alpha

    def operator(self, graph):
        return graph.identity()


def test_constructors_from_elsewhere_are_checked_without_recursion():
    # A constructor inherited from a mixin, or added by a decorator, used to
    # check its own assignments by building an instance, which checked its own.
    reg = _MixedIn(alpha=2.0)
    with pytest.raises(ValueError, match="'alpha' must be positive"):
        reg.alpha = -1.0
    assert reg.alpha == 2.0
    reg = _Declared(alpha=2.0)
    reg.alpha = 3.0
    assert reg.alpha == 3.0
    reg = _PositionalOnly(2.0)  # its arguments are not passed by name: unchecked
    reg.alpha = 3.0
    assert reg.alpha == 3.0


def test_a_loaded_state_is_checked_as_a_whole():
    # Loaded one key at a time, (alpha, beta) = (1, 0) -> (0, 1) would pass
    # through (0, 0), which the constructor refuses.
    source = R.get('tsgcn', alpha=0.0, beta=1.0)
    target = R.get('tsgcn', alpha=1.0, beta=0.0)
    target.load_state_dict(source.state_dict())
    assert (target.alpha, target.beta) == (0.0, 1.0)


class _Keywords(R.Regularizer):
    name = ''

    def __init__(self, K: int = 2, **coefficients) -> None:
        self.K = K
        self.note = 'set by the constructor, not one of its arguments'

    def operator(self, graph):
        return graph.identity()


class _NoInit(R.Regularizer):
    name = ''

    def operator(self, graph):
        return graph.identity()


def test_subclasses_without_named_arguments_still_load_their_state():
    # With **kwargs, or without an __init__ of their own, the constructor
    # cannot tell a key it does not take from a failed check: no check then.
    from torch_geometric_regcn import RegularizerConv
    for cls in (_Keywords, _NoInit):
        layer, other = RegularizerConv(2, 2, cls), RegularizerConv(2, 2, cls)
        layer.regularizer.alpha = 2.0  # an attribute set after construction
        other.load_state_dict(layer.state_dict())
        assert other.regularizer.coefficients() == layer.regularizer.coefficients()


class _Tikhonov(R.Regularizer):
    r"""A user's regulariser written as docs/framework.md says (``operator()``
    only): :math:`\mathbf{M} = (1 + \gamma)\mathbf{I} - \gamma\hat{\mathbf{A}}`,
    its strength a learnable coefficient or a submodule's parameter."""
    name = None  # not registered
    learnable = {'gamma': 'positive'}

    def __init__(self, gamma: float = 2.0, submodule: bool = False) -> None:
        super().__init__()
        self.gamma = gamma
        self.strength = torch.nn.Linear(1, 1, bias=False) if submodule else None
        if submodule:
            torch.nn.init.constant_(self.strength.weight, gamma)

    def operator(self, graph):
        from torch_geometric_regcn.linalg.graph_operator import linear_combination
        g = self.gamma if self.strength is None else self.strength.weight.reshape(())
        return linear_combination([graph.identity(), graph.adj], [1 + g, -g])


@pytest.mark.parametrize('submodule', [False, True])
def test_a_users_operator_gets_the_gradient_of_what_it_reads_by_every_solver(submodule):
    # Reference: 'closed' (a dense solve, plain autograd). CG's implicit
    # backward passed on only the coefficients of operator_terms(), so a
    # learned coefficient or a submodule's parameter read by operator() got
    # None; 'series' held its step 1/||M|| constant. float64, CG to 1e-12 and
    # 400 series terms (the error shrinks as (1 - 1/5)^K): agreement to 1e-8.
    x = h_in().requires_grad_()
    grads = {}
    for solver in ('closed', 'cg', 'series'):
        reg = _Tikhonov(submodule=submodule).double()
        if not submodule:
            reg.learn('gamma')
        reg.K = 400
        graph = operators(reg)
        out = reg.propagate(x, graph, solver, tol=1e-12)
        param = reg.strength.weight if submodule else reg.raw_gamma
        grads[solver] = torch.autograd.grad(out.square().sum(), (param, x))
    for solver in ('cg', 'series'):
        for got, expected in zip(grads[solver], grads['closed']):
            torch.testing.assert_close(got, expected, rtol=1e-8, atol=1e-10)


def test_the_default_series_differentiates_its_step():
    # K = 5 terms stop far from M^-1 X, so the step omega = 1/||M||_inf,
    # which depends on gamma, matters. Reference: a central finite
    # difference in float64 (step 1e-6: truncation ~1e-12, rounding ~1e-10).
    reg = _Tikhonov().learn('gamma').double()
    reg.K = 5
    graph = operators(reg)
    x = h_in()
    (auto,) = torch.autograd.grad(reg.series(x, graph).sum(), reg.raw_gamma)
    raw, eps, values = reg.raw_gamma.detach().clone(), 1e-6, []
    for sign in (1, -1):
        with torch.no_grad():
            reg.raw_gamma.copy_(raw + sign * eps)
            values.append(reg.series(x, graph).sum())
    finite = (values[0] - values[1]) / (2 * eps)
    torch.testing.assert_close(auto, finite.reshape(auto.shape), rtol=1e-6, atol=1e-8)


def test_a_state_of_one_regulariser_is_refused_by_another():
    # An 'appnp' state loaded into an 'sgc' layer silently made it an SGC of
    # APPNP's K = 10 (0.54 off the SGC it was built as).
    from torch_geometric_regcn import RegularizerConv
    appnp = RegularizerConv(8, 4, 'appnp', K=10, alpha=0.1)
    sgc = RegularizerConv(8, 4, 'sgc', K=2)
    with pytest.raises(ValueError, match=r"coefficients of APPNPRegularizer, but this "
                                         r"module's regulariser is SGCRegularizer"):
        sgc.load_state_dict(appnp.state_dict())
    assert sgc.regularizer.K == 2
    # A state without the class (saved by 0.1) still loads.
    state = appnp.state_dict()
    state['regularizer._extra_state'] = {'K': 5, 'alpha': 0.2}
    appnp.load_state_dict(state)
    assert (appnp.regularizer.K, appnp.regularizer.alpha) == (5, 0.2)


def test_a_cached_layer_evaluates_with_the_operator_of_the_current_parameters():
    # A no_grad evaluation after an optimizer step reused the operator built
    # before it (0.51 off). Reference: a dense float64 solve with the
    # parameter's new value (CG to 1e-12: agreement to 1e-9).
    from torch_geometric_regcn import RegularizerConv
    x, ei = h_in(), undirected_graph(3)[0]
    layer = RegularizerConv(3, 2, _Tikhonov(submodule=True), solver='cg', cached=True,
                            tol=1e-12).double()

    def dense():
        graph = operators(layer.regularizer, seed=3)
        m = layer.regularizer.operator(graph).to_dense().detach()
        return torch.linalg.solve(m, layer.lin(x).detach()) + layer.bias.detach()

    with torch.no_grad():
        layer(x, ei)  # an evaluation before training
    optimizer = torch.optim.SGD(layer.regularizer.parameters(), lr=0.5)
    layer(x, ei).square().sum().backward()
    optimizer.step()
    with torch.no_grad():
        torch.testing.assert_close(layer(x, ei), dense(), rtol=0, atol=1e-9)


def test_a_state_loads_into_its_class_moved_elsewhere_or_a_subclass():
    # The class name without its module (a class saved from a script's
    # __main__ and later imported) and the classes it derives from.
    from torch_geometric_regcn import RegularizerConv
    appnp = RegularizerConv(8, 4, 'appnp', K=10, alpha=0.3)

    class MyAPPNP(type(appnp.regularizer)):
        name = None

    mine = RegularizerConv(8, 4, MyAPPNP(K=10, alpha=0.1))
    mine.load_state_dict(appnp.state_dict())
    assert mine.regularizer.alpha == 0.3
    state = appnp.state_dict()
    state['regularizer._extra_state']['_regularizer'] = 'APPNPRegularizer'
    RegularizerConv(8, 4, 'appnp').load_state_dict(state)


@pytest.mark.parametrize('name, coefficients', [('jknet', {}), ('gnn_lf', {'mu': 0.0})])
def test_a_singular_numerator_has_no_regulariser_matrix(name, coefficients):
    # det(A + I) = 0 on this graph, so B (Â for JKNet, (1 - mu) Â for GNN-LF at mu = 0) is
    # singular: R = B^-1 M was rounding noise of 1e16 and so was the energy.
    pairs = torch.tensor([[0, 0, 0, 1, 1, 3, 3, 4, 5], [2, 6, 7, 3, 6, 5, 6, 7, 6]])
    a = torch.zeros(8, 8, dtype=torch.float64)
    a[pairs[0], pairs[1]] = a[pairs[1], pairs[0]] = 1.0
    assert abs(float(torch.linalg.det(a + torch.eye(8, dtype=torch.float64)))) < 1e-9
    reg = R.get(name, **coefficients)
    graph = build_graph(reg, torch.cat([pairs, pairs.flip(0)], 1), 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"no regulariser matrix on this graph: B .*singular"):
        reg.regularizer_matrix(graph)
    with pytest.raises(ValueError, match=r"no regulariser matrix"):
        reg.energy(torch.ones(8, 2, dtype=torch.float64), torch.ones(8, 2, dtype=torch.float64),
                   graph)


def test_energy_refuses_inputs_of_different_shapes():
    # -(h * h_in).sum() broadcast an [N, 1] or [F] h_in silently.
    reg = R.get('appnp')
    edge_index = undirected_graph(N)
    h = torch.ones(N, 3, dtype=torch.float64)
    for bad in (torch.ones(N, 1), torch.ones(1, 3), torch.ones(3)):
        with pytest.raises(ValueError, match=r"'h' and 'h_in' must be \[N, F\] matrices of one "
                                             rf"shape \(got \[{N}, 3\] and"):
            reg.energy(h, bad.double(), edge_index)


@pytest.mark.parametrize('name', ['appnp', 'gnn_lf', 'gnn_hf'])
def test_a_subnormal_teleport_alpha_is_refused_by_name(name):
    # 1 / alpha = inf: the series returned NaN, CG named 'coefficients[0]'.
    with pytest.raises(ValueError, match=r"'alpha' = 1e-310 is so small that 1 / alpha"):
        R.get(name, alpha=1e-310)
    R.get(name, alpha=1e-300)


def test_operators_of_another_graph_are_named():
    # A prepared GraphOperators of another size surfaced as torch's "mat1 and
    # mat2 shapes cannot be multiplied (5x5 and 3x2)" (review s45/quad).
    reg = R.get('appnp')
    graph = build_graph(reg, torch.tensor([[0, 1], [1, 0]]), 5, None, torch.float64)
    x = torch.ones(3, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"'x' has 3 rows but the GraphOperators were built "
                                         r"for 5 nodes"):
        reg.propagate(x, graph, 'series')
    with pytest.raises(ValueError, match=r"'h' has 3 rows but the GraphOperators were built"):
        reg.energy(x, x, graph)


@pytest.mark.parametrize('name', ['appnp', 'signed', 'polynomial'])
def test_operators_of_another_dtype_are_named_before_any_work(name):
    # x in float64 beside float32 operators: CG named both, but 'series' and
    # 'closed' raised torch's "expected scalar type Float but found Double", and
    # energy() did so after building the dense R (an SVD and a solve for
    # 'polynomial') (review s55/hetreg).
    reg = R.get(name)
    edge_index, _ = undirected_graph(0, N)
    graph = build_graph(reg, edge_index, N, None, torch.float32)
    x = torch.ones(N, 2, dtype=torch.float64)
    fix = (r"'x' is torch.float64 but the GraphOperators were built in torch.float32: build "
           r"them in torch.float64 \(build_graph\(..., dtype=torch.float64\)\) or pass "
           r"'x.to\(torch.float32\)'")
    for solver in reg.solvers:
        if solver != 'lowrank':
            with pytest.raises(TypeError, match=fix):
                reg.propagate(x, graph, solver)
    with pytest.raises(TypeError, match=r"'h' is torch.float64 but the GraphOperators"):
        reg.energy(x, x, graph)
    # The operators' own dtype passes (float32 against the float64 solve).
    out = reg.propagate(x.float(), graph, 'closed')
    expected = reg.propagate(x, build_graph(reg, edge_index, N, None, torch.float64), 'closed')
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0)


def test_a_state_does_not_load_into_a_registered_subclass():
    # SGCRegularizer derives from GCNRegularizer: a GCN layer's state loaded
    # into an SGC layer with strict=True, which then computed another model.
    from torch_geometric_regcn import RegularizerGNN
    gcn = RegularizerGNN(4, 8, 3, regularizer='gcn')
    sgc = RegularizerGNN(4, 8, 3, regularizer='sgc')
    with pytest.raises(ValueError, match='holds the coefficients of GCNRegularizer'):
        sgc.load_state_dict(gcn.state_dict())
    with pytest.raises(ValueError, match='holds the coefficients of SGCRegularizer'):
        gcn.load_state_dict(sgc.state_dict())


class _Gated(R.Regularizer):
    r"""I + s L of a frozen parameter or buffer s."""
    def __init__(self, buffer: bool = False):
        super().__init__()
        if buffer:
            self.register_buffer('s', torch.tensor(0.4, dtype=torch.float64))
        else:
            self.s = torch.nn.Parameter(torch.tensor(0.4, dtype=torch.float64),
                                        requires_grad=False)

    def operator(self, graph):
        from torch_geometric_regcn.linalg.graph_operator import linear_combination
        return linear_combination([graph.identity(), graph.adj], [1 + self.s, -self.s])


@pytest.mark.parametrize('buffer', [False, True])
def test_a_cached_operator_follows_frozen_parameters_and_buffers(buffer):
    # The cache's version read the trainable parameters only: a frozen one or a
    # buffer filled in place, or swapped by functional_call, left a cached layer
    # on the old operator, 0.37 off (review s55/graphops). Reference: the dense
    # solve of I + s L at the new s.
    from torch_geometric_regcn import RegularizerConv
    edge_index, _ = undirected_graph(0, N)
    x = torch.randn(N, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    conv = RegularizerConv(3, 2, _Gated(buffer), solver='cg', cached=True, bias=False,
                           tol=1e-12).double()
    conv(x, edge_index)
    with torch.no_grad():
        conv.regularizer.s.fill_(3.0)
    graph = build_graph(conv.regularizer, edge_index, N, None, torch.float64)
    dense = graph.dense(conv.regularizer.operator(graph))
    expected = torch.linalg.solve(dense, x @ conv.lin.weight.detach().T)
    torch.testing.assert_close(conv(x, edge_index), expected, rtol=0, atol=1e-9)
    # Tensors swapped in by functional_call, one fresh tensor per call: a freed
    # one's address may come back, so the cache holds what it was built from
    # (an (id, version) key served the stale operator, review s55/diff55).
    for value in (1.0, 2.0, 3.0, 4.0, 5.0):
        s = torch.tensor(value, dtype=torch.float64)
        swapped = torch.func.functional_call(conv, {'regularizer.s': s}, (x, edge_index))
        with torch.no_grad():
            conv.regularizer.s.fill_(value)
        dense = graph.dense(conv.regularizer.operator(graph))
        expected = torch.linalg.solve(dense, x @ conv.lin.weight.detach().T)
        torch.testing.assert_close(swapped, expected, rtol=0, atol=1e-9)
        del s, swapped


class _SquaredTerms(R.Regularizer):
    r"""I + g (g L) by operator_terms: a learned g in a coefficient and a matrix."""
    learnable = {'gamma': 'positive'}

    def __init__(self, gamma: float = 1.0):
        super().__init__()
        self.gamma = gamma

    def operator(self, graph):
        from torch_geometric_regcn.linalg.graph_operator import linear_combination
        return linear_combination([graph.identity(), graph.adj],
                                  [1 + self.gamma ** 2, -self.gamma ** 2])

    def operator_terms(self, graph):
        from torch_geometric_regcn.linalg.graph_operator import linear_combination
        return [(1.0, None), (self.gamma, linear_combination(
            [graph.identity(), graph.adj], [self.gamma, -self.gamma]))]


def test_cg_differentiates_a_learned_coefficient_read_by_a_term_and_its_matrix():
    # CG's params held the coefficients' nodes and, where a matrix read the
    # learned parameter, not that parameter: its gradient came through the
    # coefficient alone (or none). Given both, it counted the coefficient twice,
    # 1.52 for 1.01 (review s55/graphops). Reference: central finite differences
    # of the closed solve, step 1e-6 (error ~1e-10 on a loss of size 1).
    edge_index, _ = undirected_graph(0, N)
    gen = torch.Generator().manual_seed(0)
    x, w = (torch.randn(N, 2, dtype=torch.float64, generator=gen) for _ in range(2))

    def loss(reg, solver):
        graph = build_graph(reg, edge_index, N, None, torch.float64)
        return (reg.propagate(x, graph, solver, tol=1e-13) * w).sum()

    reg = _SquaredTerms(0.7).learn('gamma').double()
    grad, = torch.autograd.grad(loss(reg, 'cg'), reg.raw_gamma)
    with torch.no_grad():
        raw = reg.raw_gamma.item()
        values = []
        for step in (1e-6, -1e-6):
            reg.raw_gamma.fill_(raw + step)
            values.append(loss(reg, 'closed').item())
    assert float(grad) == pytest.approx((values[0] - values[1]) / 2e-6, rel=1e-6)


def test_unknown_coefficients_and_features_of_another_graph_are_named():
    # set_coefficients(alhpa=0.5) was stored beside alpha, shown and saved; an x
    # of 3 rows for 5 nodes gave tsGCN a 3-node kNN graph (review s55/graphops).
    reg = R.get('appnp')
    with pytest.raises(TypeError, match=r"APPNPRegularizer has no coefficient\(s\) "
                                        r"\['alhpa'\]; its coefficients are \['K', 'alpha'\]"):
        reg.set_coefficients(alhpa=0.5)
    assert reg.alpha == 0.1 and 'alhpa' not in repr(reg)
    tsgcn = R.get('tsgcn')
    with pytest.raises(ValueError, match=r"'x' has 3 rows but the graph has 5 nodes"):
        build_graph(tsgcn, torch.tensor([[0, 1], [1, 0]]), 5, None, torch.float64,
                    x=torch.ones(3, 2, dtype=torch.float64))


def test_a_projection_other_than_relu_or_identity_is_refused_with_the_class():
    # RegularizerGNN applied ReLU only for 'relu' and nothing otherwise, so a
    # user regulariser with projection = 'ReLU' ran a linear stack, 0.6 off the
    # ReLU one, silently (review s55/models2).
    with pytest.raises(TypeError, match=r"Tikhonov.projection must be one of \('relu', "
                                        r"'identity'\) \(got 'ReLU'\)"):
        class Tikhonov(R.Regularizer):
            projection = 'ReLU'
