r"""Extreme eigenpairs of a sparse symmetric operator by thick-restart block
Lanczos with full reorthogonalisation."""
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
    precision_hint,
    select,
)
from torch_geometric_regcn.linalg.graph_operator import to_csr

STALL = 5  # cycles without progress after which block_lanczos lowers the degree


def _orthogonalize(block: Tensor, basis: Tensor) -> Tensor:
    r"""Returns :obj:`block` minus its projection on the orthonormal columns of
    :obj:`basis` and the projection coefficients of the first pass: block
    classical Gram--Schmidt, run twice ("twice is enough", Kahan)."""
    coefficients = basis.T @ block
    block = block - basis @ coefficients
    block = block - basis @ (basis.T @ block)
    return block, coefficients


def _orthonormal_block(block: Tensor, basis: Tensor, scale: float,
                       generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
    r"""QR of :obj:`block` (already orthogonal to :obj:`basis`). Columns that
    are numerically dependent (the Krylov space became invariant) are replaced
    by random directions orthogonal to :obj:`basis` and the block, so that the
    returned :math:`\mathbf{Q}` always extends :obj:`basis` orthonormally and
    :math:`\text{block} \approx \mathbf{Q}\mathbf{R}` still holds."""
    q, r = torch.linalg.qr(block)
    threshold = 100 * torch.finfo(block.dtype).eps * max(scale, torch.finfo(block.dtype).tiny)
    deficient = r.diagonal().abs() <= threshold
    if bool(deficient.any()):
        good = q[:, ~deficient]
        fresh = torch.randn(block.size(0), int(deficient.sum()), dtype=block.dtype,
                            device=block.device, generator=generator)
        fresh, _ = _orthogonalize(fresh, torch.cat([basis, good], dim=1))
        q = torch.cat([good, torch.linalg.qr(fresh).Q], dim=1)
        r = q.T @ block
    return q, r


def _compact(operator: Tensor) -> Tensor:
    r"""The operator as CSR with 32-bit indices where they fit, whose sparse
    products are markedly faster than with 64-bit ones (COO becomes CSR)."""
    if operator.layout == torch.sparse_coo:
        operator = to_csr(operator)
    if (operator.layout == torch.sparse_csr and operator.crow_indices().dtype == torch.int64
            and operator._nnz() < 2**31 - 1):
        operator = torch.sparse_csr_tensor(operator.crow_indices().int(),
                                           operator.col_indices().int(), operator.values(),
                                           operator.shape, check_invariants=False)
    return operator


def _thick_restart(apply: Callable[[Tensor], Tensor], start: Tensor, size_max: int, keep: int,
                   max_cycles: int, done: Callable[[int, Tensor, Tensor], bool],
                   generator: Optional[torch.Generator]) -> tuple[int, Tensor, Tensor]:
    r"""Thick-restart block Lanczos for the largest eigenvalues of the
    symmetric linear map :obj:`apply`, from the block :obj:`start`. After each
    cycle it calls :obj:`done(cycle, theta, ritz)` with all Ritz values (in
    descending order) and the :obj:`keep` leading Ritz vectors, and returns
    :obj:`(cycles, theta, ritz)` once that returns :obj:`True` or after
    :obj:`max_cycles` cycles."""
    n, b = start.shape
    m = size_max
    basis = start.new_empty(n, m + b)
    projected = start.new_zeros(m, m)
    basis[:, :b] = torch.linalg.qr(start).Q
    size, scale = b, 0.0  # columns in the basis; running estimate of the spectral norm
    for cycle in range(1, max_cycles + 1):
        while True:  # expand by one block: one application of the map
            block, coefficients = _orthogonalize(apply(basis[:, size - b:size]),
                                                 basis[:, :size])
            projected[:size, size - b:size] = coefficients
            scale = max(scale, float(coefficients[size - b:].abs().max()))
            basis[:, size:size + b], _ = _orthonormal_block(block, basis[:, :size], scale,
                                                            generator)
            if size == m:
                break
            size += b
        theta, rotation = torch.linalg.eigh(torch.triu(projected) + torch.triu(projected, 1).T)
        theta, rotation = theta.flip(0), rotation.flip(1)
        ritz = basis[:, :m] @ rotation[:, :keep] if keep else basis[:, :0]
        if done(cycle, theta, ritz) or cycle == max_cycles:
            break
        # Thick restart: the kept Ritz vectors, then the next Lanczos block, whose
        # couplings to them are computed by the next expansion.
        basis[:, keep:keep + b] = basis[:, m:m + b]
        basis[:, :keep] = ritz
        projected.zero_()
        projected[:keep, :keep] = torch.diag(theta[:keep])
        size = keep + b
    return cycle, theta, ritz


@ieee_float32_matmul()
def block_lanczos(
    operator: Tensor,
    k: int,
    which: str = 'LA',
    tol: float = 1e-4,
    max_iter: int = 100,
    degree: int = 8,
    block_size: Optional[int] = None,
    basis_size: Optional[int] = None,
    generator: Optional[torch.Generator] = None,
    callback: Optional[Callable[[int, float], None]] = None,
) -> EigenPairs:
    r"""Computes :obj:`k` extreme eigenpairs of the symmetric matrix
    :obj:`operator` :math:`\mathbf{S}` by Chebyshev-filtered thick-restart
    block Lanczos (Wu and Simon, 2000; Fang and Saad, 2012).

    A first Lanczos cycle on :math:`\mathbf{S}` locates the spectrum: its Ritz
    values bound the unwanted part, and a Chebyshev polynomial :math:`p` of
    degree :obj:`degree` that is at most one there and grows fastest on the
    wanted eigenvalues is fixed. Block Lanczos then runs on
    :math:`p(\mathbf{S})`: a basis is grown :math:`b` columns at a time, each
    block mapped through :math:`p(\mathbf{S})` (:obj:`degree` sparse products)
    and orthogonalised against the whole basis by two passes of block
    Gram--Schmidt (dense matrix products only); the projected matrix comes from
    the Gram--Schmidt coefficients. When the basis holds :math:`m` columns, the
    leading Ritz vectors are kept with the next Lanczos block (thick restart).
    Filtering trades cheap sparse products for expensive orthogonalisation:
    each Lanczos step advances the Krylov polynomial by :obj:`degree`.

    After each cycle the :obj:`k` leading Ritz vectors get Rayleigh--Ritz on
    :math:`\mathbf{S}` itself; it stops once every pair has
    :math:`\|\mathbf{S}x_i - \theta_i x_i\| \leq \text{tol} \cdot
    \|\mathbf{S}\|_2` (the spectral norm estimated from the Ritz values) and
    warns with the achieved residual when :obj:`max_iter` cycles are reached
    first. In float32 a steep filter can push the wanted eigenvalues below
    rounding, relative to the largest one: when the first cycle shows this,
    or when the residual stops improving for 5 cycles while such rounding
    could explain it, the degree is lowered (at least halved) and the
    iteration starts again; the best pairs seen are returned. Cost per cycle:
    :math:`O(\mathrm{nnz} \cdot \text{degree} \cdot (m - k) + N m^2)` time;
    memory :math:`O(N m)`. When :math:`m + b \geq N` the problem is small and
    is solved densely.

    Args:
        operator (torch.Tensor): The symmetric :math:`N \times N` matrix, sparse
            (CSR or COO) or dense.
        k (int): The number of eigenpairs.
        which (str, optional): :obj:`"LA"` for the largest algebraic
            eigenvalues, :obj:`"LM"` for the largest in magnitude.
            (default: :obj:`"LA"`)
        tol (float, optional): The relative residual to reach.
            (default: :obj:`1e-4`)
        max_iter (int, optional): The maximum number of restart cycles.
            (default: :obj:`100`)
        degree (int, optional): The filter degree; :obj:`1` is plain block
            Lanczos on :math:`\mathbf{S}` (rounded up to even for
            :obj:`"LM"`, whose filter is even). (default: :obj:`8`)
        block_size (int, optional): The block size :math:`b`.
            (default: :obj:`min(k, 16)`)
        basis_size (int, optional): The basis size :math:`m` before a restart,
            rounded up to a multiple of :math:`b`. (default: :math:`2k + 8b`)
        generator (torch.Generator, optional): The random generator of the
            starting block, for reproducibility. (default: :obj:`None`)
        callback (callable, optional): Called as :obj:`callback(cycle,
            residual)` after every filtered cycle, e.g. for a progress bar.
            (default: :obj:`None`)
    """
    n = check_problem(operator, k, which, max_iter, degree)
    b = min(k, 16) if block_size is None else block_size
    if b < 1:
        raise ValueError(f"'block_size' must be a positive integer (got {b})")
    m = b * math.ceil((2 * k + 8 * b if basis_size is None else basis_size) / b)
    if m < k + 2 * b:
        raise ValueError(f"'basis_size' must be at least k + 2 * block_size = {k + 2 * b} "
                         f"(got {m})")
    dtype, device = operator.dtype, operator.device
    operator = _compact(operator)

    if m + b >= n:  # the Krylov basis would span (nearly) everything: solve densely
        dense = operator.to_dense() if operator.layout != torch.strided else operator
        theta, vectors = torch.linalg.eigh((dense + dense.T) / 2)
        theta, vectors = select(theta, vectors, k, which)
        return EigenPairs(theta, vectors, 0.0, 0, True)

    def start() -> Tensor:
        return torch.randn(n, b, dtype=dtype, device=device, generator=generator)

    # Locate the spectrum with one plain Lanczos cycle. Ritz values interlace
    # the eigenvalues, so theta[k] lies below the (k+1)-th largest eigenvalue
    # and theta[-1] above the smallest: widen the lower end by a margin.
    _, theta, _ = _thick_restart(lambda x: operator @ x, start(), m, 0, 1,
                                 lambda *_: True, generator)
    top, bottom = float(theta[0]), float(theta[-1])
    spread = max(top - bottom, torch.finfo(dtype).tiny)
    if which == 'LA':
        lower = bottom - 0.1 * spread
        upper = max(float(theta[k]), lower + 1e-3 * spread)
        peak = top
    else:
        upper = max(float(theta.abs().sort(descending=True).values[k]), 1e-3 * spread)
        lower, peak = -upper, max(abs(top), abs(bottom))
        degree += degree % 2  # an even filter treats both ends alike
    lowest = 2 if which == 'LM' else 1
    keep = m - b * max(1, (m - k) // (2 * b))  # kept Ritz vectors: half the spare room
    # The filter maps the wanted eigenvalue nearest the cut to a fraction of
    # the largest; below about sqrt(eps) rounding hides the differences
    # between wanted eigenvalues there (float32, one eigenvalue far above the
    # rest, a cut close to the wanted ones). Then the degree is lowered.
    eps = torch.finfo(dtype).eps
    floor = math.sqrt(eps)
    center, half = (upper + lower) / 2, (upper - lower) / 2

    def reach(value: float) -> float:  # T_d(ℓ(value)) grows like exp(d * reach)
        return math.acosh(max(1.0, abs(value - center) / half))

    def shrink(wanted: float) -> float:
        # The exponent by which the filter shrinks the wanted eigenvalue nearest
        # the cut relative to the top one, per unit of degree.
        return max(reach(peak) - reach(wanted), 1e-12)

    result, best, cycles = {}, {'residual': math.inf}, 0

    def done(cycle: int, theta: Tensor, ritz: Tensor) -> bool:
        # Rayleigh-Ritz on S. The 'LA' filter is increasing above the cut, so
        # the k leading Ritz vectors hold the wanted pairs; the even 'LM' filter
        # maps λ and -λ alike, so there all kept vectors take part.
        ritz = ritz[:, :k] if which == 'LA' else ritz
        image = operator @ ritz
        values, rotation = torch.linalg.eigh(ritz.T @ image)
        values, rotation = select(values, rotation, k, which)
        vectors, image = ritz @ rotation, image @ rotation
        norm = max(abs(top), abs(bottom), float(values.abs().max()), torch.finfo(dtype).tiny)
        residual = float((image - vectors * values).norm(dim=0).max()) / norm
        history.append(residual)
        faint = (cycle == 1 and degree > lowest
                 and float(theta[k - 1]) < floor * float(theta[0]))
        # A stall: the best residual of the last STALL cycles is not half the
        # best before them, while rounding under this filter (eps, magnified
        # by how far the filter shrinks the wanted eigenvalues) could be what
        # limits it. Then it is treated like a faint filter. Slow progress far
        # above that level is left alone.
        limit = eps * math.exp(min(degree * shrink(float(values[k - 1])), 700.0))
        stalled = (degree > lowest and len(history) > STALL and limit > 0.1 * tol
                   and min(history[-STALL:]) > 0.5 * min(history[:-STALL]))
        result.update(values=values, vectors=vectors, residual=residual,
                      faint=faint or stalled)
        if residual < best['residual']:  # a restart must not lose the best pairs
            best.update(values=values, vectors=vectors, residual=residual)
        if callback is not None:
            callback(cycles + cycle, residual)
        return residual <= tol or result['faint']

    while True:
        history = []  # residuals of this filter's cycles
        apply = chebyshev_filter(operator, lower, upper, degree, peak)
        cycles += _thick_restart(apply, start(), m, keep, max_iter - cycles, done,
                                 generator)[0]
        if not result['faint'] or result['residual'] <= tol or cycles >= max_iter:
            break
        # Largest degree whose filter keeps the k-th wanted eigenvalue (now
        # estimated) above the floor, relative to the top; at least halve it.
        fit = math.log(2 / floor) / shrink(float(result['values'][k - 1]))
        degree = max(lowest, min(degree // 2, int(fit)))
        degree += degree % 2 if which == 'LM' else 0

    result = best
    residual = result['residual']
    converged = residual <= tol
    if not converged:
        warnings.warn(
            f"Block Lanczos stopped after {cycles} restart cycles with relative residual "
            f"{residual:.2e} > tol={tol:.0e}; raise 'max_iter', 'basis_size' or 'degree', "
            f"or raise 'tol'{precision_hint(operator)}", UserWarning, stacklevel=3)
    return EigenPairs(result['values'], result['vectors'], residual, cycles, converged)
