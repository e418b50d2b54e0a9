r"""Each model's chosen configuration retrained at another dropout, on the same
official splits: is a model's rank on a heterophilous graph the protocol's
dropout?

Issue 29's protocol trains every model with dropout 0.5. On minesweeper the
deep models' best epochs come at the end of the 300 (median 260-295), as if
under-trained, and half the nodes are training nodes, so there is little to
regularise. This retrains, for each model named, the configuration that
``examples.heterophily`` chose on validation (``"chosen"`` of its record, the
protocol's dropout 0.5) with the protocol's ``dropout`` field set to
``--dropout`` (a model's own dropouts, such as Polynormer's
``global_dropout`` or GAT's attention dropout, stay as they are), with the
same seeds (the split's number) and budget, on the CPU, one thread per
process, and compares both per split. ``--depths MODEL:L,L`` trains that
model's configuration at each depth and keeps the one of best mean
validation score; ``--set MODEL:KEY=VALUE`` changes one more key of its
configuration (a variant, named in the summary). The package's recommended
model is chosen again by mean validation score among the chosen points of
the models of ``harness.heterophily.RECOMMENDED`` that run. Nothing is
chosen on test.

Run from the repository root (one process per shard; runs already in the
journal are read back, not retrained)::

    OMP_NUM_THREADS=1 python -m benchmarks.heterophily_dropout --dataset minesweeper \
        --models regcn polynormer sage gcn --depths regcn:4,8 polynormer:7,10 \
        --dropout 0.2 --journal runs.jsonl [--shard I N]
    python -m benchmarks.heterophily_dropout --dataset minesweeper ... --summary

The summary table goes to stdout (``--output``: also to a file);
``benchmarks/results/heterophily.md`` has the runs of 2026-12-01.
"""
import argparse
import json
import math
import os.path as osp
from typing import Any, Dict, List, Tuple

import torch

from harness.cli import check_writable, positive_int
from harness.heterophily import (
    MODELS,
    RECOMMENDED,
    SEARCH_BUDGET,
    fit_model,
    load_heterophilous,
    mean_validation,
    official_split,
    select,
)
from harness.heterophily_results import RECOMMENDED_NAME, Journal, mean_and_error
from torch_geometric_regcn.datasets import HETEROPHILOUS
from torch_geometric_regcn.datasets.heterophilous import normalize_name

RECORDS = osp.join(osp.dirname(osp.abspath(__file__)), 'results', 'heterophily')


def chosen_configs(record: Dict, models: List[str]) -> Dict[str, Dict]:
    r"""The configuration each of :obj:`models` chose on validation in
    :obj:`record` (a JSON record of ``examples.heterophily``)."""
    missing = [m for m in models if m not in record['chosen']]
    if missing:
        raise ValueError(f'the record holds no search of {missing}: run examples.heterophily '
                         f'with --models {" ".join(missing)} first')
    return {m: {k: v for k, v in record['chosen'][m]['config'].items() if k != 'model'}
            for m in models}


def _fmt(mean_err: Tuple[float, float], sign: str = '') -> str:
    mean, err = mean_err
    text = f'{100 * mean:{sign}.1f}'
    return text if math.isnan(err) else f'{text} ± {100 * err:.1f}'


def depth_grid(text: str) -> Tuple[str, List[int]]:
    r"""``MODEL:L,L,...`` as the model and its depths."""
    model, _, depths = text.partition(':')
    try:
        values = [int(d) for d in depths.split(',')]
    except ValueError:
        values = []
    if model not in MODELS or not values or min(values) < 1 \
            or len(set(values)) != len(values) or len(values) > SEARCH_BUDGET:
        raise argparse.ArgumentTypeError(
            f'{text!r}: must be MODEL:L,L,... with a model of harness.heterophily.MODELS and '
            f'1 to {SEARCH_BUDGET} distinct depths of at least 1 (e.g. regcn:4,8,12)')
    return model, values


