"""A smoke run of examples/heterophily.py on the staged heterophilous sets: one
official split, two epochs, the JSON file it writes, and the merge of the
files of two processes."""
import json
import re

import pytest

from harness.data import has_offline_copy
from harness.heterophily import STACK_GRID, configurations
from tests.entry_points import run_module

pytestmark = pytest.mark.slow


def run_example(*args):
    # One thread: on a busy machine, two OpenMP threads on these small products
    # are slower than one.
    out = run_module('examples.heterophily', *args, threads=1)
    assert out.code == 0, out.stderr[-2000:]
    return out.stdout


def run_models(tmp_path, dataset, *models, name='scores.json'):
    if not has_offline_copy(dataset):
        pytest.skip(f'{dataset} is not staged in ../shared/data/heterophilous')
    path = tmp_path / name
    stdout = run_example('--dataset', dataset, '--splits', '1', '--epochs', '2', '--models',
                         *models, '--json', str(path))
    with open(path, encoding='utf-8') as f:
        return stdout, json.load(f)


def test_heterophily_example_searches_each_model_and_merges_processes(tmp_path):
    stdout, written = run_models(tmp_path, 'chameleon_filtered', 'mlp', 'gcn', name='a.json')
    assert list(written)[:4] == ['dataset', 'metric', 'chosen', 'results']
    assert written['dataset'] == 'chameleon_filtered' and written['metric'] == 'accuracy'
    assert list(written['chosen']) == list(written['results']) == ['mlp', 'gcn']
    assert written['splits'] == [0]
    for name in ('mlp', 'gcn'):
        chosen = written['chosen'][name]
        assert chosen['grid'] == list(STACK_GRID) and len(chosen['mean_val']) == 3
        # The chosen point is the one of best validation score (one split here).
        best = max(range(3), key=lambda i: (chosen['mean_val'][i], -i))
        assert chosen['index'] == best
        assert chosen['config'] == configurations(name)[best] | {'epochs': 2}
        runs = written['runs'][name]
        assert [run['val'] for run in runs] == [[v] for v in chosen['mean_val']]
        assert written['results'][name] == runs[best]['test']
        assert 0.0 <= written['results'][name][0] <= 1.0
    assert written['chosen']['gcn']['config']['layer'] == 'GCNConv'
    assert 'GCN [1/3: residual=False, layers=2] split 0: test accuracy' in stdout
    # The table: one row per model, in percent, the JSON's score to one decimal.
    lines = stdout.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith('model ')):]
    row = next(line for line in table if line.startswith('GCN '))
    assert f"{100 * written['results']['gcn'][0]:.1f} ± nan" in row

    # A second process with another model, then the merge of both files.
    _, other = run_models(tmp_path, 'chameleon_filtered', 'gprgnn', name='b.json')
    merged_path = tmp_path / 'merged.json'
    stdout = run_example('--merge', str(tmp_path / 'a.json'), str(tmp_path / 'b.json'),
                         '--json', str(merged_path))
    with open(merged_path, encoding='utf-8') as f:
        merged = json.load(f)
    assert list(merged['results']) == ['mlp', 'gcn', 'gprgnn']
    assert merged['chosen']['gprgnn'] == other['chosen']['gprgnn']
    assert merged['results']['mlp'] == written['results']['mlp']
    assert any(line.startswith('GPR-GNN ') for line in stdout.splitlines())


def test_heterophily_example_scores_two_class_sets_by_roc_auc(tmp_path):
    stdout, written = run_models(tmp_path, 'minesweeper', 'mlp')
    assert written['metric'] == 'roc_auc' and list(written['results']) == ['mlp']
    assert 'test roc_auc' in stdout and 0.0 <= written['results']['mlp'][0] <= 1.0


