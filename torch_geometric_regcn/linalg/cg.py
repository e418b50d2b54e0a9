r"""Conjugate gradient for sparse symmetric positive definite systems, with an
implicit backward pass."""
import warnings
from typing import Any, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.utils.sparse import diagonal


def conjugate_gradient(matrix: Tensor, rhs: Tensor, tol: float = 1e-6,
                       max_iter: int = 1000) -> Tuple[Tensor, float, int]:
    r"""Solves :math:`\mathbf{M} \mathbf{Y} = \mathbf{B}` column by column with
    Jacobi-preconditioned conjugate gradient, all columns at once.

    Stops when every column has :math:`\|\mathbf{B} - \mathbf{M}\mathbf{Y}\| \leq
    \text{tol} \cdot \|\mathbf{B}\|`. Each iteration costs one sparse matmul,
    :math:`O(\mathrm{nnz} \cdot F)`. Returns the solution, the largest relative
    residual reached and the number of iterations."""
    squeeze = rhs.dim() == 1
    b = rhs.unsqueeze(-1) if squeeze else rhs
    inv_diag = diagonal(matrix).reciprocal().unsqueeze(-1)
    b_norm = b.norm(dim=0).clamp_min(torch.finfo(b.dtype).tiny)
    y = torch.zeros_like(b)
    r = b.clone()
    z = inv_diag * r
    p = z.clone()
    rz = (r * z).sum(dim=0)
    residual, iteration = float((r.norm(dim=0) / b_norm).max()) if b.numel() else 0.0, 0
    while residual > tol and iteration < max_iter:
        iteration += 1
        mp = matrix @ p
        step = rz / (p * mp).sum(dim=0).clamp_min(torch.finfo(b.dtype).tiny)
        y = y + step * p
        r = r - step * mp
        z = inv_diag * r
        rz, rz_old = (r * z).sum(dim=0), rz
        p = z + (rz / rz_old.clamp_min(torch.finfo(b.dtype).tiny)) * p
        residual = float((r.norm(dim=0) / b_norm).max())
    return (y.squeeze(-1) if squeeze else y), residual, iteration


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
        return None, _solve(ctx.matrix, grad, ctx.tol, ctx.max_iter), None, None


def cg_solve(matrix: Tensor, rhs: Tensor, tol: float = 1e-6, max_iter: int = 1000) -> Tensor:
    r"""Returns :math:`\mathbf{M}^{-1} \mathbf{B}` for a symmetric positive
    definite (typically sparse) :math:`\mathbf{M}` by conjugate gradient.

    The backward pass is implicit: the gradient with respect to
    :math:`\mathbf{B}` is :math:`\mathbf{M}^{-1}` times the output gradient,
    one more solve with the same matrix, so memory does not grow with the
    number of iterations. :math:`\mathbf{M}` receives no gradient. Warns with the
    achieved residual when :obj:`max_iter` is reached before :obj:`tol`."""
    return _CGSolve.apply(matrix, rhs, tol, max_iter)
