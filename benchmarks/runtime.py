r"""Runtime of every Table 3 method on PubMed (the paper's Fig. 2a).

Run from the repository root::

    python -m benchmarks.runtime [--dataset PubMed] [--epochs 50] [--threads 1]

Each method trains for --epochs epochs (Adam, one forward + backward + an
evaluation pass per epoch, its paper's hyperparameters) on one random split,
with the row-normalised features as a sparse CSR matrix (as
``benchmarks/accuracy.py`` feeds them), all in this one process with
``--threads`` torch threads. The time per epoch leaves out the first epoch
(one-time allocations and lazy initialisation), and is also given as a ratio
to GCN's in the same run, the figure that survives a loaded machine. The
figure shows the time of 200 epochs extrapolated from the time per epoch,
stacked on the method's precompute (the semantic kNN graph for both tsGCN
models, plus the low-rank factors for tsGCN). Writes the figure
``docs/runtime_<dataset>.png`` and its numbers
``benchmarks/results/runtime_<dataset>.md`` (``--figure``, ``--output``).
"""
import argparse
import os.path as osp
import sys
import time
from typing import List

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from harness.cli import check_writable, int_at_least, positive_int  # noqa: E402
from harness.data import load_paper_dataset  # noqa: E402
from harness.methods import TABLE3 as METHODS  # noqa: E402
from harness.report import FIGURES, RESULTS, Report  # noqa: E402
from harness.training import fit  # noqa: E402
from torch_geometric_regcn import LowRankInverse, SemanticGraph, paper_rank  # noqa: E402
from torch_geometric_regcn.datasets import PAPER_SETTINGS, paper_split  # noqa: E402

NOTES = """Notes. Every method gets the same sparse CSR features, so input dropout
draws only over the stored entries (about 10 % on PubMed). Every first linear map
on them runs through `torch_geometric_regcn.nn.linear.SparseInputMatmul`, whose
backward pass keeps the transposed sparsity pattern: the framework's layers
(GCN, SGC, APPNP, JKNet, DAGNN, GNN-LF/HF, both tsGCN) by their `Linear`, PyG's
Chebyshev and GraphSAGE by `harness.baselines`' projection-first forms of
`ChebConv` and `SAGEConv` (the same functions and parameters); PyG's GAT uses
its own `Linear`. `harness.training.fit` calls `keep_freed_memory()`, so freed
buffers are not page-faulted back every epoch. The precompute of both tsGCN
models is the exact semantic kNN graph, plus the factors for tsGCN."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dataset', default='PubMed', choices=sorted(PAPER_SETTINGS))
    parser.add_argument('--epochs', type=int_at_least(2), default=50,
                        help='(the first epoch is not timed; default: %(default)s)')
    parser.add_argument('--threads', type=positive_int, default=1)
    parser.add_argument('--output', default=None, help='the markdown results (default: '
                        'benchmarks/results/runtime_<dataset>.md)')
    parser.add_argument('--figure', default=None, help='the figure (default: '
                        'docs/runtime_<dataset>.png)')
    argv = sys.argv[1:]
    args = parser.parse_args(argv)
    stem = f'runtime_{args.dataset.lower()}'
    png = args.figure or osp.join(FIGURES, stem + '.png')
    md = args.output or osp.join(RESULTS, stem + '.md')
    check_writable(parser, '--figure', png)  # both written after the training
    check_writable(parser, '--output', md, create=True)
    torch.set_num_threads(args.threads)
    wall = time.perf_counter()
    rep = Report()
    rep.header(f'Runtime on {args.dataset}', 'benchmarks.runtime', argv, args.threads,
               isolated=False)
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
        ends: List[float] = []
        fit(model, lambda: spec.run(model, data), data, args.epochs,  # noqa: B023
            spec.lr, spec.weight_decay, on_epoch=lambda epoch: ends.append(  # noqa: B023
                time.perf_counter()))
        per_epoch = (ends[-1] - ends[0]) / (len(ends) - 1)  # epochs 2 .. --epochs
        pre = {'tsGCN': knn + factors, 'tsGCN (inv)': knn}.get(name, 0.0)
        rows.append((name, pre, per_epoch))
        print(f'{name:12s} precompute {pre:6.2f} s, {1e3 * per_epoch:8.1f} ms/epoch', flush=True)
    gcn = dict((r[0], r[2]) for r in rows)['GCN']

    fig, ax = plt.subplots(figsize=(7, 4.5))
    names = [r[0] for r in rows]
    pre = [r[1] for r in rows]
    train = [200 * r[2] for r in rows]
    ax.barh(names, pre, color='tab:orange', label='precompute (kNN graph, factors)')
    ax.barh(names, train, left=pre, color='tab:blue', label='200 training epochs')
    ax.set_xlabel('seconds')
    ax.set_xscale('log')
    ax.invert_yaxis()
    ax.set_title(f'Runtime on {args.dataset} ({args.threads} CPU thread(s))')
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    rep(f'Row-normalised features as sparse CSR. Time per epoch: forward, backward, step '
        f'and evaluation, over epochs 2 to {args.epochs}; 200 epochs extrapolated.')
    rep()
    rep.table(['method', 'precompute (s)', 'ms / epoch', '× GCN', '200 epochs + precompute (s)'],
              [(name, f'{p:.2f}', f'{1e3 * e:.1f}', f'{e / gcn:.2f}', f'{p + 200 * e:.1f}')
               for name, p, e in rows])
    rep(NOTES)
    rep()
    rep.finish(wall, md)
    print(f'wrote {png} and {md}')


if __name__ == '__main__':
    main()
