import json
import math
import os
import statistics
import tempfile
from functools import partial

import pytest
import torch
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Data
from torch_geometric.nn import APPNP, DirGNNConv, FAConv, GCN2Conv, GCNConv, SAGEConv
from torch_geometric.nn.models import LINKX, Polynormer

from harness.data import has_offline_copy
from harness.heterophily import (
    MODELS,
    PROTOCOL,
    SEARCH_BUDGET,
    SEMANTIC_K,
    STACK_GRID,
    Dims,
    Model,
    SplitResult,
    Stack,
    configurations,
    fit_model,
    fit_split,
    load_heterophilous,
    local_epochs,
    official_split,
    score,
    search,
    select,
)
from harness.heterophily_results import Journal, format_summary, format_table, merge, record
from harness.training import fit
from torch_geometric_regcn import RegularizerConv, SemanticGraph
from torch_geometric_regcn.datasets import contextual_sbm, paper_split

# score() computes the ROC-AUC as a Mann-Whitney count: a sum of (half-)integer
# ranks, exact in float64, and one division; scikit-learn integrates the ROC
# curve by the trapezoid rule over its cumulative counts. Both are the same
# rational number up to a few roundings of numbers below 1: 1e-12 is far above
# that and far below the 1 / (P * N) >= 1e-6 one swapped pair would change.
AUC_TOL = 1e-12


@pytest.mark.parametrize('seed', range(4))
def test_roc_auc_matches_scikit_learn_with_ties(seed):
    gen = torch.Generator().manual_seed(seed)
    n = 300
    # Class 0's logit is zero and class 1's a small integer: many tied scores,
    # and the softmax probabilities (float64) tie exactly where the logits do.
    logits = torch.stack([torch.zeros(n), torch.randint(-3, 4, (n,), generator=gen).float()], 1)
    y = torch.randint(0, 2, (n,), generator=gen)
    mask = torch.rand(n, generator=gen) < 0.7
    prob = torch.softmax(logits.double(), dim=-1)[:, 1]
    expected = roc_auc_score(y[mask].numpy(), prob[mask].numpy())
    assert score(logits, y, mask, 'roc_auc') == pytest.approx(expected, abs=AUC_TOL)


@pytest.mark.parametrize('seed', range(3))
def test_roc_auc_matches_scikit_learn_on_continuous_logits(seed):
    gen = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(500, 2, generator=gen)
    y = (logits[:, 1] - logits[:, 0] + 2 * torch.randn(500, generator=gen) > 0).long()
    mask = torch.ones(500, dtype=torch.bool)
    prob = torch.softmax(logits.double(), dim=-1)[:, 1]
    expected = roc_auc_score(y.numpy(), prob.numpy())
    assert 0.6 < expected < 1.0  # informative, not perfect
    assert score(logits, y, mask, 'roc_auc') == pytest.approx(expected, abs=AUC_TOL)


def test_roc_auc_ranks_without_the_ties_of_a_saturated_softmax():
    # Logit differences of 20-50: float32's softmax rounds every probability to
    # 1.0, which would score the ranking 0.5; the logit difference keeps it.
    logits = torch.tensor([[0., 50.], [0., 40.], [0., 30.], [0., 20.]])
    y = torch.tensor([1, 0, 1, 0])
    mask = torch.ones(4, dtype=torch.bool)
    assert torch.softmax(logits, dim=-1)[:, 1].eq(1.0).all()
    expected = roc_auc_score(y.numpy(), (logits[:, 1] - logits[:, 0]).double().numpy())
    assert expected == 0.75
    assert score(logits, y, mask, 'roc_auc') == pytest.approx(expected, abs=AUC_TOL)
    assert math.isnan(score(torch.full((4, 2), math.nan), y, mask, 'roc_auc'))


@pytest.mark.parametrize('seed', range(3))
def test_accuracy_is_a_direct_count(seed):
    gen = torch.Generator().manual_seed(seed)
    n, c = 211, 5
    logits = torch.randint(0, 3, (n, c), generator=gen).float()  # ties: the first max wins
    y = torch.randint(0, c, (n,), generator=gen)
    mask = torch.rand(n, generator=gen) < 0.5
    correct = 0
    for row, label, keep in zip(logits.tolist(), y.tolist(), mask.tolist()):
        if keep:
            first_max = max(range(c), key=lambda j: (row[j], -j))
            correct += first_max == label
    assert score(logits, y, mask, 'accuracy') == correct / int(mask.sum())


def test_accuracy_of_nan_logits_is_nan_not_a_vote_for_class_0():
    # argmax reads a row of nan as class 0: an all-nan epoch scored the share
    # of class 0 and could be selected as the best one.
    y = torch.tensor([0, 0, 0, 1])
    mask = torch.ones(4, dtype=torch.bool)
    logits = torch.randn(4, 2)
    logits[2, 1] = math.nan
    assert math.isnan(score(logits, y, mask, 'accuracy'))
    logits[2] = torch.tensor([math.inf, -math.inf])  # infinite logits still rank
    assert score(logits, y, mask, 'accuracy') == float((logits.argmax(1) == y).float().mean())
    masked_out = torch.tensor([True, True, False, True])
    logits[2, 1] = math.nan
    assert not math.isnan(score(logits, y, masked_out, 'accuracy'))


