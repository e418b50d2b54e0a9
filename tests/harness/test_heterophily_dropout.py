"""benchmarks.heterophily_dropout: each model's chosen configuration at another
dropout, a depth grid chosen on validation alone, paired by split against the
record's runs at the protocol's dropout."""
import json
import sys

import pytest

from benchmarks import heterophily_dropout
from harness.heterophily import RECOMMENDED, configurations


def _config(model, **changes):
    return {**configurations(model)[-1], **changes}


def test_the_summary_chooses_the_depth_on_validation_and_pairs_by_split(tmp_path, monkeypatch,
                                                                        capsys):
    regcn, gcn = _config('regcn'), _config('gcn')
    record = {'chosen': {'regcn': {'config': {'model': 'regcn', **regcn}},
                         'gcn': {'config': gcn}},
              'results': {'regcn': [0.90] * 4, 'gcn': [0.80] * 4, 'recommended': [0.91] * 4}}
    (tmp_path / 'record.json').write_text(json.dumps(record))
    runs = []
    for s in range(4):
        # 8 layers: best on validation; 12 layers: best on test only.
        for layers, test, val in [(4, 0.92, 0.90), (8, 0.93 + s / 1000, 0.95), (12, 0.99, 0.5)]:
            runs.append(('regcn', {**regcn, 'dropout': 0.2, 'layers': layers}, s, test, val))
        runs.append(('gcn', {**gcn, 'dropout': 0.2}, s, 0.85, 0.85))
    with open(tmp_path / 'journal.jsonl', 'w') as f:
        for model, config, split, test, val in runs:
            f.write(json.dumps({'dataset': 'minesweeper', 'model': model, 'config': config,
                                'split': split, 'device': 'cpu', 'test': test, 'val': val,
                                'best_epoch': 1, 'seconds': 1.0}) + '\n')
    argv = ['heterophily_dropout', '--dataset', 'minesweeper', '--models', 'regcn', 'gcn',
            '--dropout', '0.2', '--depths', 'regcn:4,8,12', '--splits', '4', '--summary',
            '--record', str(tmp_path / 'record.json'), '--journal',
            str(tmp_path / 'journal.jsonl'), '--output', str(tmp_path / 'out.md')]
    monkeypatch.setattr(sys, 'argv', argv)
    heterophily_dropout.main()
    out = capsys.readouterr().out
    assert out.strip() == (tmp_path / 'out.md').read_text().strip()
    lines = out.splitlines()
    # 93.15 = the mean of 0.930 .. 0.933 (standard error 0.065); +3.15 against the
    # record's 90 (the 12-layer point, best on test, never chosen).
    assert any(line.startswith('| RegCN (poly) (4 → 8, residual) | 90.0 ± 0.0 | 93.2 ± 0.1 | '
                               '+3.2 ± 0.1 | 95.00 |') for line in lines), out
    assert any(line.startswith('| GCN (4 → 4, residual) | 80.0 ± 0.0 | 85.0 ± 0.0 | '
                               '+5.0 ± 0.0 | 85.00 |') for line in lines), out
    assert 'recommended − GCN (both at 0.2): +8.2 ± 0.1' in out
    assert 'recommended at 0.2 − recommended at 0.5: +2.2 ± 0.1' in out
    assert 'regcn' in RECOMMENDED


def test_a_missing_run_is_named_not_read_as_a_score(tmp_path, monkeypatch):
    regcn = _config('regcn')
    (tmp_path / 'record.json').write_text(json.dumps(
        {'chosen': {'regcn': {'config': regcn}}, 'results': {'regcn': [0.9, 0.9]}}))
    (tmp_path / 'journal.jsonl').write_text('')
    monkeypatch.setattr(sys, 'argv', [
        'heterophily_dropout', '--dataset', 'minesweeper', '--models', 'regcn', '--dropout',
        '0.2', '--splits', '2', '--summary', '--record', str(tmp_path / 'record.json'),
        '--journal', str(tmp_path / 'journal.jsonl')])
    with pytest.raises(SystemExit, match='regcn: 2 of 2 runs are missing'):
        heterophily_dropout.main()


def test_a_variant_trains_and_reads_its_own_configuration(tmp_path, monkeypatch, capsys):
    regcn = _config('regcn')
    assert regcn['K'] == 1
    (tmp_path / 'record.json').write_text(json.dumps(
        {'chosen': {'regcn': {'config': regcn}}, 'results': {'regcn': [0.9, 0.9]}}))
    with open(tmp_path / 'journal.jsonl', 'w') as f:
        for split in range(2):  # the chosen configuration at K = 1 (no variant) scores 0
            for k, test in [(1, 0.0), (3, 0.95)]:
                f.write(json.dumps({'dataset': 'minesweeper', 'model': 'regcn', 'config': {
                    **regcn, 'dropout': 0.2, 'K': k}, 'split': split, 'device': 'cpu',
                    'test': test, 'val': test, 'best_epoch': 1, 'seconds': 1.0}) + '\n')
    monkeypatch.setattr(sys, 'argv', [
        'heterophily_dropout', '--dataset', 'minesweeper', '--models', 'regcn', '--dropout',
        '0.2', '--set', 'regcn:K=3', '--splits', '2', '--summary', '--record',
        str(tmp_path / 'record.json'), '--journal', str(tmp_path / 'journal.jsonl')])
    heterophily_dropout.main()
    out = capsys.readouterr().out
    assert 'regcn with K = 3 (chosen at 0.5: 1)' in out
    assert '| 90.0 ± 0.0 | 95.0 ± 0.0 | +5.0 ± 0.0 |' in out
