r"""Forward + backward time and peak memory of the tsGCN solvers on PubMed,
next to PyG's APPNP(K=10).

Each method is one layer, ``Linear(500, 32)`` followed by its propagation, with
the graph operators built once beforehand (``cached=True``), trained on the
public split: the time is the median of ``--repeats`` forward + backward passes,
the memory the peak resident set size above the one just before them, each
method in a fresh process.

    python benchmarks/solvers.py [--repeats 20] [--rank 64]

Writes ``benchmarks/results/solvers.md``. Target: ``'cg'`` at residual 1e-6
within 3x of APPNP(K=10).
"""
import argparse
import ctypes
import gc
import multiprocessing
import os.path as osp
import platform
import shutil
import statistics
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
from harness.data import SHARED_DATA as SHARED  # noqa: E402

ALPHA, BETA, K_NN = 1.0, 0.3, 10  # the paper's PubMed setting


def _kib(field: str) -> int:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> None:
    gc.collect()
    ctypes.CDLL('libc.so.6').malloc_trim(0)  # hand freed memory back, so RSS is what is live
    with open('/proc/self/clear_refs', 'w') as f:  # resets VmHWM to the current RSS
        f.write('5')


def load_pubmed(rank: int):
    from torch_geometric.datasets import Planetoid

    from torch_geometric_regcn import LowRankInverse, SemanticGraph

    root = tempfile.mkdtemp()
    shutil.copytree(osp.join(SHARED, 'PubMed'), osp.join(root, 'PubMed'))
    data = Planetoid(root, 'PubMed')[0]
    data = SemanticGraph(K_NN)(data)
    return LowRankInverse(ALPHA, BETA, rank)(data)


def measure(method: str, rank: int, repeats: int, queue) -> None:
    warnings.filterwarnings('ignore', message=r'.*[Ss]parse.*')
    torch.set_num_threads(torch.get_num_threads())
    from torch_geometric.nn import APPNP
    from torch_geometric.nn.dense.linear import Linear

    from torch_geometric_regcn import RegularizerConv

    data = load_pubmed(rank)
    torch.manual_seed(0)
    if method == 'APPNP(K=10)':
        lin, prop = Linear(data.num_features, 32), APPNP(K=10, alpha=0.1, cached=True)

        def forward():
            return prop(lin(data.x), data.edge_index)
        params = list(lin.parameters())
    else:
        solver = method.split("'")[1]
        conv = RegularizerConv(data.num_features, 32, 'tsgcn', solver=solver, cached=True,
                               tol=1e-6, alpha=ALPHA, beta=BETA, K=10)

        def forward():
            return conv(data.x, data.edge_index, semantic_edge_index=data.semantic_edge_index,
                        lowrank_w=data.lowrank_w, lowrank_v=data.lowrank_v)
        params = list(conv.parameters())
    target = data.y[data.train_mask] % 32

    def step():
        for p in params:
            p.grad = None
        F.cross_entropy(forward()[data.train_mask], target).backward()

    step()  # builds the cached operators, warms up
    _reset_peak()
    rss_before = _kib('VmRSS')
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    queue.put((method, statistics.median(times), (_kib('VmHWM') - rss_before) / 1024))


def main() -> None:
    parser = argparse.ArgumentParser(description='tsGCN solvers vs APPNP on PubMed')
    parser.add_argument('--repeats', type=int, default=20)
    parser.add_argument('--rank', type=int, default=64)
    args = parser.parse_args()
    if not osp.isdir(osp.join(SHARED, 'PubMed')):
        sys.exit(f'PubMed is not at {osp.normpath(SHARED)}: nothing to measure')

    methods = ['APPNP(K=10)', "tsgcn 'cg'", "tsgcn 'series'", "tsgcn 'lowrank'"]
    ctx = multiprocessing.get_context('spawn')
    rows = {}
    for method in methods:
        queue = ctx.Queue()
        proc = ctx.Process(target=measure, args=(method, args.rank, args.repeats, queue))
        proc.start()
        rows[method] = queue.get()[1:]
        proc.join()
        print(f'{method:18s} {rows[method][0] * 1e3:8.1f} ms  {rows[method][1]:7.1f} MiB',
              flush=True)

    base = rows['APPNP(K=10)'][0]
    lines = [
        '# tsGCN solvers vs APPNP(K=10) on PubMed', '',
        f'`python benchmarks/solvers.py --repeats {args.repeats} --rank {args.rank}` on '
        f'{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, '
        f'torch {torch.__version__}.', '',
        'One layer, `Linear(500, 32)` and its propagation, forward + backward on the public '
        f'split; alpha={ALPHA}, beta={BETA}, k={K_NN}; `cg` to relative residual 1e-6 '
        f'(forward and backward), `series` with K=10 terms, `lowrank` at rank {args.rank}. '
        'Graph operators are built once (`cached=True`) and not timed.', '',
        '| method | forward + backward (ms, median) | x APPNP | peak memory above start (MiB) |',
        '|---|---|---|---|',
    ]
    for method, (seconds, mib) in rows.items():
        lines.append(f'| {method} | {seconds * 1e3:.1f} | {seconds / base:.2f} | {mib:.1f} |')
    ratio = rows["tsgcn 'cg'"][0] / base
    lines += ['', f"Target `'cg'` within 3x of APPNP(K=10): measured {ratio:.2f}x, "
              f"{'PASS' if ratio <= 3 else 'FAIL'}."]
    out = osp.join(REPO, 'benchmarks', 'results', 'solvers.md')
    with open(out, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