def test_score_refuses_what_it_cannot_score():
    logits, y = torch.randn(6, 3), torch.tensor([0, 1, 2, 0, 1, 2])
    mask = torch.ones(6, dtype=torch.bool)
    with pytest.raises(ValueError, match="'metric' must be one of.*'f1'"):
        score(logits, y, mask, 'f1')
    with pytest.raises(ValueError, match=r'official_split\(data, k\)'):
        score(logits, y, mask[:, None].repeat(1, 10), 'accuracy')
    with pytest.raises(ValueError, match='selects no node'):
        score(logits, y, torch.zeros(6, dtype=torch.bool), 'accuracy')
    with pytest.raises(ValueError, match=r"two classes: 'logits' must be \[N, 2\]"):
        score(logits, y, mask, 'roc_auc')
    with pytest.raises(ValueError, match=r'classes 0 and 1 only.*\[1\]'):
        score(logits[:, :2], torch.ones(6, dtype=torch.long), mask, 'roc_auc')


def official(num_nodes=12, num_splits=10, seed=0):
    gen = torch.Generator().manual_seed(seed)
    part = torch.randint(0, 3, (num_nodes, num_splits), generator=gen)
    return Data(x=torch.randn(num_nodes, 4, generator=gen), y=torch.arange(num_nodes) % 2,
                edge_index=torch.tensor([[0, 1], [1, 0]]), train_mask=part == 0,
                val_mask=part == 1, test_mask=part == 2)


def test_official_split_picks_column_k():
    data = official()
    masks = {part: data[part].clone() for part in ('train_mask', 'val_mask', 'test_mask')}
    for k in (0, 3, 9):
        split = official_split(data, k)
        for part, mask in masks.items():
            assert split[part].shape == (12,)
            assert torch.equal(split[part], mask[:, k])
        assert split.x is data.x and split.edge_index is data.edge_index  # shallow
    for part, mask in masks.items():  # the input keeps its [N, 10] masks
        assert torch.equal(data[part], mask)


@pytest.mark.parametrize('k', [10, -1, 25])
def test_official_split_refuses_k_out_of_range(k):
    with pytest.raises(ValueError, match=rf"'k' must be an official split in \[0, 9\].*K = 10"
                                         rf".*k={k}"):
        official_split(official(), k)


def test_official_split_needs_the_official_masks():
    with pytest.raises(ValueError, match="'k' must be an integer.*e.g. 1"):
        official_split(official(), 1.0)
    one = official_split(official(), 0)
    with pytest.raises(ValueError, match=r"boolean \[N, K\] 'data.train_mask'.*shape \[12\]"):
        official_split(one, 0)


class Replay(torch.nn.Module):
    r"""Returns a fixed sequence of logits in eval mode (one per epoch), and in
    training mode logits that depend on one parameter, so that the optimiser
    has something to step."""
    def __init__(self, sequence):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.sequence, self.calls = sequence, 0

    def forward(self):
        if self.training:
            return self.weight * torch.ones_like(self.sequence[0])
        self.calls += 1
        return self.sequence[self.calls - 1]


def two_class_split():
    # Nodes 0-1 train, 2-5 validation (classes 1, 1, 0, 0), 6-9 test.
    y = torch.tensor([0, 1, 1, 1, 0, 0, 1, 0, 1, 0])
    masks = [torch.zeros(10, dtype=torch.bool) for _ in range(3)]
    masks[0][:2], masks[1][2:6], masks[2][6:] = True, True, True
    return Data(y=y, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])


def logits_of(val_scores, test_scores):
    # logit 1 - logit 0 = the score; nodes 0-1 (training) get 0.
    diff = torch.tensor([0., 0., *val_scores, *test_scores])
    return torch.stack([torch.zeros(10), diff], dim=1)


# On validation (classes 1, 1, 0, 0), with predicted class 1 where the score > 0:
# A: every node predicted 1: accuracy 0.5, AUC 1.0;
# B: [1, .5, -1, 2]: accuracy 0.75, AUC 0.5 (each positive beats one negative);
# C: positives below negatives: accuracy 0, AUC 0.
EPOCHS = [logits_of([3, 2, 1, .5], [1, -1, 2, -2]),   # 0: A
          logits_of([1, .5, -1, 2], [-1, 1, -2, 2]),  # 1: B
          logits_of([3, 2, 1, .5], [2, 1, -1, -2]),   # 2: A again (ties epoch 0)
          logits_of([-1, -2, 1, 2], [1, 2, 3, 4])]    # 3: C


@pytest.mark.parametrize('metric,epoch', [('roc_auc', 2), ('accuracy', 1)])
def test_fit_split_selects_the_epoch_by_the_validation_metric(metric, epoch):
    data = two_class_split()
    val = [score(out, data.y, data.val_mask, metric) for out in EPOCHS]
    assert val == ([1.0, 0.5, 1.0, 0.0] if metric == 'roc_auc' else [0.5, 0.75, 0.5, 0.0])
    model, seen = Replay(EPOCHS), []
    result = fit_split(model, model, data, metric, epochs=4, on_epoch=seen.append)
    assert seen == [0, 1, 2, 3] and model.calls == 4 and result.seconds > 0
    # The later of the tied epochs 0 and 2 for ROC-AUC; never epoch 1's accuracy peak.
    assert result.best_epoch == epoch and result.val == val[epoch]
    assert result.test == score(EPOCHS[epoch], data.y, data.test_mask, metric)
    assert result.test != score(EPOCHS[1 if epoch == 2 else 2], data.y, data.test_mask, metric)


