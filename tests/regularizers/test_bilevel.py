r"""Coefficients on the validation loss, weights on the training loss
(:mod:`torch_geometric_regcn.regularizers.bilevel`): the hypergradient
against finite differences of a dense float64 network, the calibrated loss
against a scalar minimiser of scipy, the alternation against a hand-written
loop, the restarts against the weights copied at the start, and the errors."""
import math

import pytest
import torch
import torch.nn.functional as F
from scipy.optimize import minimize_scalar
from torch_geometric.utils import to_undirected

from torch_geometric_regcn import RegularizerGNN
from torch_geometric_regcn.knn import knn_graph_cosine
from torch_geometric_regcn.regularizers import (
    BilevelStep,
    calibrated_cross_entropy,
    calibrated_temperature,
    coefficient_parameters,
    param_groups,
    weight_parameters,
)
from torch_geometric_regcn.regularizers.graph import GraphOperators

N, F_IN, HIDDEN, C = 24, 5, 6, 3
GEN = torch.Generator


def problem(seed=0):
    r"""A small graph, its semantic graph, features, labels and two masks."""
    gen = GEN().manual_seed(seed)
    ring = torch.arange(N)
    edge_index = torch.cat([torch.stack([ring, (ring + 1) % N]),
                            torch.randint(0, N, (2, N), generator=gen)], dim=1)
    edge_index = to_undirected(edge_index[:, edge_index[0] != edge_index[1]], num_nodes=N)
    x = torch.randn(N, F_IN, dtype=torch.float64, generator=gen)
    # Labels that the features and their neighbours predict, mostly (random ones
    # would make the best temperature 0 and every calibrated gradient vanish).
    ops = GraphOperators(N, edge_index, dtype=torch.float64)
    score = ops.adj.to_dense() @ x @ torch.randn(F_IN, C, dtype=torch.float64, generator=gen)
    y = (score + 0.5 * torch.randn(N, C, dtype=torch.float64, generator=gen)).argmax(1)
    train = torch.zeros(N, dtype=torch.bool)
    train[::3] = True
    return x, edge_index, knn_graph_cosine(x, 3), y, train, ~train


def tsgcn(seed=0, **kwargs):
    torch.manual_seed(seed)
    return RegularizerGNN(F_IN, HIDDEN, C, regularizer='tsgcn', solver='cg', alpha=1.0,
                          beta=0.4, learn=('alpha', 'beta'), bias=False, tol=1e-13,
                          **kwargs).double()


def dense_logits(model, raws, x, edge_index, semantic):
    r"""The 2-layer tsGCN by hand, in float64: :math:`(\mathbf{I} -
    \mathbf{S}_2)^{-1} \mathrm{relu}((\mathbf{I} - \mathbf{S}_1)^{-1}
    \mathbf{X}\mathbf{W}_1^\top) \mathbf{W}_2^\top`, :math:`\mathbf{S} =
    (\alpha \hat{\mathbf{A}}_G + \beta \hat{\mathbf{A}}_X) / (1 + \alpha +
    \beta)` with :math:`\alpha, \beta` the softplus of :obj:`raws` (per
    layer: raw alpha, raw beta)."""
    ops = GraphOperators(N, edge_index, dtype=torch.float64, semantic_edge_index=semantic)
    a_g, a_x = ops.adj.to_dense(), ops.semantic_adjacency().to_dense()
    eye = torch.eye(N, dtype=torch.float64)
    h = x
    for i, conv in enumerate(model.convs):
        alpha, beta = F.softplus(raws[2 * i]), F.softplus(raws[2 * i + 1])
        s = (alpha * a_g + beta * a_x) / (1 + alpha + beta)
        h = torch.linalg.solve(eye - s, h @ conv.lin.weight.detach().T)
        if i < len(model.convs) - 1:
            h = h.relu()
    return h


def scipy_calibrated(z, y):
    r"""min over tau of CE(tau z), by scipy's bounded Brent search in log tau."""
    def f(log_tau):
        return float(F.cross_entropy(math.exp(log_tau) * z, y))
    res = minimize_scalar(f, bounds=(-12.0, 12.0), method='bounded',
                          options={'xatol': 1e-12})
    return res.fun, math.exp(res.x)


