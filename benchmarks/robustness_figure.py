r"""Draws test accuracy against the attack budget from the records of
``benchmarks.robustness``.

Run from the repository root::

    python -m benchmarks.robustness_figure RECORDS.json [RECORDS.json ...]
        [--attack prbcd] [--out docs/robustness.png]

One panel per dataset and setting (evasion, poisoning), one line per model:
the mean test accuracy over the seeds at each budget, with its standard
error as a band.
"""
import argparse
import json
import math
import os.path as osp
import statistics
from typing import Dict, List

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

from harness.cli import check_writable  # noqa: E402
from harness.report import FIGURES  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('records', nargs='+')
    parser.add_argument('--attack', default='prbcd')
    parser.add_argument('--out', default=osp.join(FIGURES, 'robustness.png'))
    args = parser.parse_args()
    for path in args.records:
        if not osp.isfile(path):
            parser.error(f'records: no such file {path} (a --json of benchmarks.robustness)')
    check_writable(parser, '--out', args.out)
    records: List[Dict] = []
    for path in args.records:
        with open(path) as f:
            records += [r for r in json.load(f)['records'] if r['attack'] == args.attack]
    if not records:
        parser.error(f'no records of attack {args.attack!r} in {args.records}')
    datasets = sorted({r['dataset'] for r in records})
    models = list(dict.fromkeys(r['model'] for r in records))
    fig, axes = plt.subplots(len(datasets), 2, figsize=(10, 3.6 * len(datasets)),
                             squeeze=False)
    for row, dataset in enumerate(datasets):
        for col, setting in enumerate(('evasion', 'poisoning')):
            ax = axes[row][col]
            for model in models:
                cells = {}
                for r in records:
                    if (r['dataset'], r['model']) == (dataset, model):
                        cells.setdefault(r['budget'], []).append(100 * r[setting])
                budgets = sorted(cells)
                mean = [statistics.fmean(cells[b]) for b in budgets]
                err = [statistics.stdev(cells[b]) / math.sqrt(len(cells[b]))
                       if len(cells[b]) > 1 else 0.0 for b in budgets]
                x = [100 * b for b in budgets]
                ax.plot(x, mean, marker='o', label=model)
                ax.fill_between(x, [m - e for m, e in zip(mean, err)],
                                [m + e for m, e in zip(mean, err)], alpha=0.2)
            ax.set_title(f'{dataset}, {args.attack}, {setting}')
            ax.set_xlabel('perturbed edges (% of the edges)')
            ax.set_ylabel('test accuracy (%)')
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f'wrote {args.out}')


if __name__ == '__main__':
    main()
