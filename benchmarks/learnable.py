r"""tsGCN's (alpha, beta) learned, against those of the validation grid search.

On Cora, CiteSeer and PubMed.

Run from the repository root::

    python -m benchmarks.learnable [--datasets Cora CiteSeer PubMed] [--seeds 10 ...]
                                   [--epochs 500 ...] [--routes learned fixed]
                                   [--threads 1]
    python -m benchmarks.learnable --summary-only   # rewrite learnable.md, train nothing

Two routes to tsGCN's coefficients, on the paper's random splits (seeds
0 .. SEEDS - 1, the same splits for both), the 2-layer exact tsGCN of the
library's convention, :math:`(\mathbf{I} - \mathbf{S})^{-1}` by conjugate
gradient (``RegularizerGNN(F, 32, C, regularizer='tsgcn', solver='cg',
cached=True, bias=False)``), trained by ``harness.training.fit`` (Adam,
learning rate 0.01, test scores at the best validation epoch):

- ``learned``: alpha and beta start at the paper's values
  (``PAPER_SETTINGS``) and are learned with the weights
  (``learn=('alpha', 'beta')``: softplus of ``raw_alpha``, ``raw_beta``,
  per layer), by implicit differentiation through the CG solve. The raw
  coefficients are an Adam group of their own without weight decay (weight
  decay on ``raw_alpha`` would pull alpha towards softplus(0) = 0.69). The
  coefficients of each layer are recorded after the last epoch and at the
  best validation epoch.
- ``fixed``: the same model at the (alpha, beta) that the validation grid of
  ``benchmarks/results/tuning.md`` chose (:obj:`TUNED`, which cites the run),
  held fixed: the grid route's final runs again, with the same model family
  as the learned route and on the same splits, so that the two differ in the
  coefficients alone. The grid itself is not run again: its seconds are the
  ones tuning.md recorded (a low-rank ``TSGCN``, so a CG grid would cost more;
  the report estimates how much from the per-epoch time measured here).

Everything but (alpha, beta) is the grid route's final setting, for both
routes: the semantic graph's k, dropout and weight decay of :obj:`TUNED`
(tuning.md chose them on validation too; on Cora they are the paper's k = 10,
dropout 0, weight decay 5e-4), hidden 32 and learning rate 0.01. The
protocol's runs are 10 splits of 500 epochs; ``--seeds`` and ``--epochs``
take one value, or one per dataset, to fit a time budget (the report says
what was reduced). Each run is appended to
``benchmarks/results/learnable.jsonl`` as it finishes and skipped when
stored, so an interrupted run resumes; ``benchmarks/results/learnable.md``
then summarises every stored run. Features are the row-normalised sparse CSR
matrix. The script pins ``--threads`` torch threads (default 1).
"""
import argparse
import datetime
import math
import os.path as osp
import statistics
import time
from typing import Dict, List, NamedTuple, Optional, Sequence

import torch

from harness.data import REPO, load_paper_dataset, run_split
from harness.measure import load_average, machine_info
from harness.report import RESULTS, Report, command_line
from harness.results import ResultStore
from harness.training import fit
from torch_geometric_regcn import RegularizerGNN, SemanticGraph
from torch_geometric_regcn.datasets import PAPER_SETTINGS

MODULE = 'benchmarks.learnable'
CELLS = osp.join(RESULTS, 'learnable.jsonl')  #: one line per (dataset, route, epochs, seed)
SUMMARY = osp.join(RESULTS, 'learnable.md')
DATASETS = ['Cora', 'CiteSeer', 'PubMed']
ROUTES = ['learned', 'fixed']
EPOCHS, SEEDS = 500, 10  #: the protocol (the grid route's final runs)
HIDDEN, LR = 32, 0.01


class Tuned(NamedTuple):
    r"""The grid route's choice for one dataset, as recorded in
    ``benchmarks/results/tuning.md``."""
    alpha: float
    beta: float
    k: int  #: the semantic graph's k
    dropout: float
    weight_decay: float
    acc: float  #: test ACC (%) of its final runs there (low-rank TSGCN, 500 epochs)
    std: float
    splits: int  #: the splits of those final runs
    search_seconds: int  #: the run(s) that searched (alpha, beta), final runs included
    search_epochs: int  #: training epochs of the (alpha, beta) grid: points x splits x epochs
    all_seconds: int  #: every random-split tuning run of the dataset in tuning.md
    source: str