@pytest.mark.parametrize('calibrated', [False, True])
def test_coefficient_step_descends_the_finite_difference_of_the_dense_validation_loss(
        calibrated):
    x, edge_index, semantic, y, train, val = problem()
    model = tsgcn()
    raws = coefficient_parameters(model)
    assert [tuple(p.shape) for p in raws] == [()] * 4
    step = BilevelStep(model, torch.optim.Adam(weight_parameters(model), lr=0.1),
                       torch.optim.SGD(raws, lr=1.0))
    for _ in range(10):  # trained weights: at random ones the coefficients act as a scale
        out = model(x, edge_index, semantic_edge_index=semantic)
        step.weight_step(F.cross_entropy(out[train], y[train]))
    before = torch.stack([p.detach().clone() for p in raws])
    out = model(x, edge_index, semantic_edge_index=semantic)
    # The model is the network of dense_logits (a CG residual of 1e-13).
    torch.testing.assert_close(out, dense_logits(model, before, x, edge_index, semantic),
                               rtol=1e-9, atol=1e-11)
    loss_fn = calibrated_cross_entropy if calibrated else F.cross_entropy
    step.coefficient_step(loss_fn(out[val], y[val]))
    got = torch.stack([p.grad for p in raws])

    def reference(r):  # the validation loss of the dense network, at its best temperature
        z = dense_logits(model, r, x, edge_index, semantic)[val]
        return scipy_calibrated(z, y[val])[0] if calibrated else float(
            F.cross_entropy(z, y[val]))

    h = 1e-5  # central differences: truncation ~h^2 = 1e-10, rounding ~eps / h = 1e-11
    expected = torch.tensor([(reference(before + h * e) - reference(before - h * e)) / (2 * h)
                             for e in torch.eye(4, dtype=torch.float64)], dtype=torch.float64)
    assert expected.abs().max() > 1e-3  # a gradient that can be wrong
    # The CG residual (1e-13) and the minimiser's tolerance (1e-12 in log tau,
    # whose error enters the minimum to second order) are far below 1e-7.
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-8)
    # SGD with lr=1: the raw parameters moved by minus their hypergradient.
    torch.testing.assert_close(torch.stack([p.detach() for p in raws]), before - expected,
                               rtol=1e-6, atol=1e-8)


def test_the_training_step_never_moves_a_coefficient_nor_the_validation_step_a_weight():
    x, edge_index, semantic, y, train, val = problem(1)
    model = tsgcn(1, dropout=0.2)
    weights, raws = weight_parameters(model), coefficient_parameters(model)
    assert {id(p) for p in weights} | {id(p) for p in raws} == {id(p) for p in
                                                                  model.parameters()}
    step = BilevelStep(model, torch.optim.Adam(weights, lr=0.1, weight_decay=5e-4),
                       torch.optim.Adam(raws, lr=0.1))
    for _ in range(3):
        coefficients = [p.detach().clone() for p in raws]
        grads = [None if p.grad is None else p.grad.clone() for p in raws]
        model.train()
        out = model(x, edge_index, semantic_edge_index=semantic)
        step.weight_step(F.cross_entropy(out[train], y[train]))
        # Not even computed: the gradients left by the last coefficient step stay.
        assert all(p.grad is None if g is None else torch.equal(p.grad, g)
                   for p, g in zip(raws, grads))
        assert all(torch.equal(p, q) for p, q in zip(raws, coefficients))
        trained = [p.detach().clone() for p in weights]
        model.eval()
        out = model(x, edge_index, semantic_edge_index=semantic)
        grads = [p.grad.clone() for p in weights]
        step.coefficient_step(calibrated_cross_entropy(out[val], y[val]))
        assert all(torch.equal(p, q) for p, q in zip(weights, trained))
        assert all(torch.equal(p.grad, g) for p, g in zip(weights, grads))  # untouched
        assert all(not torch.equal(p, q) for p, q in zip(raws, coefficients))


