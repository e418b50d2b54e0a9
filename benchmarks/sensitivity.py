r"""Sensitivity of tsGCN to the rank r and to (alpha, beta), as in the paper's
parameter-sensitivity figures.

Run from the repository root::

    python -m benchmarks.sensitivity [--dataset Cora] [--seeds 3] [--epochs 200] [--ps P ...]
    python -m benchmarks.sensitivity --summary   # plot the datasets run so far, train nothing

Rank: r = N // p at the paper's (alpha, beta), for p = 2, 4, ..., 2048 (the
paper's range) where 1 <= r <= 2,000 (larger ranks approach a dense
eigendecomposition and are left out). Weights: the grid alpha, beta in {0.1,
0.5, 1, 2, 5} at the paper's p. Everything else is the paper's model and
training (32 hidden units, no dropout, weight decay 5e-4, k = 10). Test
accuracy at the epoch of best validation accuracy, mean over --seeds random
splits. Writes the figure ``docs/sensitivity_<dataset>.png`` and its numbers
``benchmarks/results/sensitivity_<dataset>.md`` and ``.json``; --summary
plots the rank curves of every dataset whose ``.json`` is there in one
figure, like the paper's Fig. 2b (``docs/sensitivity_rank.png``).
"""
import argparse
import glob
import json
import os.path as osp
import statistics

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from harness.cli import check_writable, positive_int  # noqa: E402
from harness.data import REPO, load_paper_dataset  # noqa: E402
from harness.report import FIGURES, RESULTS, command_line  # noqa: E402
from harness.training import fit  # noqa: E402
from torch_geometric_regcn import TSGCN, LowRankInverse, SemanticGraph, paper_rank  # noqa: E402
from torch_geometric_regcn.datasets import PAPER_SETTINGS, paper_split  # noqa: E402

WEIGHTS = [0.1, 0.5, 1.0, 2.0, 5.0]
PS = [2**i for i in range(1, 12)]  # 2 ... 2048
MAX_RANK = 2000


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


def summary() -> None:
    runs = []
    for path in sorted(glob.glob(osp.join(RESULTS, 'sensitivity_*.json'))):
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        raise SystemExit(f'no sensitivity_<dataset>.json in {osp.relpath(RESULTS, REPO)} yet: '
                         'run a dataset first')
    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        ax.plot([p for p, _, _ in run['by_rank']], [a for *_, a in run['by_rank']], 'o-',
                label=run['dataset'])
    ax.set_xscale('log', base=2)
    ax.set_xlabel('p (rank r = N // p)')
    ax.set_ylabel('test accuracy (%)')
    ax.set_title("tsGCN against the rank, the paper's (alpha, beta)")
    ax.legend(fontsize=8, loc='center left', bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    path = osp.join(FIGURES, 'sensitivity_rank.png')
    fig.savefig(path, dpi=120)
    print(f'wrote {path}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dataset', default='Cora', choices=sorted(PAPER_SETTINGS))
    parser.add_argument('--seeds', type=positive_int, default=3)
    parser.add_argument('--epochs', type=positive_int, default=200)
    parser.add_argument('--ps', nargs='+', type=positive_int, default=PS,
                        help='the divisors p of the rank curve, r = N // p')
    parser.add_argument('--summary', action='store_true',
                        help='only plot the rank curves of the datasets run so far')
    args = parser.parse_args()
    if args.summary:
        return summary()
    name = f'sensitivity_{args.dataset.lower()}'
    png, stem = osp.join(FIGURES, name + '.png'), osp.join(RESULTS, name)
    for path in (png, stem + '.md', stem + '.json'):  # written after the training
        check_writable(parser, osp.basename(path), path)
    s = PAPER_SETTINGS[args.dataset]
    base = SemanticGraph(10)(load_paper_dataset(args.dataset,
                                                sparse_features=True))
    n = base.num_nodes
    by_rank = []
    for p in args.ps:
        rank = paper_rank(n, p)
        if not 1 <= rank <= MAX_RANK:
            continue
        acc = accuracy(base, s.alpha, s.beta, rank, args.seeds, args.epochs)
        by_rank.append((p, rank, acc))
        print(f'p={p:4d} r={rank:5d}: {acc:.1f}', flush=True)
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
    fig.savefig(png, dpi=120)
    command = command_line('benchmarks.sensitivity', [
        '--dataset', args.dataset, '--seeds', str(args.seeds), '--epochs', str(args.epochs),
        *([] if args.ps == PS else ['--ps', *map(str, args.ps)])])
    with open(stem + '.md', 'w') as f:
        f.write(f'# Sensitivity on {args.dataset}\n\nCommand: `{command}`; test '
                f'accuracy (%) at the best validation epoch, mean of {args.seeds} splits; '
                f"the paper's alpha = {s.alpha}, beta = {s.beta}, p = {s.p}.\n\n"
                '| p | rank | ACC |\n|---|---|---|\n')
        for p, r, a in by_rank:
            f.write(f'| {p} | {r} | {a:.1f} |\n')
        f.write('\n| alpha \\ beta | ' + ' | '.join(map(str, WEIGHTS)) + ' |\n')
        f.write('|---' * (len(WEIGHTS) + 1) + '|\n')
        for i, a in enumerate(WEIGHTS):
            f.write(f'| {a} | ' + ' | '.join(f'{float(v):.1f}' for v in grid[i]) + ' |\n')
    with open(stem + '.json', 'w') as f:
        json.dump({'dataset': args.dataset, 'command': command, 'by_rank': by_rank,
                   'weights': WEIGHTS, 'grid': grid.tolist()}, f, indent=1)
    print(f'wrote {png}, {stem}.md and .json')


if __name__ == '__main__':
    main()