#: The tuned settings of ``benchmarks/results/tuning.md`` (random splits),
#: with the sections they come from.
TUNED: Dict[str, Tuned] = {
    'Cora': Tuned(
        5.0, 1.0, 10, 0.0, 5e-4, 82.1, 1.9, 10, 400, 16 * 3 * 200, 420,
        'section "Cora (2026-11-26)": the 4 x 4 grid (3 splits x 200 epochs each) chose '
        'alpha = 5, beta = 1 at the paper\'s k = 10, dropout 0, weight decay 5e-4; the run '
        'took 400 s with its final runs (10 splits x 500 epochs: ACC 82.1 (1.9)). The final '
        'runs again ("Cora (2026-11-27)"): 82.3 (1.7), 20 s'),
    'CiteSeer': Tuned(
        5.0, 2.0, 40, 0.8, 0.05, 71.8, 0.6, 10, 993 + 311, (12 + 3) * 10 * 500, 10883,
        'sections "CiteSeer (2026-11-27)" with --seeds 10 --grid-epochs 500: the 4 x 3 grid '
        'of 993 s chose alpha = 5, beta = 2 (final runs: ACC 71.8 (0.6)), and the grid\'s '
        'edge alpha = 10 (311 s) scored lower (74.3 against 74.8); at rank 828, k = 40, '
        'dropout 0.8, weight decay 0.05, chosen by the earlier stages 2 and 3. Over 30 splits '
        'the same setting scored 72.1 (1.1)'),
    'PubMed': Tuned(
        1.0, 0.1, 10, 0.8, 5e-3, 81.8, 1.4, 10, 800, 16 * 3 * 200, 1820,
        'section "PubMed (2026-11-26)" (first): the 4 x 4 grid (3 splits x 200 epochs) chose '
        'alpha = 1, beta = 0.1 (800 s with stage 2 and its final runs); stage 3 then chose '
        'dropout 0.8, weight decay 5e-3, whose final runs ("PubMed (2026-11-27)") scored ACC '
        '81.8 (1.4)'),
}


def cell_key(dataset: str, route: str, epochs: int, seed: int) -> str:
    r"""The name of a run, e.g. ``'Cora__learned__e500__3'``."""
    return f'{dataset}__{route}__e{epochs}__{seed}'


def open_cells(path: str = CELLS) -> ResultStore:
    return ResultStore(path, key=lambda r: cell_key(r['dataset'], r['route'], r['epochs'],
                                                   r['seed']))


def coefficients(model: RegularizerGNN) -> Dict[str, List[float]]:
    r"""Each layer's alpha and beta."""
    regs = [conv.regularizer for conv in model.convs]
    return {name: [float(getattr(r, name).detach()) for r in regs] for name in ('alpha', 'beta')}


def train(data, dataset: str, route: str, seed: int, epochs: int) -> dict:
    r"""One run of :obj:`route` on the split of :obj:`seed`: the stored record."""
    tuned, paper = TUNED[dataset], PAPER_SETTINGS[dataset]
    alpha, beta = (paper.alpha, paper.beta) if route == 'learned' else (tuned.alpha, tuned.beta)
    run = run_split(data, seed)
    torch.manual_seed(seed)
    model = RegularizerGNN(run.num_features, HIDDEN, int(data.y.max()) + 1,
                           regularizer='tsgcn', solver='cg', alpha=alpha, beta=beta, k=tuned.k,
                           learn=('alpha', 'beta') if route == 'learned' else (),
                           cached=True, bias=False, dropout=tuned.dropout)
    raw = [p for conv in model.convs for p in conv.regularizer.learned_parameters()]
    trace: List[Dict[str, List[float]]] = []
    load = load_average()
    result = fit(model, lambda: model(run.x, run.edge_index,
                                      semantic_edge_index=run.semantic_edge_index),
                 run, epochs, LR, tuned.weight_decay,
                 on_epoch=lambda epoch: trace.append(coefficients(model)) if raw else None,
                 param_groups=[{'params': raw, 'weight_decay': 0.0}] if raw else None)
    record = dict(dataset=dataset, route=route, seed=seed, epochs=epochs,
                  alpha0=alpha, beta0=beta, k=tuned.k, dropout=tuned.dropout,
                  weight_decay=tuned.weight_decay, acc=100 * result.accuracy,
                  f1=100 * result.f1, val=100 * result.val_accuracy,
                  last_acc=100 * result.last_accuracy, epoch=result.best_epoch,
                  seconds=result.seconds, threads=torch.get_num_threads(), load=load)
    if raw:
        record.update({f'{name}_last': trace[-1][name] for name in ('alpha', 'beta')})
        record.update({f'{name}_best': trace[result.best_epoch][name]
                       for name in ('alpha', 'beta')})
    return record