def test_the_alternation_equals_a_hand_written_loop():
    x, edge_index, semantic, y, train, val = problem(2)
    runs = []
    for by_hand in (False, True):
        model = tsgcn(2)
        weights, raws = weight_parameters(model), coefficient_parameters(model)
        opt_w = torch.optim.Adam(weights, lr=0.05, weight_decay=5e-4)
        opt_c = torch.optim.Adam(raws, lr=0.05)
        step = None if by_hand else BilevelStep(model, opt_w, opt_c)
        for _ in range(4):
            out = model(x, edge_index, semantic_edge_index=semantic)
            loss = F.cross_entropy(out[train], y[train])
            if by_hand:
                for p, g in zip(weights, torch.autograd.grad(loss, weights)):
                    p.grad = g
                opt_w.step()
            else:
                step.weight_step(loss)
            out = model(x, edge_index, semantic_edge_index=semantic)
            loss = F.cross_entropy(out[val], y[val])
            if by_hand:
                for p, g in zip(raws, torch.autograd.grad(loss, raws)):
                    p.grad = g
                opt_c.step()
            else:
                step.coefficient_step(loss)
        runs.append([p.detach() for p in model.parameters()])
    for got, want in zip(*runs):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_patience_rewinds_the_weights_and_keeps_the_coefficients():
    x, edge_index, semantic, y, train, val = problem(3)
    model = tsgcn(3)
    weights, raws = weight_parameters(model), coefficient_parameters(model)
    initial = [p.detach().clone() for p in weights]
    opt_w = torch.optim.Adam(weights, lr=0.05)
    step = BilevelStep(model, opt_w, torch.optim.Adam(raws, lr=0.05), patience=2)
    assert step.cycles == 1

    def epoch(val_loss):
        out = model(x, edge_index, semantic_edge_index=semantic)
        step.weight_step(F.cross_entropy(out[train], y[train]))
        out = model(x, edge_index, semantic_edge_index=semantic)
        # A validation loss with a chosen value and the true gradient.
        loss = calibrated_cross_entropy(out[val], y[val])
        step.coefficient_step(loss - loss.detach() + val_loss)

    epoch(1.0)
    epoch(0.5)  # a lower loss: the cycle goes on
    epoch(0.7)  # 1 step without improvement
    assert step.cycles == 1 and len(opt_w.state) > 0
    assert not all(torch.equal(p, q) for p, q in zip(weights, initial))
    coefficients = [p.detach().clone() for p in raws]
    epoch(0.6)  # 2 steps without improvement: the weights restart
    assert step.cycles == 2
    assert all(torch.equal(p, q) for p, q in zip(weights, initial))
    assert len(opt_w.state) == 0  # Adam starts afresh
    # The coefficients took their step and were not rewound.
    assert all(not torch.equal(p, q) for p, q in zip(raws, coefficients))
    epoch(0.9)  # a new cycle: its own lowest loss
    epoch(0.95)
    assert step.cycles == 2
    epoch(0.95)
    assert step.cycles == 3


def test_calibrated_cross_entropy_is_the_minimum_over_the_temperature():
    gen = GEN().manual_seed(0)
    z = 3 * torch.randn(50, 4, dtype=torch.float64, generator=gen)
    y = (z + 3 * torch.randn(50, 4, dtype=torch.float64, generator=gen)).argmax(1)
    got = calibrated_cross_entropy(z, y)
    value, _ = scipy_calibrated(z, y)
    # Brent's search to 1e-12 in log tau: the minimum to ~1e-20; Newton converges quadratically.
    assert math.isclose(float(got), value, rel_tol=1e-10)
    assert float(got) < float(F.cross_entropy(z, y))  # tau = 1 was not the best
    # Invariant to the scale of the logits, where the plain loss is not.
    torch.testing.assert_close(calibrated_cross_entropy(7.5 * z, y), got, rtol=1e-10, atol=0)
    # Its derivative in a scale of the logits vanishes (the envelope theorem).
    scale = torch.ones((), dtype=torch.float64, requires_grad=True)
    (slope,) = torch.autograd.grad(calibrated_cross_entropy(scale * z, y), scale)
    assert abs(float(slope)) < 1e-10
    (plain,) = torch.autograd.grad(F.cross_entropy(scale * z, y), scale)
    assert abs(float(plain)) > 1e-2
    # float32 logits: the loss in float32, the temperature found in float64.
    assert calibrated_cross_entropy(z.float(), y).dtype == torch.float32


