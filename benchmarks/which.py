"""Test accuracy of tsGCN with the factors of which='LA' against which='LM'.

Run from the repository root::

    python -m benchmarks.which [--datasets Cora CiteSeer] [--seeds 10] [--epochs 200]

The paper's settings (2 layers, 32 hidden, no bias, Adam lr 0.01, weight decay
5e-4, rank N // p), Planetoid's public split with row-sum normalised features,
test accuracy at the best validation epoch. Writes
``benchmarks/results/which.md`` (``--output``: elsewhere).
"""
import argparse
import os.path as osp
import statistics
import warnings

import torch
import torch_geometric.transforms as T

from harness.cli import check_writable, int_at_least, positive_int
from harness.graphs import load_planetoid
from harness.report import RESULTS, command_line
from harness.training import fit
from torch_geometric_regcn import TSGCN, LowRankInverse, paper_rank
from torch_geometric_regcn.datasets import PAPER_SETTINGS


def accuracy(data, seed: int, epochs: int) -> float:
    r"""Test accuracy at the best validation epoch of one tsGCN run."""
    torch.manual_seed(seed)
    model = TSGCN(data.num_features, 32, int(data.y.max()) + 1)
    return fit(model, lambda: model(data.x, data.lowrank_w, data.lowrank_v), data, epochs,
               lr=0.01, weight_decay=5e-4).accuracy


def main() -> None:
    parser = argparse.ArgumentParser(prog='python -m benchmarks.which',
                                    description=__doc__.splitlines()[0])
    parser.add_argument('--datasets', nargs='+', default=['Cora', 'CiteSeer', 'PubMed'],
                        choices=['Cora', 'CiteSeer', 'PubMed'])
    parser.add_argument('--seeds', type=int_at_least(2), default=10,
                        help='their standard deviation needs two (default: %(default)s)')
    parser.add_argument('--epochs', type=positive_int, default=200)
    parser.add_argument('--output', default=osp.join(RESULTS, 'which.md'),
                        help='markdown output (default: benchmarks/results/which.md)')
    args = parser.parse_args()
    check_writable(parser, '--output', args.output)  # written after the training
    warnings.filterwarnings('ignore', message=r'.*[Ss]parse.*')
    command = command_line('benchmarks.which', ['--datasets', *args.datasets, '--seeds',
                                                str(args.seeds), '--epochs', str(args.epochs)])
    lines = ['# which="LA" vs which="LM"', '', f'`{command}`', '',
             '| dataset | rank | LA test acc | LM test acc | eigenvalues < 0 among LM |',
             '|---|---|---|---|---|']
    for name in args.datasets:
        base = load_planetoid(name, transform=T.NormalizeFeatures())
        alpha, beta, p = (getattr(PAPER_SETTINGS[name], f) for f in ('alpha', 'beta', 'p'))
        rank = paper_rank(base.num_nodes, p)
        row, negative = [], 0
        for which in ('LA', 'LM'):
            data = LowRankInverse(alpha, beta, rank, which=which)(base.clone())
            if which == 'LM':  # Vᵀ W = -Λ
                negative = int((torch.diagonal(data.lowrank_v.T @ data.lowrank_w) > 0).sum())
            accs = [accuracy(data, seed, args.epochs) for seed in range(args.seeds)]
            row.append(f'{statistics.mean(accs):.4f} ± {statistics.stdev(accs):.4f}')
        lines.append(f'| {name} | {rank} | {row[0]} | {row[1]} | {negative} |')
        print(lines[-1], flush=True)
    with open(args.output, 'w') as f:
        f.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