def run_dataset(cells: ResultStore, dataset: str, seeds: int, epochs: int,
                routes: Sequence[str], command: str) -> None:
    r"""Trains the runs of :obj:`dataset` that :obj:`cells` lacks, the routes
    alternating split by split (so that a change of the machine's load falls
    on both), and stores each as it finishes."""
    todo = [(seed, route) for seed in range(seeds) for route in routes
            if cell_key(dataset, route, epochs, seed) not in cells]
    if not todo:
        return
    start = time.perf_counter()
    data = SemanticGraph(TUNED[dataset].k, progress=False)(
        load_paper_dataset(dataset, sparse_features=True))
    print(f'{dataset}: loaded, semantic graph k = {TUNED[dataset].k}, '
          f'{time.perf_counter() - start:.1f} s', flush=True)
    for seed, route in todo:
        record = train(data, dataset, route, seed, epochs)
        record['command'] = command
        cells.add(record)
        learned = (f"; alpha {record['alpha_last']}, beta {record['beta_last']}"
                   if route == 'learned' else '')
        print(f"{dataset} {route} seed {seed}: ACC {record['acc']:.1f} (epoch "
              f"{record['epoch']}), {record['seconds']:.0f} s{learned}", flush=True)


def _mean_std(values: Sequence[float], spec: str = '.1f') -> str:
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f'{statistics.mean(values):{spec}} ({std:{spec}})'


def _layers(rows: List[dict], name: str) -> str:
    r"""The mean of a learned coefficient per layer, over the runs."""
    return ', '.join(f'{statistics.mean(r[name][i] for r in rows):.2f}'
                     for i in range(len(rows[0][name])))


def summarize(cells: ResultStore, rep: Report) -> None:
    r"""Appends the summary of every stored run to :obj:`rep`."""
    records = cells.records()
    commands = sorted({r['command'] for r in records})
    rep(f'Runs stored in `{osp.relpath(cells.path, REPO)}`, made by: '
        + '; '.join(f'`{c}`' for c in commands) + '.')
    rep()
    _overview(records, rep)
    for dataset in DATASETS:
        mine = [r for r in records if r['dataset'] == dataset]
        if not mine:
            continue
        tuned, paper = TUNED[dataset], PAPER_SETTINGS[dataset]
        rep(f'## {dataset}')
        rep()
        rep(f'Both routes: k = {tuned.k}, dropout {tuned.dropout:g}, weight decay '
            f'{tuned.weight_decay:g} (none on the raw coefficients), hidden {HIDDEN}, learning '
            f'rate {LR:g}. The grid route\'s choice, from `tuning.md`: {tuned.source}.')
        rep()
        rows, times = [], []
        for epochs in sorted({r['epochs'] for r in mine}, reverse=True):
            by_route = {route: sorted((r for r in mine if r['route'] == route
                                       and r['epochs'] == epochs), key=lambda r: r['seed'])
                        for route in ROUTES}
            for route, runs in by_route.items():
                if not runs:
                    continue
                seconds = sum(r['seconds'] for r in runs)
                if route == 'learned':
                    what = (f'learned from ({paper.alpha:g}, {paper.beta:g}): alpha '
                            f'{_layers(runs, "alpha_last")}, beta {_layers(runs, "beta_last")} '
                            f'(layers 1, 2; at the best validation epoch alpha '
                            f'{_layers(runs, "alpha_best")}, beta {_layers(runs, "beta_best")})')
                else:
                    what = f'fixed at the grid\'s ({tuned.alpha:g}, {tuned.beta:g})'
                rows.append([route, what, len(runs), epochs, _mean_std([r['acc'] for r in runs]),
                             _mean_std([r['f1'] for r in runs]),
                             _mean_std([r['last_acc'] for r in runs]),
                             _mean_std([r['val'] for r in runs]),
                             f"{statistics.median(r['epoch'] for r in runs):g}",
                             f'{seconds / len(runs):.0f}',
                             f"{seconds / sum(r['epochs'] for r in runs) * 1000:.0f}"])
                times.append((route, epochs, len(runs), seconds))
            paired = _paired(by_route['learned'], by_route['fixed'])
            if paired:
                diff, se, n = paired
                rep(f'{epochs} epochs, learned - fixed on the {n} splits both ran: '
                    f'{diff:+.1f} points of test ACC (paired standard error {se:.1f}): '
                    f'{_verdict(diff, se)}.')
                rep()
        rows.append(['grid (tuning.md)', f'fixed at ({tuned.alpha:g}, {tuned.beta:g}), '
                     'low-rank TSGCN', tuned.splits, EPOCHS, f'{tuned.acc:.1f} ({tuned.std:.1f})',
                     '-', '-', '-', '-', '-', '-'])
        rep.table(['route', '(alpha, beta)', 'splits', 'epochs', 'test ACC', 'test F1',
                   'ACC last epoch', 'val ACC', 'best epoch (median)', 's/run', 'ms/epoch'],
                  rows)
        _time_table(rep, tuned, times)


