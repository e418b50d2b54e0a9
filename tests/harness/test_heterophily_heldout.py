"""benchmarks.heterophily_heldout: each stage of RegCN's grid chooses its point
on validation alone and is paired by split against the baselines."""
import json

from benchmarks.heterophily_heldout import chosen, report, stages
from harness.heterophily import configurations
from harness.heterophily_results import Journal


def _journal(path, runs):
    with open(path, 'w') as f:
        for dataset, model, config, split, test, val in runs:
            f.write(json.dumps({'dataset': dataset, 'model': model, 'config': config,
                                'split': split, 'device': 'cpu', 'test': test, 'val': val,
                                'best_epoch': 1, 'seconds': 1.0}) + '\n')


def test_stages_choose_on_validation_and_pair_by_split(tmp_path):
    grids = [grid for _, grid in stages()]
    assert [len(g) for g in grids] == [1, 2, 3, 3] and grids[2][2]['K'] == 2
    evening, current = grids[2][2], grids[3][2]
    runs = []
    for s in range(10):
        # Point 1 best on validation; the evening's point best on test only;
        # the current third point best on validation among the last grid.
        for config, test, val in [(grids[0][0], 0.50, 0.60), (grids[1][1], 0.40, 0.50),
                                  (evening, 0.90, 0.10), (current, 0.70 + s / 500, 0.70)]:
            runs.append(('actor', 'regcn', config, s, test, val))
        for model, test in [('gcn', 0.45), ('mlp', 0.55)]:
            runs.append(('actor', model, configurations(model)[0], s, test, 0.5))
    path = tmp_path / 'journal.jsonl'
    _journal(path, runs)
    journal = Journal(str(path))
    assert chosen(journal, 'actor', 'regcn', grids[2])[0] == 0  # the test score never counts
    point, scores = chosen(journal, 'actor', 'regcn', grids[3])
    assert point == 2 and scores[3] == 100 * 0.706
    assert chosen(journal, 'actor', 'regcn', [*grids[3], {'layers': 9}]) is None  # not run
    table = report(journal, ['actor']).splitlines()
    first, _, evening_row, current_row = table[2:]
    assert '| 50.0 ± 0.0 | 45.0 ± 0.0 (1) | +5.0 ± 0.0 | MLP 55.0 ± 0.0 (1) | -5.0 ± 0.0 |' \
        in first
    assert '| 50.0 ± 0.0 |' in evening_row
    assert '| 70.9 ± 0.2 | 45.0 ± 0.0 (1) | +25.9 ± 0.2 |' in current_row