def test_fit_split_checks_before_training():
    data, model = two_class_split(), Replay(EPOCHS)
    with pytest.raises(ValueError, match="'metric' must be one of"):
        fit_split(model, model, data, 'auc', epochs=4)
    one_class = data.clone()
    one_class.y[2:4] = 0  # validation: class 0 only
    with pytest.raises(ValueError, match=r"classes 0 and 1 only, both in 'data.val_mask'.*\[0\]"):
        fit_split(model, model, one_class, 'roc_auc', epochs=4)
    stacked = data.clone()
    stacked.val_mask = stacked.val_mask[:, None].repeat(1, 10)
    with pytest.raises(ValueError, match=r"official_split\(data, k\)"):
        fit_split(model, model, stacked, 'accuracy', epochs=4)
    assert model.calls == 0 and model.weight.item() == 0.0  # nothing trained


def test_fit_split_warns_when_no_epoch_has_a_finite_score():
    data = two_class_split()
    model = Replay([torch.full((10, 2), math.nan)] * 3)
    with pytest.warns(UserWarning, match='no epoch of 3 had a finite validation roc_auc'):
        result = fit_split(model, model, data, 'roc_auc', epochs=3)
    assert result.best_epoch == -1 and math.isnan(result.test) and math.isnan(result.val)
    # Epoch 0 says class 1 everywhere (validation 2 of 4); epoch 1 is nan,
    # which argmax would read as class 0 everywhere (also 2 of 4, and later).
    model = Replay([torch.tensor([[0., 1.]]).repeat(10, 1), torch.full((10, 2), math.nan)])
    result = fit_split(model, model, data, 'accuracy', epochs=2)
    assert result.best_epoch == 0 and result.val == 0.5


def test_fit_split_with_accuracy_is_fit():
    # The same training loop: the same epochs, the same selection (later epoch
    # on ties); fit's float32 mean over 600 test nodes is within 1e-6 of
    # the exact count.
    data = paper_split(contextual_sbm(1200, num_classes=4, num_features=16, seed=2), seed=0,
                       num_val=300, num_test=600)
    results = []
    for train in (fit, fit_split):
        torch.manual_seed(0)
        model = MODELS['gcn'].build(Dims(16, 4, 1200), configurations('gcn')[0])
        args = ('accuracy',) if train is fit_split else ()
        results.append(train(model, partial(model, data.x, data.edge_index), data, *args,
                             epochs=25))
    by_fit, by_split = results
    assert by_split.best_epoch == by_fit.best_epoch
    assert by_split.test == pytest.approx(by_fit.accuracy, abs=1e-6)
    assert by_split.val == pytest.approx(by_fit.val_accuracy, abs=1e-6)


def small_graph():
    data = contextual_sbm(300, num_classes=3, num_features=12, seed=0)
    return SemanticGraph(SEMANTIC_K, progress=False)(paper_split(data, seed=0, num_val=60,
                                                                 num_test=150))


def test_gcn_and_appnp_are_pyg_layers_in_the_stack():
    data = small_graph()
    dims = Dims(12, 3, 300)
    torch.manual_seed(0)
    gcn = MODELS['gcn'].build(dims, configurations('gcn')[0]).eval()
    first, second = gcn.layers
    assert isinstance(first, GCNConv) and (first.in_channels, first.out_channels) == (12, 64)
    reference = second(first(data.x, data.edge_index).relu(), data.edge_index)
    torch.testing.assert_close(MODELS['gcn'].run(gcn, data), reference, rtol=0, atol=0)
    appnp = MODELS['appnp'].build(dims, configurations('appnp')[1]).eval()
    mlp = appnp.layers[1](appnp.layers[0](data.x).relu())
    reference = APPNP(K=10, alpha=0.5)(mlp, data.edge_index)
    torch.testing.assert_close(MODELS['appnp'].run(appnp, data), reference, rtol=0, atol=0)
    assert isinstance(gcn, Stack) and gcn.dropout == PROTOCOL.dropout and not gcn.residual


def test_residual_stack_is_a_pre_norm_residual_block_around_each_layer():
    data = small_graph()
    config = configurations('gcn')[2]
    assert config['residual'] and config['layers'] == 4
    torch.manual_seed(0)
    model = MODELS['gcn'].build(Dims(12, 3, 300), config).eval()
    assert model.residual and len(model.layers) == 4 and len(model.norms) == 5
    assert all(isinstance(conv, GCNConv) and (conv.in_channels, conv.out_channels) == (64, 64)
               for conv in model.layers)
    # Reference: the block written out with the stack's own modules.
    x = model.encoder(data.x).relu()
    for conv, norm in zip(model.layers, model.norms):
        x = x + conv(torch.nn.functional.layer_norm(x, (64,), norm.weight, norm.bias),
                     data.edge_index).relu()
    last = model.norms[-1]
    reference = model.decoder(torch.nn.functional.layer_norm(x, (64,), last.weight, last.bias))
    torch.testing.assert_close(MODELS['gcn'].run(model, data), reference, rtol=0, atol=0)
    # Dropout is active in training mode only.
    model.train()
    assert not torch.equal(model(data.x, data.edge_index), reference)
    with pytest.raises(ValueError, match="both 'encoder' and 'decoder'"):
        Stack(model.layers, 0.5, encoder=model.encoder)


