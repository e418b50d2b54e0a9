"""benchmarks.learnable: a stored run is reused, and routes are summarised
together, only when they were made with the same settings (the run's key
names the dataset, route, epochs, seed and device only)."""
import json

import pytest
import torch

from benchmarks.learnable import (
    GRIDS,
    IMPLICIT_FIELDS,
    TUNED,
    Run,
    choose,
    job_settings,
    merged_records,
    open_cells,
    record_key,
    settings,
    summarize,
    train_all,
)
from harness.report import Report


def _record(job, **changes):
    (k, dropout, decay, alpha, beta, hidden, coefficient_lr, patience, steps,
     implicit) = job_settings(job)
    record = dict(dataset=job.dataset, route=job.route, seed=job.seed, epochs=job.epochs,
                  alpha0=alpha, beta0=beta, k=k, dropout=dropout, weight_decay=decay,
                  hidden=hidden, acc=70.0, f1=60.0, val=70.0, last_acc=70.0, epoch=1,
                  seconds=1.0, device='cpu')
    if coefficient_lr is not None:
        record.update(coefficient_lr=coefficient_lr, patience=patience,
                      calibrated=steps is not None, newton_steps=steps)
    if implicit is not None:
        record.update(zip(IMPLICIT_FIELDS, implicit), implicit_every=implicit[-1])
    record.update(changes)
    return record


def test_a_run_stored_with_other_settings_is_refused(tmp_path):
    job = Run('CiteSeer', 'bilevel', 0, 500, None)
    path = tmp_path / 'cells.jsonl'
    path.write_text(json.dumps(_record(job, k=10)) + '\n')
    store = open_cells(str(path))
    assert settings(store.records()[0]) != job_settings(job)
    with pytest.raises(ValueError, match="stored with .* pass another --cells file"):
        train_all([store], [job], torch.device('cpu'), 'test')
    # The same settings: reused, nothing trained (no graph is loaded).
    path.write_text(json.dumps(_record(job)) + '\n')
    train_all([open_cells(str(path))], [job], torch.device('cpu'), 'test')
    assert record_key(_record(job)) == 'CiteSeer__bilevel__e500__0'


def test_an_implicit_run_of_other_constants_is_refused(tmp_path):
    # The indirect term's constants are part of a bilevel-implicit run's settings.
    job = Run('CiteSeer', 'bilevel-implicit', 0, 500, None)
    path = tmp_path / 'cells.jsonl'
    path.write_text(json.dumps(_record(job, neumann_steps=5)) + '\n')
    with pytest.raises(ValueError, match="stored with .* pass another --cells file"):
        train_all([open_cells(str(path))], [job], torch.device('cpu'), 'test')
    path.write_text(json.dumps(_record(job)) + '\n')
    train_all([open_cells(str(path))], [job], torch.device('cpu'), 'test')  # reused
    # The lagged route's period too; runs stored before it was recorded formed the
    # term every epoch.
    lagged = Run('CiteSeer', 'bilevel-implicit-lagged', 0, 500, None)
    path.write_text(json.dumps(_record(lagged, implicit_every=1)) + '\n')
    with pytest.raises(ValueError, match="stored with .* pass another --cells file"):
        train_all([open_cells(str(path))], [lagged], torch.device('cpu'), 'test')
    old = _record(job)
    del old['implicit_every']
    assert settings(old) == job_settings(job)


def test_routes_of_other_settings_are_not_summarised_together():
    grid = Run('CiteSeer', 'grid', 0, 500, (TUNED['CiteSeer'].alpha, TUNED['CiteSeer'].beta))
    bilevel = Run('CiteSeer', 'bilevel', 0, 500, None)
    with pytest.raises(ValueError, match=r'different \(k, dropout, weight decay, hidden\)'):
        summarize([_record(grid), _record(bilevel, dropout=0.5)], Report())


def test_a_calibrated_run_of_other_newton_steps_is_refused(tmp_path):
    # Runs stored before 'newton_steps' was recorded used 10 steps of
    # calibrated_cross_entropy (the default is now 30): not the run this code makes.
    job = Run('PubMed', 'bilevel', 0, 500, None)
    old = _record(job)
    del old['newton_steps']
    path = tmp_path / 'cells.jsonl'
    path.write_text(json.dumps(old) + '\n')
    with pytest.raises(ValueError, match="stored with .* pass another --cells file"):
        train_all([open_cells(str(path))], [job], torch.device('cpu'), 'test')


def test_a_tie_goes_to_the_first_point_in_grid_order():
    # The file may hold a later grid point first (a second shard's runs).
    def run(a, b, acc):
        return dict(alpha0=a, beta0=b, seed=0, val=80.0, acc=acc, seconds=1.0)
    later, first = (5.0, 1.0), (1.0, 0.1)
    assert GRIDS['PubMed'].index(first) < GRIDS['PubMed'].index(later)
    runs = [run(*later, 70.0), run(*first, 75.0)]
    assert choose(runs, order=GRIDS['PubMed']).choice == first