def test_calibrated_temperature_is_the_minimiser_of_the_cross_entropy():
    # Reference: scipy's bounded Brent search in log tau.
    gen = GEN().manual_seed(1)
    z = 3 * torch.randn(60, 4, dtype=torch.float64, generator=gen)
    y = (z + 3 * torch.randn(60, 4, dtype=torch.float64, generator=gen)).argmax(1)
    _, tau = scipy_calibrated(z, y)
    # Brent places a smooth minimum to about sqrt(eps) ~ 1e-8 relative (the loss is
    # flat there, to second order); Newton's converges quadratically.
    got = calibrated_temperature(z, y)
    assert math.isclose(float(got), tau, rel_tol=1e-6) and not got.requires_grad
    torch.testing.assert_close(calibrated_cross_entropy(z, y), F.cross_entropy(got * z, y),
                               rtol=0, atol=0)
    assert calibrated_temperature(z.float(), y).dtype == torch.float32
    with pytest.raises(ValueError, match="'target' must hold one integer class per row"):
        calibrated_temperature(z, y.bool())


def test_calibrated_cross_entropy_of_separated_logits_tends_to_zero():
    z = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 1.0]], dtype=torch.float64)
    y = torch.tensor([0, 1, 0])
    # Newton's steps in tau grow it by about 1 / margin each: the loss shrinks.
    losses = [float(calibrated_cross_entropy(z, y, iterations=i)) for i in (0, 5, 10, 20)]
    assert losses == sorted(losses, reverse=True) and losses[2] < 1e-4 and losses[3] < 1e-8
    assert float(calibrated_cross_entropy(z, y, iterations=0)) == pytest.approx(
        float(F.cross_entropy(z, y)), rel=1e-15)
    # Logits that predict nothing (every row mistaken): the best tau is 0, the
    # loss tends to log C, the uniform guess's.
    assert float(calibrated_cross_entropy(z, 1 - y)) == pytest.approx(math.log(2), abs=1e-6)


def test_a_model_without_learned_coefficients_is_refused():
    model = RegularizerGNN(F_IN, HIDDEN, C, regularizer='tsgcn', solver='cg')
    with pytest.raises(ValueError, match=r"'module' \(RegularizerGNN\) has no learned "
                                         r"regulariser coefficients.*learn=\('alpha', 'beta'\)"):
        coefficient_parameters(model)
    assert weight_parameters(model) == list(model.parameters())
    opt = torch.optim.Adam(model.parameters())
    with pytest.raises(ValueError, match='no learned regulariser coefficients'):
        BilevelStep(model, opt, torch.optim.Adam([torch.nn.Parameter(torch.ones(1))]))
    with pytest.raises(TypeError, match=r"'module' must be a torch.nn.Module \(got list\)"):
        coefficient_parameters([])


def test_optimizers_that_mix_the_two_levels_are_refused():
    model = tsgcn()
    weights, raws = weight_parameters(model), coefficient_parameters(model)
    both = torch.optim.Adam(model.parameters())
    coefficients = torch.optim.Adam(raws)
    with pytest.raises(ValueError, match=r"'weight_optimizer' holds the raw coefficient "
                                         r"parameter\(s\) \['convs.0.regularizer.raw_alpha'.*"
                                         r"weight_parameters\(model\)"):
        BilevelStep(model, both, coefficients)
    with pytest.raises(ValueError, match=r"'weight_optimizer' holds"):  # the documented groups
        BilevelStep(model, torch.optim.Adam(param_groups(model, 5e-4)), coefficients)
    with pytest.raises(ValueError, match=r"'coefficient_optimizer' holds 2 parameter\(s\) that "
                                         r"are not .*convs.0.lin.weight.*"
                                         r"coefficient_parameters\(model\)"):
        BilevelStep(model, torch.optim.Adam(weights), torch.optim.Adam(model.parameters()))
    with pytest.raises(ValueError, match=r"a \(2,\) tensor outside the model"):
        BilevelStep(model, torch.optim.Adam(weights),
                    torch.optim.Adam(raws + [torch.nn.Parameter(torch.ones(2))]))
    with pytest.raises(ValueError, match=r"'coefficient_optimizer' lacks the raw coefficient "
                                         r"parameter\(s\) \['convs.1.regularizer.raw_alpha', "
                                         r"'convs.1.regularizer.raw_beta'\]"):
        BilevelStep(model, torch.optim.Adam(weights), torch.optim.Adam(raws[:2]))
    with pytest.raises(ValueError, match='are the same optimizer'):
        BilevelStep(model, coefficients, coefficients)
    with pytest.raises(TypeError, match=r"'coefficient_optimizer' must be a "
                                        r"torch.optim.Optimizer \(got list\)"):
        BilevelStep(model, torch.optim.Adam(weights), raws)
    with pytest.raises(ValueError, match="patience"):
        BilevelStep(model, torch.optim.Adam(weights), coefficients, patience=0)
    lazy = RegularizerGNN(-1, HIDDEN, C, regularizer='tsgcn', solver='cg', alpha=1.0, beta=0.4,
                          learn=('alpha', 'beta'))
    with pytest.raises(ValueError, match=r"not initialised yet \(in_channels=-1\).*run one "
                                         r"forward pass"):
        BilevelStep(lazy, torch.optim.SGD(weight_parameters(lazy), lr=0.1),
                    torch.optim.Adam(coefficient_parameters(lazy)), patience=5)