def _verdict(diff: float, se: float) -> str:
    return ('within two standard errors of each other' if abs(diff) < 2 * se
            else 'the learned coefficients score higher' if diff > 0
            else "the grid's fixed coefficients score higher")


def _overview(records: List[dict], rep: Report) -> None:
    r"""One row per dataset and number of epochs that both routes ran: test
    ACC and the time of each route."""
    rows = []
    for dataset in DATASETS:
        tuned = TUNED[dataset]
        for epochs in sorted({r['epochs'] for r in records if r['dataset'] == dataset},
                             reverse=True):
            runs = {route: [r for r in records if r['dataset'] == dataset
                            and r['epochs'] == epochs and r['route'] == route]
                    for route in ROUTES}
            paired = _paired(runs['learned'], runs['fixed'])
            if not paired:
                continue
            seeds = {r['seed'] for r in runs['fixed']}
            learned = [r for r in runs['learned'] if r['seed'] in seeds]
            fixed = [r for r in runs['fixed'] if r['seed'] in {r['seed'] for r in learned}]
            learned_s, fixed_s = (sum(r['seconds'] for r in rs) for rs in (learned, fixed))
            cg_search = tuned.search_epochs * fixed_s / sum(r['epochs'] for r in fixed)
            rows.append([dataset, f'{paired[2]} x {epochs}',
                         _mean_std([r['acc'] for r in learned]),
                         _mean_std([r['acc'] for r in fixed]),
                         f'{paired[0]:+.1f} ({paired[1]:.1f})', _verdict(*paired[:2]),
                         f'{learned_s:.0f}',
                         f'{tuned.search_seconds} + {fixed_s:.0f} = '
                         f'{tuned.search_seconds + fixed_s:.0f}',
                         f'{cg_search + fixed_s:.0f}'])
    if not rows:
        return
    rep('## Summary')
    rep()
    rep('Test ACC of the exact tsGCN (CG) with (alpha, beta) learned from the paper\'s values '
        'and with the pair the validation grid chose, on the same splits, all else equal; '
        'learned - fixed is the mean per-split difference (its standard error). Route time: '
        'the learned route is its training; the grid route is the (alpha, beta) search as '
        'recorded in tuning.md (low-rank TSGCN, its final runs included) plus the final runs '
        'again with CG here, or, last column, the same search estimated with CG (its training '
        'epochs times the ms/epoch of the fixed runs here).')
    rep()
    rep.table(['dataset', 'splits x epochs', 'learned ACC', 'grid ACC', 'learned - grid',
               'higher test ACC', 'learned route (s)', 'grid route (s)',
               'grid route, CG search (s, est.)'], rows)


def _paired(learned: List[dict], fixed: List[dict]) -> Optional[tuple]:
    r"""Mean and standard error of the per-split difference learned - fixed."""
    fixed_by_seed = {r['seed']: r['acc'] for r in fixed}
    diffs = [r['acc'] - fixed_by_seed[r['seed']] for r in learned if r['seed'] in fixed_by_seed]
    if len(diffs) < 2:
        return None
    return statistics.mean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs)), len(diffs)


def _time_table(rep: Report, tuned: Tuned, times: List[tuple]) -> None:
    r"""The wall time of each route: training for the learned one, the
    recorded grid search plus the final runs for the grid one."""
    rows = []
    for route, epochs, splits, seconds in times:
        if route == 'learned':
            rows.append([f'learned, {splits} splits x {epochs} epochs', 'training, here',
                         f'{seconds:.0f}'])
            continue
        per_epoch = seconds / (splits * epochs)
        rows.append([f'grid, final runs {splits} splits x {epochs} epochs', 'CG re-run, here',
                     f'{seconds:.0f}'])
        rows.append(['grid, + (alpha, beta) search', 'recorded in tuning.md (low-rank '
                     'TSGCN, final runs included)',
                     f'{tuned.search_seconds} (total {tuned.search_seconds + seconds:.0f})'])
        rows.append(['grid, + (alpha, beta) search with CG', f'estimate: {tuned.search_epochs} '
                     f'epochs x {per_epoch * 1000:.0f} ms (this re-run\'s ms/epoch)',
                     f'{tuned.search_epochs * per_epoch:.0f} (total '
                     f'{tuned.search_epochs * per_epoch + seconds:.0f})'])
    rows.append(['grid, every tuning run of the dataset', 'recorded in tuning.md (random '
                 'splits; all stages)', f'{tuned.all_seconds}'])
    rep.table(['route', 'what', 'seconds'], rows)


