r"""Runtime of every Table 3 method on PubMed (the paper's Fig. 2a).

Run from the repository root::

    python -m benchmarks.runtime [--dataset PubMed] [--epochs 50]

Each method trains for --epochs epochs (Adam, one forward + backward + an
evaluation pass per epoch, its paper's hyperparameters) on one random split,
with the row-normalised features as a sparse CSR matrix (as
``benchmarks/accuracy.py`` feeds them); the figure shows the time of 200
epochs extrapolated from the measured per-epoch time, stacked on the method's
precompute (the semantic kNN graph for both tsGCN models, plus the low-rank
factors for tsGCN). Writes the figure ``docs/runtime_<dataset>.png`` and its
numbers ``benchmarks/results/runtime_<dataset>.md``.
"""
import argparse
import os.path as osp
import time

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from harness.data import load_paper_dataset  # noqa: E402
from harness.methods import TABLE3 as METHODS  # noqa: E402
from harness.report import FIGURES, RESULTS, command_line  # noqa: E402
from harness.training import fit  # noqa: E402
from torch_geometric_regcn import LowRankInverse, SemanticGraph, paper_rank  # noqa: E402
from torch_geometric_regcn.datasets import PAPER_SETTINGS, paper_split  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dataset', default='PubMed', choices=sorted(PAPER_SETTINGS))
    parser.add_argument('--epochs', type=int, default=50)
    args = parser.parse_args()
    setting = PAPER_SETTINGS[args.dataset]
    data = paper_split(load_paper_dataset(args.dataset, sparse_features=True),
                       seed=0)
    num_classes = int(data.y.max()) + 1
    start = time.perf_counter()
    data = SemanticGraph(10)(data)
    knn = time.perf_counter() - start
    start = time.perf_counter()
    data = LowRankInverse(setting.alpha, setting.beta,
                          paper_rank(data.num_nodes, setting.p), k=10)(data)
    factors = time.perf_counter() - start
    rows = []
    for name, spec in METHODS.items():
        torch.manual_seed(0)
        model = spec.build(data, num_classes, setting)
        result = fit(model, lambda: spec.run(model, data), data, args.epochs,  # noqa: B023
                     spec.lr, spec.weight_decay)
        per_epoch = result.seconds / args.epochs
        pre = {'tsGCN': knn + factors, 'tsGCN (inv)': knn}.get(name, 0.0)
        rows.append((name, pre, per_epoch))
        print(f'{name:12s} precompute {pre:6.2f} s, {1e3 * per_epoch:8.1f} ms/epoch', flush=True)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = [r[0] for r in rows]
    pre = [r[1] for r in rows]
    train = [200 * r[2] for r in rows]
    ax.barh(names, pre, color='tab:orange', label='precompute (kNN graph, factors)')
    ax.barh(names, train, left=pre, color='tab:blue', label='200 training epochs')
    ax.set_xlabel('seconds')
    ax.set_xscale('log')
    ax.invert_yaxis()
    ax.set_title(f'Runtime on {args.dataset} ({torch.get_num_threads()} CPU threads)')
    ax.legend(fontsize=8)
    fig.tight_layout()
    stem = f'runtime_{args.dataset.lower()}'
    png, md = osp.join(FIGURES, stem + '.png'), osp.join(RESULTS, stem + '.md')
    fig.savefig(png, dpi=120)
    command = command_line('benchmarks.runtime',
                           ['--dataset', args.dataset, '--epochs', str(args.epochs)])
    with open(md, 'w') as f:
        f.write(f'# Runtime on {args.dataset}\n\nCommand: `{command}` '
                f'({torch.get_num_threads()} CPU threads), row-normalised features as sparse '
                'CSR. Per-epoch time measured over the epochs run (forward, backward, step, '
                'evaluation); 200 epochs extrapolated.\n\n'
                '| method | precompute (s) | ms / epoch | 200 epochs + precompute (s) |\n'
                '|---|---|---|---|\n')
        for name, p, e in rows:
            f.write(f'| {name} | {p:.2f} | {1e3 * e:.1f} | {p + 200 * e:.1f} |\n')
    print(f'wrote {png} and {md}')


if __name__ == '__main__':
    main()