def test_the_new_baselines_are_the_pyg_layers_they_name():
    dims = Dims(12, 3, 300)
    gcnii = MODELS['gcnii'].build(dims, configurations('gcnii')[0])
    assert len(gcnii.convs) == 4 and all(
        isinstance(conv, GCN2Conv) and conv.alpha == 0.1 and conv.weight2 is None
        for conv in gcnii.convs)  # shared weights: one matrix per layer
    assert [conv.beta for conv in gcnii.convs] == pytest.approx(
        [math.log(0.5 / layer + 1) for layer in range(1, 5)])
    fagcn = MODELS['fagcn'].build(dims, configurations('fagcn')[1])
    assert len(fagcn.convs) == 4 and all(isinstance(conv, FAConv) and conv.eps == 0.1
                                         for conv in fagcn.convs)
    for name, inner in (('dir_gcn', GCNConv), ('dir_sage', SAGEConv)):
        model = MODELS[name].build(dims, configurations(name)[0])
        assert all(isinstance(layer, DirGNNConv) and isinstance(layer.conv_in, inner)
                   and layer.alpha == 0.5 and layer.root_weight for layer in model.layers)
    linkx = MODELS['linkx'].build(dims, configurations('linkx')[2])
    assert isinstance(linkx, LINKX) and linkx.num_nodes == 300 and len(linkx.final_mlp.lins) == 3
    polynormer = MODELS['polynormer'].build(dims, configurations('polynormer')[2])
    assert isinstance(polynormer, Polynormer) and len(polynormer.local_convs) == 7


def test_polynormer_is_pygs_on_one_graph_and_switches_to_global_after_its_local_epochs():
    data = small_graph()
    config = configurations('polynormer', PROTOCOL._replace(epochs=10))[0]
    assert local_epochs(config) == 5
    torch.manual_seed(0)
    model = MODELS['polynormer'].build(Dims(12, 3, 300), config).eval()
    reference = Polynormer(12, 64, 3, local_layers=2).eval()
    reference.load_state_dict(model.state_dict())
    batch = torch.zeros(300, dtype=torch.long)
    switch = MODELS['polynormer'].schedule
    for epoch in range(10):
        assert model._global == (epoch >= 5)
        reference._global = model._global
        torch.testing.assert_close(model(data.x, data.edge_index),
                                   reference(data.x, data.edge_index, batch), rtol=0, atol=0)
        switch(model, epoch, config)
    model.reset_parameters()
    assert not model._global


def test_polynormer_with_the_packages_layer_is_polynormer_where_the_layer_is_gcnconv():
    # Reference: PyG's Polynormer (its local layers GCNConv); RegularizerConv
    # with the 'gcn' regulariser is GCNConv (one hop of the renormalised
    # adjacency, then the bias), so the same weights give the same outputs,
    # in float64 to the rounding of a 2-layer network (1e-12).
    data = small_graph()
    config = {**configurations('regcn_polynormer', PROTOCOL._replace(epochs=10))[0],
              'regularizer': 'gcn', 'learn': ()}
    del config['K'], config['alpha']
    torch.manual_seed(0)
    model = MODELS['regcn_polynormer'].build(Dims(12, 3, 300), config).double().eval()
    assert all(isinstance(conv, RegularizerConv) for conv in model.local_convs)
    reference = Polynormer(12, 64, 3, local_layers=2).double().eval()
    # The regulariser's coefficients (none for 'gcn') are extra state.
    reference.load_state_dict({key: value for key, value in model.state_dict().items()
                               if not key.endswith('_extra_state')})
    x, batch = data.x.double(), torch.zeros(300, dtype=torch.long)
    for is_global in (False, True):
        model._global = reference._global = is_global
        torch.testing.assert_close(model(x, data.edge_index),
                                   reference(x, data.edge_index, batch), rtol=0, atol=1e-12)
    # As configured: the learned degree-2 response in each of the 7 layers.
    model = MODELS['regcn_polynormer'].build(Dims(12, 3, 300),
                                             configurations('regcn_polynormer')[2])
    assert len(model.local_convs) == 7
    for conv in model.local_convs:
        assert conv.regularizer.name == 'polynomial' and conv.regularizer.gamma.numel() == 3
        assert conv.regularizer.raw_gamma.requires_grad and not conv.root_weight
    assert model.local_convs[1].in_channels == model.local_convs[1].out_channels == 64


def test_every_model_trains_in_every_configuration_of_its_grid():
    data = small_graph()
    protocol = PROTOCOL._replace(epochs=2)
    for name in MODELS:
        for config in configurations(name, protocol):
            result = fit_model(name, data, 'accuracy', config, seed=1)
            assert 0.0 <= result.test <= 1.0 and 0 <= result.best_epoch < 2, (name, config)
            json.dumps(config)  # serialisable
    with pytest.raises(ValueError, match=r"tsgcn needs 'data.semantic_edge_index'"):
        del data.semantic_edge_index
        fit_model('tsgcn', data, 'accuracy')


def test_gprgnn_learns_its_weights_without_decay():
    model = MODELS['gprgnn'].build(Dims(12, 3, 300), configurations('gprgnn')[0])
    groups = MODELS['gprgnn'].param_groups(model)
    assert groups == [{'params': [model.gamma], 'weight_decay': 0.0}]


def test_configurations_layer_protocol_config_and_grid_point():
    configs = configurations('gcnii', PROTOCOL._replace(lr=0.02))
    assert [c['layers'] for c in configs] == [4, 8, 16]
    assert all(c['lr'] == 0.02 and c['alpha'] == 0.1 and c['epochs'] == 300 for c in configs)
    assert configurations('gcn') == [{**PROTOCOL._asdict(), 'layer': 'GCNConv', **point}
                                     for point in STACK_GRID]
    assert all(1 <= len(model.grid) <= SEARCH_BUDGET for model in MODELS.values())


