r"""Extreme eigenpairs of a disconnected operator: which components
:func:`~torch_geometric_regcn.linalg.componentwise.componentwise_eigenpairs`
solves densely.

Workloads: :obj:`count` connected random graphs of :obj:`size` nodes each
(a path plus ``2 * size`` random edges, seed 0), normalised with self loops
(every component has the top eigenvalue 1, so the :obj:`k` pairs come from
the lowest components), float64, ``which='LA'``, tol 1e-4. Each workload is
solved twice in one process, by the package's rule (a component above
``DENSE_NODES`` nodes is solved densely when it has at most
``DENSE_PER_PAIR * k`` nodes, up to ``DENSE_NODES_MAX``) and by the
threshold alone (``DENSE_PER_PAIR = 0``, the rule before it: every component
above ``DENSE_NODES`` nodes by block Lanczos); the ratio is rule / threshold
(below 1: the rule is faster). Error: the largest difference of the returned
eigenvalues from the dense float64 spectrum of each component (``eigvalsh``,
the reference).

Run from the repository root::

    python -m benchmarks.components               # about 10 min on one core
    python -m benchmarks.components --quick       # two small workloads

Writes ``benchmarks/results/components.md`` (``--quick``: the git-ignored
``benchmarks/results/components-quick.tmp``; ``--output``: elsewhere).
"""
import argparse
import time
from typing import List, Optional, Tuple

import numpy as np
import torch

from harness.cli import check_writable, positive_int
from harness.graphs import connected_pieces
from harness.report import RESULTS, Report
from torch_geometric_regcn.linalg import componentwise, extreme_eigenpairs

#: (components, nodes each, k): one component per pair wanted (k = 64 of 400
#: components of 300 nodes), a third of each spectrum, and two where the
#: threshold alone already chose right (Lanczos for a few pairs of large
#: components).
WORKLOADS = [(400, 300, 64), (100, 600, 200), (20, 1000, 128), (20, 2000, 256),
             (20, 400, 32)]
QUICK = [(40, 300, 64), (10, 1000, 128)]


def components(count: int, size: int, seed: int = 0):
    r"""The operator of :obj:`count` connected pieces of :obj:`size` nodes
    (:func:`harness.graphs.connected_pieces`) and its spectrum, each piece's
    dense one."""
    s = connected_pieces(count, size, seed)
    coo = s.to_sparse_coo().coalesce()
    row, col = coo.indices()
    spectrum = []
    for c in range(count):
        inside = (row // size) == c
        block = np.zeros((size, size))
        block[(row[inside] % size).numpy(), (col[inside] % size).numpy()] = \
            coo.values()[inside].numpy()
        spectrum.append(np.linalg.eigvalsh(block))
    return s, np.sort(np.concatenate(spectrum))[::-1]


def solve(s, k: int, per_pair: int) -> Tuple[float, np.ndarray]:
    saved = componentwise.DENSE_PER_PAIR
    componentwise.DENSE_PER_PAIR = per_pair
    try:
        start = time.perf_counter()
        pairs = extreme_eigenpairs(s, k, 'LA', tol=1e-4, max_iter=200,
                                   generator=torch.Generator().manual_seed(0))
        return time.perf_counter() - start, pairs.eigenvalues.numpy()
    finally:
        componentwise.DENSE_PER_PAIR = saved


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(prog='python -m benchmarks.components',
                                description=__doc__.split('\n\n')[0])
    p.add_argument('--quick', action='store_true', help='two small workloads')
    p.add_argument('--threads', type=positive_int, default=1)
    p.add_argument('--output', default=None)
    args = p.parse_args(argv)
    output = args.output or (f'{RESULTS}/components-quick.tmp' if args.quick
                             else f'{RESULTS}/components.md')
    check_writable(p, '--output', output)
    torch.set_num_threads(args.threads)
    rep, start = Report(), time.perf_counter()
    rep.header('Eigenpairs of a disconnected operator: dense or iterative per component',
               'benchmarks.components', argv, args.threads, args.quick, isolated=False)
    rep(f'Rule: a component above {componentwise.DENSE_NODES} nodes is solved densely '
        f'when it has at most {componentwise.DENSE_PER_PAIR} k nodes (up to '
        f'{componentwise.DENSE_NODES_MAX}); threshold: only up to '
        f'{componentwise.DENSE_NODES}. Both in this process, one after the other; where '
        f'both choose Lanczos they are the same computation, and their ratio is the '
        f'run\'s noise.')
    rep()
    rows = []
    for count, size, k in (QUICK if args.quick else WORKLOADS):
        s, spectrum = components(count, size)
        times, errors = [], []
        for per_pair in (componentwise.DENSE_PER_PAIR, 0):
            seconds, values = solve(s, k, per_pair)
            times.append(seconds)
            errors.append(float(np.abs(values - spectrum[:k]).max()))
        dense = size <= componentwise.DENSE_PER_PAIR * k
        rows.append([f'{count} x {size}', k, 'dense' if dense else 'Lanczos',
                     f'{times[0]:.2f}', f'{times[1]:.2f}', f'{times[0] / times[1]:.2f}',
                     f'{errors[0]:.1e}', f'{errors[1]:.1e}'])
        print(rows[-1], flush=True)
    rep.table(['components x nodes', 'k', 'rule chooses', 'rule (s)', 'threshold (s)',
               'rule / threshold', 'error, rule', 'error, threshold'], rows)
    rep.finish(start, output)


if __name__ == '__main__':
    main()