def test_heterophily_example_resumes_from_its_journal(tmp_path):
    if not has_offline_copy('chameleon_filtered'):
        pytest.skip('chameleon_filtered is not staged in ../shared/data/heterophilous')
    journal, first, second = (str(tmp_path / name) for name in ('runs.jsonl', 'a.json',
                                                                'b.json'))
    common = ['--dataset', 'chameleon_filtered', '--splits', '1', '--epochs', '2',
              '--models', 'mlp', '--journal', journal]
    run_example(*common, '--points', '2', '--json', first)
    # A larger search: its first two points are read back, only the third is trained.
    stdout = run_example(*common, '--json', second)
    assert 'journal ' + journal + ': 2 runs recorded' in stdout
    assert stdout.count(', from the journal)') == 2
    assert 'MLP [3/3: residual=True, layers=4] split 0' in stdout
    with open(first, encoding='utf-8') as f:
        a = json.load(f)
    with open(second, encoding='utf-8') as f:
        b = json.load(f)
    assert b['runs']['mlp'][:2] == a['runs']['mlp']
    with open(journal, encoding='utf-8') as f:
        assert len(f.read().splitlines()) == 3


@pytest.mark.parametrize('args, message', [
    (['--epochs', '0'], 'argument --epochs: must be a positive integer'),
    (['--splits', '0'], 'argument --splits: must be a positive integer'),
    (['--json', 'no_such_folder/out.json'], 'no_such_folder does not exist'),
    (['--root', 'no_such_root'], 'actor could not be loaded .*under --root .*no_such_root'),
    (['--journal', 'no_such_folder/runs.jsonl'], '--journal .*no_such_folder does not exist'),
    (['--device', 'no_such_device'], 'argument --device: not a torch device'),
    (['--merge', 'a.json'], '--merge reads .* trains nothing: drop --dataset, --models'),
    (['--json', 'same.jsonl', '--journal', 'same.jsonl'],
     '--json and --journal name the same file'),
])
def test_heterophily_example_refuses_bad_arguments_before_any_training(tmp_path, args,
                                                                       message):
    # Each failed after training (an unwritable --json lost every run), or
    # scored nan as a table (--epochs 0), or ended in a traceback (--root).
    args = [str(tmp_path / a) if a.startswith('no_such_f') or a.startswith('no_such_r')
            else a for a in args]
    # Any exception but argparse's exit propagates (the traceback a user saw).
    out = run_module('examples.heterophily', '--dataset', 'actor', '--models', 'mlp', *args,
                     threads=1)
    assert out.code == 2
    assert re.search(message, out.stderr), out.stderr[-1000:]
    assert 'split 0' not in out.stdout  # nothing trained


def test_heterophily_example_trains_the_recommended_model_and_gcn_by_default(tmp_path):
    # The entry point: without --models, the two models of the recommended
    # one and GCN (it trained every model of the harness, hours on a CPU); the
    # recommended model is their search together, reported first.
    if not has_offline_copy('chameleon_filtered'):
        pytest.skip('chameleon_filtered is not staged in ../shared/data/heterophilous')
    path = tmp_path / 'default.json'
    stdout = run_example('--dataset', 'chameleon_filtered', '--splits', '1', '--epochs', '2',
                         '--points', '1', '--json', str(path))
    with open(path, encoding='utf-8') as f:
        written = json.load(f)
    assert list(written['results']) == ['recommended', 'regcn', 'regcn_polynormer', 'gcn']
    chosen = written['chosen']['recommended']
    assert [point['model'] for point in chosen['grid']] == ['regcn', 'regcn_polynormer']
    model = chosen['grid'][chosen['index']]['model']
    assert written['results']['recommended'] == written['results'][model]
    assert f"Recommended (by validation): chosen [{chosen['index'] + 1}/2: model={model}" \
        in stdout


def test_heterophily_example_names_a_file_merge_cannot_read(tmp_path):
    # A file that is no record ended in a traceback (review s55/harness).
    bad = tmp_path / 'bad.json'
    bad.write_text('{"results": {}}', encoding='utf-8')
    out = run_module('examples.heterophily', '--merge', str(bad), threads=1)
    assert out.code == 2
    assert re.search(r"--merge: .*bad.json: not a record of examples.heterophily", out.stderr)
    bad.write_text('null', encoding='utf-8')  # valid JSON, no object: a TypeError (s55/diff55)
    out = run_module('examples.heterophily', '--merge', str(bad), threads=1)
    assert out.code == 2 and 'a JSON NoneType, not an object' in out.stderr