def fake_model(*grid):
    return Model('Fake', lambda dims, config: None, lambda model, data: None, {'option': 0},
                 tuple(grid))


@pytest.mark.parametrize('grid,match', [
    ((), 'the grid must hold 1 to SEARCH_BUDGET = 3 points.*got 0'),
    (({'option': i} for i in range(4)), 'the grid must hold 1 to SEARCH_BUDGET = 3 points.*got 4'),
    (({'optoin': 1},), r"grid point \{'optoin': 1\} sets \['optoin'\], which is neither a "
                       r"Protocol field nor in its config \(keys: .*'option'"),
    (({'epochs': 100},), r"grid point \{'epochs': 100\} sets epochs"),
])
def test_configurations_refuse_a_grid_outside_the_rule(monkeypatch, grid, match):
    monkeypatch.setitem(MODELS, 'fake', fake_model(*grid))
    with pytest.raises(ValueError, match=f'^fake: {match}'):
        configurations('fake')


def test_select_takes_the_best_mean_the_first_on_ties_never_nan():
    assert select([0.5, 0.7, 0.7, 0.6]) == 1
    assert select([math.nan, 0.2, 0.1]) == 1
    with pytest.warns(UserWarning, match='every configuration had a nan'):
        assert select([math.nan, math.nan]) == 0


# Validation and test scores per grid point and split, made so that choosing by
# mean validation gives point 1, while choosing by test (mean or any split),
# by the first split's validation or by the best single validation score
# gives another point.
VAL = [[0.50, 0.50, 0.50], [0.40, 0.70, 0.70], [0.80, 0.45, 0.45]]
TEST = [[0.90, 0.90, 0.90], [0.10, 0.20, 0.30], [0.50, 0.60, 0.70]]


def fake_fit(calls):
    def fit(name, data, metric, config, seed):
        calls.append((name, data, metric, config, seed))
        point, k = config['option'], [3, 5, 7].index(seed)
        return SplitResult(TEST[point][k], VAL[point][k], 10 * point + k, 0.5)
    return fit


def test_search_chooses_by_mean_validation_never_by_test(monkeypatch):
    monkeypatch.setitem(MODELS, 'fake', fake_model({'option': 0}, {'option': 1},
                                                   {'option': 2}))
    data, calls, seen = official(), [], []
    found = search('fake', data, 'accuracy', [3, 5, 7], fit=fake_fit(calls),
                   on_run=lambda point, k, result: seen.append((point, k)))
    assert found.index == 1 and found.config == {**PROTOCOL._asdict(), 'option': 1}
    assert found.mean_val == pytest.approx([sum(v) / 3 for v in VAL])
    assert [r.test for r in found.chosen_runs] == TEST[1]
    assert found.splits == [3, 5, 7] and seen == [(p, k) for p in range(3) for k in (3, 5, 7)]
    # Every point on every split, seeded by the split, on that split's masks.
    assert [(c[3]['option'], c[4]) for c in calls] == [(p, k) for p in range(3)
                                                         for k in (3, 5, 7)]
    for name, split, metric, config, k in calls:
        assert name == 'fake' and metric == 'accuracy'
        assert config == configurations('fake')[config['option']]
        assert torch.equal(split.val_mask, data.val_mask[:, k])
        assert torch.equal(split.test_mask, data.test_mask[:, k])


def test_search_with_fewer_points_tries_the_first_ones_only(monkeypatch):
    # The example's --points: a smaller budget that leaves the model's grid whole
    # (it was cut in MODELS, so a second search in the same process saw the cut).
    grid = ({'option': 0}, {'option': 1}, {'option': 2})
    monkeypatch.setitem(MODELS, 'fake', fake_model(*grid))
    calls = []
    found = search('fake', official(), 'accuracy', [3, 5, 7], fit=fake_fit(calls), points=2)
    assert found.grid == grid[:2] and found.configs == configurations('fake')[:2]
    assert found.mean_val == pytest.approx([sum(v) / 3 for v in VAL[:2]])
    assert found.index == 1 and {c[3]['option'] for c in calls} == {0, 1}
    assert MODELS['fake'].grid == grid and len(configurations('fake')) == 3
    with pytest.raises(ValueError, match=r"'points' must be a positive integer \(got 0\)"):
        configurations('fake', points=0)


def test_search_checks_the_splits_before_training(monkeypatch):
    monkeypatch.setitem(MODELS, 'fake', fake_model({'option': 0}))
    calls = []
    for splits, match in (([3, 3], 'distinct'), ([], 'at least one'),
                          ([0, 10], r"'k' must be an official split in \[0, 9\]")):
        with pytest.raises(ValueError, match=match):
            search('fake', official(), 'accuracy', splits, fit=fake_fit(calls))
    assert calls == []


def fake_searches(names, splits=(3, 5, 7), protocol=PROTOCOL):
    # Real model names (their grids and configurations), fake training.
    def fit(name, data, metric, config, seed):
        point = [c for c in configurations(name, protocol)].index(config)
        base = 0.1 * list(MODELS).index(name) + 0.01 * point
        return SplitResult(base + 0.001 * seed, 0.5 - 0.01 * point + 0.002 * seed, seed, 1.0)
    return [search(name, official(), 'accuracy', splits, protocol, fit) for name in names]


LABELS = {name: model.label for name, model in MODELS.items()}


