r"""Extreme eigenpairs of a sparse symmetric operator by thick-restart block
Lanczos with full reorthogonalisation."""
import math
import warnings
from typing import Callable, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import (
    Group,
    agree_arguments,
    all_gather,
    all_reduce,
    any_rank,
    broadcast,
    consensus,
    rank_of,
)
from torch_geometric_regcn.linalg.blocks import gram, rayleigh_gram, tall_qr
from torch_geometric_regcn.linalg.chebyshev import chebyshev_filter
from torch_geometric_regcn.linalg.eigenpairs import (
    EigenPairs,
    check_problem,
    ieee_float32_matmul,
    overflow_error,
    precision_hint,
    select,
    small_eigh,
)
from torch_geometric_regcn.linalg.random_rows import RandomRows
from torch_geometric_regcn.linalg.sharded_matrix import (
    ShardedMatrix,
    gather_dense,
    reusing_buffer,
)
from torch_geometric_regcn.utils.sparse import compact_csr
from torch_geometric_regcn.utils.validation import check_int

STALL = 5  # cycles without progress after which block_lanczos lowers the degree
#: How many times the dtype's eps a residual stalled at the lowest filter
#: degree may be and still count as the dtype's floor (block_lanczos stops).
FLOOR_FACTOR = 100.0
#: Rows per chunk of the products with the basis that must not allocate an
#: N x m result: the Ritz rotation in place and the residuals.
ROW_CHUNK = 4096
#: :obj:`step_callback(cycle, step, steps)` of :func:`block_lanczos`
StepCallback = Callable[[int, int, int], None]
#: :obj:`residuals_callback(cycle, residuals)` of :func:`block_lanczos`
ResidualsCallback = Callable[[int, Tensor], None]


def _orthogonalize(block: Tensor, basis: Tensor, group: Group) -> Tuple[Tensor, Tensor]:
    r"""Subtracts from :obj:`block`, in place, its projection on the
    orthonormal columns of :obj:`basis`; returns it and the projection
    coefficients of the first pass: block classical Gram--Schmidt, run twice
    ("twice is enough", Kahan). Row-sharded blocks (a :obj:`group`)
    all-reduce the coefficients."""
    coefficients = gram(basis, block, group)
    block.addmm_(basis, coefficients, alpha=-1)
    block.addmm_(basis, gram(basis, block, group), alpha=-1)
    return block, coefficients