def test_bad_losses_and_rewind_without_patience_are_refused():
    x, edge_index, semantic, y, train, val = problem()
    model = tsgcn()
    step = BilevelStep(model, torch.optim.Adam(weight_parameters(model)),
                       torch.optim.Adam(coefficient_parameters(model)))
    with torch.no_grad():
        out = model(x, edge_index, semantic_edge_index=semantic)
    with pytest.raises(ValueError, match=r"'loss' must be a scalar .*requires_grad=False.*"
                                         r"outside torch.no_grad\(\)"):
        step.coefficient_step(F.cross_entropy(out[val], y[val]))
    out = model(x, edge_index, semantic_edge_index=semantic)
    with pytest.raises(ValueError, match=r"got shape \(24, 3\)"):
        step.weight_step(out)
    with pytest.raises(TypeError, match=r"'loss' must be a torch.Tensor \(got float\)"):
        step.weight_step(1.0)
    with pytest.raises(RuntimeError, match=r"patience=<steps>"):
        step.rewind()
    with pytest.raises(ValueError, match=r"'target' must hold one integer class per row"):
        calibrated_cross_entropy(out, y[:3])
    with pytest.raises(ValueError, match=r"'input' must be floating-point logits"):
        calibrated_cross_entropy(y, y)


def test_calibrated_cross_entropy_takes_any_integer_target():
    z = torch.randn(6, 3, dtype=torch.float64, generator=GEN().manual_seed(0))
    y = torch.tensor([0, 1, 2, 2, 1, 0])
    assert float(calibrated_cross_entropy(z, y.int())) == float(calibrated_cross_entropy(z, y))


def test_a_coefficient_learned_after_the_step_was_made_is_refused():
    # Its raw parameter is in neither optimizer: it would never be trained.
    x, edge_index, semantic, y, train, val = problem()
    model = RegularizerGNN(F_IN, HIDDEN, C, regularizer='tsgcn', solver='cg', alpha=1.0,
                           beta=0.4, learn=('alpha',), bias=False).double()
    step = BilevelStep(model, torch.optim.Adam(weight_parameters(model)),
                       torch.optim.Adam(coefficient_parameters(model)))
    for conv in model.convs:
        conv.regularizer.learn('beta')
    out = model(x, edge_index, semantic_edge_index=semantic)
    with pytest.raises(ValueError, match=r"learns 4 coefficient parameter\(s\) now, 2 of "
                                         r"them among the 2 BilevelStep was made with"):
        step.weight_step(F.cross_entropy(out[train], y[train]))
    with pytest.raises(ValueError, match='build a new BilevelStep'):
        step.coefficient_step(F.cross_entropy(out[val], y[val]))


def test_the_docstring_example_runs():
    import inspect
    import re
    import textwrap
    doc = inspect.getdoc(BilevelStep)
    (body,) = re.findall(r'^( *)\.\. code-block:: python\n\n((?:\1 {4}.*\n|\n)+)', doc + '\n',
                         re.M)
    scope = {}
    exec(compile(textwrap.dedent(body[1]), '<BilevelStep example>', 'exec'), scope)
    # It trained: the coefficients moved from the (1, 0.2) they started at.
    alpha = float(scope['model'].convs[0].regularizer.alpha.detach())
    assert alpha != pytest.approx(1.0, abs=1e-3)


def test_an_empty_validation_set_is_refused():
    from torch_geometric_regcn.regularizers import calibrated_cross_entropy

    # Left alone it would be NaN with a zero gradient, and the coefficients
    # would silently never move.
    with pytest.raises(ValueError, match='no rows'):
        calibrated_cross_entropy(torch.empty(0, 3), torch.empty(0, dtype=torch.long))


