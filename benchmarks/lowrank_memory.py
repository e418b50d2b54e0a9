r"""Peak memory of LowRankInverse as the number of nodes N grows: linear in
N, far below one dense N x N matrix.

On SBM-like synthetic graphs of ``--scaling-nodes`` nodes (beta 0, so no
features are needed), the whole transform (the operator S and the rank-r
eigenpairs, ``--rank``) runs in a fresh spawned process per N with
``--threads`` threads, timed, its peak resident memory measured above the
memory held before it. ``--scaling-max-iter`` caps the block Lanczos restart
cycles: the working set is allocated in the first one and reused, so the cap
does not change the peak, but the times are for that many cycles, not for
convergence. Target: the log-log slope of the peak against N at most 1.25,
and the peak at the largest N under 10 % of one dense N×N float32 matrix.

Run from the repository root::

    python -m benchmarks.lowrank_memory            # about 1 min on 2 cores
    python -m benchmarks.lowrank_memory --quick    # smoke test (rank 16, N up to 20k)

Writes ``benchmarks/results/lowrank_memory.md`` (``--quick``: the git-ignored
``benchmarks/results/lowrank_memory-quick.tmp``; ``--output``: elsewhere).
This was part 3 of the former ``benchmarks/lowrank.py``, whose last report is
``benchmarks/results/lowrank.md``.
"""
import argparse
import os.path as osp
import time
import warnings

import numpy as np
from torch_geometric.data import Data

from harness.cli import check_writable, comma_separated, positive_int
from harness.graphs import synthetic_graph
from harness.measure import (
    MIB,
    PEAK_DELTA,
    PeakMeter,
    run_isolated,
    warning_messages,
)
from harness.report import RESULTS, Report
from torch_geometric_regcn import LowRankInverse

# torch flags its sparse CSR support as beta; this also runs in every spawned child.
warnings.filterwarnings('ignore', message=r'.*sparse.*beta', category=UserWarning)

#: glibc's threshold above which a block is mapped on its own and unmapped when
#: freed; set to 1 MiB in the measuring processes, so the RSS follows live memory.
MMAP_VAR = 'MALLOC_MMAP_THRESHOLD_'