def setting(text: str) -> Tuple[str, str, Any]:
    r"""``MODEL:KEY=VALUE`` (the value as JSON) as the model, key and value."""
    model, _, assignment = text.partition(':')
    key, _, value = assignment.partition('=')
    try:
        parsed = json.loads(value)
    except ValueError:
        parsed = None
    if model not in MODELS or not key or parsed is None:
        raise argparse.ArgumentTypeError(
            f'{text!r}: must be MODEL:KEY=VALUE with a model of harness.heterophily.MODELS and '
            f'a JSON value (e.g. regcn_polynormer:K=1)')
    return model, key, parsed


def main() -> None:
    parser = argparse.ArgumentParser(prog='python -m benchmarks.heterophily_dropout')
    parser.add_argument('--dataset', type=normalize_name, required=True)
    parser.add_argument('--record', default=None,
                        help='the record of examples.heterophily '
                             '(default: benchmarks/results/heterophily/<dataset>.json)')
    parser.add_argument('--models', nargs='+', required=True, choices=sorted(MODELS))
    parser.add_argument('--dropout', type=float, required=True)
    parser.add_argument('--depths', nargs='+', type=depth_grid, default=[], metavar='MODEL:L,..',
                        help='a grid over depth for a model of --models: its chosen '
                             'configuration at each depth, the one of best mean validation '
                             'score chosen (default: its chosen depth alone)')
    parser.add_argument('--set', nargs='+', type=setting, default=[], metavar='MODEL:KEY=VALUE',
                        help="another value of a key of a model's chosen configuration "
                             '(a variant; the key must be one the configuration holds)')
    parser.add_argument('--splits', type=positive_int, default=10)
    parser.add_argument('--journal', required=True)
    parser.add_argument('--shard', type=int, nargs=2, default=(0, 1), metavar=('I', 'N'))
    parser.add_argument('--summary', action='store_true',
                        help='train nothing: summarise the runs in the journal')
    parser.add_argument('--output', default=None)
    args = parser.parse_args()
    if not 0 <= args.dropout < 1:
        parser.error(f'--dropout must lie in [0, 1) (got {args.dropout})')
    depths = dict(args.depths)
    if len(depths) != len(args.depths) or set(depths) - set(args.models):
        parser.error(f'--depths: one grid per model, each of --models (got '
                     f'{[m for m, _ in args.depths]})')
    index, shards = args.shard
    if not 0 <= index < shards:
        parser.error(f'--shard I N needs 0 <= I < N (got {index} {shards})')
    record_path = args.record or osp.join(RECORDS, f'{args.dataset}.json')
    if not osp.isfile(record_path):
        parser.error(f'--record {record_path}: no such file; run examples.heterophily '
                     f'--dataset {args.dataset} --json PATH first')
    if not args.summary:
        check_writable(parser, '--journal', args.journal)
    elif not osp.isfile(args.journal):
        parser.error(f'--journal {args.journal}: no such file (with --summary it is read)')
    if args.output:
        check_writable(parser, '--output', args.output)
    with open(record_path) as f:
        record = json.load(f)
    try:
        base = chosen_configs(record, args.models)
    except ValueError as error:
        parser.error(f'--models: {error}')
    for m, key, value in args.set:
        if m not in base or key not in base[m] or key in ('dropout', 'layers', 'epochs'):
            parser.error(f'--set {m}:{key}: {m} must be one of --models and {key} a key of its '
                         f"configuration other than dropout, layers and epochs (its keys: "
                         f'{sorted(base.get(m, {}))})')
        base[m] = {**base[m], key: value}
    metric = HETEROPHILOUS[args.dataset].metric
    # Each model's points at the new dropout: its chosen configuration at each depth.
    points = {m: [{**c, 'dropout': args.dropout, 'layers': layers}
                  for layers in depths.get(m, [c['layers']])] for m, c in base.items()}
    journal = Journal(args.journal)
    if not args.summary:
        jobs = [(m, config, k) for k in range(args.splits) for m in args.models
                for config in points[m]]
        torch.set_num_threads(1)
        data = load_heterophilous(args.dataset)
        for m, config, k in jobs[index::shards]:
            if journal.get(args.dataset, m, config, k, 'cpu') is None:
                result = fit_model(m, official_split(data, k), metric, config, k)
                journal.add(args.dataset, m, config, k, 'cpu', result)
                print(m, config['layers'], k, result, flush=True)
        return
    print(summary(args, record, record_path, metric, base, points, journal))


