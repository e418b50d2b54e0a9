"""A smoke run of examples/heterophily.py on the staged heterophilous sets: one
official split, a few epochs, and the JSON file it writes."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest

from harness.data import has_offline_copy

pytestmark = pytest.mark.slow

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def run_example(tmp_path, dataset, *models):
    if not has_offline_copy(dataset):
        pytest.skip(f'{dataset} is not staged in ../shared/data/heterophilous')
    path = tmp_path / 'scores.json'
    # One thread: on a busy machine, two OpenMP threads on these small products
    # are slower than one.
    out = subprocess.run([sys.executable, '-m', 'examples.heterophily', '--dataset', dataset,
                          '--splits', '1', '--epochs', '3', '--models', *models, '--json',
                          str(path)], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert out.returncode == 0, out.stderr[-2000:]
    with open(path, encoding='utf-8') as f:
        return out.stdout, json.load(f)


def test_heterophily_example_writes_the_scores_of_each_model(tmp_path):
    stdout, written = run_example(tmp_path, 'chameleon_filtered', 'mlp', 'gcn')
    assert list(written) == ['dataset', 'metric', 'chosen', 'results']
    assert written['dataset'] == 'chameleon_filtered' and written['metric'] == 'accuracy'
    assert list(written['chosen']) == list(written['results']) == ['mlp', 'gcn']
    assert written['chosen']['gcn']['layer'] == 'GCNConv'
    assert all(config['epochs'] == 3 and config['hidden'] == 64
               for config in written['chosen'].values())
    for scores in written['results'].values():
        assert len(scores) == 1 and 0.0 <= scores[0] <= 1.0
    assert 'split 0 MLP: test accuracy' in stdout and 'split 0 GCN: test accuracy' in stdout
    # The table: one row per model, in percent, the JSON's score to one decimal.
    row = next(line for line in stdout.splitlines() if line.startswith('GCN '))
    assert f"{100 * written['results']['gcn'][0]:.1f} ± nan" in row


def test_heterophily_example_scores_two_class_sets_by_roc_auc(tmp_path):
    stdout, written = run_example(tmp_path, 'minesweeper', 'mlp')
    assert written['metric'] == 'roc_auc' and list(written['results']) == ['mlp']
    assert 'test roc_auc' in stdout and 0.0 <= written['results']['mlp'][0] <= 1.0
