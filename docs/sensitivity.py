"""Sensitivity of tsGCN to the rank r and to (alpha, beta), as in the paper's
parameter-sensitivity figures.

    python docs/sensitivity.py [--dataset Cora] [--seeds 3] [--epochs 200]

Rank: r = N // p for p in 2 ... 128 at the paper's (alpha, beta). Weights: the
grid alpha, beta in {0.1, 0.5, 1, 2, 5} at the paper's p. Test accuracy at the
epoch of best validation accuracy, mean over --seeds random splits. Writes
docs/sensitivity_<dataset>.png and docs/sensitivity_<dataset>.md.
"""
import argparse
import os.path as osp
import statistics

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from torch_geometric_regcn import TSGCN, LowRankInverse, SemanticGraph, paper_rank  # noqa: E402
from torch_geometric_regcn.datasets import paper_split  # noqa: E402
from torch_geometric_regcn.experiments import PAPER_SETTINGS, fit, load_paper_dataset  # noqa: E402

HERE = osp.dirname(osp.abspath(__file__))
SHARED = osp.join(HERE, '..', '..', 'shared', 'data')
WEIGHTS = [0.1, 0.5, 1.0, 2.0, 5.0]
PS = [2, 4, 8, 16, 32, 64, 128]


def accuracy(base, alpha, beta, rank, seeds, epochs):
    data = LowRankInverse(alpha, beta, rank, k=10, progress=False)(base.clone())
    num_classes = int(data.y.max()) + 1
    scores = []
    for seed in range(seeds):
        split = paper_split(data.clone(), seed=seed)
        torch.manual_seed(seed)
        model = TSGCN(split.num_features, 32, num_classes)
        result = fit(model, lambda: model(split.x, split.lowrank_w, split.lowrank_v),  # noqa: B023
                     split, epochs)
        scores.append(100 * result.accuracy)
    return statistics.mean(scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dataset', default='Cora', choices=sorted(PAPER_SETTINGS))
    parser.add_argument('--seeds', type=int, default=3)
    parser.add_argument('--epochs', type=int, default=200)
    args = parser.parse_args()
    s = PAPER_SETTINGS[args.dataset]
    base = SemanticGraph(10)(load_paper_dataset(args.dataset, None, SHARED))
    n = base.num_nodes
    by_rank = []
    for p in PS:
        acc = accuracy(base, s.alpha, s.beta, paper_rank(n, p), args.seeds, args.epochs)
        by_rank.append((p, paper_rank(n, p), acc))
        print(f'p={p:4d} r={paper_rank(n, p):5d}: {acc:.1f}', flush=True)
    grid = torch.zeros(len(WEIGHTS), len(WEIGHTS))
    for i, a in enumerate(WEIGHTS):
        for j, b in enumerate(WEIGHTS):
            grid[i, j] = accuracy(base, a, b, paper_rank(n, s.p), args.seeds, args.epochs)
            print(f'alpha={a} beta={b}: {grid[i, j]:.1f}', flush=True)

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot([r for _, r, _ in by_rank], [a for *_, a in by_rank], 'o-')
    left.set_xscale('log')
    left.set_xlabel('rank r = N // p')
    left.set_ylabel('test accuracy (%)')
    left.set_title(f'{args.dataset}: rank (alpha={s.alpha}, beta={s.beta})')
    image = right.imshow(grid, origin='lower', cmap='viridis')
    right.set_xticks(range(len(WEIGHTS)), WEIGHTS)
    right.set_yticks(range(len(WEIGHTS)), WEIGHTS)
    right.set_xlabel('beta')
    right.set_ylabel('alpha')
    for i in range(len(WEIGHTS)):
        for j in range(len(WEIGHTS)):
            right.text(j, i, f'{grid[i, j]:.1f}', ha='center', va='center', fontsize=7,
                       color='white')
    right.set_title(f'{args.dataset}: (alpha, beta), r = N // {s.p}')
    fig.colorbar(image, ax=right)
    fig.tight_layout()
    stem = osp.join(HERE, f'sensitivity_{args.dataset.lower()}')
    fig.savefig(stem + '.png', dpi=120)
    with open(stem + '.md', 'w') as f:
        f.write(f'# Sensitivity on {args.dataset}\n\nCommand: `python docs/sensitivity.py '
                f'--dataset {args.dataset} --seeds {args.seeds} --epochs {args.epochs}`; test '
                f'accuracy (%) at the best validation epoch, mean of {args.seeds} splits.\n\n'
                '| p | rank | ACC |\n|---|---|---|\n')
        for p, r, a in by_rank:
            f.write(f'| {p} | {r} | {a:.1f} |\n')
        f.write('\n| alpha \\ beta | ' + ' | '.join(map(str, WEIGHTS)) + ' |\n')
        f.write('|---' * (len(WEIGHTS) + 1) + '|\n')
        for i, a in enumerate(WEIGHTS):
            f.write(f'| {a} | ' + ' | '.join(f'{float(v):.1f}' for v in grid[i]) + ' |\n')
    print(f'wrote {stem}.png and {stem}.md')


if __name__ == '__main__':
    main()