def summary(args: argparse.Namespace, record: Dict, record_path: str, metric: str,
            base: Dict[str, Dict], points: Dict[str, List[Dict]], journal: Journal) -> str:
    r"""The table of the runs in :obj:`journal` (written to ``--output`` too)."""
    splits = list(range(args.splits))
    before = {m: record['results'][m] for m in args.models}
    after, val, depth, lines = {}, {}, {}, []
    grid_lines = []
    for m in args.models:
        runs = [[journal.get(args.dataset, m, config, k, 'cpu') for k in splits]
                for config in points[m]]
        missing = sum(r is None for point in runs for r in point)
        if missing:
            raise SystemExit(f'{m}: {missing} of {len(splits) * len(runs)} runs are missing '
                             f'from {args.journal}')
        mean_val = [mean_validation(point) for point in runs]
        chosen = select(mean_val)
        after[m], val[m] = [r.test for r in runs[chosen]], mean_val[chosen]
        depth[m] = points[m][chosen]['layers']
        if len(runs) > 1:
            grid_lines.append(f'- {MODELS[m].label}: ' + '; '.join(
                f"{config['layers']} layers: val {100 * v:.2f}, test "
                f"{_fmt(mean_and_error([r.test for r in point]))}"
                + (' (chosen)' if i == chosen else '')
                for i, (config, v, point) in enumerate(zip(points[m], mean_val, runs))))
    lines += [f'{args.dataset} ({metric}), {args.splits} official splits; each model at its '
              f'configuration chosen at dropout 0.5 ({osp.relpath(record_path)}), retrained at '
              f'dropout {args.dropout} (at the depths of --depths where given, one chosen by '
              f'mean validation score)'
              + ''.join(f'; {m} with {key} = {value!r} (chosen at 0.5: '
                        f"{record['chosen'][m]['config'].get(key)!r})"
                        for m, key, value in args.set), '',
              f'| model (depth at 0.5 → at {args.dropout}) | dropout 0.5 | dropout '
              f'{args.dropout} | change | mean val at {args.dropout} |', '|---|---|---|---|---|']
    for m in args.models:
        c = base[m]
        change = [a - b for a, b in zip(after[m], before[m])]
        lines.append(f"| {MODELS[m].label} ({c['layers']} → {depth[m]}"
                     f"{', residual' if c.get('residual') else ''}) | "
                     f'{_fmt(mean_and_error(before[m]))} | {_fmt(mean_and_error(after[m]))} | '
                     f"{_fmt(mean_and_error(change), '+')} | {100 * val[m]:.2f} |")
    if grid_lines:
        lines += ['', 'Grids over depth:'] + grid_lines
    recommended = [m for m in RECOMMENDED if m in args.models]
    if recommended:
        pick = max(recommended, key=lambda m: (val[m], -RECOMMENDED.index(m)))
        lines += ['', f'Recommended at dropout {args.dropout} (by mean validation among '
                  f'{", ".join(recommended)}): {pick}, {_fmt(mean_and_error(after[pick]))}']
        for m in args.models:
            if m not in RECOMMENDED:
                diff = [a - b for a, b in zip(after[pick], after[m])]
                lines.append(f'- recommended − {MODELS[m].label} (both at {args.dropout}): '
                             f"{_fmt(mean_and_error(diff), '+')}")
        if RECOMMENDED_NAME in record['results']:
            diff = [a - b for a, b in zip(after[pick], record['results'][RECOMMENDED_NAME])]
            lines.append(f'- recommended at {args.dropout} − recommended at 0.5: '
                         f"{_fmt(mean_and_error(diff), '+')}")
    text = '\n'.join(lines)
    if args.output:
        with open(args.output, 'w') as f:
            f.write(text + '\n')
    return text


if __name__ == '__main__':
    main()