def transform_peak(spec: dict) -> dict:
    r"""In a spawned process: LowRankInverse on the synthetic graph of
    ``spec['n']`` nodes, timed, with its peak memory above the start."""
    data = synthetic_graph(spec['n'], seed=spec['seed'])
    data = Data(edge_index=data.edge_index, num_nodes=data.num_nodes)  # beta = 0: no features
    small = synthetic_graph(2000, seed=1)  # warm-up: load the code paths before measuring
    LowRankInverse(alpha=1.0, beta=0.0, rank=8)(Data(edge_index=small.edge_index,
                                                    num_nodes=small.num_nodes))
    transform = LowRankInverse(alpha=1.0, beta=0.0, rank=spec['rank'], max_iter=spec['max_iter'])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        meter = PeakMeter().start()
        t0 = time.perf_counter()
        transform(data)
        elapsed = time.perf_counter() - t0
        peak = meter.stop()
    return {'time': elapsed, 'peak_mib': peak, 'warnings': warning_messages(caught)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog='python -m benchmarks.lowrank_memory',
                               description=__doc__.split('\n\n')[0])
    p.add_argument('--rank', type=positive_int, default=None,
                   help='rank r (default 64, 16 with --quick)')
    p.add_argument('--scaling-nodes', type=comma_separated(positive_int), default=None,
                   help='comma-separated N (default 25000,50000,100000,200000; '
                        '5000,10000,20000 with --quick)')
    p.add_argument('--scaling-max-iter', type=positive_int, default=3,
                   help='max_iter of LowRankInverse; memory is per restart cycle (default '
                        '%(default)s)')
    p.add_argument('--threads', type=positive_int, default=1,
                   help='torch/BLAS threads of every measurement (default %(default)s)')
    p.add_argument('--quick', action='store_true', help='small, fast smoke test')
    p.add_argument('--output', default=None,
                   help='markdown output (default benchmarks/results/lowrank_memory.md)')
    args = p.parse_args(argv)
    q = args.quick
    args.rank = args.rank or (16 if q else 64)
    args.scaling_nodes = args.scaling_nodes or (
        [5000, 10000, 20000] if q else [25000, 50000, 100000, 200000])
    args.output = args.output or osp.join(RESULTS, 'lowrank_memory-quick.tmp' if q
                                          else 'lowrank_memory.md')
    check_writable(p, '--output', args.output, create=True)  # written at the end
    return args


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    rep = Report()
    rep.header(f'Peak memory of LowRankInverse as N grows (rank {args.rank}, beta = 0)',
               'benchmarks.lowrank_memory', argv, args.threads, args.quick)
    rep(PEAK_DELTA)
    rep()
    rep('SBM-like synthetic graphs (256 communities of uneven sizes, average degree ~10, 80 % '
        'of edges inside a community); the whole transform (operator + block Lanczos) is '
        f'measured, in a fresh process per N, with max_iter={args.scaling_max_iter}: the '
        'working set is allocated in the first iteration and reused, so the cap does not '
        'change the peak, but the times are for that many iterations, not for convergence '
        "(hence the warnings). These processes run with glibc's "
        f'{MMAP_VAR}=1 MiB, so that freed blocks go back to the OS and the RSS peak follows '
        'live memory: with the default dynamic threshold (up to 32 MiB), N×b blocks below '
        'it are kept in the heap and the peak depends on heap fragmentation.')
    rep()
    # The scale N·b of the table: b is subspace iteration's block width, r + max(8, r / 4).
    b = args.rank + max(8, args.rank // 4)
    rows, points = [], []
    for n in args.scaling_nodes:
        print(f'  N = {n:,} ...', flush=True)
        res = run_isolated(args.threads, transform_peak,
                           dict(n=n, rank=args.rank, seed=0, max_iter=args.scaling_max_iter),
                           env={MMAP_VAR: str(2**20)})
        if 'error' in res:
            rows.append([f'{n:,}', 'FAILED: ' + res['error'], '-', '-', '-', '-', '-'])
            continue
        nrb = 4 * n * b / MIB
        points.append((n, res['peak_mib']))
        rows.append([f'{n:,}', f"{res['time']:.1f}", f"{res['peak_mib']:.1f}", f'{nrb:.1f}',
                     f"{res['peak_mib'] / nrb:.1f}", f'{4 * n * n / 2**30:,.1f} GiB',
                     '; '.join(res['warnings'])[:90]])
    rep.table(['N', 'time (s)', 'peak Δ (MiB)', f'N·b·4 B (b = {b}) (MiB)', 'peak / N·b',
               'dense N² float32', 'warnings'], rows)

    rep('## Target')
    rep()
    if len(points) >= 2:
        slope = float(np.polyfit(np.log([p[0] for p in points]),
                                 np.log([max(p[1], 1e-3) for p in points]), 1)[0])
        n_max, m_max = points[-1]
        frac = m_max * MIB / (4.0 * n_max * n_max)
        rep(f'Log-log slope of peak Δ against N: {slope:.2f} (1 = linear, 2 = quadratic); '
            f'at N = {n_max:,} the peak is {100 * frac:.3f} % of one dense N×N float32 '
            'matrix.')
        rep()
        row = ['peak memory grows as N·r, not N²',
               f'slope {slope:.2f}; {100 * frac:.3f} % of N² at the largest N',
               'PASS' if slope <= 1.25 and frac < 0.1 else 'FAIL']
    else:
        row = ['peak memory grows as N·r, not N²', '-', 'SKIPPED (fewer than 2 sizes)']
    rep.table(['target', 'measured', 'verdict'], [row])
    rep.finish(start, args.output)


if __name__ == '__main__':
    main()
