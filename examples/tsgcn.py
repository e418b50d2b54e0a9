"""tsGCN on one of the paper's datasets, with the paper's settings.

    python -m examples.tsgcn --dataset Cora [--runs 10] [--epochs 500] [--root DIR]
                             [--device cpu] [--k 10] [--alpha A] [--beta B] [--p P]

Prints one line per run (a random split of 20 labelled nodes per class, 500
validation and 1000 test nodes, seeded by the run index) and the paper's
figures: ACC and macro-F1 as mean (std) in percent, plus the precompute and
training times. The test scores are those of the epoch of best validation
accuracy. Without --root, the raw files are copied from ../shared/data into a
temporary root (no download); with --root, PyG's loaders download as usual.
"""
import argparse
import math
import statistics
import time

import torch

from harness.cli import device_name, non_negative_float, positive_int
from harness.data import OFFLINE, load_paper_dataset
from harness.training import fit
from torch_geometric_regcn import TSGCN, LowRankInverse, SemanticGraph, paper_rank
from torch_geometric_regcn.datasets import PAPER_SETTINGS, paper_split
from torch_geometric_regcn.utils.progress import progress_bar


def train(data, run: int, num_classes: int, args):
    torch.manual_seed(run)
    model = TSGCN(data.num_features, 32, num_classes).to(args.device)
    with progress_bar(args.epochs, f'run {run}', 'epoch', leave=False) as bar:
        return fit(model, lambda: model(data.x, data.lowrank_w, data.lowrank_v), data,
                   args.epochs, lr=0.01, weight_decay=5e-4, on_epoch=lambda _: bar.update())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dataset', required=True, choices=OFFLINE,
                        help='the datasets whose raw files lie in ../shared/data')
    parser.add_argument('--runs', type=positive_int, default=10,
                        help='random splits, one per seed (default: %(default)s)')
    parser.add_argument('--epochs', type=positive_int, default=500, help='(default: %(default)s)')
    parser.add_argument('--root', default=None, help='dataset root (default: a copy of '
                        '../shared/data)')
    parser.add_argument('--device', type=device_name,
                        default='cuda' if torch.cuda.is_available() else 'cpu',
                        help='(default: %(default)s)')
    parser.add_argument('--k', type=positive_int, default=10,
                        help='neighbours of the semantic graph (default: %(default)s)')
    parser.add_argument('--alpha', type=non_negative_float, help="default: the paper's")
    parser.add_argument('--beta', type=non_negative_float, help="default: the paper's")
    parser.add_argument('--p', type=positive_int, help="rank = N // p; default: the paper's")
    parser.add_argument('--which', default='LA', choices=['LA', 'LM'],
                        help='eigenvalues kept by LowRankInverse (default: %(default)s)')
    args = parser.parse_args()

    setting = PAPER_SETTINGS[args.dataset]
    alpha = setting.alpha if args.alpha is None else args.alpha
    beta = setting.beta if args.beta is None else args.beta
    p = setting.p if args.p is None else args.p

    data = load_paper_dataset(args.dataset, args.root, sparse_features=True)
    data = data.to(args.device)
    rank = paper_rank(data.num_nodes, p)
    start = time.perf_counter()
    data = SemanticGraph(args.k)(data)
    data = LowRankInverse(alpha, beta, rank, which=args.which)(data)
    precompute = time.perf_counter() - start
    num_classes = int(data.y.max()) + 1
    print(f'{args.dataset}: {data.num_nodes} nodes, {data.num_features} features, '
          f'{num_classes} classes; alpha={alpha}, beta={beta}, rank={rank} (N // {p}), '
          f'k={args.k}; precompute {precompute:.1f}s on {args.device}')

    accs, f1s, seconds = [], [], []
    for run in range(args.runs):
        result = train(paper_split(data, seed=run).to(args.device), run, num_classes, args)
        accs.append(100 * result.accuracy)
        f1s.append(100 * result.f1)
        seconds.append(result.seconds)
        print(f'run {run}: ACC {accs[-1]:.1f}  F1 {f1s[-1]:.1f}  (best epoch '
              f'{result.best_epoch}, val {100 * result.val_accuracy:.1f}, '
              f'{result.seconds:.1f}s)')

    def summary(values):
        std = statistics.stdev(values) if len(values) > 1 else math.nan  # one run: no spread
        return f'{statistics.mean(values):.1f} ({std:.1f})'
    print(f'ACC: {summary(accs)}')
    print(f'F1: {summary(f1s)}')
    print(f'precompute {precompute:.1f}s, training {statistics.mean(seconds):.1f}s per run')


if __name__ == '__main__':
    main()