def test_the_weight_step_trains_what_the_weight_optimizer_holds():
    # A head outside the model was never trained, a weight frozen when the step was built
    # and unfrozen later never moved, and one frozen later made autograd fail; each now
    # matches a hand-written step of torch.autograd.grad and Adam, and restarts reset the head.
    x, edge_index, semantic, y, train, val = problem(4)
    runs = []
    for by_hand in (False, True):
        model = tsgcn(4)
        torch.manual_seed(5)
        head = torch.nn.Linear(C, C).double()
        first, second = (conv.lin.weight for conv in model.convs)
        weights = weight_parameters(model) + list(head.parameters())
        initial = [p.detach().clone() for p in weights]
        opt_w = torch.optim.Adam(weights, lr=0.05)
        first.requires_grad_(False)
        step = None if by_hand else BilevelStep(model, opt_w, torch.optim.Adam(
            coefficient_parameters(model), lr=0.05), patience=1)
        for epoch in range(3):
            first.requires_grad_(epoch > 0)  # unfrozen after the step was built
            second.requires_grad_(epoch != 2)  # frozen after it
            out = head(model(x, edge_index, semantic_edge_index=semantic))
            loss = F.cross_entropy(out[train], y[train])
            if by_hand:
                trained = [p for p in weights if p.requires_grad]
                opt_w.zero_grad(set_to_none=True)
                for p, g in zip(trained, torch.autograd.grad(loss, trained)):
                    p.grad = g
                opt_w.step()
            else:
                step.weight_step(loss)
        runs.append([p.detach().clone() for p in weights])
        if not by_hand:
            step.rewind()
            assert all(torch.equal(p, q) for p, q in zip(weights, initial))
    assert not torch.equal(runs[0][-1], initial[-1])  # the head was trained
    for got, want in zip(*runs):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_default_newton_steps_reach_a_nearly_separable_minimum():
    # One of 200 validation nodes misclassified: tau* = 16 and 164 at logit
    # scales 1 and 0.1, which 10 Newton steps stopped short of (the gradient 12 %
    # and 44 % off the minimum's). Reference: the minimum over tau by scipy in
    # float64, and its directional derivative by central differences (step 1e-4
    # of the logits' scale: truncation error ~1e-8 of the derivative's size).
    # Tolerance 1e-5 relative: far above the differences' error, far below 12 %.
    def minimum(z, y):
        def ce(log_tau):
            return F.cross_entropy(math.exp(log_tau) * z, y).item()
        return minimize_scalar(ce, bounds=(-15, 15), method='bounded',
                               options={'xatol': 1e-14}).fun

    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 5, (200,), generator=gen)
    base = torch.randn(200, 5, generator=gen, dtype=torch.float64)
    base[torch.arange(200), y] += 4.0
    direction = torch.randn(200, 5, generator=gen, dtype=torch.float64)
    assert 0 < int((base.argmax(1) != y).sum()) <= 2
    for scale in (1.0, 0.1):
        z = (base * scale).requires_grad_()
        grad, = torch.autograd.grad(calibrated_cross_entropy(z, y), z)
        h = 1e-4 * scale
        expected = (minimum(z.detach() + h * direction, y)
                    - minimum(z.detach() - h * direction, y)) / (2 * h)
        assert float((grad * direction).sum()) == pytest.approx(expected, rel=1e-5)


def test_a_mask_passed_for_the_labels_is_refused():
    z = torch.randn(4, 3)
    with pytest.raises(ValueError, match="'target' must hold one integer class per row"):
        calibrated_cross_entropy(z, torch.tensor([True, False, True, False]))


def test_an_ignored_label_is_refused():
    # A target of -100 (cross_entropy's ignore_index) was clamped to class 0 for
    # the temperature and then ignored by the loss: 0.871 where the labelled
    # rows' calibrated loss is 0.
    z = torch.tensor([[5.0, 0.0], [0.0, 5.0], [5.0, 0.0]])
    with pytest.raises(ValueError, match=r"'target' must hold classes in \[0, 2\)"):
        calibrated_cross_entropy(z, torch.tensor([0, 1, -100]))


