"""Test accuracy of tsGCN with the factors of which='LA' against which='LM'.

    python benchmarks/which.py [--datasets Cora CiteSeer] [--seeds 10] [--epochs 200]

The paper's settings (2 layers, 32 hidden, no bias, Adam lr 0.01, weight decay
5e-4, rank N // p), the public split, test accuracy at the best validation
epoch. Writes ``benchmarks/results/which.md``.
"""
import argparse
import os.path as osp
import shutil
import statistics
import tempfile
import warnings

import torch
import torch_geometric.transforms as T
from torch_geometric.datasets import Planetoid

from harness.data import SHARED_DATA as SHARED
from harness.training import fit
from torch_geometric_regcn import TSGCN, LowRankInverse, paper_rank
from torch_geometric_regcn.datasets import PAPER_SETTINGS

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


def accuracy(data, seed: int, epochs: int) -> float:
    torch.manual_seed(seed)
    model = TSGCN(data.num_features, 32, int(data.y.max()) + 1)
    return fit(model, lambda: model(data.x, data.lowrank_w, data.lowrank_v), data, epochs,
               lr=0.01, weight_decay=5e-4).accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--datasets', nargs='+', default=['Cora', 'CiteSeer', 'PubMed'])
    parser.add_argument('--seeds', type=int, default=10)
    parser.add_argument('--epochs', type=int, default=200)
    args = parser.parse_args()
    warnings.filterwarnings('ignore', message=r'.*[Ss]parse.*')
    root = tempfile.mkdtemp()
    lines = ['# which="LA" vs which="LM"', '',
             f'`python benchmarks/which.py --datasets {" ".join(args.datasets)} '
             f'--seeds {args.seeds} --epochs {args.epochs}`', '',
             '| dataset | rank | LA test acc | LM test acc | eigenvalues < 0 among LM |',
             '|---|---|---|---|---|']
    for name in args.datasets:
        shutil.copytree(osp.join(SHARED, name), osp.join(root, name))
        base = Planetoid(root, name, transform=T.NormalizeFeatures())[0]
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
    with open(osp.join(REPO, 'benchmarks', 'results', 'which.md'), 'w') as f:
        f.write('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
