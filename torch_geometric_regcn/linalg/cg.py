r"""Conjugate gradient for sparse symmetric positive definite systems, with an
implicit backward pass."""
import math
import numbers
import warnings
from typing import Any, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.utils.sparse import diagonal
from torch_geometric_regcn.utils.validation import check_finite


def conjugate_gradient(matrix: Tensor, rhs: Tensor, tol: float = 1e-6,
                       max_iter: int = 1000) -> Tuple[Tensor, float, int]:
    r"""Solves :math:`\mathbf{M} \mathbf{Y} = \mathbf{B}` column by column with
    Jacobi-preconditioned conjugate gradient, all columns at once.

    Stops when every column has :math:`\|\mathbf{B} - \mathbf{M}\mathbf{Y}\| \leq
    \text{tol} \cdot \|\mathbf{B}\|`. Each iteration costs one sparse matmul,
    :math:`O(\mathrm{nnz} \cdot F)`. Returns the solution, the largest relative
    residual reached and the number of iterations.

    Raises :class:`ValueError` when :obj:`matrix` or :obj:`rhs` holds NaN or
    infinite values, when the diagonal of :obj:`matrix` is not positive, and
    when an iteration finds a direction :math:`\mathbf{p}` with
    :math:`\mathbf{p}^{\top}\mathbf{M}\mathbf{p} \leq 0` (or a non-finite
    residual): :math:`\mathbf{M}` is then not positive definite and the
    iterates would be meaningless."""
    check_arguments(tol, max_iter)
    squeeze = rhs.dim() == 1
    b = rhs.unsqueeze(-1) if squeeze else rhs
    if b.dim() != 2 or matrix.dim() != 2 or matrix.size(0) != matrix.size(1) \
            or matrix.size(0) != b.size(0):
        raise ValueError(f"'matrix' must be square with as many rows as 'rhs' "
                         f"(got {list(matrix.shape)} and {list(rhs.shape)})")
    check_finite('rhs', b)
    check_finite('matrix', matrix)
    diag = diagonal(matrix)
    if b.numel() and not bool((diag > 0).all()):
        raise ValueError("'matrix' has a non-positive diagonal entry, so it is not positive "
                         "definite; conjugate gradient needs a symmetric positive definite "
                         "matrix (check the regulariser's operator())")
    inv_diag = diag.reciprocal().unsqueeze(-1)
    b_norm = b.norm(dim=0).clamp_min(torch.finfo(b.dtype).tiny)
    y = torch.zeros_like(b)
    r = b.clone()
    z = inv_diag * r
    p = z.clone()
    rz = (r * z).sum(dim=0)
    relative = r.norm(dim=0) / b_norm
    residual, iteration = float(relative.max()) if b.numel() else 0.0, 0
    while residual > tol and iteration < max_iter:
        iteration += 1
        mp = matrix @ p
        curvature = (p * mp).sum(dim=0)
        # Columns still above tol need p^T M p > 0 (converged ones may underflow).
        breakdown = ((curvature <= 0) & (relative > tol)).any()
        step = rz / curvature.clamp_min(torch.finfo(b.dtype).tiny)
        y = y + step * p
        r = r - step * mp
        z = inv_diag * r
        rz, rz_old = (r * z).sum(dim=0), rz
        p = z + (rz / rz_old.clamp_min(torch.finfo(b.dtype).tiny)) * p
        relative = r.norm(dim=0) / b_norm
        residual, broke = torch.stack([relative.max(), breakdown.to(b.dtype)]).tolist()
        if broke:
            raise ValueError(
                f"Conjugate gradient broke down at iteration {iteration}: a search direction "
                f"p has p^T M p <= 0, so 'matrix' is not positive definite (a regulariser's "
                f"operator() must return a symmetric positive definite M)")
        if not math.isfinite(residual):  # overflow: never hand back plausible numbers
            raise ValueError(f"Conjugate gradient diverged at iteration {iteration} (the "
                             f"residual is {residual}); 'matrix' is not positive definite or "
                             f"too badly scaled for {b.dtype}")
    return (y.squeeze(-1) if squeeze else y), residual, iteration


def check_arguments(tol: float, max_iter: int) -> None:
    r"""Validates the stopping rule of :func:`conjugate_gradient`: a finite
    positive :obj:`tol` and a positive integer :obj:`max_iter` (NumPy integers
    accepted)."""
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) \
            or not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"'tol' must be a positive finite number (got {tol!r})")
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"'max_iter' must be a positive integer (got {max_iter!r})")


def _solve(matrix: Tensor, rhs: Tensor, tol: float, max_iter: int) -> Tensor:
    y, residual, iteration = conjugate_gradient(matrix, rhs, tol, max_iter)
    if residual > tol:
        warnings.warn(
            f"Conjugate gradient stopped after {iteration} iterations with relative residual "
            f"{residual:.2e} > tol={tol:.0e}; raise 'max_iter' or 'tol'", UserWarning,
            stacklevel=3)
    return y


class _CGSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, matrix: Tensor, rhs: Tensor, tol: float, max_iter: int) -> Tensor:
        ctx.matrix, ctx.tol, ctx.max_iter = matrix, tol, max_iter
        return _solve(matrix, rhs, tol, max_iter)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[None, Tensor, None, None]:
        # Y = M⁻¹ B with M symmetric, so dL/dB = M⁻¹ dL/dY: one more solve.
        # A column of the upstream gradient with a NaN or an infinity makes the
        # whole column of M⁻¹ dL/dY NaN, as the exact inverse would.
        finite = grad.isfinite().all(dim=0)
        if bool(finite.all()):
            return None, _solve(ctx.matrix, grad, ctx.tol, ctx.max_iter), None, None
        warnings.warn(f"cg_solve received a non-finite gradient in {int((~finite).sum())} of "
                      f"{finite.numel()} columns; their gradient is NaN (the loss or a layer "
                      f"above produced NaN or infinity)", RuntimeWarning, stacklevel=2)
        out = torch.full_like(grad, math.nan)
        if bool(finite.any()):
            out[:, finite] = _solve(ctx.matrix, grad[:, finite], ctx.tol, ctx.max_iter)
        return None, out, None, None


def cg_solve(matrix: Tensor, rhs: Tensor, tol: float = 1e-6, max_iter: int = 1000) -> Tensor:
    r"""Returns :math:`\mathbf{M}^{-1} \mathbf{B}` for a symmetric positive
    definite (typically sparse) :math:`\mathbf{M}` by conjugate gradient.

    The backward pass is implicit: the gradient with respect to
    :math:`\mathbf{B}` is :math:`\mathbf{M}^{-1}` times the output gradient,
    one more solve with the same matrix, so memory does not grow with the
    number of iterations. :math:`\mathbf{M}` receives no gradient. Warns with the
    achieved residual when :obj:`max_iter` is reached before :obj:`tol`.

    Non-finite input raises :class:`ValueError` (see
    :func:`conjugate_gradient`); a non-finite output gradient gives NaN in
    the affected columns of the input gradient, with a
    :class:`RuntimeWarning`, never zeros."""
    if rhs.dim() == 1:
        return _CGSolve.apply(matrix, rhs.unsqueeze(-1), tol, max_iter).squeeze(-1)
    return _CGSolve.apply(matrix, rhs, tol, max_iter)
