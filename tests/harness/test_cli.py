"""harness.cli and the benchmarks' command lines: a bad number or an output
that cannot be written is refused (status 2, naming the option) before any
work, instead of a crash, a nan table or a lost report after hours of it."""
import argparse
import importlib
import inspect
import json
import os
import re
import sys

import pytest

from harness import cli
from harness.cli import (
    check_writable,
    comma_separated,
    int_at_least,
    non_negative_int,
    positive_float,
    positive_int,
)


def _refused(capsys, call) -> str:
    with pytest.raises(SystemExit) as exit_info:
        call()
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_number_types_name_the_option(capsys):
    parser = argparse.ArgumentParser()
    parser.add_argument('--epochs', type=positive_int)
    parser.add_argument('--warmup', type=non_negative_int)
    parser.add_argument('--seeds', type=int_at_least(2))
    parser.add_argument('--tol', type=positive_float)
    parser.add_argument('--tols', type=comma_separated(positive_float), default='1e-3,1e-4')
    args = parser.parse_args(['--epochs', '3', '--warmup', '0', '--seeds', '2', '--tol', '1e-6'])
    assert (args.epochs, args.warmup, args.seeds, args.tol) == (3, 0, 2, 1e-6)
    assert args.tols == [1e-3, 1e-4]  # the default string goes through the type too
    for argv, message in [(['--epochs', '0'], '--epochs: must be a positive integer (got 0)'),
                          (['--warmup', '-1'], '--warmup: must be a non-negative integer'),
                          (['--seeds', '1'], '--seeds: must be an integer of at least 2'),
                          (['--tol', '0'], '--tol: must be a finite positive number'),
                          (['--tol', 'inf'], '--tol: must be a finite positive number'),
                          (['--tols', '1e-3,-1'], '--tols: each item must be a finite positive'),
                          (['--tols', '1e-3,'], '--tols: must be a comma-separated list')]:
        assert message in _refused(capsys, lambda argv=argv: parser.parse_args(argv))


def test_check_writable(tmp_path, capsys, monkeypatch):
    parser = argparse.ArgumentParser()
    blocker = tmp_path / 'a_file'
    blocker.write_text('')
    check_writable(parser, '--output', str(tmp_path / 'out.md'))
    check_writable(parser, '--output', str(tmp_path / 'new' / 'out.md'), create=True)
    check_writable(parser, '--save', str(tmp_path), folder=True)
    check_writable(parser, '--cache', str(tmp_path / 'new' / 'cache'), folder=True, create=True)
    for kwargs, path, message in [
            ({}, tmp_path / 'new' / 'out.md', 'new does not exist; create it first'),
            ({'create': True}, blocker / 'out.md', 'a_file is not a folder'),
            ({'create': True}, blocker / 'deeper' / 'out.md', 'a_file is not a folder'),
            ({}, tmp_path, 'is a folder; name a file in it'),
            ({'folder': True}, tmp_path / 'new', 'new does not exist')]:
        err = _refused(capsys, lambda path=path, kwargs=kwargs: check_writable(
            parser, '--output', str(path), **kwargs))
        assert f'--output {path}: ' in err and message in err
    # A read-only folder (root writes anywhere, so os.access stands in for it).
    monkeypatch.setattr(cli.os, 'access', lambda path, mode: False)
    err = _refused(capsys, lambda: check_writable(parser, '--json', str(tmp_path / 'out.json')))
    assert f'{tmp_path} is not writable; choose another path' in err


def _work(*_, **__):
    raise AssertionError('the script started its work before checking its arguments')


class _Plt:  # matplotlib.pyplot's drawing, for the figure scripts
    subplots = staticmethod(_work)