def test_a_run_stored_differently_in_two_cells_files_is_refused(tmp_path):
    # A split rerun into another --cells file (docs/learnable.md: bilevel runs of other
    # Newton steps) was summarised next to the stored one: its split counted twice.
    job = Run('PubMed', 'bilevel', 0, 500, None)
    first, second = tmp_path / 'a.jsonl', tmp_path / 'b.jsonl'
    first.write_text(json.dumps(_record(job, newton_steps=10)) + '\n')
    second.write_text(json.dumps(_record(job)) + '\n')
    same = tmp_path / 'c.jsonl'
    same.write_text(first.read_text())
    assert len(merged_records([open_cells(str(first)), open_cells(str(same))])) == 1
    with pytest.raises(ValueError, match='would count its split twice'):
        merged_records([open_cells(str(first)), open_cells(str(second))])


def test_the_summary_names_the_newton_steps_of_the_bilevel_runs():
    # Cora's stored bilevel runs used 10 steps, PubMed's 30: the summary row and
    # the route's row say which (a reader could not tell them apart before).
    alpha, beta = TUNED['Cora'].alpha, TUNED['Cora'].beta
    records = []
    for seed in range(2):
        records.append(_record(Run('Cora', 'grid', seed, 500, (alpha, beta))))
        old = _record(Run('Cora', 'bilevel', seed, 500, None))
        del old['newton_steps']
        records.append(old)
    rep = Report()
    summarize(records, rep)
    text = '\n'.join(rep.lines)
    assert '| Cora | cpu | 2 x 500 | 10 |' in text
    assert '; 10 Newton steps of the calibrated loss |' in text


def test_the_bilevel_error_route_descends_the_expected_error(monkeypatch):
    # The route's one difference from 'bilevel': its validation loss. Reference: the
    # expected error mean(1 - softmax(tau z)_y) at the calibrated temperature.
    from types import SimpleNamespace

    import benchmarks.learnable as learnable
    from tests.regularizers.test_bilevel import problem, tsgcn
    from torch_geometric_regcn.regularizers import calibrated_temperature
    x, edge_index, semantic, y, train, val = problem()
    original, seen = learnable.calibrated_expected_error, []

    def spy(input, target):
        loss = original(input, target)
        z = input.detach()
        tau = calibrated_temperature(z, target)
        expected = (1 - torch.softmax(tau * z, 1)[torch.arange(len(target)), target]).mean()
        seen.append(abs(float(loss.detach()) - float(expected)))
        return loss
    monkeypatch.setattr(learnable, 'calibrated_expected_error', spy)
    model = tsgcn()
    run = SimpleNamespace(y=y, train_mask=train, val_mask=val, test_mask=val)
    learnable.fit_bilevel(model, lambda: model(x, edge_index, semantic_edge_index=semantic),
                          run, 2, 5e-4, True, True, [], expected_error=True)
    assert len(seen) == 2 and max(seen) < 1e-12  # float64: the same arithmetic


