"""A fast smoke run of each example: one small dataset, a few epochs. The scripts a
user starts by their path run so, in a fresh process; the examples that use the
repository's harness and the figure scripts of benchmarks/ run as modules, in
this process (tests/entry_points.py)."""
import ast
import importlib
import importlib.util
import os.path as osp
import re
import subprocess
import sys

import pytest

from tests.conftest import SHARED_DATA
from tests.entry_points import run_module

pytestmark = pytest.mark.slow

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
needs_data = pytest.mark.skipif(not osp.isdir(osp.join(SHARED_DATA, 'Cora')),
                                reason=f'the paper datasets are not at {SHARED_DATA}')


def run(*args: str) -> str:
    """``python ARGS`` from the repository root, in a fresh process."""
    out = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def run_main(name: str, *argv: str) -> str:
    """``python -m NAME ARGV``, in this process."""
    out = run_module(name, *argv)
    assert out.code == 0, out.stderr[-2000:]
    return out.stdout


def test_csbm_example():
    out = run('examples/csbm.py', '--nodes', '1600', '--epochs', '5', '--seeds', '1')
    assert 'tsGCN  test accuracy' in out and 'GCN    test accuracy' in out


@pytest.mark.parametrize('solver', ['series', 'cg'])
def test_explain_example(solver):
    out = run('examples/explain.py', '--nodes', '200', '--epochs', '10', '--explainer-epochs',
              '5', '--solver', solver)
    assert f'APPNP ({solver}) test accuracy' in out and 'edges can change its prediction' in out


@needs_data
def test_tsgcn_example():
    out = run_main('examples.tsgcn', '--dataset', 'Cora', '--runs', '2', '--epochs', '5')
    assert 'rank=169 (N // 16)' in out
    assert out.count('run ') == 2 and 'ACC: ' in out and 'F1: ' in out
    assert 'precompute' in out and 'training' in out


@needs_data
@pytest.mark.parametrize('model', ['GAT', 'APPNP', 'tsgcn-inv'])
def test_regularizers_example(model):
    out = run_main('examples.regularizers', '--dataset', 'Cora', '--model', model, '--runs',
                   '1', '--epochs', '3')
    assert 'ACC: ' in out and 'F1: ' in out


def test_model_names_need_no_shell_quoting():
    from examples.regularizers import model_name
    assert model_name('tsgcn-inv') == model_name('TSGCN_INV') == 'tsGCN (inv)'
    assert model_name('gnn-hf') == 'GNN-HF' and model_name('graphsage') == 'GraphSAGE'
    assert model_name('tsgcn') == 'tsGCN' and model_name('gin') == 'gin'


def test_help_shows_every_default():
    out = run_main('examples.tsgcn', '--help')
    assert '(default: 10)' in out and '(default: 500)' in out



#: The scripts that draw the documentation's figures (docs/*.png) and compute its
#: tables; their numbers go to benchmarks/results/.
FIGURE_SCRIPTS = ['sensitivity', 'runtime', 'tsne', 'frequency_response', 'capacity_plan']


@pytest.mark.parametrize('name', FIGURE_SCRIPTS)
def test_figure_script_states_and_takes_its_command_line(name):
    with open(osp.join(REPO, 'benchmarks', f'{name}.py'), encoding='utf-8') as f:
        doc = ast.get_docstring(ast.parse(f.read()))
    assert f'python -m benchmarks.{name}' in doc
    if name != 'capacity_plan' and importlib.util.find_spec('matplotlib') is None:
        pytest.skip('the figure scripts draw with matplotlib (pip install -e ".[docs]")')
    assert run_main(f'benchmarks.{name}', '--help').startswith(f'usage: {name}.py')


@pytest.mark.parametrize('example, argv, message', [
    ('tsgcn', ['--dataset', 'Cora', '--runs', '0'], 'argument --runs: must be a positive'),
    ('regularizers', ['--dataset', 'Cora', '--model', 'gcn', '--epochs', '0'],
     'argument --epochs: must be a positive'),
    ('tsgcn', ['--dataset', 'Cora', '--device', 'gpu0'], 'argument --device: not a torch device'),
    ('regularizers', ['--dataset', 'Cora', '--model', 'gcn', '--device', 'gpu0'],
     'argument --device: not a torch device'),
    ('minibatch', ['--nodes', '50'], '--nodes must be at least 200'),
    ('minibatch', ['--batch-size', '0'], '--batch-size must be a positive integer'),
    ('distributed', ['--train', '0'], r'--train must lie in \(0, 1\]'),
    ('distributed', ['--classes', '1'], '--classes must be at least 2'),
    ('explain', ['--node', '500', '--nodes', '200'], r'--node must lie in \[0, --nodes\)'),
    ('csbm', ['--seeds', '0'], '--seeds must be a positive integer'),
    ('csbm', ['--nodes', '100'], '--nodes must be at least 1600'),
    ('laplacian_pe', ['--homophily', '1.5'], r'--homophily must lie in \[0, 1\]'),
    ('learnable', ['--lr', 'nan'], '--lr must be a finite positive number'),
])
def test_bad_arguments_are_named_before_any_work(example, argv, message, monkeypatch, capsys):
    # They crashed with raw tracebacks, often after the precompute, or printed
    # a result of zero runs (csbm --seeds 0: nan over 0 seeds).
    module = importlib.import_module(f'examples.{example}')
    monkeypatch.setattr(sys, 'argv', [example, *argv])
    with pytest.raises(SystemExit) as exit_info:
        module.main()
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)
