r"""Dominant eigenpairs of a sparse symmetric operator by block subspace
iteration with Rayleigh--Ritz, optionally accelerated by Chebyshev filtering."""
import math
import warnings
from typing import Callable, Optional

import torch
from torch import Tensor

from torch_geometric_regcn.linalg.chebyshev import chebyshev_filter
from torch_geometric_regcn.linalg.eigenpairs import (
    EigenPairs,
    check_problem,
    ieee_float32_matmul,
    overflow_error,
    precision_hint,
    small_eigh,
)
from torch_geometric_regcn.utils.deprecation import moved
from torch_geometric_regcn.utils.sparse import spectral_bound
from torch_geometric_regcn.utils.validation import check_choice, check_int

#: The iterations of :func:`subspace_iteration`.
SUBSPACE_METHODS = ('chebyshev', 'power')


#: Iterations without a new lowest residual, near the dtype's rounding, after
#: which :func:`subspace_iteration` stops.
FLOOR_WINDOW = 10


@ieee_float32_matmul()
def subspace_iteration(
    operator: Tensor,
    k: int,
    which: str = 'LA',
    tol: float = 1e-4,
    max_iter: int = 100,
    method: str = 'chebyshev',
    degree: int = 16,
    oversample: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    callback: Optional[Callable[[int, float], None]] = None,
) -> EigenPairs:
    r"""Computes :obj:`k` eigenpairs of the symmetric matrix :obj:`operator`
    :math:`\mathbf{S}` by block subspace iteration.

    Each iteration maps an orthonormal block :math:`\mathbf{U} \in
    \mathbb{R}^{N \times b}` through a polynomial in :math:`\mathbf{S}`,
    re-orthonormalises it by QR and extracts Ritz pairs from
    :math:`\mathbf{U}^{\top} \mathbf{S} \mathbf{U}` (Rayleigh--Ritz). Wanted pairs
    that have converged, in order, are locked: they leave the block, which is kept
    orthogonal to them, so later iterations filter fewer columns. It stops
    once every wanted Ritz pair has a relative residual
    :math:`\|\mathbf{S} x_i - \theta_i x_i\| / \|\mathbf{S}\|_\infty` of at
    most :obj:`tol`, and warns with the achieved residual when
    :obj:`max_iter` is reached first. Cost per iteration:
    :math:`O(\mathrm{nnz} \cdot b \cdot \text{degree} + N b^2)` time and
    :math:`O(N b)` memory.

    Args:
        operator (torch.Tensor): The symmetric :math:`N \times N` matrix, sparse
            (CSR or COO) or dense.
        k (int): The number of eigenpairs.
        which (str, optional): :obj:`"LA"` for the largest algebraic
            eigenvalues, :obj:`"LM"` for the largest in magnitude.
            (default: :obj:`"LA"`)
        tol (float, optional): The relative residual to reach.
            (default: :obj:`1e-4`)
        max_iter (int, optional): The maximum number of iterations.
            (default: :obj:`100`)
        method (str, optional): :obj:`"power"` multiplies by :math:`\mathbf{S}`
            once per iteration (shifted by :math:`\|\mathbf{S}\|_\infty` for
            :obj:`"LA"`), the plain iteration of the tsGCN paper;
            :obj:`"chebyshev"` applies a Chebyshev filter of degree
            :obj:`degree` that damps the unwanted part of the spectrum, which
            converges in far fewer iterations on the clustered spectra of
            graphs. (default: :obj:`"chebyshev"`)
        degree (int, optional): The Chebyshev filter degree. (default: :obj:`16`)
        oversample (int, optional): Extra block columns :math:`b - k`, which
            speed up convergence. (default: :obj:`max(8, k // 4)`)
        generator (torch.Generator, optional): The random generator of the
            starting block, for reproducibility. (default: :obj:`None`)
        callback (callable, optional): Called as :obj:`callback(iteration,
            residual)` after every iteration. (default: :obj:`None`)
    """
    n = check_problem(operator, k, which, max_iter, degree, tol)
    check_choice('method', method, SUBSPACE_METHODS)
    if oversample is not None:
        oversample = check_int('oversample', oversample, minimum=0)

    dtype, device = operator.dtype, operator.device
    bound = max(spectral_bound(operator), torch.finfo(dtype).tiny)
    if not math.isfinite(bound):  # residuals relative to it would all read 0
        raise overflow_error(dtype, 'absolute row sums beyond its range')
    b = min(n, k + (max(8, k // 4) if oversample is None else oversample))

    def key(theta: Tensor) -> Tensor:
        return theta if which == 'LA' else theta.abs()

    start = torch.randn(n, b, dtype=dtype, device=device, generator=generator)
    basis = torch.linalg.qr(start).Q
    locked, locked_theta = start.new_zeros(n, 0), start.new_zeros(0)
    locked_res = start.new_zeros(0)  # each locked pair's residual, when it was locked
    iteration, history, floor = 0, [], False
    while iteration < max_iter:
        iteration += 1
        image = operator @ basis
        gram = basis.T @ image
        theta, rotation = small_eigh((gram + gram.T) / 2)
        order = key(theta).argsort(descending=True)
        theta, rotation = theta[order], rotation[:, order]
        ritz, ritz_image = basis @ rotation, image @ rotation
        wanted = k - locked.size(1)
        # Relative before the norm, whose squares could overflow for finite entries.
        res = ((ritz_image[:, :wanted] - ritz[:, :wanted] * theta[:wanted]) / bound).norm(dim=0)
        if callback is not None:
            callback(iteration, float(torch.cat([locked_res, res]).max()))
        # Lock the leading converged pairs: they leave the block and stay orthogonal to it.
        done = wanted if b == n else int((res <= tol).int().cumprod(0).sum())
        if done:
            locked = torch.cat([locked, ritz[:, :done]], dim=1)
            locked_theta = torch.cat([locked_theta, theta[:done]])
            locked_res = torch.cat([locked_res, res[:done]])
            ritz, ritz_image, theta, res = (ritz[:, done:], ritz_image[:, done:], theta[done:],
                                            res[done:])
        if locked.size(1) >= k:
            break
        # At the dtype's rounding the residual wanders instead of falling: no
        # new lowest in FLOOR_WINDOW iterations, within 1000 eps of zero.
        history.append(float(res.max()))
        floor = (len(history) > FLOOR_WINDOW
                 and min(history[-FLOOR_WINDOW:]) >= min(history[:-FLOOR_WINDOW])
                 and min(history) < 1e3 * torch.finfo(res.dtype).eps)
        if floor:
            break
        if method == 'power':
            block = ritz_image + bound * ritz if which == 'LA' else ritz_image
        else:
            # 'LM': |theta| of a mixture of eigenvectors of +-lambda (a bipartite
            # spectrum) can be near zero, a cut that filters nothing; ||S v||, at
            # least |theta| and lambda for such a mixture, is the scale it holds.
            cut = (float(theta[-1]) if which == 'LA'
                   else float(ritz_image.norm(dim=0).min()))
            lower = -bound if which == 'LA' else -cut
            upper = max(cut, lower + 1e-3 * bound)
            block = chebyshev_filter(operator, lower, upper, degree, bound)(ritz)
        for _ in range(2):  # twice is enough (Kahan): keep the block orthogonal to the locked
            block = block - locked @ (locked.T @ block)
        basis = torch.linalg.qr(block).Q

    if locked.size(1) < k:  # not converged: complete with the best unlocked pairs
        missing = k - locked.size(1)
        locked = torch.cat([locked, ritz[:, :missing]], dim=1)
        locked_theta = torch.cat([locked_theta, theta[:missing]])
        locked_res = torch.cat([locked_res, res[:missing]])
    order = key(locked_theta).argsort(descending=True)
    locked_theta, locked = locked_theta[order], locked[:, order]
    residual = float(locked_res.max())  # over every pair returned, locked early or late
    converged = residual <= tol
    if not converged:
        fix = (f"its residual no longer falls: the rounding of {operator.dtype} limits it; "
               + ("solve in float64 or raise 'tol'" if operator.dtype != torch.float64
                  else "raise 'tol' (float64 rounding bounds it near 1e3 * eps)")
               if floor else
               "raise 'max_iter', raise 'tol', or use method='chebyshev' with a higher 'degree'")
        warnings.warn(
            f"Subspace iteration stopped after {iteration} iterations with relative residual "
            f"{residual:.2e} > tol={tol:.0e}; {fix}{precision_hint(operator)}", UserWarning,
            stacklevel=3)
    return EigenPairs(locked_theta, locked, residual, iteration, converged)


__getattr__ = moved(__name__, {'METHODS': f'{__name__}:SUBSPACE_METHODS'})
