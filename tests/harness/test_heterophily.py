import json
import math
import os
import tempfile
from functools import partial

import pytest
import torch
from sklearn.metrics import roc_auc_score
from torch_geometric.data import Data
from torch_geometric.nn import APPNP, GCNConv

from harness.data import has_offline_copy
from harness.heterophily import (
    MODELS,
    PROTOCOL,
    SEMANTIC_K,
    Stack,
    chosen,
    fit_model,
    fit_split,
    load_heterophilous,
    official_split,
    score,
)
from harness.training import fit
from torch_geometric_regcn import SemanticGraph
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


def test_fit_split_with_accuracy_is_fit():
    # The same training loop: the same epochs, the same selection (later epoch
    # on ties); fit's float32 mean over 600 test nodes is within 1e-6 of
    # the exact count.
    data = paper_split(contextual_sbm(1200, num_classes=4, num_features=16, seed=2), seed=0,
                       num_val=300, num_test=600)
    results = []
    for train in (fit, fit_split):
        torch.manual_seed(0)
        model = MODELS['gcn'].build(16, 4, PROTOCOL)
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
    torch.manual_seed(0)
    gcn = MODELS['gcn'].build(12, 3, PROTOCOL).eval()
    first, second = gcn.layers
    assert isinstance(first, GCNConv) and (first.in_channels, first.out_channels) == (12, 64)
    reference = second(first(data.x, data.edge_index).relu(), data.edge_index)
    torch.testing.assert_close(MODELS['gcn'].run(gcn, data), reference, rtol=0, atol=0)
    appnp = MODELS['appnp'].build(12, 3, PROTOCOL).eval()
    mlp = appnp.layers[1](appnp.layers[0](data.x).relu())
    reference = APPNP(K=10, alpha=0.1)(mlp, data.edge_index)
    torch.testing.assert_close(MODELS['appnp'].run(appnp, data), reference, rtol=0, atol=0)
    assert isinstance(gcn, Stack) and gcn.dropout == PROTOCOL.dropout


def test_every_model_trains_and_states_its_configuration():
    data = small_graph()
    protocol = PROTOCOL._replace(epochs=3)
    for name in MODELS:
        result = fit_model(name, data, 'accuracy', protocol, seed=1)
        assert 0.0 <= result.test <= 1.0 and 0 <= result.best_epoch < 3, name
        config = chosen(name, protocol)
        assert config['epochs'] == 3 and config['hidden'] == 64 and config['dropout'] == 0.5
        json.dumps(config)  # serialisable
    with pytest.raises(ValueError, match=r"tsgcn needs 'data.semantic_edge_index'"):
        del data.semantic_edge_index
        fit_model('tsgcn', data, 'accuracy', protocol)


def test_load_heterophilous_copies_the_staged_file_and_leaves_nothing(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="'name' must be one of"):
        load_heterophilous('cora')
    if not has_offline_copy('chameleon_filtered'):
        pytest.skip('chameleon_filtered is not staged')
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))  # where the copy goes
    data = load_heterophilous('Chameleon-Filtered')
    assert data.x.shape == (890, 2325) and data.train_mask.shape == (890, 10)
    assert os.listdir(tmp_path) == []
