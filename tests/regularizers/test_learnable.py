r"""Learned coefficients: gradients through the exact solve by implicit
differentiation, against the dense inverse and finite differences; the
reparametrisation of a coefficient's interval, for numbers and vectors."""
import math

import pytest
import torch
from torch_geometric.utils import to_undirected

from torch_geometric_regcn import RegularizerConv, RegularizerGNN
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.knn import knn_graph_cosine
from torch_geometric_regcn.regularizers import TSGCNRegularizer
from torch_geometric_regcn.regularizers.base import constrain, interval, unconstrain
from torch_geometric_regcn.regularizers.graph import GraphOperators

N, F = 24, 4


def graph(seed=0):
    gen = torch.Generator().manual_seed(seed)
    ring = torch.arange(N)
    edge_index = torch.cat([torch.stack([ring, (ring + 1) % N]),
                            torch.randint(0, N, (2, N), generator=gen)], dim=1)
    edge_index = to_undirected(edge_index[:, edge_index[0] != edge_index[1]], num_nodes=N)
    x = torch.randn(N, F, dtype=torch.float64, generator=gen)
    return x, edge_index, knn_graph_cosine(x, 3)


def dense_tsgcn(x, edge_index, semantic, alpha, beta):
    # (I - S)^-1 X from the dense renormalised adjacencies.
    ops = GraphOperators(N, edge_index, dtype=torch.float64, semantic_edge_index=semantic)
    a_g, a_x = ops.adj.to_dense(), ops.semantic_adjacency().to_dense()
    s = (alpha * a_g + beta * a_x) / (1 + alpha + beta)
    return torch.linalg.solve(torch.eye(N, dtype=torch.float64) - s, x)


@pytest.mark.parametrize('solver', ['cg', 'closed'])
def test_tsgcn_gradient_matches_the_dense_inverse(solver):
    x, edge_index, semantic = graph()
    conv = RegularizerConv(F, 3, 'tsgcn', solver=solver, alpha=1.0, beta=0.4, tol=1e-13,
                           learn=('alpha', 'beta'), bias=False).double()
    reg = conv.regularizer
    out = conv(x, edge_index, semantic_edge_index=semantic)
    h = conv.lin(x).detach()
    raw = [reg.raw_alpha.detach().clone().requires_grad_(),
           reg.raw_beta.detach().clone().requires_grad_()]
    alpha, beta = (torch.nn.functional.softplus(r) for r in raw)
    expected = dense_tsgcn(h, edge_index, semantic, alpha, beta)
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-11)
    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum(), [reg.raw_alpha, reg.raw_beta])
    expected_grads = torch.autograd.grad((expected * weights).sum(), raw)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize('solver', ['cg', 'closed'])
