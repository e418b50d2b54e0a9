"""Baselines on a heterophilous graph of Platonov et al., on its official splits.

    python -m examples.heterophily --dataset NAME [--root DIR] [--splits K] [--epochs E]
                                   [--models M ...] [--json PATH] [--device DEVICE]

Trains each model on the first K of the dataset's ten official splits with the
protocol of issue 29 (harness/heterophily.py: 2 layers, 64 hidden units,
dropout 0.5, Adam 0.01, weight decay 5e-4, 300 epochs, no tuning) and reports
the test score at the epoch of best validation score, measured by the
dataset's metric (accuracy, or ROC-AUC of class 1 for the two-class sets),
then a table of the mean and standard error over the splits, in percent.
Every configuration is fixed in advance (nothing is chosen on the test
nodes, nor on validation beyond the epoch). Each split's model is seeded by
the split index.

The package's recommended heterophily model (issue 29, item 2: signed or
high-pass regularisers, ego/neighbour separation, a learned frequency
response, directed operators) is not built yet. Meanwhile this runs the
baselines written with PyG's layers (mlp, gcn, sage, gat, appnp) and, for
reference, the package's current tsGCN by exact CG propagation, with its
semantic kNN graph (tsgcn: alpha=1, beta=1, k=10) and without it
(tsgcn_topology: alpha=1, beta=0). On the `_directed` sets, PyG's layers pass
messages along edge_index[0] -> edge_index[1] as stored, while tsGCN's
regulariser symmetrises the graph.

With --json, writes {"dataset", "metric", "chosen", "results"}: "chosen" maps
each model to its configuration, "results" each model to its test score per
split, in split order, as a fraction in [0, 1]. Without --root, the raw file
is copied from ../shared/data/heterophilous into a temporary root (no
download); with --root, PyG's HeterophilousGraphDataset downloads its five
sets as usual.
"""
import argparse
import json
import math
import statistics
import time

import torch

from harness.heterophily import (
    MODELS,
    PROTOCOL,
    SEMANTIC_K,
    chosen,
    fit_model,
    load_heterophilous,
    official_split,
)
from torch_geometric_regcn import SemanticGraph
from torch_geometric_regcn.datasets import HETEROPHILOUS
from torch_geometric_regcn.datasets.heterophilous import normalize_name
from torch_geometric_regcn.utils.progress import progress_bar


def mean_and_error(values):
    """The mean and its standard error (sample standard deviation over the
    square root of the count; nan for one value)."""
    if len(values) < 2:
        return statistics.mean(values), math.nan
    return statistics.mean(values), statistics.stdev(values) / math.sqrt(len(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dataset', required=True, type=normalize_name,
                        choices=list(HETEROPHILOUS), help='a heterophilous dataset')
    parser.add_argument('--root', default=None, help='dataset root (default: a copy of '
                        '../shared/data/heterophilous)')
    parser.add_argument('--splits', type=int, default=10,
                        help='the first K official splits (default: %(default)s)')
    parser.add_argument('--epochs', type=int, default=PROTOCOL.epochs,
                        help='(default: %(default)s)')
    parser.add_argument('--models', nargs='+', default=list(MODELS), choices=list(MODELS),
                        metavar='MODEL', help=f"of {', '.join(MODELS)} (default: all)")
    parser.add_argument('--json', default=None, metavar='PATH',
                        help='write the scores per split to PATH')
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu',
                        help='(default: %(default)s)')
    args = parser.parse_args()

    metric = HETEROPHILOUS[args.dataset].metric
    protocol = PROTOCOL._replace(epochs=args.epochs)
    data = load_heterophilous(args.dataset, args.root)
    num_splits = data.train_mask.size(1)
    if not 1 <= args.splits <= num_splits:
        parser.error(f'--splits must be in [1, {num_splits}] (got {args.splits})')
    num_classes = int(data.y.max()) + 1
    data = data.to(args.device)
    print(f'{args.dataset}: {data.num_nodes} nodes, {data.edge_index.size(1)} edges, '
          f'{data.num_features} features, {num_classes} classes; metric {metric}; '
          f'{args.splits} of {num_splits} official splits, {args.epochs} epochs')
    if any(MODELS[name].semantic for name in args.models):
        start = time.perf_counter()
        data = SemanticGraph(SEMANTIC_K, progress=False)(data)
        print(f'semantic graph (k={SEMANTIC_K}): {data.semantic_edge_index.size(1)} edges, '
              f'{time.perf_counter() - start:.1f}s')

    results, seconds = {name: [] for name in args.models}, {name: [] for name in args.models}
    for k in range(args.splits):
        split = official_split(data, k)
        for name in args.models:
            with progress_bar(args.epochs, f'{name} split {k}', 'epoch', leave=False) as bar:
                result = fit_model(name, split, metric, protocol, seed=k,
                                   on_epoch=lambda _: bar.update())
            results[name].append(result.test)
            seconds[name].append(result.seconds)
            print(f'split {k} {MODELS[name].label}: test {metric} {100 * result.test:.1f} (val '
                  f'{100 * result.val:.1f}, best epoch {result.best_epoch}, '
                  f'{result.seconds:.1f}s)')

    print(f'\n{args.dataset}, test {metric} (%) at the best validation {metric}, '
          f'mean ± standard error over {args.splits} splits')
    width = max(len(MODELS[name].label) for name in args.models)
    print(f"{'model':<{width}}  {metric:>11}  s/split")
    for name in args.models:
        mean, error = mean_and_error(results[name])
        cell = f'{100 * mean:.1f} ± {100 * error:.1f}'
        print(f'{MODELS[name].label:<{width}}  {cell:>11}  {statistics.mean(seconds[name]):7.1f}')

    if args.json:
        with open(args.json, 'w', encoding='utf-8') as f:
            json.dump({'dataset': args.dataset, 'metric': metric,
                       'chosen': {name: chosen(name, protocol) for name in args.models},
                       'results': results}, f, indent=2)
            f.write('\n')


if __name__ == '__main__':
    main()