def test_record_holds_the_issues_keys_and_every_run():
    rec = record('chameleon_filtered', 'accuracy', fake_searches(['mlp', 'gcn']), LABELS)
    assert list(rec)[:4] == ['dataset', 'metric', 'chosen', 'results']
    assert rec['chosen']['gcn']['grid'] == list(STACK_GRID) and rec['chosen']['gcn']['index'] == 0
    assert rec['chosen']['gcn']['config'] == configurations('gcn')[0]
    assert rec['results']['gcn'] == pytest.approx([0.103, 0.105, 0.107])
    assert rec['splits'] == [3, 5, 7] and rec['best_epoch']['mlp'] == [3, 5, 7]
    # The fake's own arithmetic (mlp is model 0): every point's runs, in grid order.
    assert [run['test'] for run in rec['runs']['mlp']] == [
        [0.1 * 0 + 0.01 * p + 0.001 * k for k in (3, 5, 7)] for p in range(3)]
    json.dumps(rec)


def test_merge_is_the_record_of_one_process():
    one = record('actor', 'accuracy', fake_searches(['mlp', 'gcn', 'gat']), LABELS)
    parts = [record('actor', 'accuracy', fake_searches(names), LABELS)
             for names in (['mlp', 'gcn'], ['gat'])]
    other = record('minesweeper', 'roc_auc', fake_searches(['gcn']), LABELS)
    merged = merge([parts[0], other, parts[1]], ['a.json', 'b.json', 'c.json'])
    assert list(merged) == ['actor', 'minesweeper']
    assert json.dumps(merged['actor']) == json.dumps(one)  # the same keys, in the same order
    assert merged['minesweeper'] == other
    summary = format_summary(merged)
    assert 'actor (accuracy)' in summary and 'minesweeper (roc_auc)' in summary
    assert summary.splitlines()[1].split()[0] == 'MLP'


def _searches_with_val(val_of, names, splits=(3, 5, 7)):
    # Fake training whose validation score is val_of(name, point) + 0.001 * split
    # and whose test score names the run: 10 * model index + point + split / 100.
    def fit(name, data, metric, config, seed):
        point = configurations(name).index(config)
        return SplitResult(10 * list(MODELS).index(name) + point + seed / 100,
                           val_of(name, point) + 0.001 * seed, seed, 1.0)
    return [search(name, official(), 'accuracy', splits, PROTOCOL, fit) for name in names]


@pytest.mark.parametrize('best', [('regcn', 2), ('regcn_polynormer', 1)])
def test_the_recommended_model_is_one_search_over_both_grids(best):
    from harness.heterophily import RECOMMENDED

    assert RECOMMENDED == ('regcn', 'regcn_polynormer')
    rec = record('actor', 'accuracy', _searches_with_val(
        lambda name, point: 0.6 if (name, point) == best else 0.3 + 0.01 * point,
        ['gcn', 'regcn', 'regcn_polynormer']), LABELS)
    # First, before the models it is derived from.
    assert list(rec['results']) == ['recommended', 'gcn', 'regcn', 'regcn_polynormer']
    chosen = rec['chosen']['recommended']
    grid = [{'model': name, **point} for name in RECOMMENDED
            for point in MODELS[name].grid]
    assert chosen['grid'] == grid and len(grid) == 6
    # The reference: the mean validation score of every point of both grids.
    means = [statistics.mean(0.6 if (point['model'], i % 3) == best else 0.3 + 0.01 * (i % 3)
                             for _ in (3, 5, 7)) + 0.005 for i, point in enumerate(grid)]
    assert chosen['mean_val'] == pytest.approx(means, abs=1e-12)
    index = max(range(6), key=lambda i: (means[i], -i))
    assert chosen['index'] == index and grid[index]['model'] == best[0]
    assert chosen['config'] == {'model': best[0], **configurations(best[0])[best[1]]}
    position = list(MODELS).index(best[0])
    assert rec['results']['recommended'] == pytest.approx(
        [10 * position + best[1] + k / 100 for k in (3, 5, 7)])
    for key in ('results', 'val', 'best_epoch', 'seconds'):
        assert rec[key]['recommended'] == rec[key][best[0]]
    assert rec['runs']['recommended'] == rec['runs']['regcn'] + rec['runs']['regcn_polynormer']
    assert rec['labels']['recommended'] == 'Recommended (by validation)'
    # Its search spans both grids: no "unequal budgets" against models of 3 points.
    lines = format_table(rec).splitlines()
    assert not any(line.startswith('Unequal budgets') for line in lines)
    assert lines[-1] == ('Recommended (by validation): one search over the grids of regcn '
                         'and regcn_polynormer together (6 points), its scores those of the '
                         'point it chose')
    json.dumps(rec)

    # Without one of its models there is no recommended model; the merge of
    # processes that ran them apart derives it, and an entry of a file is not
    # taken as it stands.
    alone = record('actor', 'accuracy', _searches_with_val(
        lambda name, point: 0.3, ['gcn', 'regcn']), LABELS)
    assert 'recommended' not in alone['results']
    parts = [record('actor', 'accuracy', searches, LABELS) for searches in (
        _searches_with_val(lambda name, point: 0.6 if (name, point) == best else 0.3,
                           names) for names in (['gcn', 'regcn'], ['regcn_polynormer']))]
    parts[1]['results']['recommended'] = [0.0] * 3  # stale: replaced, not refused
    merged = merge(parts, ['a.json', 'b.json'])['actor']
    assert list(merged['results'])[0] == 'recommended'
    assert merged['chosen']['recommended']['config']['model'] == best[0]
    assert merged['results']['recommended'] == merged['results'][best[0]]