def test_the_implicit_route_adds_the_neumann_hypergradient_of_the_dense_network(
        monkeypatch):
    # The route 'bilevel-implicit' adds -d2L/dlambda dW p, p the truncated Neumann
    # series of H^-1 g, every product a central difference of first-order gradients
    # through CG. Reference: the same series from exact Hessian-vector and mixed
    # products of the dense float64 network (double backward through
    # torch.linalg.solve). The differences at a step of 1e-5 times the weights'
    # norm, where no ReLU kink lies within it and the O(h^2) truncation is ~1e-10:
    # what is left is CG's residual (1e-13) over the step, far below 1e-5
    # relative; a wrong sign, term or scale errs by O(1). (At the route's 1e-3 the
    # kinks crossed make it 1.5e-4 here, an error of the hypergradient, not of
    # the formula.)
    import benchmarks.learnable as learnable
    monkeypatch.setattr(learnable, 'DIFFERENCE_STEP', 1e-5)
    from types import SimpleNamespace

    import torch.nn.functional as F

    from tests.regularizers.test_bilevel import problem, tsgcn
    from torch_geometric_regcn.regularizers import coefficient_parameters, weight_parameters
    from torch_geometric_regcn.regularizers.graph import GraphOperators
    x, edge_index, semantic, y, train, val = problem()
    model = tsgcn()
    optimizer = torch.optim.Adam(weight_parameters(model), lr=0.05)
    for _ in range(20):  # near a minimum, where the route uses the term
        optimizer.zero_grad()
        out = model(x, edge_index, semantic_edge_index=semantic)
        F.cross_entropy(out[train], y[train]).backward()
        optimizer.step()
    model.eval()
    weights = weight_parameters(model)
    raws = coefficient_parameters(model)
    assert weights == [conv.lin.weight for conv in model.convs]
    decay = 5e-4
    run = SimpleNamespace(y=y, train_mask=train, val_mask=val, test_mask=val)
    training = learnable._TrainingLoss(
        lambda: model(x, edge_index, semantic_edge_index=semantic), run, weights, raws, decay)
    out = model(x, edge_index, semantic_edge_index=semantic)
    g = list(torch.autograd.grad(F.cross_entropy(out[val], y[val]), weights))
    before = [p.detach().clone() for p in weights]
    got = training.indirect(g)
    assert all(torch.equal(p, b) for p, b in zip(weights, before))  # restored bit for bit

    n = x.size(0)
    ops = GraphOperators(n, edge_index, dtype=torch.float64, semantic_edge_index=semantic)
    a_g, a_x = ops.adj.to_dense(), ops.semantic_adjacency().to_dense()
    eye = torch.eye(n, dtype=torch.float64)
    w = [p.detach().clone().requires_grad_() for p in weights]
    r = [p.detach().clone().requires_grad_() for p in raws]

    def loss():
        h = x
        for i in range(len(w)):
            alpha, beta = F.softplus(r[2 * i]), F.softplus(r[2 * i + 1])
            s = (alpha * a_g + beta * a_x) / (1 + alpha + beta)
            h = torch.linalg.solve(eye - s, h @ w[i].T)
            h = h.relu() if i < len(w) - 1 else h
        return F.cross_entropy(h[train], y[train]) + 0.5 * decay * sum(
            t.square().sum() for t in w)

    def products(u):
        grads = torch.autograd.grad(loss(), w, create_graph=True)
        dot = sum((a * b).sum() for a, b in zip(grads, u))
        return torch.autograd.grad(dot, w + r)

    def norm(ts):
        return float(torch.sqrt(sum(t.square().sum() for t in ts)))

    hg = products(g)[:len(w)]
    eta = learnable.NEUMANN_SCALE * norm(g) / norm(hg)
    term, total, h = list(g), list(g), hg
    for j in range(learnable.NEUMANN_STEPS):
        if j:
            h = products(term)[:len(w)]
        term = [t - eta * a for t, a in zip(term, h)]
        total = [s + t for s, t in zip(total, term)]
    expected = [-m for m in products([eta * t for t in total])[len(w):]]
    torch.testing.assert_close(torch.stack(got), torch.stack(expected), rtol=1e-5,
                               atol=1e-5 * float(torch.stack(expected).abs().max()))


@pytest.mark.parametrize('every', [1, 2])
def test_the_implicit_route_steps_on_the_direct_plus_the_indirect_term(monkeypatch, every):
    # fit_bilevel(implicit=True): before the warm-up the coefficients step on the
    # direct gradient alone (as 'bilevel'); from it on, on direct + indirect, the
    # indirect term formed every 'every'-th epoch and the last one reused between
    # (the lagged route). The reference: the gradient the coefficient step
    # receives against the direct gradient of the same validation loss plus the
    # spied indirect term (float64, the same arithmetic; 1e-12).
    from types import SimpleNamespace

    import benchmarks.learnable as learnable
    from tests.regularizers.test_bilevel import problem, tsgcn
    from torch_geometric_regcn.regularizers import BilevelStep, coefficient_parameters
    x, edge_index, semantic, y, train, val = problem()
    model = tsgcn()
    raws = coefficient_parameters(model)
    added, received = [], []
    indirect = learnable._TrainingLoss.indirect

    def spy_indirect(self, g):
        out = indirect(self, g)
        added.append(torch.stack([t.detach() for t in out]))
        return out
    step = BilevelStep.coefficient_step

    def spy_step(self, loss):
        received.append(torch.stack(torch.autograd.grad(loss, raws, retain_graph=True)))
        return step(self, loss)
    monkeypatch.setattr(learnable._TrainingLoss, 'indirect', spy_indirect)
    monkeypatch.setattr(BilevelStep, 'coefficient_step', spy_step)
    monkeypatch.setattr(learnable, 'IMPLICIT_WARMUP', 3)
    forward = lambda: model(x, edge_index, semantic_edge_index=semantic)  # noqa: E731
    run = SimpleNamespace(y=y, train_mask=train, val_mask=val, test_mask=val)
    directs = []
    original = learnable.calibrated_cross_entropy

    def spy_loss(input, target):
        loss = original(input, target)
        directs.append(torch.stack(torch.autograd.grad(loss, raws, retain_graph=True)))
        return loss
    monkeypatch.setattr(learnable, 'calibrated_cross_entropy', spy_loss)
    learnable.fit_bilevel(model, forward, run, 5, 5e-4, True, True, [], implicit=True,
                          every=every)
    formed = [2, 3, 4] if every == 1 else [2, 4]  # epochs 3 to 5, or 3 and 5
    assert len(received) == len(directs) == 5 and len(added) == len(formed)
    for epoch in range(5):
        last = [i for i, e in enumerate(formed) if e <= epoch]
        expected = directs[epoch] + (added[last[-1]] if last else 0)
        torch.testing.assert_close(received[epoch], expected, rtol=1e-12, atol=1e-14)
