r"""The result type, the selection rule and the numerical setting shared by
the eigensolvers."""
import math
import os
from contextlib import contextmanager
from typing import Iterator, NamedTuple, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, broadcast, rank_of
from torch_geometric_regcn.utils.validation import check_choice, check_finite, check_int, check_real

WHICH = ('LA', 'LM')


class EigenPairs(NamedTuple):
    r"""The result of an eigensolver."""
    eigenvalues: Tensor  #: shape :obj:`[k]`, ordered by the selection rule
    eigenvectors: Tensor  #: shape :obj:`[N, k]`, orthonormal columns
    residual: float  #: the largest relative residual of a returned pair
    iterations: int  #: outer iterations (restarts) run
    converged: bool  #: whether :obj:`residual <= tol`


def select(theta: Tensor, vectors: Tensor, count: int, which: str) -> tuple[Tensor, Tensor]:
    r"""The :obj:`count` pairs first under :obj:`which` (:obj:`"LA"`: largest
    algebraic, :obj:`"LM"`: largest magnitude), in that order."""
    key = theta if which == 'LA' else theta.abs()
    order = key.argsort(descending=True)[:count]
    return theta[order], vectors[:, order]


def check_problem(operator: Tensor, k: int, which: str, max_iter: int, degree: int,
                  tol: float = 1e-4) -> int:
    r"""Validates the arguments shared by the eigensolvers (a finite square
    float32 or float64 operator, :math:`1 \leq k \leq N`, positive integer
    counts); returns :math:`N`."""
    if operator.dim() != 2 or operator.size(0) != operator.size(1):
        raise ValueError(f"'operator' must be a square matrix (got {list(operator.shape)})")
    if isinstance(operator, Tensor) and operator.layout not in (
            torch.strided, torch.sparse_coo, torch.sparse_csr):
        raise TypeError(f"'operator' must be dense, sparse COO or sparse CSR (got layout "
                        f"{operator.layout}); convert it with 'operator.to_sparse_csr()'")
    n = operator.size(0)
    if n == 0:
        raise ValueError("'operator' is empty (N = 0): it has no eigenpairs to find")
    if operator.dtype not in (torch.float32, torch.float64):  # a ShardedMatrix too
        raise TypeError(f"'operator' must be a float32 or float64 matrix (got "
                        f"{operator.dtype}); use 'operator.float()' or 'operator.double()'")
    k = check_int('k', k, minimum=0)
    if not 0 < k <= n:
        raise ValueError(f"'k' must lie in [1, {n}] (got {k})")
    check_choice('which', which, WHICH)
    check_real('tol', tol, 0.0, low_open=True)
    check_int('max_iter', max_iter)
    check_int('degree', degree)
    check_finite('operator', operator)
    if isinstance(operator, Tensor):  # a ShardedMatrix is built from a symmetric graph
        check_symmetric(operator)
    return n


def check_symmetric(operator: Tensor) -> None:
    r"""Raises :class:`ValueError` unless the square :obj:`operator` is
    symmetric, as the eigensolvers assume (they would return the pairs of
    another matrix, or run to :obj:`max_iter`), by the randomised test
    :math:`\mathbf{u}^{\top}\mathbf{S}\mathbf{v} = \mathbf{v}^{\top}
    \mathbf{S}\mathbf{u}` for fixed random signs :math:`\mathbf{u},
    \mathbf{v}` (two products, :math:`O(\mathrm{nnz})` or :math:`O(N^2)`),
    within the rounding of the products and of entries computed as sums of
    up to :math:`r` terms, :math:`2((r + 2)\epsilon + N\epsilon_{64})
    \sum_{ij}|s_{ij}|`, :math:`r` the most entries of a row (:math:`N` for
    a dense matrix): it finds an operator that is far from symmetric (a
    directed graph's, or a dense matrix that was never symmetrised), not an
    asymmetry as small as rounding. Operators in other dtypes than float32
    and float64 are left to :func:`check_problem`, which refuses them."""
    n = operator.size(0)
    if n == 0 or operator.dtype not in (torch.float32, torch.float64):
        return
    eps = torch.finfo(operator.dtype).eps
    if operator.layout == torch.strided:
        matrix, r, total = operator, n, float(operator.abs().sum())
    else:
        matrix = operator.to_sparse_csr() if operator.layout != torch.sparse_csr else operator
        r, total = int(matrix.crow_indices().diff().max()), float(matrix.values().abs().sum())
    generator = torch.Generator().manual_seed(0)
    signs = (torch.randint(0, 2, (2, n), generator=generator) * 2 - 1).to(operator.dtype)
    u, v = signs.to(operator.device)
    a = torch.dot(u.double(), (matrix @ v.unsqueeze(-1)).squeeze(-1).double())
    b = torch.dot(v.double(), (matrix @ u.unsqueeze(-1)).squeeze(-1).double())
    bound = 2 * ((r + 2) * eps + n * torch.finfo(torch.float64).eps) * total
    if float((a - b).abs()) > bound:
        raise ValueError("'operator' is not symmetric (u^T S v != v^T S u for random signs u, "
                         "v); the eigensolvers need a symmetric matrix (an undirected graph's "
                         "operator; symmetrise a dense one, e.g. '(S + S.T) / 2', if meant)")


