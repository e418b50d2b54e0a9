r"""Accuracy under structure attacks: GCN, APPNP, tsGCN, the non-quadratic
regularisers and GCN-Jaccard on graphs perturbed by PR-BCD, random flips and DICE.

Run from the repository root::

    python -m benchmarks.robustness [--datasets cora citeseer pubmed]
        [--attacks prbcd random dice] [--budgets 0 0.05 0.1 0.2] [--seeds 5] [--first-seed 0]
        [--models gcn appnp tsgcn elastic airgnn robust gcn_jaccard]
        [--epochs 300] [--cache DIR] [--json PATH]

For each seed ``s`` (``0 .. SEEDS - 1``): the paper's random split of seed
``s`` (20 labelled nodes per class, 500 validation, 1,000 test nodes), the
perturbed graph of seed ``s`` (PR-BCD: PyG's
:class:`~torch_geometric.contrib.nn.PRBCDAttack` on a surrogate 2-layer GCN
trained on the split, a global attack on the test nodes' predictions;
random flips; DICE) with a budget of the given fraction of the undirected
edges, and every model trained with seed ``s``: on the clean graph and
tested on the perturbed one (evasion, the attack transferred from the
surrogate) and trained and tested on the perturbed one (poisoning, by
transfer). The models are those of ``harness.heterophily.MODELS`` (2 layers,
64 hidden, dropout 0.5, Adam 0.01, weight decay 5e-4, the test accuracy at
the best validation epoch; see ``harness.robustness.ROBUSTNESS_MODELS``).
Perturbed graphs are cached in ``--cache`` (default: a folder under the
system's temporary directory; never commit them). Prints mean ± standard
error over the seeds per (dataset, attack, budget, setting, model).
"""
import argparse
import json
import math
import os
import tempfile
import time
from typing import Dict, List

import torch

from harness.cli import check_writable
from harness.heterophily import HOMOPHILOUS, load_homophilous, official_split
from harness.heterophily_results import mean_and_error
from harness.robustness import ATTACKS, ROBUSTNESS_MODELS, perturbed_graph, robustness_scores

DEFAULT_CACHE = os.path.join(tempfile.gettempdir(), 'regcn-perturbed-graphs')


def _summary(values: List[float]) -> str:
    mean, error = mean_and_error(values)  # nan for a diverged run
    if math.isnan(mean) or math.isnan(error):  # one seed: no spread
        return f'{100 * mean:.1f}'
    return f'{100 * mean:.1f} ± {100 * error:.1f}'


def summary_table(records: List[Dict], dataset: str, attack: str, budgets: List[float],
                  models: List[str]) -> List[str]:
    r"""The lines of one dataset's and attack's table: a row per model, a
    column per budget, each cell the evasion / poisoning mean ± standard
    error over the seeds; each column as wide as its widest cell, two
    spaces apart."""
    table = [['model'] + [f'{b:g}' for b in budgets]]
    for model in models:
        cells = [model]
        for budget in budgets:
            rows = [r for r in records
                    if (r['dataset'], r['attack'], r['budget'], r['model'])
                    == (dataset, attack, budget, model)]
            cells.append(f"{_summary([r['evasion'] for r in rows])} / "
                         f"{_summary([r['poisoning'] for r in rows])}")
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return [row[0].ljust(widths[0]) + ''.join('  ' + cell.rjust(width)
                                              for cell, width in zip(row[1:], widths[1:]))
            for row in table]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--datasets', nargs='+', type=str.lower, default=list(HOMOPHILOUS),
                        choices=HOMOPHILOUS)
    parser.add_argument('--attacks', nargs='+', default=list(ATTACKS), choices=ATTACKS)
    parser.add_argument('--budgets', nargs='+', type=float, default=[0.0, 0.05, 0.1, 0.2])
    parser.add_argument('--seeds', type=int, default=5)
    parser.add_argument('--first-seed', type=int, default=0,
                        help='run seeds FIRST_SEED .. SEEDS - 1 only (to split a run)')
    parser.add_argument('--models', nargs='+', default=list(ROBUSTNESS_MODELS),
                        choices=list(ROBUSTNESS_MODELS))
    parser.add_argument('--epochs', type=int, default=300)
    parser.add_argument('--cache', default=DEFAULT_CACHE)
    parser.add_argument('--json', default=None, help='write the per-seed scores here')
    args = parser.parse_args()
    if args.seeds < 1 or args.epochs < 1 or any(not 0 <= b < 1 for b in args.budgets) \
            or not 0 <= args.first_seed < args.seeds:
        parser.error('--seeds and --epochs must be positive, --budgets in [0, 1), '
                     '--first-seed in [0, SEEDS)')
    for name in ('datasets', 'attacks', 'budgets', 'models'):  # each counted once
        values = getattr(args, name)
        if len(set(values)) < len(values):
            parser.error(f'--{name} repeats a value: each cell would count its runs twice')
    if args.json is not None and os.path.exists(args.json):
        parser.error(f'--json {args.json} exists; choose a new path')
    if args.json is not None:  # written after every seed: fail now, not after the first
        check_writable(parser, '--json', args.json)
    check_writable(parser, '--cache', args.cache, folder=True, create=True)

    records: List[Dict] = []
    for dataset in args.datasets:
        data = load_homophilous(dataset, args.seeds)
        for seed in range(args.first_seed, args.seeds):
            split = official_split(data, seed)
            clean = {}  # the budget-0 score of each model, shared by every attack
            for attack in args.attacks:
                for budget in args.budgets:
                    start = time.perf_counter()
                    edge_index = perturbed_graph(split, attack, budget, seed, args.cache,
                                                 name=dataset)
                    attack_seconds = time.perf_counter() - start
                    for model in args.models:
                        if budget == 0 and model in clean:
                            scores = clean[model]
                        else:
                            scores = robustness_scores(model, split, edge_index, seed,
                                                       args.epochs)
                            if budget == 0:
                                clean[model] = scores
                        record = dict(dataset=dataset, attack=attack, budget=budget, seed=seed,
                                      model=model, evasion=scores.evasion,
                                      poisoning=scores.poisoning,
                                      attack_seconds=attack_seconds)
                        records.append(record)
                        print(f'{dataset} seed {seed} {attack} {budget:g} {model}: evasion '
                              f'{100 * scores.evasion:.1f} poisoning '
                              f'{100 * scores.poisoning:.1f}', flush=True)
            if args.json is not None:  # after every seed: nothing finished is lost
                with open(args.json, 'w') as f:
                    json.dump({'args': vars(args), 'records': records}, f, indent=1)

    print()
    for dataset in args.datasets:
        for attack in args.attacks:
            print(f'{dataset}, {attack}: test accuracy (%), evasion / poisoning')
            print('\n'.join(summary_table(records, dataset, attack, args.budgets,
                                           args.models)))
            print()


if __name__ == '__main__':
    torch.set_num_threads(int(os.environ.get('OMP_NUM_THREADS', '1')))
    main()
