r"""Where the float32 block Lanczos of :class:`LowRankInverse` loses its accuracy
on a device: the relative residual it reaches, with each of its float32 parts
in turn done in float64.

On an NVIDIA H200 (2026-11-30) the float32 solve of the tsGCN operator of a
100k-node graph stopped at a relative residual of 1.4e-4, while the same solve
on the CPU reached 2e-6 and the float64 solve on the GPU converged in 3
cycles; the float32 sparse product and a 64-column Gram matrix were accurate
there (relative errors 9e-8 and 2e-7). This script runs the float32 solve
(rank 64, ``'LA'``, ``--cycles`` restart cycles, tol 1e-12, which no cycle
meets) once as it is and once with each part below computed in float64 and
rounded back to float32, so that the part whose float64 version lowers the
residual to the CPU's level is the one that limits it:

- ``eigh``: the eigendecompositions of the small projected matrices, which
  the solvers already do in float64 on the matrix's device
  (:func:`~torch_geometric_regcn.linalg.eigenpairs.small_eigh`): here on the
  CPU (LAPACK against the device's own library), with ``eigvalsh`` too;
- ``gram``: the Gram matrices :math:`\mathbf{A}^{\top}\mathbf{B}` of the
  blocks (``linalg.blocks.local_gram``);
- ``product``: the products with the sparse operator in the Chebyshev filter;
- ``qr``: the QR factorisations of the blocks (``linalg.blocks.tall_qr``).

Run from the repository root::

    python -m benchmarks.precision_floor --device cuda [--nodes 100000]

It prints one line per variant (the residual reached and the cycles run);
nothing is written.
"""
import argparse
import time
import warnings
from contextlib import contextmanager, nullcontext
from typing import Callable, Dict, Iterator

import torch

import torch_geometric_regcn.linalg.blocks as blocks
import torch_geometric_regcn.linalg.chebyshev as chebyshev
import torch_geometric_regcn.linalg.lanczos as lanczos
from harness.cli import positive_int
from harness.graphs import synthetic_graph
from torch_geometric_regcn.linalg import extreme_eigenpairs
from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator
from torch_geometric_regcn.utils.sparse import compact_csr


@contextmanager
def _replaced(owner, name: str, value) -> Iterator[None]:
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


def _float64_eigh() -> Callable:
    eigh, eigvalsh = torch.linalg.eigh, torch.linalg.eigvalsh

    def in_float64(fn):
        def call(matrix, *args, **kwargs):
            out = fn(matrix.double().cpu(), *args, **kwargs)
            back = lambda t: t.to(matrix.device, matrix.dtype)  # noqa: E731
            return type(out)(map(back, out)) if isinstance(out, tuple) else back(out)
        return call

    @contextmanager
    def context():
        with _replaced(torch.linalg, 'eigh', in_float64(eigh)), \
                _replaced(torch.linalg, 'eigvalsh', in_float64(eigvalsh)):
            yield
    return context


def _float64_gram():
    def local_gram(a, b):
        return (a.double().T @ b.double()).to(torch.promote_types(a.dtype, b.dtype))
    return lambda: _replaced(blocks, 'local_gram', local_gram)


def _float64_product(operator64):
    class Torch:  # chebyshev's 'torch', with addmm done in float64 by the float64 operator
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def addmm(x, operator, y, beta, alpha, out):
            exact = torch.addmm(x.double(), operator64, y.double(), beta=beta, alpha=alpha)
            return out.copy_(exact)
    return lambda: _replaced(chebyshev, 'torch', Torch())


def _float64_qr():
    def tall_qr(block, group):
        q, r = torch.linalg.qr(block.double())
        return blocks.QR(q.to(block.dtype), r.to(block.dtype))
    return lambda: _replaced(lanczos, 'tall_qr', tall_qr)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog='python -m benchmarks.precision_floor',
                                     description=__doc__.split('\n\n')[0])
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--nodes', type=positive_int, default=100_000)
    parser.add_argument('--cycles', type=positive_int, default=6)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    data = synthetic_graph(args.nodes, avg_degree=30)
    data.x = data.x.double()  # S in float64, rounded to float32: symmetric in both
    operator = compact_csr(tsgcn_operator(data, 1.0, 0.0, 10)).to(device)
    assert operator.dtype == torch.float64
    variants: Dict[str, Callable] = {
        'as it is': nullcontext,
        'eigh in float64': _float64_eigh(),
        'gram in float64': _float64_gram(),
        'product in float64': _float64_product(operator),
        'qr in float64': _float64_qr(),
    }
    name = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'CPU'
    print(f'{name}: {args.nodes:,} nodes, nnz(S) = {operator._nnz():,}, rank 64, '
          f'at most {args.cycles} cycles, tol 1e-12 (the relative residual reached)')
    for label, context in variants.items():
        for dtype in ((torch.float32, torch.float64) if label == 'as it is' else
                      (torch.float32,)):
            start = time.perf_counter()
            with context(), warnings.catch_warnings():
                warnings.simplefilter('ignore')  # no tol can be met: the residual is the result
                pairs = extreme_eigenpairs(operator.to(dtype), 64, 'LA', 1e-12, args.cycles,
                                           'lanczos', generator=torch.Generator(device)
                                           .manual_seed(0))
            if device.type == 'cuda':
                torch.cuda.synchronize()
            print(f'  {label:<20} {str(dtype):<14} residual {pairs.residual:.2e} after '
                  f'{pairs.iterations} cycles ({time.perf_counter() - start:.1f} s)', flush=True)


if __name__ == '__main__':
    main()