def _per_dataset(values: Sequence[int], datasets: Sequence[str], name: str,
                 parser: argparse.ArgumentParser) -> Dict[str, int]:
    if len(values) == 1:
        return dict.fromkeys(datasets, values[0])
    if len(values) != len(datasets):
        parser.error(f'--{name} takes one value or one per dataset ({len(datasets)})')
    return dict(zip(datasets, values))


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog=f'python -m {MODULE}',
                                     description=__doc__.splitlines()[0])
    parser.add_argument('--datasets', nargs='+', default=DATASETS, choices=DATASETS)
    parser.add_argument('--seeds', nargs='+', type=int, default=[SEEDS],
                        help='splits 0 .. SEEDS - 1: one value, or one per dataset '
                             '(default: %(default)s)')
    parser.add_argument('--epochs', nargs='+', type=int, default=[EPOCHS],
                        help='one value, or one per dataset (default: %(default)s)')
    parser.add_argument('--routes', nargs='+', default=ROUTES, choices=ROUTES)
    parser.add_argument('--threads', type=int, default=1,
                        help='torch threads (default: %(default)s)')
    parser.add_argument('--summary-only', action='store_true',
                        help='rewrite the summary from the stored runs, train nothing')
    parser.add_argument('--cells', default=CELLS, help='the JSON-lines file of the runs')
    parser.add_argument('--output', default=SUMMARY, help='the markdown summary')
    args = parser.parse_args(argv)
    seeds = _per_dataset(args.seeds, args.datasets, 'seeds', parser)
    epochs = _per_dataset(args.epochs, args.datasets, 'epochs', parser)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    command = command_line(MODULE, argv)
    cells = open_cells(args.cells)
    load = load_average()
    if not args.summary_only:
        for dataset in args.datasets:
            run_dataset(cells, dataset, seeds[dataset], epochs[dataset], args.routes, command)
    info = machine_info(args.threads)
    rep = Report()
    rep('# Learned (alpha, beta) against the validation grid search')
    rep()
    rep(f'Written by `{command}` (from the repository root); see the docstring of '
        '`benchmarks/learnable.py` for the protocol. Test ACC and macro-F1 in %, mean (std) '
        'over the splits, at each run\'s best validation epoch; "ACC last epoch" after the '
        'last one. s/run and ms/epoch are training times (each epoch: a training step and an '
        'evaluation); the route times below add up those of all splits.')
    rep()
    loads = [float(r['load'].split()[0]) for r in cells.records() if r['load'] != 'n/a']
    spread = f' {min(loads):.1f} to {max(loads):.1f}' if loads else ' n/a'
    rep(f"Machine: {info['cpu']}, {info['cpu_count']} CPUs, shared with other jobs; "
        f"{args.threads} torch thread(s). Python {info['python']}, torch {info['torch']}, "
        f"torch_geometric {info['torch_geometric']}. Load average at the start of this "
        f'command: {load}; the 1-minute load average at the start of the stored runs:{spread}. '
        f'Date: {datetime.date.today().isoformat()}. The seconds cited from tuning.md were '
        'measured on the same machine under its own load.')
    rep()
    reduced = sorted({(r['dataset'], r['epochs'], len({s['seed'] for s in cells.records()
                                                       if s['dataset'] == r['dataset']
                                                       and s['epochs'] == r['epochs']}))
                      for r in cells.records()})
    cuts = [f'{d}: {n} splits x {e} epochs' for d, e, n in reduced if e < EPOCHS or n < SEEDS]
    if cuts:
        rep(f'Reduced from the protocol\'s {SEEDS} splits x {EPOCHS} epochs to fit the time '
            f'budget of the run: {"; ".join(cuts)}. The grid route\'s recorded figures are '
            f'{SEEDS} splits x {EPOCHS} epochs.')
        rep()
    summarize(cells, rep)
    rep(f"Training time of all stored runs: "
        f"{sum(r['seconds'] for r in cells.records()) / 60:.1f} min.")
    rep()
    rep.finish(start, args.output)


if __name__ == '__main__':
    main()
