r"""The QR of a tall block, as every block Lanczos step takes it:
``linalg.tall_qr`` (CholeskyQR2 below its conditioning limit) against
``torch.linalg.qr`` (Householder, LAPACK), in one process and the same run.

Blocks of ``n`` rows and ``b`` Gaussian columns (condition number near one;
a Lanczos block after its Gram-Schmidt pass is within a few hundred), in float32 and
float64; each time is the median of ``--repeats`` calls, the two methods
alternating, after one warm-up call each. The table also gives the loss of
orthogonality :math:`\|\mathbf{Q}^{\top}\mathbf{Q} - \mathbf{I}\|_{\max}`
in units of the dtype's rounding, and the backward error
:math:`\|\mathbf{Q}\mathbf{R} - \mathbf{B}\|_F / \|\mathbf{B}\|_F`, both
computed in float64.

Run from the repository root::

    python -m benchmarks.tall_qr [--threads 1] [--repeats 7]

Writes ``benchmarks/results/tall_qr.md`` (``--output``: elsewhere).
"""
import argparse
import os.path as osp
import statistics
import time

import torch

from harness.cli import check_writable, positive_int
from harness.report import RESULTS, Report
from torch_geometric_regcn.linalg.blocks import tall_qr


def accuracy(block, q, r):
    r"""Loss of orthogonality (in units of the dtype's rounding) and backward error."""
    eps = torch.finfo(block.dtype).eps
    q64, r64, b64 = q.double(), r.double(), block.double()
    gap = (q64.T @ q64 - torch.eye(q.size(1), dtype=torch.float64)).abs().max()
    backward = torch.linalg.matrix_norm(q64 @ r64 - b64) / torch.linalg.matrix_norm(b64)
    return float(gap) / eps, float(backward) / eps


def main(argv=None):
    p = argparse.ArgumentParser(prog='python -m benchmarks.tall_qr',
                               description=__doc__.split('\n\n')[0])
    p.add_argument('--rows', type=positive_int, nargs='+', default=[100_000, 1_000_000])
    p.add_argument('--cols', type=positive_int, nargs='+', default=[8, 16, 32])
    p.add_argument('--threads', type=positive_int, default=1)
    p.add_argument('--repeats', type=positive_int, default=7)
    p.add_argument('--output', default=osp.join(RESULTS, 'tall_qr.md'))
    args = p.parse_args(argv)
    if max(args.cols) > min(args.rows):
        p.error(f'--cols must not exceed --rows: the blocks are tall (got --cols '
                f'{max(args.cols)} for --rows {min(args.rows)})')
    check_writable(p, '--output', args.output, create=True)  # written at the end
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rep = Report()
    rep.header('The QR of a tall block: tall_qr (CholeskyQR2) against torch.linalg.qr',
               'benchmarks.tall_qr', argv, args.threads, isolated=False)
    rep(' '.join(' '.join(__doc__.split('\n\n')[1:2]).split()))
    rep()
    rows = []
    generator = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float64):
        for n in args.rows:
            for b in args.cols:
                block = torch.randn(n, b, generator=generator, dtype=dtype)
                times = {'tall_qr': [], 'torch': []}
                methods = {'tall_qr': lambda x: tall_qr(x, None), 'torch': torch.linalg.qr}
                for method in methods.values():
                    method(block)
                for _ in range(args.repeats):
                    for name, method in methods.items():
                        t0 = time.perf_counter()
                        method(block)
                        times[name].append(time.perf_counter() - t0)
                ours, theirs = (statistics.median(times[name]) for name in ('tall_qr', 'torch'))
                orth, backward = accuracy(block, *tall_qr(block, None))
                orth_h, backward_h = accuracy(block, *torch.linalg.qr(block))
                rows.append([str(dtype).replace('torch.', ''), f'{n:,}', b,
                             f'{1e3 * ours:.1f}', f'{1e3 * theirs:.1f}', f'{ours / theirs:.2f}',
                             f'{orth:.1f} / {orth_h:.1f}', f'{backward:.1f} / {backward_h:.1f}'])
    rep.table(['dtype', 'rows', 'columns', 'tall_qr (ms)', 'torch.linalg.qr (ms)',
               'time ratio', 'orthogonality / eps (tall_qr / torch)',
               'backward error / eps (tall_qr / torch)'], rows)
    rep.finish(start, args.output)


if __name__ == '__main__':
    main()