def test_gradients_reach_the_parameters_the_call_read(solver):
    # torch.func.functional_call swaps the parameters for one call and puts
    # the module's back before the backward pass; CG's backward read the
    # module's raw_alpha again, so the swapped one got no gradient and the
    # weights a gradient at the other alpha. Reference: the dense inverse at
    # the swapped values, differentiated by autograd.
    from torch.func import functional_call
    x, edge_index, semantic = graph()
    conv = RegularizerConv(F, 3, 'tsgcn', solver=solver, alpha=1.0, beta=0.4, tol=1e-13,
                           learn=('alpha', 'beta'), bias=False).double()
    swapped = {'regularizer.raw_alpha': torch.tensor(2.0, dtype=torch.float64,
                                                     requires_grad=True),
               'lin.weight': conv.lin.weight.detach().clone().requires_grad_()}
    out = functional_call(conv, swapped, (x, edge_index),
                          {'semantic_edge_index': semantic})
    weights = torch.randn_like(out)
    got = torch.autograd.grad((out * weights).sum(), list(swapped.values()))
    raw = [t.detach().clone().requires_grad_() for t in swapped.values()]
    alpha, beta = torch.nn.functional.softplus(raw[0]), conv.regularizer.beta.detach()
    expected = dense_tsgcn(x @ raw[1].T, edge_index, semantic, alpha, beta)
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-11)
    # CG solved to 1e-13 relative, forward and backward: 1e-7 is far above it.
    for g, w in zip(got, torch.autograd.grad((expected * weights).sum(), raw)):
        torch.testing.assert_close(g, w, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize('regularizer, learn, solver', [
    ('tsgcn', ('alpha', 'beta'), 'cg'), ('tsgcn', ('beta',), 'series'),
    ('appnp', ('alpha',), 'cg'), ('appnp', ('alpha',), 'series'),
    ('jknet', ('beta',), 'cg'), ('jknet', ('beta',), 'closed'),
    ('signed', ('alpha',), 'cg'), ('signed', ('alpha',), 'series'),
    ('polynomial', ('gamma',), 'series')])
def test_gradcheck(regularizer, learn, solver):
    x, edge_index, semantic = graph(1)
    kwargs = {'semantic_edge_index': semantic} if regularizer == 'tsgcn' else {}
    conv = RegularizerConv(F, 2, regularizer, solver=solver, tol=1e-13, learn=learn).double()
    names = [f'raw_{name}' for name in learn]
    weights = torch.randn(N, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def f(*raws):  # two weighted sums of the output: two backward passes per check
        for name, value in zip(names, raws):
            conv.regularizer._parameters[name] = value
        return (conv(x, edge_index, **kwargs) * weights).sum(dim=0)

    raws = tuple(conv.regularizer._parameters[name].detach().clone().requires_grad_()
                 for name in names)
    assert torch.autograd.gradcheck(f, raws, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_learned_coefficients_stay_in_range_and_train():
    x, edge_index, semantic = graph(2)
    y = torch.randint(0, 3, (N,), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = RegularizerGNN(F, 8, 3, regularizer='tsgcn', solver='cg', alpha=1.0, beta=0.2,
                           learn=('alpha', 'beta')).double()
    regs = [conv.regularizer for conv in model.convs]
    assert len({id(r.raw_alpha) for r in regs}) == len(regs)  # one per layer
    start = [float(r.alpha.detach()) for r in regs]
    optimizer = torch.optim.SGD(model.parameters(), lr=20.0)  # large steps
    for _ in range(5):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            model(x, edge_index, semantic_edge_index=semantic), y)
        loss.backward()
        optimizer.step()
    for reg, first in zip(regs, start):
        alpha, beta = float(reg.alpha.detach()), float(reg.beta.detach())
        assert alpha >= 0 and beta >= 0  # softplus may underflow to 0
        assert alpha != first


def test_state_dict_round_trip_and_repr():
    x, edge_index, semantic = graph(3)
    conv = RegularizerConv(F, 3, 'tsgcn', solver='cg', alpha=2.0, beta=0.5,
                           learn=('alpha', 'beta')).double()
    with torch.no_grad():
        conv.regularizer.raw_alpha.add_(0.3)
    state = conv.state_dict()
    assert {'regularizer.raw_alpha', 'regularizer.raw_beta'} <= set(state)
    fresh = RegularizerConv(F, 3, 'tsgcn', solver='cg', learn=('alpha', 'beta')).double()
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh(x, edge_index, semantic_edge_index=semantic),
                               conv(x, edge_index, semantic_edge_index=semantic))
    assert 'alpha=learned(' in repr(conv.regularizer)
    assert float(fresh.regularizer.alpha.detach()) == pytest.approx(
        float(conv.regularizer.alpha.detach()))


def test_learn_errors():
    with pytest.raises(ValueError, match="cannot learn 'K'"):
        RegularizerConv(F, 3, 'appnp', learn=('K',))
    with pytest.raises(ValueError, match="'beta' = 0.0 cannot be learned"):
        RegularizerConv(F, 3, 'tsgcn', solver='cg', beta=0.0, learn=('beta',))
    with pytest.raises(ValueError, match="'learn' needs solver 'cg'"):
        RegularizerConv(F, 3, 'tsgcn', solver='lowrank', learn=('alpha',))
    with pytest.raises(ValueError, match="cannot learn"):
        RegularizerConv(F, 3, 'gcn', learn=('alpha',))
    reg = TSGCNRegularizer(alpha=1.0).learn('alpha')
    assert reg.learned == ('alpha',) and 'alpha' not in reg.coefficients()
    with pytest.raises(TypeError, match="'learn' must be a coefficient's name"):
        RegularizerConv(F, 3, 'appnp', learn=None)


def test_a_refused_layer_or_learn_leaves_the_regulariser_as_it_was():
    # learn() ran before the layer's other checks, and one name at a time:
    # a refused layer left the caller's instance learning alpha.
    reg = R.get('signed', alpha=-0.2)
    with pytest.raises(ValueError, match="directed=True needs solver='series'"):
        RegularizerConv(F, 3, reg, solver='cg', directed=True, learn=('alpha',))
    with pytest.raises(TypeError, match="'root_weight' must be True or False"):
        RegularizerConv(F, 3, reg, root_weight='yes', learn=('alpha',))
    with pytest.raises(ValueError, match="cannot learn 'K'"):
        reg.learn('alpha', 'K')
    assert reg.learned == () and list(reg.parameters()) == [] and reg.alpha == -0.2


def test_a_learned_state_the_constructor_refuses_loads_back():
    # Softplus underflow put tsGCN's learned alpha and beta both on 0, which
    # the forward computes (the identity) but the constructor refuses: its
    # state_dict could not be loaded back. Reference: the model that ran.
    x = torch.randn(12, F, dtype=torch.float64)
    ring = torch.stack([torch.arange(12), (torch.arange(12) + 1) % 12])
    ring = torch.cat([ring, ring.flip(0)], dim=1)
    model = RegularizerGNN(F, 8, 2, regularizer='tsgcn', solver='cg',
                           learn=('alpha', 'beta')).double()
    with torch.no_grad():
        for conv in model.convs:
            conv.regularizer.raw_alpha.fill_(-800.0)  # softplus: 0 in float64
            conv.regularizer.raw_beta.fill_(-800.0)
    assert float(model.regularizer.alpha.detach()) == 0.0
    expected = model(x, ring, semantic_edge_index=ring)
    fresh = RegularizerGNN(F, 8, 2, regularizer='tsgcn', solver='cg',
                           learn=('alpha', 'beta')).double()
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(fresh(x, ring, semantic_edge_index=ring), expected)


INTERVALS = [(0.0, math.inf), (0.0, 1.0), (-0.5, math.inf), (-2.0, 3.0), (-math.inf, math.inf),
             (-math.inf, 1.0)]


def inside(low, high):
    """Values across the interval, near both ends included (float64)."""
    lo = -1e3 if low == -math.inf else low
    hi = 1e3 if high == math.inf else high
    t = torch.tensor([1e-6, 1e-3, 0.1, 0.5, 0.9, 0.999, 1 - 1e-6], dtype=torch.float64)
    return lo + (hi - lo) * t


@pytest.mark.parametrize('low, high', INTERVALS)
def test_interval_reparametrisation_maps_values_to_raw_and_back(low, high):
    # value -> raw -> value: constrain(unconstrain(v)) = v to a few ulps of the
    # interval's scale (softplus and its inverse are accurate to ~ε relative; the
    # sigmoid's affine map adds ε (high - low)).
    value = inside(low, high)
    back = constrain(unconstrain(value, low, high), low, high)
    scale = max(abs(x) for x in (low, high, 1.0) if math.isfinite(x))
    torch.testing.assert_close(back, value, rtol=1e-14, atol=8 * 2.0**-52 * scale)
    assert bool(((back > low) & (back < high)).all())
    # raw -> value -> raw, where the value keeps the raw's information: |raw| <= 10
    # (1 - σ(10) = 4.5e-5 holds ~1e-12 of relative error).
    raw = torch.linspace(-10, 10, 41, dtype=torch.float64)
    torch.testing.assert_close(unconstrain(constrain(raw, low, high), low, high), raw,
                               rtol=0, atol=1e-10)


def test_positive_and_unit_are_bit_identical_to_softplus_and_sigmoid():
    # The kinds 'positive' and 'unit' of APPNP, JKNet and tsGCN: the raw parameter
    # and the value are the numbers they always were (the formulas of 0.x), so
    # saved state dicts load to the same models.
    appnp = R.get('appnp', alpha=0.1).learn('alpha')
    jknet = R.get('jknet', beta=1.0).learn('beta')
    v = torch.tensor(0.1, dtype=torch.float64)
    assert torch.equal(appnp.raw_alpha.detach(), torch.logit(v).float())
    assert torch.equal(appnp.alpha, torch.sigmoid(appnp.raw_alpha))
    v = torch.tensor(1.0, dtype=torch.float64)
    assert torch.equal(jknet.raw_beta.detach(), (v + torch.log(-torch.expm1(-v))).float())
    assert torch.equal(jknet.beta, torch.nn.functional.softplus(jknet.raw_beta))
    raw = torch.randn(100, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.equal(constrain(raw, *interval('positive')),
                       torch.nn.functional.softplus(raw))
    assert torch.equal(constrain(raw, *interval('unit')), torch.sigmoid(raw))
    # A regulariser pickled by an older version stored the kind's name.
    appnp._learned['alpha'] = 'unit'
    assert torch.equal(appnp.alpha, torch.sigmoid(appnp.raw_alpha))


class Ranges(R.Regularizer):
    """A regulariser with a coefficient of every kind of range (unregistered)."""
    learnable = {'a': (-0.5, math.inf), 'w': (-1.0, 2.0), 'v': (-math.inf, math.inf),
                 'u': (-math.inf, 1.0), 'p': 'positive'}

    def __init__(self, a=-0.3, w=(0.5, -0.25, 1.5), v=None, u=-7.0, p=2.0):
        self.a, self.w, self.u, self.p = a, w, u, p
        self.v = torch.tensor([3.0, -4.0]) if v is None else v

    def operator(self, graph):
        return graph.identity()


def test_learn_numbers_and_vectors_on_any_interval():
    reg = Ranges().learn('a', 'w', 'v', 'u', 'p')
    shapes = {name: tuple(p.shape) for name, p in reg.named_parameters()}
    assert shapes == {'raw_a': (), 'raw_w': (3,), 'raw_v': (2,), 'raw_u': (), 'raw_p': ()}
    start = {'a': -0.3, 'w': [0.5, -0.25, 1.5], 'v': [3.0, -4.0], 'u': -7.0, 'p': 2.0}
    for name, value in start.items():
        low, high = interval(Ranges.learnable[name])
        value = torch.tensor(value, dtype=torch.float64)
        raw = reg.get_parameter(f'raw_{name}')
        # The raw parameter is the float64 inverse, stored in the default dtype ...
        assert torch.equal(raw.detach(), unconstrain(value, low, high).float())
        # ... and the coefficient is its image, to float32 rounding of the start.
        assert torch.equal(getattr(reg, name), constrain(raw, low, high))
        torch.testing.assert_close(getattr(reg, name).detach().double(), value,
                                   rtol=1e-6, atol=1e-6)
    assert 'w=learned([0.5, -0.25, 1.5])' in repr(reg)
    assert 'v=learned([3.0, -4.0])' in repr(reg)
    assert reg.coefficients() == {}
    # Vector gradients reach the raw parameter through the reparametrisation.
    (reg.w * torch.tensor([1.0, 2.0, 3.0])).sum().backward()
    s = torch.sigmoid(reg.raw_w.detach())
    torch.testing.assert_close(reg.raw_w.grad, 3.0 * s * (1 - s) * torch.tensor([1.0, 2, 3]))


def test_learned_vector_state_dict_round_trip():
    reg = Ranges().learn('w', 'v')
    with torch.no_grad():
        reg.raw_w.add_(torch.tensor([0.1, -0.2, 0.3]))
    fresh = Ranges().learn('w', 'v')
    fresh.load_state_dict(reg.state_dict())
    assert torch.equal(fresh.w, reg.w) and torch.equal(fresh.v, reg.v)
    assert fresh.a == -0.3


@pytest.mark.parametrize('coefficients, name, message', [
    (dict(a=-0.5), 'a', r"'a' = -0.5 cannot be learned: start it inside \(-0.5, inf\)"),
    (dict(a=-1.0), 'a', r"'a' = -1.0 cannot be learned: start it inside \(-0.5, inf\)"),
    (dict(w=(0.5, 2.0, 0.0)), 'w',
     r"'w' = \[0.5, 2.0, 0.0\] cannot be learned: start it inside \(-1, 2\)"),
    (dict(v=torch.tensor([1.0, math.nan])), 'v', r"'v' = \[1.0, nan\] cannot be learned"),
    (dict(u=1.0), 'u', r"'u' = 1.0 cannot be learned: start it inside \(-inf, 1\)"),
    (dict(p=0.0), 'p', r"'p' = 0.0 cannot be learned: start it inside \(0, inf\)"),
])
def test_start_outside_the_interval_names_the_coefficient(coefficients, name, message):
    reg = Ranges(**coefficients)
    with pytest.raises(ValueError, match=message):
        reg.learn(name)
    assert reg.learned == () and not list(reg.parameters())  # nothing changed


def test_a_coefficient_that_is_neither_a_number_nor_a_vector():
    with pytest.raises(TypeError, match=r"'v' cannot be learned: a learned coefficient is a "
                                        r"real number or a vector"):
        Ranges(v=torch.ones(2, 2)).learn('v')


@pytest.mark.parametrize('kind, error, message', [
    ((1.0, 0.0), ValueError, r'low < high \(got \(1.0, 0.0\)\)'),
    ((0.0, 0.0), ValueError, 'low < high'),
    ((math.nan, 1.0), ValueError, 'low < high'),
    ((math.inf, math.inf), ValueError, 'low < high'),
    ('bogus', ValueError, r"one of \['positive', 'unit'\]"),
    (('x', 1.0), TypeError, 'a pair \\(low, high\\) of real numbers'),
    ((0.0, 1.0, 2.0), TypeError, 'a pair'),
    (0.5, TypeError, 'a pair'),
])
def test_invalid_ranges_are_named(kind, error, message):
    class Bad(Ranges):
        learnable = {'a': kind}

    with pytest.raises(error, match=f"learnable coefficient 'a'.*{message}"):
        Bad().learn('a')


def test_assigning_a_learned_coefficient_sets_its_parameter():
    # A plain attribute used to hide the learned one: the forward used it, the
    # optimizer's raw_alpha got no gradient, and a reload dropped it.
    x, edge_index, _ = graph()
    conv = RegularizerConv(F, 2, 'appnp', solver='closed', K=5, alpha=0.2,
                           learn=('alpha',)).double()
    reg = conv.regularizer
    reg.alpha = 0.5
    assert 'alpha' not in vars(reg) and reg.learned == ('alpha',)
    assert float(reg.alpha.detach()) == pytest.approx(0.5, rel=1e-7)  # float32 raw
    expected = RegularizerConv(F, 2, 'appnp', solver='closed', K=5, alpha=float(reg.alpha.detach()),
                               bias=False).double()
    expected.lin.weight.data.copy_(conv.lin.weight)
    torch.testing.assert_close(conv(x, edge_index) - conv.bias, expected(x, edge_index))
    conv(x, edge_index).sum().backward()
    assert reg.raw_alpha.grad is not None and float(reg.raw_alpha.grad) != 0
    with pytest.raises(ValueError, match=r"'alpha' = 1.5 cannot be learned: start it inside"):
        reg.alpha = 1.5


def test_reset_parameters_returns_learned_coefficients_to_their_start():
    model = RegularizerGNN(F, 8, 3, regularizer='tsgcn', solver='cg', alpha=1.0, beta=0.2,
                           learn=('alpha', 'beta'))
    start = [r.detach().clone() for r in model.parameters()]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    torch.manual_seed(0)
    model.reset_parameters()
    for conv in model.convs:  # the coefficients exactly, the weights re-drawn
        assert float(conv.regularizer.alpha.detach()) == pytest.approx(1.0, rel=1e-7)
        assert float(conv.regularizer.beta.detach()) == pytest.approx(0.2, rel=1e-6)
    raws = {id(p) for conv in model.convs for p in conv.regularizer.learned_parameters()}
    for old, new in zip(start, model.parameters()):
        if id(new) in raws:
            assert torch.equal(old, new.detach())



def test_a_layer_keeps_the_learned_coefficient_it_is_handed():
    # RegularizerConv's constructor reset the caller's coefficient to where learning began
    # (-0.2); the value set afterwards (-0.4) is the one the layer must start from.
    reg = R.SignedLaplacianRegularizer(alpha=-0.2).learn('alpha')
    reg.alpha = -0.4
    conv = RegularizerConv(F, 2, reg)
    assert float(conv.regularizer.alpha.detach()) == pytest.approx(-0.4, rel=1e-6)
    model = RegularizerGNN(F, 8, 2, regularizer=reg)
    assert [float(c.regularizer.alpha.detach()) for c in model.convs] == \
        pytest.approx([-0.4, -0.4], rel=1e-6)
    conv.reset_parameters()  # an explicit reset returns to the start, as documented
    assert float(conv.regularizer.alpha.detach()) == pytest.approx(-0.2, rel=1e-6)

    class Gated(R.SignedLaplacianRegularizer):  # a user's override of the plain signature
        name = ''

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.gate = torch.nn.Linear(2, 2)

        def reset_parameters(self):
            super().reset_parameters()
            self.gate.reset_parameters()

    gated = Gated(alpha=-0.2).learn('alpha')
    gated.alpha = -0.3
    conv = RegularizerConv(F, 2, gated)
    assert float(conv.regularizer.alpha.detach()) == pytest.approx(-0.3, rel=1e-6)

class _SharedCoefficient(R.Regularizer):
    r"""M = (1 + a) I + a I - 0.3 a Â, its terms built from one tensor (a
    user's operator_terms may reuse one)."""
    name = ''
    learnable = {'a': 'positive'}

    def __init__(self, a: float = 0.5) -> None:
        self.a = a

    def operator(self, graph):
        eye = graph.identity()
        return (1 + 2 * self.a) * eye - 0.3 * self.a * graph.adj

    def operator_terms(self, graph):
        a = self.a
        return [(1.0, None), (a, None), (a, None), (-0.3 * a, graph.adj)]


def test_cg_gradient_of_coefficients_built_from_one_tensor():
    # CG's backward ran through the shared part of the graph (a -> -0.3 a) and
    # freed it, or counted it twice. Reference: 'closed' by plain autograd.
    x, edge_index, _ = graph()
    grads = {}
    for solver in ('cg', 'closed'):
        conv = RegularizerConv(F, 2, _SharedCoefficient, solver=solver, a=0.5, learn=('a',),
                               tol=1e-13).double()
        torch.manual_seed(0)
        conv.reset_parameters()
        out = conv(x, edge_index)
        gen = torch.Generator().manual_seed(1)
        weights = torch.randn(out.shape, dtype=out.dtype, generator=gen)
        grads[solver] = torch.autograd.grad((out * weights).sum(), conv.regularizer.raw_a)[0]
    torch.testing.assert_close(grads['cg'], grads['closed'], rtol=1e-8, atol=0)


def test_setting_a_learned_coefficient_to_a_tensor_with_grad_is_refused():
    reg = R.get('appnp', alpha=0.2).learn('alpha')
    with pytest.raises(TypeError, match="'alpha' is learned through raw_alpha"):
        reg.alpha = torch.tensor(0.3, requires_grad=True)


def test_appnp_alpha_rounded_to_zero_is_refused_and_one_is_not():
    x, edge_index, _ = graph()
    conv = RegularizerConv(F, 2, 'appnp', solver='series', K=3, alpha=0.2, learn=('alpha',))
    with torch.no_grad():
        conv.regularizer.raw_alpha.fill_(-120.0)  # sigmoid underflows to 0: M = I / 0
    with pytest.raises(ValueError, match=r"'alpha' = 0.0 has reached an end"):
        conv(x.float(), edge_index)
    with torch.no_grad():
        conv.regularizer.raw_alpha.fill_(40.0)  # sigmoid rounds to 1: M = I, allowed
    assert float(conv.regularizer.alpha.detach()) == 1.0
    torch.testing.assert_close(conv(x.float(), edge_index) - conv.bias, conv.lin(x.float()))


def test_a_float64_layer_starts_from_the_exact_coefficient():
    # The raw parameter was created in float32 and cast by .double(): alpha
    # started (and reset_parameters() returned) at 0.30000000275, the output
    # 6e-9 away from the fixed-alpha layer's. Reference: the fixed layer, to
    # float64 rounding of the softplus round trip (a few eps) and CG's tol.
    x = torch.randn(6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4]])
    fixed = RegularizerConv(3, 2, 'appnp', alpha=0.3, K=5, solver='cg', tol=1e-13).double()
    learned = RegularizerConv(3, 2, 'appnp', alpha=0.3, K=5, solver='cg', tol=1e-13,
                              learn=('alpha',)).double()
    learned.lin.load_state_dict(fixed.lin.state_dict())
    assert float(learned.regularizer.alpha.detach()) == pytest.approx(0.3, abs=1e-15)
    torch.testing.assert_close(learned(x, ei), fixed(x, ei), rtol=0, atol=1e-12)
    with torch.no_grad():
        learned.regularizer.raw_alpha.add_(1.0)  # trained: a cast keeps it as it is
    learned.reset_parameters()
    assert float(learned.regularizer.alpha.detach()) == pytest.approx(0.3, abs=1e-15)
    trained = RegularizerConv(3, 2, 'appnp', alpha=0.3, learn=('alpha',))
    with torch.no_grad():
        trained.regularizer.raw_alpha.add_(0.5)
    value = float(trained.regularizer.alpha.detach())
    assert float(trained.double().regularizer.alpha.detach()) == pytest.approx(value, abs=1e-7)


def test_a_fixed_coefficient_checkpoint_seeds_a_learning_module():
    # A checkpoint of a fixed alpha (extra state 'alpha': 0.05) loaded with
    # strict=False into a module that learns alpha kept the new module's 0.3,
    # silently (only 'raw_alpha' was reported missing): learning now continues
    # from the checkpoint's value, to float32 rounding of its raw parameter.
    fixed = RegularizerConv(3, 2, 'appnp', alpha=0.05, K=5)
    learning = RegularizerConv(3, 2, 'appnp', alpha=0.3, K=5, learn=('alpha',))
    missing = learning.load_state_dict(fixed.state_dict(), strict=False).missing_keys
    assert missing == ['regularizer.raw_alpha']
    assert float(learning.regularizer.alpha.detach()) == pytest.approx(0.05, rel=1e-6)


@pytest.mark.parametrize('name, learn, coefficients', [
    ('appnp', ('alpha',), {}), ('tsgcn', ('alpha', 'beta'), dict(alpha=0.7, beta=0.3)),
    ('polynomial', ('gamma',), dict(K=3))])
def test_a_layer_learning_coefficients_builds_on_the_meta_device(name, learn, coefficients):
    # Built under torch.device('meta') (deferred initialisation), materialised with
    # to_empty() and reset_parameters(): every parameter on the meta device first,
    # then the same layer as one built on the CPU, its learned coefficients at
    # their start values.
    x, edge_index, semantic = graph()
    inputs = dict(semantic_edge_index=semantic) if name == 'tsgcn' else {}
    with torch.device('meta'):
        layer = RegularizerConv(F, 3, name, solver='closed', learn=learn, **coefficients)
    assert {p.device.type for p in layer.parameters()} == {'meta'}
    repr(layer)
    layer = layer.to_empty(device='cpu').double()
    layer.reset_parameters()
    reference = RegularizerConv(F, 3, name, solver='closed', learn=learn,
                                **coefficients).double()
    for coefficient in learn:
        assert torch.equal(torch.as_tensor(getattr(layer.regularizer, coefficient)),
                           torch.as_tensor(getattr(reference.regularizer, coefficient)))
    reference.load_state_dict(layer.state_dict())
    assert torch.equal(layer(x, edge_index, **inputs), reference(x, edge_index, **inputs))