#: module, arguments, the message, what the script's work starts with (each
#: replaced by a function that fails), and module globals to replace. In the
#: arguments and globals, MISSING is a file in a missing folder, BLOCKED one
#: in a "folder" that is a file, NOFILE a file that does not exist, TMP an
#: empty folder and RECORDS a records file of benchmarks.robustness.
CASES = [
    # Each is what a run did before these checks: crash after work, nan or
    # empty tables, or another setting than the one asked for.
    ('accuracy', ['--epochs', '0'], '--epochs: must be a positive integer',
     ['open_cells', 'run_dataset'], {}),  # the methods' own epochs, silently
    ('accuracy', ['--datasets', 'cora'], "--datasets: invalid choice: 'cora'",
     ['open_cells', 'run_dataset'], {}),  # its cells never summarised
    ('accuracy', [], 'the summary .*a_file is not a folder',
     ['open_cells', 'run_dataset'], {'SUMMARY': 'BLOCKED'}),
    ('distributed', ['--output', 'MISSING'], None, ['_measure', 'Report'], {}),
    ('distributed', ['--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['_measure', 'Report'], {}),
    ('distributed', ['--procs', '0'], '--procs: must be a positive', ['_measure', 'Report'], {}),
    ('distributed', ['--from-raw', 'NOFILE'], '--from-raw .*no such file',
     ['_measure', 'Report'], {}),
    ('eigen_pe', ['--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['Report', 'run_family'], {}),
    ('eigen_pe', ['--repeats', '0'], '--repeats: must be a positive', ['Report', 'run_family'],
     {}),
    ('eigensolver', ['--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['Report', 'machine_info', 'build_operators'], {}),
    ('eigensolver', ['--threads', '1,0'], '--threads: each item must be a positive integer',
     ['Report', 'machine_info', 'build_operators'], {}),
    ('eigensolver_sweep', ['--quick', '--output', 'BLOCKED'], '--output .*a_file is not a',
     ['Report', 'benchmark_graphs'], {}),
    ('eigensolver_sweep', ['--tol', '0'], '--tol: must be a finite positive',
     ['Report', 'benchmark_graphs'], {}),
    ('heterophily_heldout', ['--journal', 'NOFILE'], '--journal .*no such file',
     ['Journal', 'report'], {}),
    ('heterophily_dropout', ['--dataset', 'minesweeper', '--models', 'gcn', '--dropout', '1',
                             '--journal', 'NOFILE'], '--dropout must lie in',
     ['Journal', 'fit_model', 'load_heterophilous'], {}),
    ('heterophily_dropout', ['--dataset', 'minesweeper', '--models', 'gcn', '--dropout', '0.2',
                             '--journal', 'MISSING'], '--journal .*does not exist',
     ['Journal', 'fit_model', 'load_heterophilous'], {}),
    ('heterophily_dropout', ['--dataset', 'minesweeper', '--models', 'gcn', '--dropout', '0.2',
                             '--journal', 'NOFILE', '--summary'], '--journal .*no such file',
     ['Journal', 'fit_model', 'load_heterophilous'], {}),
    ('heterophily_dropout', ['--dataset', 'minesweeper', '--models', 'gcn', '--dropout', '0.2',
                             '--depths', 'gcn:2,0', '--journal', 'NOFILE'],
     "--depths: .*'gcn:2,0': must be MODEL:L,L", ['Journal', 'fit_model', 'load_heterophilous'],
     {}),
    ('heterophily_dropout', ['--dataset', 'minesweeper', '--models', 'gcn', '--dropout', '0.2',
                             '--depths', 'sage:2,4', '--journal', 'NOFILE'],
     '--depths: one grid per model, each of --models',
     ['Journal', 'fit_model', 'load_heterophilous'], {}),
    ('heterophily_dropout', ['--dataset', 'minesweeper', '--models', 'gcn', '--dropout', '0.2',
                             '--set', 'gcn:layers=8', '--journal', 'NOFILE'],
     '--set gcn:layers: .*other than dropout, layers and epochs',
     ['Journal', 'fit_model', 'load_heterophilous'], {}),
    ('heterophily_dropout', ['--dataset', 'minesweeper', '--models', 'gcn', '--dropout', '0.2',
                             '--set', 'gcn:K', '--journal', 'NOFILE'],
     "--set: .*'gcn:K': must be MODEL:KEY=VALUE", ['Journal', 'fit_model', 'load_heterophilous'],
     {}),
    ('graph_batch', ['--repeats', '0'], '--repeats: must be a positive', ['prepare'], {}),
    ('graph_batch', ['--output', 'BLOCKED'], '--output .*a_file is not a folder', ['prepare'],
     {}),
    ('knn_scale', ['--nodes', '100', '--jsonl', 'MISSING'], '--jsonl .*missing does not exist',
     ['harness.graphs.synthetic_graph'], {}),
    ('knn_scale', ['--queries', '0'], '--queries: must be a positive',
     ['harness.graphs.synthetic_graph'], {}),
    ('learnable', ['--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['open_cells', 'train_all', 'Report'], {}),
    ('learnable', ['--cells', 'BLOCKED'], '--cells .*a_file is not a folder',
     ['open_cells', 'train_all', 'Report'], {}),
    ('learnable', ['--epochs', '0'], '--epochs: must be a positive',
     ['open_cells', 'train_all', 'Report'], {}),
    ('lowrank_memory', ['--quick', '--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['Report', 'run_isolated'], {}),
    ('lowrank_memory', ['--scaling-nodes', '5000,0'], '--scaling-nodes: each item must be',
     ['Report', 'run_isolated'], {}),
    ('minibatch', ['--quick', '--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['Report', 'pubmed_part', 'scale_part'], {}),
    ('minibatch', ['--seeds', '0'], '--seeds: must be a positive',  # was the default 10
     ['Report', 'pubmed_part', 'scale_part'], {}),
    ('minibatch', ['--history-fraction', '1.5'], r'--history-fraction must lie in \[0, 1\]',
     ['Report', 'pubmed_part', 'scale_part'], {}),
    ('nonquadratic', ['--epochs', '0'], '--epochs: must be a positive',  # ZeroDivisionError
     ['load_homophilous', 'official_split'], {}),
    ('nonquadratic', ['--repeats', '0'], '--repeats: must be a positive',  # median of nothing
     ['load_homophilous', 'official_split'], {}),
    ('nonquadratic', ['--datasets', 'cornell'], "--datasets: invalid choice: 'cornell'",
     ['load_homophilous', 'official_split'], {}),
    ('operator_build', ['--save', 'MISSING'], '--save .*missing/out.md does not exist',
     ['run_isolated', 'machine_info'], {}),
    ('operator_build', ['--nodes', '1000', '--compare', 'TMP'], '--compare .*no S-1000.pt',
     ['run_isolated', 'machine_info'], {}),
    ('partition_locality', ['--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['Report', 'pubmed', 'communities'], {}),
    ('partition_locality', ['--procs', '0'], '--procs: must be a positive',
     ['Report', 'pubmed', 'communities'], {}),
    ('partition_locality', ['--procs', '1', '2'], '--procs: each must be at least 2',
     ['Report', 'pubmed', 'communities'], {}),  # was a ZeroDivisionError after every run
    ('components', ['--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['Report', 'components'], {}),
    ('components', ['--threads', '0'], '--threads: must be a positive',
     ['Report', 'components'], {}),
    ('propagation', ['--quick', '--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['Report', 'benchmark_graphs'], {}),
    ('propagation', ['--hidden', '0'], '--hidden: must be a positive',
     ['Report', 'benchmark_graphs'], {}),
    ('reliability', ['--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['Report', 'contextual_sbm'], {}),
    ('reliability', ['--repeats', '0'], '--repeats: must be a positive',
     ['Report', 'contextual_sbm'], {}),
    ('robustness', ['--json', 'MISSING'], '--json .*missing does not exist',  # after a seed
     ['load_homophilous', 'perturbed_graph'], {}),
    ('robustness', ['--datasets', 'cornell'], "--datasets: invalid choice: 'cornell'",
     ['load_homophilous', 'perturbed_graph'], {}),
    ('robustness', ['--budgets', '0.05', '0.05'],  # counted twice: a smaller error
     '--budgets repeats a value', ['load_homophilous', 'perturbed_graph'], {}),
    ('robustness_figure', ['RECORDS', '--out', 'MISSING'], '--out .*missing does not exist',
     ['plt'], {}),
    ('robustness_figure', ['NOFILE'], 'records: no such file', ['plt'], {}),
    ('runtime', ['--figure', 'MISSING'], '--figure .*missing does not exist',  # after training
     ['load_paper_dataset', 'Report'], {}),
    ('runtime', ['--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['load_paper_dataset', 'Report'], {}),
    ('runtime', ['--threads', '0'], '--threads: must be a positive',
     ['load_paper_dataset', 'Report'], {}),
    ('scale', ['--output', 'BLOCKED'], '--output .*a_file is not a folder', ['Report'], {}),
    ('scale', ['--epochs', '0'], '--epochs: must be a positive', ['Report'], {}),
    ('scaling', ['--seeds', '0'], '--seeds: must be a positive',
     ['run_dataset', 'write_markdown', 'open_runs'], {}),
    ('scaling', [], 'the summary .*a_file is not a folder',
     ['run_dataset', 'write_markdown', 'open_runs'], {'MARKDOWN': 'BLOCKED'}),
    ('sensitivity', ['--ps', '0'], '--ps: must be a positive',  # ZeroDivisionError
     ['load_paper_dataset', 'SemanticGraph'], {}),
    ('sensitivity', ['--seeds', '0'], '--seeds: must be a positive',
     ['load_paper_dataset', 'SemanticGraph'], {}),
    ('sensitivity', [], r'sensitivity_cora\.png .*missing does not exist',
     ['load_paper_dataset', 'SemanticGraph'], {'FIGURES': 'MISSING'}),
    ('solvers', ['--output', 'MISSING'], '--output .*missing does not exist',
     ['run_isolated', 'describe_machine', 'has_pubmed'], {}),
    ('solvers', ['--repeats', '0'], '--repeats: must be a positive',
     ['run_isolated', 'describe_machine', 'has_pubmed'], {}),
    ('tall_qr', ['--output', 'BLOCKED'], '--output .*a_file is not a folder',
     ['Report', 'tall_qr'], {}),
    ('tall_qr', ['--repeats', '0'], '--repeats: must be a positive', ['Report', 'tall_qr'], {}),
    ('tall_qr', ['--rows', '16', '--cols', '32'], '--cols must not exceed --rows',
     ['Report', 'tall_qr'], {}),
    ('tsne', ['--epochs', '0'], '--epochs: must be a positive', ['load_paper_dataset'], {}),
    ('tsne', [], r'the figure .*tsne_blogcatalog\.png: .*missing does not exist',
     ['load_paper_dataset'], {'FIGURES': 'MISSING'}),
    ('tune', ['--output', 'MISSING'], '--output .*missing does not exist',  # after a dataset
     ['load_paper_dataset'], {}),
    ('tune', ['--final-seeds', '1'], '--final-seeds: must be an integer of at least 2',
     ['load_paper_dataset'], {}),  # stdev of one run, after all the tuning
    ('tune', ['--stage3', '--dropouts', '1.5'], r'dropout rates .*must lie in \[0, 1\)',
     ['load_paper_dataset'], {}),
    ('which', ['--output', 'MISSING'], '--output .*missing does not exist',
     ['load_planetoid'], {}),
    ('which', ['--seeds', '1'], '--seeds: must be an integer of at least 2',
     ['load_planetoid'], {}),
    ('which', ['--datasets', 'cora'], "--datasets: invalid choice: 'cora'",
     ['load_planetoid'], {}),
]


@pytest.mark.parametrize('name, argv, message, work, names', CASES,
                         ids=[f'{c[0]}-{i}' for i, c in enumerate(CASES)])
def test_benchmark_refuses_bad_arguments_before_any_work(name, argv, message, work, names,
                                                        tmp_path, monkeypatch, capsys):
    blocker = tmp_path / 'a_file'
    blocker.write_text('')
    records = tmp_path / 'records.json'
    records.write_text(json.dumps({'records': [{'attack': 'prbcd', 'dataset': 'cora',
                                                'model': 'gcn', 'budget': 0.0,
                                                'evasion': 0.8, 'poisoning': 0.8}]}))
    places = {'MISSING': str(tmp_path / 'missing' / 'out.md'),
              'BLOCKED': str(blocker / 'out.md'), 'NOFILE': str(tmp_path / 'nothing.jsonl'),
              'TMP': str(tmp_path), 'RECORDS': str(records)}
    argv = [places.get(a, a) for a in argv]
    try:
        module = importlib.import_module(f'benchmarks.{name}')
    except ModuleNotFoundError as missing:  # the figure scripts' matplotlib is no test extra
        if missing.name != 'matplotlib':
            raise
        pytest.skip(f'benchmarks.{name} needs matplotlib, which is not installed')
    for attr in work:
        if attr == 'plt':
            monkeypatch.setattr(module, 'plt', _Plt)
        elif '.' in attr:
            owner, attr = attr.rsplit('.', 1)
            monkeypatch.setattr(importlib.import_module(owner), attr, _work)
        else:
            monkeypatch.setattr(module, attr, _work)
    for attr, value in names.items():
        value = places[value]
        monkeypatch.setattr(module, attr, value if attr != 'FIGURES' else os.path.dirname(value))
    monkeypatch.setattr(sys, 'argv', [name, *argv])
    if inspect.signature(module.main).parameters:
        call = lambda: module.main(argv)  # noqa: E731
    else:
        call = module.main
    if message is None:  # accepted: the folder is made (the run then starts its work)
        with pytest.raises(AssertionError, match='started its work'):
            call()
        return
    err = _refused(capsys, call)
    assert re.search(message, err), err
    assert capsys.readouterr().out == ''
    assert not (tmp_path / 'nothing.jsonl').exists()  # no journal created on the way