def test_merge_refuses_records_that_do_not_compare():
    rec = record('actor', 'accuracy', fake_searches(['mlp']), LABELS)
    with pytest.raises(ValueError, match=r"model 'mlp' is in both a.json and b.json"):
        merge([rec, rec], ['a.json', 'b.json'])
    other_splits = record('actor', 'accuracy', fake_searches(['gcn'], (0, 1, 2)), LABELS)
    with pytest.raises(ValueError, match=r'b.json has splits \[0, 1, 2\], a.json has '
                                         r'\[3, 5, 7\]'):
        merge([rec, other_splits], ['a.json', 'b.json'])
    short = record('chameleon_filtered', 'accuracy',
                   fake_searches(['gcn'], protocol=PROTOCOL._replace(epochs=5)), LABELS)
    with pytest.raises(ValueError, match='different numbers of epochs.*b.json'):
        merge([rec, short], ['a.json', 'b.json'])
    with pytest.raises(ValueError, match=r"c.json: not a record.*'chosen'"):
        merge([{'dataset': 'actor', 'metric': 'accuracy', 'splits': [], 'results': {}}],
              ['c.json'])


def test_a_diverged_run_is_a_nan_in_the_table_not_a_crash():
    # statistics.stdev cannot sum a nan (AttributeError on Python 3.11), and the
    # table was printed before --json was written: a run whose model diverged on
    # one split lost the whole record (review s55/harness).
    rec = record('actor', 'accuracy', fake_searches(['mlp', 'gcn']), LABELS)
    rec['results']['mlp'] = [0.30, math.nan, 0.35]
    mlp = next(line for line in format_table(rec).splitlines() if line.startswith('MLP '))
    assert 'nan ± nan' in mlp


def test_load_reads_back_a_merge_of_several_datasets(tmp_path):
    # A merge of two datasets writes {dataset: record}; merging that file with a
    # third failed as "not a record of examples.heterophily" (review s55/harness).
    from harness.heterophily_results import load
    actor = record('actor', 'accuracy', fake_searches(['mlp']), LABELS)
    chameleon = record('chameleon_filtered', 'accuracy', fake_searches(['mlp']), LABELS)
    more = record('chameleon_filtered', 'accuracy', fake_searches(['gcn']), LABELS)
    for name, obj in [('both.json', {'actor': actor, 'chameleon_filtered': chameleon}),
                      ('more.json', more)]:
        with open(tmp_path / name, 'w', encoding='utf-8') as f:
            json.dump(obj, f)
    records = load([str(tmp_path / 'both.json'), str(tmp_path / 'more.json')])
    assert list(records) == ['actor', 'chameleon_filtered']
    assert list(records['chameleon_filtered']['results']) == ['mlp', 'gcn']
    assert records['actor']['results'] == actor['results']


def test_table_gives_each_model_its_mean_paired_difference_and_choice():
    rec = record('actor', 'accuracy', fake_searches(['mlp', 'gcn']), LABELS)
    rec['results']['mlp'] = [0.30, 0.40, 0.35]
    rec['results']['gcn'] = [0.20, 0.36, 0.37]
    lines = format_table(rec).splitlines()
    assert 'official splits [3, 5, 7]' in lines[0]
    mlp = next(line for line in lines if line.startswith('MLP '))
    # mean 35.0, s.e. stdev(30, 40, 35) / sqrt(3) = 5 / sqrt(3) = 2.9; differences
    # 10, 4, -2: mean +4.0, s.e. 6 / sqrt(3) = 3.5; chosen: point 1 of 3.
    assert '35.0 ± 2.9' in mlp and '+4.0 ± 3.5' in mlp
    assert '1/3: residual=False, layers=2' in mlp
    assert not any(line.startswith('Unequal budgets') for line in lines)
    # A model that searched fewer points: its paired differences are flagged.
    rec['chosen']['gcn'] = {**rec['chosen']['gcn'], 'grid': rec['chosen']['gcn']['grid'][:1],
                            'index': 0}
    assert format_table(rec).splitlines()[-1].startswith(
        'Unequal budgets: the models searched grids of 1 to 3 points')


def test_journal_gives_back_a_run_only_for_its_dataset_model_split_and_config(tmp_path):
    path = str(tmp_path / 'runs.jsonl')
    config = {**configurations('regcn')[0]}  # holds a tuple ('gamma',): JSON reads a list
    run = SplitResult(test=0.5, val=0.625, best_epoch=7, seconds=1.25)
    journal = Journal(path)
    assert len(journal) == 0 and journal.get('actor', 'regcn', config, 3, 'cpu') is None
    journal.add('actor', 'regcn', config, 3, 'cpu', run)
    # A new reader of the file (another process, a later run) finds it; nothing else does.
    again = Journal(path)
    assert len(again) == 1
    assert again.get('actor', 'regcn', json.loads(json.dumps(config)), 3, 'cpu') == run
    assert again.get('actor', 'regcn', config, 3, torch.device('cpu')) == run
    assert again.get('actor', 'regcn', config | {'epochs': 10}, 3, 'cpu') is None
    assert again.get('actor', 'regcn', config | {'root_weight': False}, 3, 'cpu') is None
    assert again.get('actor', 'regcn', config, 4, 'cpu') is None
    assert again.get('actor', 'regcn', config, 3, 'cuda:0') is None
    assert again.get('actor', 'gcn', config, 3, 'cpu') is None
    assert again.get('minesweeper', 'regcn', config, 3, 'cpu') is None
    # each row says which processor made it (its roundings differ between vendors)
    from harness.measure import processor_name
    with open(path) as f:
        assert json.loads(f.readline())['processor'] == processor_name()


