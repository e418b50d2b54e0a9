import json

import pytest

from harness.results import ResultStore


def key(record):
    return f"{record['name']}__{record['seed']}"


RUNS = [{'name': 'a', 'seed': 0, 'acc': 81.25, 'note': 'ü'},
        {'name': 'a', 'seed': 1, 'acc': 0.1 + 0.2},
        {'name': 'b', 'seed': 0, 'acc': 1e-300, 'device': 'cuda'}]


def test_round_trip_one_json_object_per_line(tmp_path):
    path = tmp_path / 'sub' / 'runs.jsonl'  # the folder is created on the first add
    store = ResultStore(str(path), key)
    assert len(store) == 0 and not path.exists()
    for run in RUNS:
        store.add(run)
    # The file, read independently: one object per line, in the order added.
    lines = path.read_text(encoding='utf-8').splitlines()
    assert [json.loads(line) for line in lines] == RUNS
    again = ResultStore(str(path), key)
    assert again.records() == RUNS and list(again) == RUNS
    assert len(again) == 3 and 'a__1' in again and 'b__1' not in again


def test_resume_skips_stored_runs_and_appends_the_rest(tmp_path):
    path = str(tmp_path / 'runs.jsonl')
    first = ResultStore(path, key)
    first.add(RUNS[0])
    resumed = ResultStore(path, key)  # an interrupted benchmark starts again
    todo = [run for run in RUNS if key(run) not in resumed]
    assert todo == RUNS[1:]
    for run in todo:
        resumed.add(run)
    assert ResultStore(path, key).records() == RUNS


def test_each_add_is_on_disk_before_the_next(tmp_path):
    path = tmp_path / 'runs.jsonl'
    store = ResultStore(str(path), key)
    for count, run in enumerate(RUNS, 1):
        store.add(run)
        assert len(path.read_text().splitlines()) == count


def test_an_interrupted_last_line_is_dropped(tmp_path):
    path = tmp_path / 'runs.jsonl'
    full = ''.join(json.dumps(run) + '\n' for run in RUNS[:2])
    path.write_text(full + json.dumps(RUNS[2])[:17])  # killed while writing the third
    with pytest.warns(UserWarning, match='last line was cut short'):
        store = ResultStore(str(path), key)
    assert store.records() == RUNS[:2]
    assert path.read_text() == full  # cut off, so the next line starts cleanly
    store.add(RUNS[2])
    assert ResultStore(str(path), key).records() == RUNS


def test_a_run_is_stored_once(tmp_path):
    path = tmp_path / 'runs.jsonl'
    store = ResultStore(str(path), key)
    store.add(RUNS[0])
    with pytest.raises(ValueError, match='already stored'):
        store.add(dict(RUNS[0], acc=0.0))
    path.write_text(json.dumps(RUNS[0]) + '\n\n' + json.dumps(RUNS[0]) + '\n')
    with pytest.raises(ValueError, match='line 3'):
        ResultStore(str(path), key)
    path.write_text(json.dumps({'name': 'a'}) + '\n')  # no key: another file
    with pytest.raises(ValueError, match=r'line 1: not a run of this store \(KeyError'):
        ResultStore(str(path), key)


def test_two_processes_storing_the_same_run_store_it_once(tmp_path):
    # Each store keeps its own snapshot: both appended the run, and every
    # later opening of the file failed with "stored twice".
    path = str(tmp_path / 'shared.jsonl')
    first, second = ResultStore(path, key=key), ResultStore(path, key=key)
    first.add({'name': 'a', 'seed': 0, 'value': 1.0})
    with pytest.warns(UserWarning, match="run 'a__0' was stored by another process"):
        second.add({'name': 'a', 'seed': 0, 'value': 2.0})
    assert second.get('a__0')['value'] == 1.0  # the stored record is kept
    second.add({'name': 'b', 'seed': 0, 'value': 3.0})
    with open(path) as f:
        assert len(f.read().splitlines()) == 2
    assert [r['value'] for r in ResultStore(path, key=key)] == [1.0, 3.0]


def test_a_line_cut_by_a_writer_that_died_is_dropped_before_appending(tmp_path):
    # The next record was glued onto the cut line, and the store no longer opened.
    path = str(tmp_path / 'shared.jsonl')
    store = ResultStore(path, key=key)
    store.add({'name': 'a', 'seed': 0})
    with open(path, 'a') as f:
        f.write('{"name": "b", "se')
    with pytest.warns(UserWarning, match='cut short'):
        store.add({'name': 'c', 'seed': 0})
    assert [r['name'] for r in ResultStore(path, key=key)] == ['a', 'c']
