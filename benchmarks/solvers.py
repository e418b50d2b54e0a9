r"""Forward + backward time and peak memory of the tsGCN solvers on PubMed,
next to PyG's APPNP(K=10).

Each method is one layer, ``Linear(500, 32)`` followed by its propagation, with
the graph operators built once beforehand (``cached=True``), trained on the
public split: the time is the median of ``--repeats`` forward + backward passes,
the memory the peak resident set size above the one just before them (freed
heap memory handed back first, so that it counts what is live), each method
in a fresh spawned process.

Run from the repository root::

    python -m benchmarks.solvers [--repeats 20] [--rank 64]

Writes ``benchmarks/results/solvers.md`` (``--output``: elsewhere). Target:
``'cg'`` at residual 1e-6 within 3x of APPNP(K=10).
"""
import argparse
import os.path as osp
import statistics
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch_geometric.nn import APPNP
from torch_geometric.nn.dense.linear import Linear
from torch_geometric.utils import to_torch_csr_tensor

from harness.cli import check_writable, positive_int
from harness.graphs import has_pubmed, load_pubmed
from harness.measure import PeakMeter, describe_machine, load_average, run_isolated
from harness.report import RESULTS, command_line
from torch_geometric_regcn import LowRankInverse, RegularizerConv, SemanticGraph

ALPHA, BETA, K_NN = 1.0, 0.3, 10  # the paper's PubMed setting


def pubmed_with_factors(rank: int):
    r"""PubMed with its semantic graph and the rank-:obj:`rank` factors."""
    data = SemanticGraph(K_NN)(load_pubmed())
    return LowRankInverse(ALPHA, BETA, rank)(data)


def measure(method: str, rank: int, repeats: int):
    r"""In a spawned process: (method, median forward + backward seconds,
    peak MiB above the start of the timed passes)."""
    warnings.filterwarnings('ignore', message=r'.*[Ss]parse.*')
    data = pubmed_with_factors(rank)
    torch.manual_seed(0)
    if method == 'APPNP(K=10)':
        lin, prop = Linear(data.num_features, 32), APPNP(K=10, alpha=0.1, cached=True)
        # PyG's sparse-matrix path (SpMM), as the tsGCN solvers propagate; edge_index would
        # time gather/scatter message passing and keep E x 32 messages per hop for backward
        adj_t = to_torch_csr_tensor(data.edge_index.flip(0),
                                    size=(data.num_nodes, data.num_nodes))

        def forward():
            return prop(lin(data.x), adj_t)
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
    meter = PeakMeter(trim=True).start()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return method, statistics.median(times), meter.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog='python -m benchmarks.solvers',
                                    description='tsGCN solvers vs APPNP on PubMed')
    parser.add_argument('--repeats', type=positive_int, default=20)
    parser.add_argument('--rank', type=positive_int, default=64)
    parser.add_argument('--threads', type=positive_int, default=1,
                        help='torch/BLAS threads of every measurement (default: 1)')
    parser.add_argument('--output', default=osp.join(RESULTS, 'solvers.md'),
                        help='markdown output (default: benchmarks/results/solvers.md)')
    args = parser.parse_args()
    check_writable(parser, '--output', args.output)  # written after the measurements
    if not has_pubmed():
        sys.exit('PubMed is not in the offline copy (harness.data.SHARED_DATA): nothing to '
                 'measure')

    methods = ['APPNP(K=10)', "tsgcn 'cg'", "tsgcn 'series'", "tsgcn 'lowrank'"]
    threads = args.threads
    machine = describe_machine(threads)  # with the load at the start
    rows = {}
    for method in methods:
        result = run_isolated(threads, measure, method, args.rank, args.repeats)
        if isinstance(result, dict):  # {'error': ...}
            sys.exit(f"{method}: {result['error']}")
        rows[method] = result[1:]
        print(f'{method:18s} {rows[method][0] * 1e3:8.1f} ms  {rows[method][1]:7.1f} MiB',
              flush=True)

    base = rows['APPNP(K=10)'][0]
    command = command_line('benchmarks.solvers', ['--repeats', str(args.repeats), '--rank',
                                                  str(args.rank), '--threads', str(threads)])
    lines = [
        '# tsGCN solvers vs APPNP(K=10) on PubMed', '',
        f'Command (from the repository root): `{command}`', '',
        machine, '',
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
              f"{'PASS' if ratio <= 3 else 'FAIL'}.", '',
              f'Load average at the end: {load_average()}.']
    with open(args.output, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