def _orthonormal_block(block: Tensor, basis: Tensor, scale: float, random: RandomRows,
                       group: Group, deflate: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    r"""QR of :obj:`block` (already orthogonal to :obj:`basis`). Columns that
    are numerically dependent (the Krylov space became invariant) are replaced
    by random directions (drawn from :obj:`random`) orthogonal to
    :obj:`basis` and the block, so that the
    returned :math:`\mathbf{Q}` always extends :obj:`basis` orthonormally and
    :math:`\text{block} \approx \mathbf{Q}\mathbf{R}` still holds. The
    random directions are also made orthogonal to :obj:`deflate`, if given."""
    q, r = tall_qr(block, group)
    eps, norm = torch.finfo(block.dtype).eps, max(scale, torch.finfo(block.dtype).tiny)
    small = r.detach().cpu()  # b x b, one synchronisation
    # R comes from local LAPACK calls on all-reduced numbers, whose bits may differ
    # between ranks: a column dependent, or the block nearly so, on any rank is on all
    # (any_rank), so that every rank refills the same columns through the same
    # collectives. (Non-finite entries are left to the caller's overflow check.)
    *flags, nearly = any_rank([
        *(small.diagonal().abs() <= 100 * eps * norm).tolist(),
        float(torch.linalg.svdvals(small.nan_to_num(0.0, 0.0, 0.0))[-1]) < eps ** 0.5 * norm],
        group)
    deficient = torch.tensor(flags, dtype=torch.bool)
    if nearly and not bool(deficient.all()):
        # Where orthogonalisation left the block nearly dependent (the space
        # nearly invariant: its smallest singular value below sqrt(eps) times
        # the operator's norm), its rounding error against the basis, about
        # eps times that norm, came out of the QR raised towards one (on graphs
        # with highly repeated eigenvalues): orthogonalise Q once more.
        q, _ = _orthogonalize(q, basis, group)
        q, again = tall_qr(q, group)
        # a column left mostly inside the basis is replaced below
        deficient = deficient | torch.tensor(any_rank(
            (again.diagonal().abs() <= 0.5).tolist(), group), dtype=torch.bool)
        r = gram(q, block, group)
    if bool(deficient.any()):
        good = q[:, (~deficient).to(q.device)]
        fresh = random.draw(int(deficient.sum()))
        if deflate is not None:
            fresh, _ = _orthogonalize(fresh, deflate, group)
        fresh, _ = _orthogonalize(fresh, torch.cat([basis, good], dim=1), group)
        q = torch.cat([good, tall_qr(fresh, group)[0]], dim=1)
        r = gram(q, block, group)
    return q, r


def _rotate_in_place(basis: Tensor, columns: int, rotation: Tensor) -> Tensor:
    r"""Overwrites the leading columns of :obj:`basis` with
    :obj:`basis[:, :columns] @ rotation` and returns them (a view), a chunk
    of :obj:`ROW_CHUNK` rows at a time: the Ritz vectors take no memory
    beyond the basis."""
    out = rotation.size(1)
    for start in range(0, basis.size(0), ROW_CHUNK):
        rows = basis[start:start + ROW_CHUNK]
        rows[:, :out] = rows[:, :columns] @ rotation
    return basis[:, :out]


class Workspace(NamedTuple):
    r"""The memory of :func:`block_lanczos`, taken in one allocation: large
    enough to be mapped from the operating system on its own, it returns whole
    when freed, and the iteration's blocks reuse it instead of allocating
    blocks of :math:`N` rows from the heap (whose fragments would stay
    resident)."""
    basis: Tensor  #: :obj:`[n, m + b]`, the Krylov basis and the next block
    blocks: Tuple[Tensor, Tensor, Tensor]  #: three contiguous :obj:`[n, b]` blocks

    @classmethod
    def allocate(cls, rows: int, size_max: int, b: int, dtype: torch.dtype,
                 device: torch.device) -> 'Workspace':
        r"""The workspace for :obj:`rows` rows, a basis of :obj:`size_max`
        columns and blocks of :obj:`b` columns."""
        width = size_max + b
        flat = torch.empty(rows * (width + 3 * b), dtype=dtype, device=device)
        blocks = flat[rows * width:].view(3, rows, b)
        return cls(flat[:rows * width].view(rows, width), (blocks[0], blocks[1], blocks[2]))


def _thick_restart(apply: Callable[[Tensor], Tensor], start: Tensor, basis: Tensor, keep: int,
                   max_cycles: int, done: Callable[[int, Tensor, Tensor, Tensor], bool],
                   random: RandomRows,
                   step: Optional[StepCallback] = None,
                   group: Group = None,
                   deflate: Optional[Tensor] = None) -> tuple[int, Tensor, Tensor]:
    r"""Thick-restart block Lanczos for the largest eigenvalues of the
    symmetric linear map :obj:`apply`, from the block :obj:`start`. After each
    cycle it calls :obj:`done(cycle, theta, ritz, spare)` with all Ritz values
    (in descending order), the :obj:`keep` leading Ritz vectors and the basis
    columns free until the restart (a workspace), and returns
    :obj:`(cycles, theta, ritz)` once that returns :obj:`True` or after
    :obj:`max_cycles` cycles. The basis of :math:`m` columns and the next
    block live in :obj:`basis` (:obj:`[n, m + b]`, overwritten).
    :obj:`step(cycle, step, steps)`, if given, is called after each of the
    :obj:`steps` expansions of a cycle. With a :obj:`group`, :obj:`start` and
    the basis are this rank's rows. With :obj:`deflate` (orthonormal columns),
    the start, every mapped block and every random replacement are
    orthogonalised against it: the iteration runs in its orthogonal
    complement."""
    if deflate is not None:
        inner = apply
        start = _orthogonalize(start, deflate, group)[0]

        def apply(block: Tensor) -> Tensor:
            return _orthogonalize(inner(block), deflate, group)[0]
    b = start.size(1)
    m = basis.size(1) - b
    projected = start.new_zeros(m, m)
    basis[:, :b] = tall_qr(start, group)[0]
    size, scale = b, 0.0  # columns in the basis; running estimate of the spectral norm
    for cycle in range(1, max_cycles + 1):
        steps = (m - size) // b + 1
        while True:  # expand by one block: one application of the map
            block, coefficients = _orthogonalize(apply(basis[:, size - b:size]),
                                                 basis[:, :size], group)
            projected[:size, size - b:size] = coefficients
            scale = max(scale, float(coefficients[size - b:].abs().max()))
            basis[:, size:size + b], _ = _orthonormal_block(block, basis[:, :size], scale,
                                                            random, group, deflate)
            if step is not None:
                step(cycle, steps - (m - size) // b, steps)
            if size == m:
                break
            size += b
        theta, rotation = small_eigh(torch.triu(projected) + torch.triu(projected, 1).T, group)
        theta, rotation = theta.flip(0), rotation.flip(1)
        ritz = _rotate_in_place(basis, m, rotation[:, :keep])
        if done(cycle, theta, ritz, basis[:, keep:m]) or cycle == max_cycles:
            break
        # Thick restart: the kept Ritz vectors (now the leading columns), then the
        # next Lanczos block, whose couplings to them come from the next expansion.
        basis[:, keep:keep + b] = basis[:, m:m + b]
        projected.zero_()
        projected[:keep, :keep] = torch.diag(theta[:keep])
        size = keep + b
    return cycle, theta, ritz


class FilterWindow(NamedTuple):
    r"""Where the Chebyshev filter of :func:`block_lanczos` damps and where it
    grows, fixed from the Ritz values of one plain Lanczos cycle on
    :math:`\mathbf{S}`: the filter is at most one on
    :math:`[\text{lower}, \text{upper}]` and one at :obj:`peak`."""
    lower: float  #: the lower end of the damped interval
    upper: float  #: the cut, the upper end of the damped interval
    peak: float  #: the edge of the spectrum where the filter is normalised
    top: float  #: the largest Ritz value of the plain cycle
    bottom: float  #: the smallest Ritz value of the plain cycle

    def reach(self, value: float) -> float:
        r"""The rate :math:`r` at which the filter grows at :obj:`value`:
        :math:`T_d(\ell(\text{value}))` grows like :math:`\exp(d \cdot r)`."""
        center, half = (self.upper + self.lower) / 2, (self.upper - self.lower) / 2
        return math.acosh(max(1.0, abs(value - center) / half))

    def shrink(self, wanted: float) -> float:
        r"""The exponent, per unit of degree, by which the filter shrinks the
        wanted eigenvalue :obj:`wanted` nearest the cut relative to the top one."""
        return max(self.reach(self.peak) - self.reach(wanted), 1e-12)


class RitzPairs(NamedTuple):
    r"""Rayleigh--Ritz pairs on :math:`\mathbf{S}`."""
    values: Tensor  #: the :obj:`k` Ritz values, ordered by the selection rule
    vectors: Tensor  #: the :obj:`k` Ritz vectors
    residual: float  #: the largest relative residual of a pair
    residuals: Tensor  #: the relative residual of each pair, :obj:`[k]`


class RitzRotation(NamedTuple):
    r"""Rayleigh--Ritz on :math:`\mathbf{S}` in the span of a block
    :math:`\mathbf{V}`, before the Ritz vectors :math:`\mathbf{V}\mathbf{R}`
    are formed."""
    values: Tensor  #: the :obj:`k` Ritz values, ordered by the selection rule
    rotation: Tensor  #: :math:`\mathbf{R}`, the Ritz vectors' coordinates in :math:`\mathbf{V}`
    residual: float  #: the largest relative residual of a pair
    residuals: Tensor  #: the relative residual of each pair, :obj:`[k]`


class CycleResult(NamedTuple):
    r"""The outcome of one filtered cycle."""
    pairs: RitzRotation  #: the Rayleigh--Ritz pairs on :math:`\mathbf{S}`
    faint: bool  #: whether the filter is too steep for the precision (faint or stalled)
    #: whether the lowest degree stalled where rounding could limit it: the
    #: dtype's floor, where more cycles would not help
    floor: bool = False


class FilterRun(NamedTuple):
    r"""The outcome of the filtered cycles of one filter degree."""
    cycles: int  #: the cycles run
    last: CycleResult  #: the last cycle
    best: RitzPairs  #: the lowest-residual pairs so far, earlier degrees included


#: The relative gap below the k-th wanted Ritz magnitude at which the 'LM'
#: filter's cut is placed (see :func:`_locate_spectrum`).
_LM_GAP = 1e-3


def _lowest_degree(which: str) -> int:
    r"""The lowest filter degree: :obj:`2` for the even :obj:`"LM"` filter."""
    return 2 if which == 'LM' else 1


def _rounding_floor(dtype: torch.dtype) -> float:
    r"""The fraction of the largest filtered eigenvalue below which rounding
    hides the differences between the wanted ones: :math:`\sqrt{\epsilon}`."""
    return math.sqrt(torch.finfo(dtype).eps)


def _locate_spectrum(operator: Tensor, k: int, which: str, workspace: Workspace, start: Tensor,
                     random: RandomRows,
                     step: Optional[StepCallback] = None,
                     deflate: Optional[Tensor] = None) -> FilterWindow:
    r"""Locates the spectrum of :obj:`operator` with one plain Lanczos cycle
    from the block :obj:`start` and returns the filter's window. Ritz values
    interlace the eigenvalues, so :obj:`theta[k]` lies below the
    :math:`(k+1)`-th largest eigenvalue and :obj:`theta[-1]` above the
    smallest: the lower end is widened by a margin. :obj:`step` is called as
    in :func:`_thick_restart`, with cycle :obj:`0`."""
    plain = chebyshev_filter(operator, -1.0, 1.0, 1, 1.0, workspace.blocks)  # T_1 on [-1, 1]: S
    _, theta, _ = _thick_restart(plain, start, workspace.basis, 0, 1,
                                 lambda *_: True, random,
                                 None if step is None else lambda _, i, n: step(0, i, n),
                                 _group_of(operator), deflate)
    top, bottom = float(theta[0]), float(theta[-1])
    # A spectrum of one point (the zero operator: a graph without edges) has no
    # spread; a window of the point's magnitude (1 for zero) keeps the filter's
    # affine map finite, where 'tiny' made its scale 1 / half overflow.
    spread = top - bottom
    if not spread > torch.finfo(start.dtype).eps * max(abs(top), abs(bottom)):
        spread = max(abs(top), abs(bottom)) or 1.0
    if which == 'LA':
        lower = bottom - 0.1 * spread
        upper = max(float(theta[k]), lower + 1e-3 * spread)
        return FilterWindow(lower, upper, top, top, bottom)
    # The cut: the largest Ritz magnitude at least _LM_GAP below the k-th
    # wanted one. On a spectrum symmetric about zero (a bipartite graph)
    # -lambda ties with lambda, and one plain cycle approximates the pair
    # unequally: a cut at the tie, or at the pair's less accurate Ritz value,
    # would amplify next to nothing. The even filter amplifies both; the
    # Rayleigh-Ritz on S picks the wanted ones.
    magnitudes = theta.abs().sort(descending=True).values
    wanted = float(magnitudes[k - 1])
    below = magnitudes[k:][magnitudes[k:] < wanted * (1 - _LM_GAP)]
    upper = max(float(below[0]) if below.numel() else 0.0, 1e-3 * spread)
    return FilterWindow(-upper, upper, max(abs(top), abs(bottom)), top, bottom)


class _FilteredCycles:
    r"""Thick-restart block Lanczos on the Chebyshev filter of one degree,
    with Rayleigh--Ritz on :math:`\mathbf{S}` after each cycle.

    An instance is the test :func:`_thick_restart` calls after each cycle: it
    records a :class:`CycleResult` (:obj:`last`), the residuals of this
    degree's cycles (:obj:`history`) and the lowest-residual pairs
    (:obj:`best`, handed over from earlier degrees, as a restart must not lose
    the best pairs), and stops the run once the residual reaches :obj:`tol`
    or the filter is found faint or stalled."""

    def __init__(self, operator: Tensor, k: int, which: str, tol: float, window: FilterWindow,
                 degree: int, best: Optional[RitzPairs] = None, cycles_before: int = 0,
                 callback: Optional[Callable[[int, float], None]] = None,
                 step_callback: Optional[StepCallback] = None,
                 residuals_callback: Optional[ResidualsCallback] = None,
                 deflate: Optional[Tensor] = None):
        self.operator, self.k, self.which, self.tol = operator, k, which, tol
        self.deflate = deflate
        self.window, self.degree = window, degree
        self.cycles_before, self.callback = cycles_before, callback
        self.step_callback, self.residuals_callback = step_callback, residuals_callback
        self.history: list[float] = []
        self.last: Optional[CycleResult] = None
        self.best = best
        self.product: Optional[Callable[[Tensor], Tensor]] = None  # S x, in the workspace
        self.blocks: Tuple[Tensor, ...] = ()

    def run(self, start: Tensor, workspace: Workspace, keep: int, max_cycles: int,
            random: RandomRows) -> FilterRun:
        r"""Runs at most :obj:`max_cycles` cycles from the block :obj:`start`
        in :obj:`workspace`."""
        window, blocks = self.window, workspace.blocks
        apply = chebyshev_filter(self.operator, window.lower, window.upper, self.degree,
                                 window.peak, blocks)
        self.product, self.blocks = chebyshev_filter(self.operator, -1.0, 1.0, 1, 1.0,
                                                     blocks), blocks
        deflate, group = self.deflate, _group_of(self.operator)
        if deflate is not None:  # P S P, P the projector on the complement of deflate
            product = self.product
            self.product = lambda block: _orthogonalize(product(block), deflate, group)[0]
        step = self.step_callback
        cycles = _thick_restart(
            apply, start, workspace.basis, keep, max_cycles, self, random,
            None if step is None else lambda c, i, n: step(self.cycles_before + c, i, n),
            group, deflate)[0]
        return FilterRun(cycles, self.last, self.best)

    def candidates(self, ritz: Tensor) -> Tensor:
        r"""An orthonormal block whose span holds the wanted pairs. The filter
        grows above the cut, so the :obj:`k` leading Ritz vectors
        :math:`\mathbf{V}` hold them for :obj:`"LA"`. The even :obj:`"LM"`
        filter maps :math:`\lambda` and :math:`-\lambda` alike: its Ritz
        vectors of a pair :math:`\pm\lambda` may be any mixtures of the two
        eigenspaces, whose Rayleigh quotients on :math:`\mathbf{S}` fall
        anywhere in :math:`[-\lambda, \lambda]` (with more copies of the pair
        than the block holds, no vector of the span is an eigenvector, and
        exact pairs of lower magnitude were selected in their place, converged).
        Since :math:`\mathbf{S}^2 \mathbf{V} \approx \mathbf{V}
        \boldsymbol{\Theta}^2` there, :math:`[\mathbf{V}, \mathbf{S}
        \mathbf{V}]` spans an invariant subspace of :math:`\mathbf{S}` that
        holds both signs: the block is :math:`\mathbf{V}` extended by the left
        singular vectors of the part :math:`\mathbf{W}` of
        :math:`\mathbf{S}\mathbf{V}` orthogonal to it (and to :obj:`deflate`)
        whose singular values exceed :math:`\max(10^{-2}\,\text{tol},
        100\epsilon)\,\lVert\mathbf{S}\rVert`, at most :math:`N - d - k` of
        them (:math:`2k` columns at most): a shorter direction moves no
        residual across :obj:`tol`, and below the rounding of :math:`\mathbf{W}`
        it is made of rounding (its columns would not be orthonormal, nor the
        same on row shards as in one process). The singular values come from
        a QR of :math:`\mathbf{W} / \lVert\mathbf{S}\rVert` (scaled: no
        square of :math:`\lVert\mathbf{S}\rVert` overflows) and an SVD of its
        :math:`k \times k` factor on rank 0, broadcast. Cost: :math:`k / b`
        block products, a QR of :math:`N \times k` and up to four transient
        :math:`N \times k` blocks."""
        lead = ritz[:, :self.k]
        if self.which == 'LA':
            return lead
        group, window = _group_of(self.operator), self.window
        chunk = self.blocks[0].size(1)
        image = torch.empty_like(lead)
        for start in range(0, lead.size(1), chunk):
            image[:, start:start + chunk] = self.product(lead[:, start:start + chunk])
        norm = max(abs(window.top), abs(window.bottom), torch.finfo(lead.dtype).tiny)
        image, _ = _orthogonalize(image.div_(norm), lead, group)  # W / ||S||
        if self.deflate is not None:
            image, _ = _orthogonalize(image, self.deflate, group)
        q, r = tall_qr(image, group)
        del image
        values, vectors = _left_singular(r, group)
        floor = max(1e-2 * self.tol, 100 * torch.finfo(lead.dtype).eps)
        room = self.operator.size(0) - self.k - (0 if self.deflate is None
                                                 else self.deflate.size(1))
        long = (values > floor).nonzero().flatten()[:max(room, 0)]
        if long.numel() == 0:  # the span of V is invariant to well below tol
            return lead
        extension = q @ vectors[:, long.to(vectors.device)]
        del q
        return torch.cat([lead, extension], dim=1)

    def rayleigh_ritz(self, ritz: Tensor, spare: Tensor) -> RitzRotation:
        r"""The wanted pairs of :math:`\mathbf{S}` in the span of the block
        :obj:`ritz` (:meth:`candidates`) and their relative residuals, a chunk
        of :obj:`ROW_CHUNK` rows at a time. :math:`\mathbf{S}\mathbf{V}` goes to
        the workspace :obj:`spare` where it fits; else (an :obj:`"LM"` block
        wider than :obj:`spare`) only its Gram matrix is
        formed, a block of columns at a time, and :math:`\mathbf{S}` times the
        :obj:`k` Ritz vectors goes to :obj:`spare` after the eigh (:math:`k / b`
        more products). Nothing of :math:`N` rows is allocated beyond a block
        (the vectors are formed only for the best pairs, in :meth:`__call__`)."""
        k, which, window, group = self.k, self.which, self.window, _group_of(self.operator)
        columns, chunk = ritz.size(1), self.blocks[0].size(1)  # the product's block width
        stored = spare.size(1) >= columns
        image = spare[:, :columns] if stored else None
        projected = ritz.new_empty(columns, columns)
        for start in range(0, columns, chunk):
            block = self.product(ritz[:, start:start + chunk])
            if stored:
                image[:, start:start + chunk] = block
            else:  # V^T S V one block of columns at a time
                projected[:, start:start + chunk] = rayleigh_gram(ritz, block, group)
        values, rotation = small_eigh(rayleigh_gram(ritz, image, group) if stored else projected,
                                      group)
        values, rotation = select(values, rotation, k, which)
        if not stored:  # S times the Ritz vectors V R, into the free columns
            image = spare[:, :k] if spare.size(1) >= k else ritz.new_empty(ritz.size(0), k)
            for start in range(0, k, chunk):
                columns = slice(start, start + chunk)
                image[:, columns] = self.product(ritz @ rotation[:, columns])
        norm = max(abs(window.top), abs(window.bottom), float(values.abs().max()),
                   torch.finfo(values.dtype).tiny)
        if not math.isfinite(norm):  # residuals relative to it would all read 0
            raise overflow_error(values.dtype, 'a spectrum beyond its range')
        squares = values.new_zeros(k)
        for start in range(0, ritz.size(0), ROW_CHUNK):
            rows = slice(start, start + ROW_CHUNK)
            mapped = image[rows] @ rotation if stored else image[rows]
            residual = mapped - (ritz[rows] @ rotation) * values
            # Relative before squaring: squares of finite entries beyond the
            # square root of the dtype's largest would overflow to inf.
            squares += (residual / norm).square().sum(dim=0)
        norms = all_reduce(squares, group).sqrt()
        return RitzRotation(values, rotation, float(norms.max()), norms)

    def is_faint(self, cycle: int, theta: Tensor, values: Tensor) -> bool:
        r"""Whether the filter is too steep for the precision. It is faint when
        the first cycle finds the wanted eigenvalue nearest the cut filtered
        below :func:`_rounding_floor` of the largest (float32, one eigenvalue
        far above the rest, a cut close to the wanted ones). It stalls when the
        best residual of the last :obj:`STALL` cycles is not half the best
        before them, while rounding under this filter (:math:`\epsilon`,
        magnified by how far the filter shrinks the wanted eigenvalues) could
        be what limits it; slow progress far above that level is left alone."""
        k, degree, lowest = self.k, self.degree, _lowest_degree(self.which)
        faint = (cycle == 1 and degree > lowest
                 and float(theta[k - 1]) < _rounding_floor(values.dtype) * float(theta[0]))
        return faint or (degree > lowest and self.stalled(values))

    def _limit(self, values: Tensor) -> float:
        # The rounding level under this filter: eps, magnified by how far the
        # filter shrinks the wanted eigenvalues.
        eps = torch.finfo(values.dtype).eps
        return eps * math.exp(min(self.degree * self.window.shrink(float(values[self.k - 1])),
                                  700.0))

    def stalled(self, values: Tensor) -> bool:
        r"""Whether the best residual of the last :obj:`STALL` cycles is not
        half the best before them, while rounding under this filter could be
        what limits it (see :meth:`is_faint`)."""
        history = self.history
        return (len(history) > STALL and self._limit(values) > 0.1 * self.tol
                and min(history[-STALL:]) > 0.5 * min(history[:-STALL]))

    def at_floor(self, values: Tensor) -> bool:
        r"""Whether the residual stalled (:meth:`stalled`) within
        :obj:`FLOOR_FACTOR` times the dtype's :math:`\epsilon`: slow progress
        above it goes on to :obj:`max_iter`."""
        eps = torch.finfo(values.dtype).eps
        return self.stalled(values) and min(self.history) < FLOOR_FACTOR * eps

    def __call__(self, cycle: int, theta: Tensor, ritz: Tensor, spare: Tensor) -> bool:
        r"""Takes cycle :obj:`cycle`'s Ritz values :obj:`theta` of the filter,
        its leading Ritz vectors :obj:`ritz` and a workspace :obj:`spare` of
        as many rows; returns whether to stop."""
        ritz = self.candidates(ritz)
        pairs = self.rayleigh_ritz(ritz, spare)
        self.history.append(pairs.residual)
        # The residual is all-reduced, the same on every rank; the Ritz values
        # behind 'faint' come from a local eigh, so rank 0's verdict is taken.
        faint = self.is_faint(cycle, theta, pairs.values)
        floor = self.degree <= _lowest_degree(self.which) and self.at_floor(pairs.values)
        faint, floor = consensus([faint, floor], _group_of(self.operator))
        self.last = CycleResult(pairs, bool(faint), bool(floor))
        if pairs.residual < (math.inf if self.best is None else self.best.residual):
            self.best = None  # the previous vectors go before the new ones are formed
            self.best = RitzPairs(pairs.values, ritz @ pairs.rotation, pairs.residual,
                                  pairs.residuals)
        if self.residuals_callback is not None:
            self.residuals_callback(self.cycles_before + cycle, pairs.residuals)
        if self.callback is not None:
            self.callback(self.cycles_before + cycle, pairs.residual)
        return pairs.residual <= self.tol or self.last.faint or self.last.floor


def _lowered_degree(degree: int, which: str, window: FilterWindow, wanted: float,
                    dtype: torch.dtype) -> int:
    r"""The degree to restart with after a faint or stalled filter: the
    largest whose filter keeps the wanted eigenvalue nearest the cut (now
    estimated as :obj:`wanted`) above :func:`_rounding_floor` relative to the
    top, at least halved, and even for :obj:`"LM"`."""
    fit = math.log(2 / _rounding_floor(dtype)) / window.shrink(wanted)
    degree = max(_lowest_degree(which), min(degree // 2, int(fit)))
    return degree + (degree % 2 if which == 'LM' else 0)


def _check_deflate(deflate: Tensor, operator: Tensor, n: int, k: int) -> None:
    r"""Validates :obj:`deflate` of :func:`block_lanczos` (orthonormality and
    invariance are checked after the arguments are agreed, by
    :func:`_check_invariant`)."""
    if not isinstance(deflate, Tensor):
        raise TypeError(f"'deflate' must be a tensor or None (got {type(deflate).__name__})")
    rows = operator.partition.num_local if isinstance(operator, ShardedMatrix) else n
    if deflate.dim() != 2 or deflate.size(0) != rows or deflate.size(1) < 1:
        raise ValueError(f"'deflate' must be a matrix [{rows}, d], d >= 1, of the operator's "
                         f"rows{' on this rank' if rows != n else ''} "
                         f"(got {list(deflate.shape)})")
    if deflate.layout != torch.strided:
        raise ValueError(f"'deflate' must be a dense tensor (got {deflate.layout})")
    if deflate.dtype != operator.dtype or deflate.device != operator.device:
        raise ValueError(f"'deflate' must have the operator's dtype and device "
                         f"({operator.dtype}, {operator.device}; got {deflate.dtype}, "
                         f"{deflate.device}); convert it with '.to(operator.dtype)'")
    if k > n - deflate.size(1):
        raise ValueError(f"'k' must be at most N - d = {n - deflate.size(1)} with 'deflate' "
                         f"of {deflate.size(1)} columns (got {k})")
    if not bool(deflate.isfinite().all()):
        raise ValueError("'deflate' contains NaN or infinite values; pass finite "
                         "orthonormal columns")


def _check_invariant(operator: Tensor, deflate: Tensor, group: Group) -> None:
    r"""Raises a :class:`ValueError` unless :obj:`deflate` has orthonormal
    columns :math:`\mathbf{U}` whose span :math:`\mathbf{S}` maps into itself,
    both to :func:`_rounding_floor`: :math:`\max|\mathbf{U}^\top\mathbf{U} -
    \mathbf{I}|` and, per column, :math:`\|\mathbf{S}\mathbf{u} -
    \mathbf{U}\mathbf{U}^\top\mathbf{S}\mathbf{u}\| / \|\mathbf{S}\mathbf{u}\|`.
    One product with :math:`d` columns; the Gram matrices and norms are
    all-reduced, so every rank of a :obj:`group` decides alike."""
    dtype, floor = deflate.dtype, _rounding_floor(deflate.dtype)
    eye = torch.eye(deflate.size(1), dtype=dtype, device=deflate.device)
    deviation = float((gram(deflate, deflate, group) - eye).abs().max())
    if not deviation <= floor:
        raise ValueError(f"'deflate' must have orthonormal columns (max |U^T U - I| = "
                         f"{deviation:.1e} > {floor:.1e}); orthonormalise it first, e.g. "
                         f"with 'torch.linalg.qr'")
    image = chebyshev_filter(operator, -1.0, 1.0, 1, 1.0)(deflate)  # S U
    norms = all_reduce(image.square().sum(dim=0), group).sqrt()
    outside = _orthogonalize(image, deflate, group)[0]
    leak = all_reduce(outside.square().sum(dim=0), group).sqrt()
    worst = float((leak / norms.clamp(min=torch.finfo(dtype).tiny)).max())
    if not worst <= floor:
        raise ValueError(f"'deflate' must span an invariant subspace of 'operator' (e.g. "
                         f"known eigenvectors): the filter is applied to S, not to P S P, so "
                         f"only then is the complement kept (max ||S u - U U^T S u|| / "
                         f"||S u|| = {worst:.1e} > {floor:.1e})")


def _left_singular(r: Tensor, group: Group) -> Tuple[Tensor, Tensor]:
    r"""The singular values (descending, on the CPU) and left singular
    vectors of the small square :obj:`r`, the same on every rank: rank 0's,
    broadcast (LAPACK's bits, and its basis of a repeated singular value,
    depend on the thread count)."""
    b = r.size(0)
    packed = r.new_full((b + 1, b), math.nan)
    if rank_of(group) == 0:
        try:  # a failure here must not leave the other ranks in the broadcast
            vectors, values, _ = torch.linalg.svd(r)
        except RuntimeError:  # LAPACK's non-convergence
            if group is None:
                raise
        else:
            packed[0], packed[1:] = values, vectors
    if group is not None:
        packed = broadcast(packed, group)
    if not bool(torch.isfinite(packed).all()):
        raise overflow_error(r.dtype, 'NaN or infinite values in the extension of the '
                                      "'LM' block")
    return packed[0].cpu(), packed[1:]


def _warn_missing_copies(values: Tensor, which: str, b: int, tol: float,
                         window: FilterWindow) -> None:
    r"""Warns where :math:`\max(b, 2)` or more of the returned eigenvalues
    are equal (to :math:`\max(\text{tol}^2, 100\epsilon)` times the
    spectrum's extent: copies converge far closer than the residual, within
    a few units of rounding, and a cluster of distinct eigenvalues that
    tight is no spectrum's) and a lower one (by :obj:`which`) is returned
    too: a block method started from :math:`b` vectors finds about
    :math:`b` copies of an eigenvalue, so more may exist and lower pairs
    may stand in their place (a disconnected operator gives one copy of its
    top eigenvalue per component). Copies that fill the returned pairs to
    the end are a valid choice and pass; :math:`\lambda` and
    :math:`-\lambda` are not copies. The values are the same on every
    rank."""
    key = values if which == 'LA' else values.abs()
    extent = max(abs(window.top), abs(window.bottom), torch.finfo(values.dtype).tiny)
    tolerance = max(tol * tol, 100 * torch.finfo(values.dtype).eps) * extent
    lowest = float(key.min())
    ordered = sorted(values.tolist())  # copies are equal values ('LM': +l and -l are not)
    first = 0
    for index in range(1, len(ordered) + 1):
        if index < len(ordered) and ordered[index] - ordered[first] <= tolerance:
            continue
        count, value = index - first, ordered[first]
        if count >= max(b, 2) and lowest < (value if which == 'LA' else abs(value)) - tolerance:
            warnings.warn(
                f"Block Lanczos returned {count} copies of the eigenvalue {value:.6g} (equal "
                f"to {tolerance:.1e}), at least its block size {b}, and lower eigenvalues "
                f"after them: a block method finds about as many copies of an eigenvalue as "
                f"its block holds, so more copies may exist in place of those lower pairs (a "
                f"disconnected operator has one copy of its top eigenvalue per connected "
                f"component). Solve it in one process with extreme_eigenpairs, which splits "
                f"it by component, raise 'block_size' above the multiplicity, or deflate "
                f"known eigenvectors ('deflate')", UserWarning, stacklevel=4)
            return
        first = index


def _group_of(operator: Tensor) -> Group:
    r"""The process group of a row-sharded operator; :obj:`None` for a matrix."""
    return operator.group if isinstance(operator, ShardedMatrix) else None


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
    step_callback: Optional[StepCallback] = None,
    residuals_callback: Optional[ResidualsCallback] = None,
    deflate: Optional[Tensor] = None,
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
    first (a problem small enough to be solved densely reports the residual
    of its pairs, and warns where the dtype's rounding keeps it above
    :obj:`tol`). In float32 a steep filter can push the wanted eigenvalues below
    rounding, relative to the largest one: when the first cycle shows this,
    or when the residual stops improving for 5 cycles while such rounding
    could explain it, the degree is lowered (at least halved) and the
    iteration starts again; the best pairs seen are returned. Cost per cycle:
    :math:`O(\mathrm{nnz} \cdot \text{degree} \cdot (m - k) + N m^2)` time;
    memory: one workspace of :math:`N (m + 4b)` numbers (the basis, the next
    block and three blocks in which the filter, the products and the starting
    blocks run), the :math:`N k` returned vectors, and a few transient
    :math:`N \times b` blocks of the QR factorisations; the Ritz vectors are
    rotated in place and the residuals computed :obj:`ROW_CHUNK` rows at a
    time; with :obj:`"LM"`, whose Rayleigh--Ritz step runs in the span of the
    :math:`k` leading Ritz vectors and :math:`\mathbf{S}` times them (an
    invariant subspace that holds both :math:`\lambda` and :math:`-\lambda`,
    which the even filter cannot tell apart), :math:`2k / b` more sparse
    products per cycle than :obj:`"LA"` and up to four transient
    :math:`N \times k` blocks. When
    :math:`m + b \geq N` the problem is small and is solved densely.

    A :class:`~torch_geometric_regcn.linalg.ShardedMatrix` operator runs the
    same iteration on row shards over its process group: each rank holds its
    rows of the basis (:math:`O(N m / P)` memory), a sparse product exchanges
    the halo rows, and the Gram--Schmidt coefficients, the QR of a block
    (TSQR) and the residual norms are all-reduced (:math:`O(m b)` numbers
    per step), so every rank sees the same projected matrix; its eigenpairs
    are rank 0's, broadcast (their bits, and a repeated eigenvalue's basis,
    depend on the thread count), and every rank takes the same decisions (a
    block's :math:`b \times b` QR, factorised on each rank, decides a refill
    on all ranks where it does on one). The returned eigenvectors are this rank's
    rows; every random block (the start, a refilled dependent block) is drawn
    by global row (:class:`~torch_geometric_regcn.linalg.random_rows.RandomRows`,
    seeded by one draw from rank 0's :obj:`generator`), so the shards start from
    the single-process solve's rows and differ from it only by the rounding of
    their sums.

    Args:
        operator (torch.Tensor or ShardedMatrix): The symmetric :math:`N
            \times N` matrix, sparse (CSR or COO) or dense, or this rank's rows
            of a row-sharded one.
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
            residual)` after every filtered cycle, e.g. for a progress bar,
            and as :obj:`callback(0, math.inf)` once the first cycle has
            located the spectrum. (default: :obj:`None`)
        step_callback (callable, optional): Called as
            :obj:`step_callback(cycle, step, steps)` after each block Lanczos
            step (one application of the filter and the orthogonalisation)
            of a cycle, :obj:`cycle` :obj:`0` being the one that locates the
            spectrum; a cycle can take long on a large graph.
            (default: :obj:`None`)
        residuals_callback (callable, optional): Called as
            :obj:`residuals_callback(cycle, residuals)` after every filtered
            cycle, before :obj:`callback`, with the relative residual of each
            of the :obj:`k` pairs (a tensor :obj:`[k]`, the same on every
            rank), e.g. for a progress bar that counts converged pairs.
            (default: :obj:`None`)
        deflate (torch.Tensor, optional): Orthonormal columns
            :math:`\mathbf{U}` (:obj:`[N, d]`, or this rank's rows, of the
            operator's dtype and device) spanning an invariant subspace of
            :math:`\mathbf{S}` (known eigenvectors, e.g. a Laplacian's
            trivial one, which the filter would amplify above the wanted
            ones): the iteration runs in the orthogonal complement of their
            span (the starting block and every mapped block are
            orthogonalised against them, :math:`O(N d b)` per block), so the
            pairs returned are those of :math:`\mathbf{S}` restricted to that
            complement; :math:`k \leq N - d`. Orthonormality and invariance
            are checked to :math:`\sqrt{\epsilon}` by one product with
            :math:`\mathbf{U}` (a :class:`ValueError` otherwise).
            (default: :obj:`None`)
    """
    group, error, same = _group_of(operator), None, {}
    try:  # on row shards agreed: a rank that raises alone would leave the others waiting
        n = check_problem(operator, k, which, max_iter, degree, tol)
        b = min(k, 16) if block_size is None else check_int('block_size', block_size)
        if basis_size is not None:
            basis_size = check_int('basis_size', basis_size)
        m = b * math.ceil((2 * k + 8 * b if basis_size is None else basis_size) / b)
        if m < k + 2 * b:
            raise ValueError(f"'basis_size' must be at least k + 2 * block_size = "
                             f"{k + 2 * b} once rounded up to a multiple of block_size "
                             f"(got {basis_size}, rounded up to {m})")
        if deflate is not None:
            _check_deflate(deflate, operator, n, k)
        if group is not None:  # each decides the iteration's collectives or its stop
            same = {"'k'": k, "'which'": which, "'tol'": float(tol), "'max_iter'": max_iter,
                    "'degree'": degree, "the block size 'block_size'": b,
                    "the basis size 'basis_size'": m,
                    "the row blocks of 'operator'": operator.partition.bounds,
                    "the dtype and device of 'operator'": (operator.dtype,
                                                            operator.device.type),
                    "the columns of 'deflate'": (None if deflate is None
                                                 else deflate.size(1))}
    except (TypeError, ValueError) as failure:
        error = failure
    agree_arguments(group, 'block_lanczos', same, error)
    dtype, device = operator.dtype, operator.device
    if group is None:
        operator = compact_csr(operator)
    if deflate is not None:
        _check_invariant(operator, deflate, group)

    if m + b >= n:  # the Krylov basis would span (nearly) everything: solve densely
        if group is not None:
            dense = gather_dense(operator)
        else:
            dense = operator.to_dense() if operator.layout != torch.strided else operator
        dense = (dense + dense.T) / 2
        if deflate is None:
            theta, vectors = small_eigh(dense, group)
        else:  # S on an orthonormal basis Q of the complement of span(deflate)
            full = torch.cat(all_gather(deflate, group)) if group is not None else deflate
            q = torch.linalg.qr(full, mode='complete').Q[:, full.size(1):]
            theta, vectors = small_eigh(q.T @ dense @ q, group)
            vectors = q @ vectors
        norm = max(float(theta.abs().max()) if theta.numel() else 0.0,
                   torch.finfo(dtype).tiny)
        theta, vectors = select(theta, vectors, k, which)
        # Relative to the spectrum's extent, as the iterations measure it: the
        # rounding of the dense solve in the operator's dtype.
        residual = float(((dense @ vectors - vectors * theta).norm(dim=0) / norm).max())
        if group is not None:
            vectors = vectors[operator.partition.start:operator.partition.end]
        converged = residual <= tol
        if not converged:
            warnings.warn(
                f"Block Lanczos solved the {n} x {n} problem densely, to relative residual "
                f"{residual:.2e} > tol={tol:.0e}: the rounding of {dtype} limits it; raise "
                f"'tol'{precision_hint(operator)}", UserWarning, stacklevel=3)
        return EigenPairs(theta, vectors, residual, 0, converged)

    # every random block by global row (by original index where the shards renumber the
    # nodes): shards draw the single process's rows
    first, last = (0, n) if group is None else (operator.partition.start,
                                                operator.partition.end)
    rows, random = last - first, RandomRows.seeded(
        generator, n, first, last, dtype, device, group,
        operator.node_id if isinstance(operator, ShardedMatrix) else None)

    with reusing_buffer(operator):  # the products' halo exchanges in one kept buffer
        workspace = Workspace.allocate(rows, m, b, dtype, device)

        def start() -> Tensor:  # a random block, in the workspace (free until the first product)
            return random.draw(b, out=workspace.blocks[0])

        window = _locate_spectrum(operator, k, which, workspace, start(),  # plain Lanczos
                                  random, step_callback, deflate)
        if callback is not None:  # no pairs yet: a progress report only
            callback(0, math.inf)
        degree += degree % 2 if which == 'LM' else 0  # an even filter treats both ends alike
        keep = m - b * max(1, (m - k) // (2 * b))  # kept Ritz vectors: half the spare room
        best, cycles = None, 0
        while True:  # filtered cycles; a faint or stalled filter restarts at a lower degree
            filtered = _FilteredCycles(operator, k, which, tol, window, degree, best, cycles,
                                       callback, step_callback, residuals_callback, deflate)
            best = None  # held by 'filtered' alone, which drops it for better pairs
            run = filtered.run(start(), workspace, keep, max_iter - cycles, random)
            del filtered
            cycles, best = cycles + run.cycles, run.best
            last, floor = run.last.pairs, run.last.floor
            if not run.last.faint or last.residual <= tol or cycles >= max_iter:
                break
            degree, = consensus([_lowered_degree(degree, which, window, float(last.values[k - 1]),
                                                 dtype)], group)  # from local Ritz values

    if best is None:  # no cycle had a finite residual
        raise overflow_error(dtype, 'no finite residual in any cycle')
    _warn_missing_copies(best.values, which, b, tol, window)
    converged = best.residual <= tol
    if not converged:
        fix = (f"restarts at the lowest filter degree no longer halve it: the rounding of "
               f"{dtype} limits it; solve in float64 or raise 'tol'" if floor else
               "raise 'max_iter', 'basis_size' or 'degree', or raise 'tol'")
        warnings.warn(
            f"Block Lanczos stopped after {cycles} restart cycles with relative residual "
            f"{best.residual:.2e} > tol={tol:.0e}; {fix}{precision_hint(operator)}",
            UserWarning, stacklevel=3)
    return EigenPairs(best.values, best.vectors, best.residual, cycles, converged)