def overflow_error(dtype: torch.dtype, symptom: str) -> ValueError:
    r"""The error of every eigensolver whose products with its operator
    overflow :obj:`dtype`, with what showed it (:obj:`symptom`)."""
    return ValueError(f"The eigensolver's products with 'operator' overflowed {dtype} "
                      f"({symptom}): its entries are too large for this dtype; scale the "
                      f"operator down or solve in float64")


def small_eigh(matrix: Tensor, group: Group = None) -> Tuple[Tensor, Tensor]:
    r""":func:`torch.linalg.eigh` of a small projected matrix of an
    eigensolver, which must be finite: products with an operator whose
    entries overflow its dtype raise a :class:`ValueError` that says so,
    instead of LAPACK's non-convergence or NaN eigenpairs. Each eigenvector
    is signed so that its entry of largest magnitude (the first of equal
    ones) is positive: LAPACK's signs follow the signs of rounding-level
    entries where the matrix is nearly diagonal (the Rayleigh--Ritz step of
    converged pairs), so row shards, which sum in another order, would flip
    eigenvectors that one process does not; this sign follows the matrix
    continuously except where two entries of largest magnitude (nearly) tie,
    as they never do for the near-identity rotation of converged, separated
    pairs. A float32 matrix is decomposed in float64 and its pairs rounded
    back: the rounding of a float32 eigendecomposition, magnified by the
    small gaps of the projected spectrum, is what limits the Ritz residuals
    of the float32 solvers (``benchmarks/precision_floor.py``). Cost: the
    eigendecomposition of a :math:`b \times b` matrix in float64, plus
    :math:`O(b^2)`.

    With a :obj:`group` (the matrix all-reduced, the same on every rank),
    every rank gets rank 0's eigenpairs (one broadcast of :math:`b (b + 1)`
    numbers): LAPACK's bits, and its basis of a repeated eigenvalue, depend
    on the thread count and the hardware, and ranks that took different
    bases would hold rows of different eigenvectors."""
    if not bool(torch.isfinite(matrix).all()):  # the same verdict on every rank
        raise overflow_error(matrix.dtype, 'NaN or infinite values')
    b = matrix.size(0)
    packed = matrix.new_full((b + 1, b), math.nan)
    if rank_of(group) == 0:
        wide = torch.float64 if matrix.dtype == torch.float32 else matrix.dtype
        try:  # a failure here must not leave the other ranks in the broadcast
            values, vectors = torch.linalg.eigh(matrix.to(wide))
        except RuntimeError:  # LAPACK's non-convergence
            if group is None:
                raise
        else:
            if vectors.numel():
                largest = vectors.gather(0, vectors.abs().argmax(dim=0, keepdim=True))
                vectors = vectors * torch.where(largest < 0, -1.0, 1.0).to(vectors.dtype)
            values, vectors = values.to(matrix.dtype), vectors.to(matrix.dtype)
            if group is None:
                return values, vectors
            packed[0], packed[1:] = values, vectors
    packed = broadcast(packed, group)
    if not bool(torch.isfinite(packed).all()):
        raise ValueError(f"torch.linalg.eigh of the {b} x {b} projected matrix failed on "
                         f"rank 0 of the group (LAPACK did not converge); every rank stops")
    return packed[0], packed[1:]


@contextmanager
def ieee_float32_matmul() -> Iterator[None]:
    r"""Runs the block (or, as a decorator, the function) with float32 matrix
    products in full precision (:obj:`torch.set_float32_matmul_precision(
    "highest")`), then restores the caller's setting. A caller that allows
    TF32 products for training (:obj:`"high"`) would otherwise hand the
    eigensolvers products with a relative error of about 3e-4, which holds
    their residuals above a 1e-4 tolerance."""
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision('highest')
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)


def tf32_forced(tensor: Tensor) -> bool:
    r"""Whether the environment forces TF32 products on the float32 CUDA
    :obj:`tensor` (:obj:`TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1` without
    :obj:`NVIDIA_TF32_OVERRIDE=0`), which no setting in Python undoes."""
    forced = (os.environ.get('TORCH_ALLOW_TF32_CUBLAS_OVERRIDE') == '1'
              and os.environ.get('NVIDIA_TF32_OVERRIDE') != '0')
    return tensor.is_cuda and tensor.dtype == torch.float32 and forced


def precision_hint(operator: Tensor) -> str:
    r"""A sentence for a non-convergence warning where the environment forces
    TF32 products on a float32 CUDA operator (:func:`tf32_forced`)."""
    if tf32_forced(operator):
        return ('; TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 forces TF32 matrix products, which '
                'cap the accuracy near 1e-4: set NVIDIA_TF32_OVERRIDE=0 or solve in float64')
    return ''