def test_journal_drops_a_line_cut_short_and_refuses_a_bad_one(tmp_path):
    path = tmp_path / 'runs.jsonl'
    config = configurations('gcn')[0]
    journal = Journal(str(path))
    journal.add('actor', 'gcn', config, 0, 'cpu', SplitResult(0.5, 0.5, 1, 1.0))
    whole = path.read_bytes()
    path.write_bytes(whole + whole[:40])  # a second run stopped while writing its line
    with pytest.warns(UserWarning, match='last line was cut short'):
        resumed = Journal(str(path))
    assert len(resumed) == 1 and path.read_bytes() == whole  # dropped: redone
    resumed.add('actor', 'gcn', config, 1, 'cpu', SplitResult(0.25, 0.5, 2, 1.0))
    again = Journal(str(path))
    assert len(again) == 2 and again.get('actor', 'gcn', config, 1, 'cpu').test == 0.25
    path.write_bytes(b'\n{"dataset": "actor"}\n' + whole)  # blank lines are skipped
    with pytest.raises(ValueError, match=r'runs.jsonl, line 2: not a run'):
        Journal(str(path))
    with pytest.raises(FileNotFoundError):  # before any training
        Journal(str(tmp_path / 'no such folder' / 'runs.jsonl'))


def test_load_heterophilous_copies_the_staged_file_and_leaves_nothing(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="'name' must be one of"):
        load_heterophilous('cora')
    if not has_offline_copy('chameleon_filtered'):
        pytest.skip('chameleon_filtered is not staged')
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))  # where the copy goes
    data = load_heterophilous('Chameleon-Filtered')
    assert data.x.shape == (890, 2325) and data.train_mask.shape == (890, 10)
    assert os.listdir(tmp_path) == []


def test_regcn_is_the_polynomial_regulariser_separation_chosen():
    from harness.heterophily import RECOMMENDED
    from torch_geometric_regcn import RegularizerConv
    from torch_geometric_regcn.regularizers import (
        GCNRegularizer,
        PolynomialRegularizer,
        SignedLaplacianRegularizer,
        TSGCNRegularizer,
    )

    assert RECOMMENDED[0] == 'regcn'
    # Its grid: the issue's 2-layer protocol with and without the root weight (chosen on
    # validation), then residual connections at 4 layers of degree 1; the variants keep
    # theirs.
    assert [c['root_weight'] for c in configurations('regcn')] == [True, False, True]
    assert [(c['residual'], c['layers']) for c in configurations('regcn')] == \
        [(False, 2), (False, 2), (True, 4)]
    assert all(c['root_weight'] for name in ('regcn_dir', 'regcn_sep', 'regcn_signed',
                                             'regcn_sem') for c in configurations(name))
    assert MODELS['regcn_sem'].semantic and all(
        (c['alpha'], c['beta']) == (1.0, 1.0) for c in configurations('regcn_sem'))
    dims = Dims(5, 3, 20)
    expected = {'regcn': (PolynomialRegularizer, False, ('gamma',)),
                'regcn_dir': (PolynomialRegularizer, True, ('gamma',)),
                'regcn_sep': (GCNRegularizer, False, ()),
                'regcn_signed': (SignedLaplacianRegularizer, False, ('alpha',)),
                'regcn_sem': (TSGCNRegularizer, False, ())}
    for name, (cls, directed, learned) in expected.items():
        for config in configurations(name):
            model = MODELS[name].build(dims, config)
            convs = [m for m in model.modules() if isinstance(m, RegularizerConv)]
            assert len(convs) == config['layers']
            for conv in convs:
                assert type(conv.regularizer) is cls
                assert conv.root_weight == config['root_weight']
                assert conv.directed is directed and conv.regularizer.learned == learned
            if name in ('regcn', 'regcn_dir'):
                # Degree 2 at 2 layers, one hop per layer at 4; the PPR start of
                # alpha = 0.1: gamma_k = 0.1 * 0.9^k below K, 0.9^K at K.
                deep = config['layers'] == 4
                assert convs[0].regularizer.K == (1 if deep else 2)
                assert convs[0].solver == 'series'
                gamma = [0.1, 0.9] if deep else [0.1, 0.09, 0.81]
                for conv in convs:
                    torch.testing.assert_close(conv.regularizer.gamma.detach().double(),
                                               torch.tensor(gamma, dtype=torch.float64),
                                               atol=1e-6, rtol=0)
            if learned:  # the coefficients are a group without weight decay
                groups = MODELS[name].param_groups(model)
                assert groups[0]['weight_decay'] == 0.0
                assert len(groups[0]['params']) == len(convs) * len(learned)


@pytest.mark.skipif(not has_offline_copy('Cora'), reason='no offline copy of Cora in '
                    '../shared/data')
def test_load_homophilous_stacks_the_paper_splits():
    from harness.data import load_paper_dataset, run_split
    from harness.heterophily import load_homophilous

    data = load_homophilous('Cora', num_splits=3)
    assert data.train_mask.shape == (data.num_nodes, 3)
    reference = load_paper_dataset('Cora')
    for seed in range(3):
        split = run_split(reference, seed)
        for part in ('train_mask', 'val_mask', 'test_mask'):
            assert torch.equal(data[part][:, seed], split[part])
    with pytest.raises(ValueError, match="'name'"):
        load_homophilous('actor')