@pytest.mark.parametrize('patience', [None, 3])
def test_a_non_finite_loss_leaves_the_parameters_and_the_optimizers_as_they_were(patience):
    # A NaN validation loss was reported (with patience) only after Adam had
    # stepped on its NaN gradient: the coefficients and Adam's moments were NaN,
    # every later forward refused to run; without patience, nothing was said
    # (review s55/bilevel). Reference: the state before the failed steps.
    x, edge_index, semantic, y, train, val = problem()
    model = tsgcn()
    step = BilevelStep(model, torch.optim.Adam(weight_parameters(model), lr=0.01),
                       torch.optim.Adam(coefficient_parameters(model), lr=0.05),
                       patience=patience)
    for _ in range(2):  # some state worth keeping
        out = model(x, edge_index, semantic_edge_index=semantic)
        step.weight_step(F.cross_entropy(out[train], y[train]))
        out = model(x, edge_index, semantic_edge_index=semantic)
        step.coefficient_step(calibrated_cross_entropy(out[val], y[val]))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    moments = [{k: v.clone() for k, v in s.items()}
               for opt in (step.weight_optimizer, step.coefficient_optimizer)
               for s in opt.state.values()]
    out = model(x, edge_index, semantic_edge_index=semantic)
    with pytest.warns(RuntimeWarning, match='non-finite gradient'), \
            pytest.raises(ValueError, match=r"The validation loss is nan: the coefficients "
                                            r"cannot learn on it and were left as they were"):
        step.coefficient_step(calibrated_cross_entropy(out[val], y[val]) * math.nan)
    out = model(x, edge_index, semantic_edge_index=semantic)
    with pytest.raises(ValueError, match=r"The training loss is inf: the weights"):
        step.weight_step(F.cross_entropy(out[train], y[train]) * math.inf)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name
        assert p.grad is None, name
    after = [s for opt in (step.weight_optimizer, step.coefficient_optimizer)
             for s in opt.state.values()]
    assert len(after) == len(moments)
    for old, new in zip(moments, after):
        assert all(torch.equal(old[k], new[k]) for k in old)
    # and training goes on from there
    out = model(x, edge_index, semantic_edge_index=semantic)
    assert math.isfinite(float(step.coefficient_step(calibrated_cross_entropy(out[val],
                                                                              y[val]))))


def test_a_param_group_added_after_the_step_was_made_is_refused():
    # The steps backpropagate into the parameters held at construction: a head
    # added by add_param_group() was never trained, silently (review s55/bilevel).
    x, edge_index, semantic, y, train, val = problem()
    model = tsgcn()
    weights = torch.optim.Adam(weight_parameters(model))
    coefficients = torch.optim.Adam(coefficient_parameters(model))
    step = BilevelStep(model, weights, coefficients)
    head = torch.nn.Linear(C, C).double()
    weights.add_param_group({'params': head.parameters()})
    out = head(model(x, edge_index, semantic_edge_index=semantic))
    with pytest.raises(ValueError, match=r"'weight_optimizer' holds 4 parameter\(s\) now, 2 of "
                                         r"them among the 2 BilevelStep was made with"):
        step.weight_step(F.cross_entropy(out[train], y[train]))
    weights.param_groups.pop()
    coefficients.add_param_group({'params': [torch.nn.Parameter(torch.zeros(()))]})
    with pytest.raises(ValueError, match=r"'coefficient_optimizer' holds 5 parameter\(s\)"):
        step.coefficient_step(F.cross_entropy(out[val], y[val]))


def test_a_masked_class_is_calibrated_as_if_absent():
    # A logit of -inf made 0 * inf = NaN in the Newton steps, and the temperature
    # fell back to 1 silently (review s55/bilevel). Reference: scipy's minimiser
    # of the cross-entropy without the masked column, which a class of
    # probability 0 does not change.
    gen = GEN().manual_seed(3)
    z = 2 * torch.randn(40, 4, dtype=torch.float64, generator=gen)
    y = (z[:, :3] + 2 * torch.randn(40, 3, dtype=torch.float64, generator=gen)).argmax(1)
    _, tau = scipy_calibrated(z[:, :3], y)
    masked = z.clone()
    masked[:, 3] = -math.inf
    assert math.isclose(float(calibrated_temperature(masked, y)), tau, rel_tol=1e-6)
    for bad in (math.nan, math.inf):
        masked[5, 1] = bad
        with pytest.raises(ValueError, match=r"'input' holds NaN or \+inf logits"):
            calibrated_temperature(masked, y)
