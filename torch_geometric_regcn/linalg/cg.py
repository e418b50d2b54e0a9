r"""Conjugate gradient for sparse symmetric positive definite systems, with an
implicit backward pass."""
import math
import warnings
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.linalg.graph_batch import check_batch
from torch_geometric_regcn.utils.deprecation import moved
from torch_geometric_regcn.utils.sparse import csr_matrix, diagonal
from torch_geometric_regcn.utils.validation import (
    all_finite,
    check_finite,
    check_stopping_rule,
)
from torch_geometric_regcn.utils.warn_once import outside_stacklevel

#: Computes :obj:`matrix @ x` (see :func:`conjugate_gradient`).
MatMul = Callable[[Tensor, Tensor], Tensor]


class CGResult(NamedTuple):
    r"""The result of :func:`conjugate_gradient`."""
    #: the solution :math:`\mathbf{Y}`, shaped as the right-hand side
    solution: Tensor
    #: the largest relative residual :math:`\|\mathbf{B} - \mathbf{M}
    #: \mathbf{Y}\| / \|\mathbf{B}\|` of a column, computed from the returned
    #: :math:`\mathbf{Y}` (not CG's recurrence)
    residual: float
    #: the iterations run
    iterations: int


def conjugate_gradient(matrix: Tensor, rhs: Tensor, tol: float = 1e-6, max_iter: int = 1000,
                       matmul: Optional[MatMul] = None,
                       start: Optional[Tensor] = None, batch: Optional[Tensor] = None,
                       batch_size: Optional[int] = None) -> CGResult:
    r"""Solves :math:`\mathbf{M} \mathbf{Y} = \mathbf{B}` column by column with
    Jacobi-preconditioned conjugate gradient, all columns at once.

    Stops when every column has :math:`\|\mathbf{B} - \mathbf{M}\mathbf{Y}\| \leq
    \text{tol} \cdot \|\mathbf{B}\|`, a test that each column meets at the
    same iteration whatever its scale: every column is first multiplied by
    a power of two that brings its largest entry near one (exact), so that
    columns of tiny norm, such as a nearly vanished gradient in the implicit
    backward, do not stall in subnormal arithmetic. CG's recurrence for the
    residual drifts from the true one in finite precision, so where it
    reaches :obj:`tol` the true residual is computed (one more product); above
    :obj:`tol`, CG restarts from it, aiming at :obj:`tol / 2`, and stops where
    a restart no longer halves it (the floor that the dtype's rounding puts
    on the system). Each iteration costs one sparse matmul,
    :math:`O(\mathrm{nnz} \cdot F)`.
    Returns a :class:`CGResult`: the solution, its largest relative residual
    and the number of iterations. :obj:`matmul(matrix, p)`,
    if given, computes the products (e.g. through a layer's
    :meth:`~torch_geometric.nn.conv.MessagePassing.propagate`).
    :obj:`start`, if given, is the first iterate (shaped as :obj:`rhs`, e.g.
    the solution of a nearby system, one more product), else zero; the
    stopping test is the same.

    :obj:`batch` (with :obj:`batch_size`), the graph of each row as
    :class:`~torch_geometric.data.Batch` numbers them, or any numbering of
    blocks in :math:`[0, \text{batch\_size})` such as the connected
    components, for a block-diagonal :obj:`matrix` (no entry between two
    blocks: the caller's promise): each block's part of each column is
    solved as its own system, with its own scale, steps and stopping test,
    so that every graph's solution meets the tolerance it meets alone (a
    test over the whole column let a graph of small features stop far from
    it); the residual is the largest over the blocks and columns.
    Each iteration then reduces by block, :math:`O(N F)` more.

    Raises :class:`TypeError` unless :obj:`rhs` is float32 or float64 and
    :obj:`matrix` of the same dtype, and :class:`ValueError` when
    :obj:`matrix` or :obj:`rhs` holds NaN or infinite values, when the
    diagonal of :obj:`matrix` is not positive, and when an iteration finds
    a direction :math:`\mathbf{p}` with
    :math:`\mathbf{p}^{\top}\mathbf{M}\mathbf{p} \leq 0` (or a non-finite
    residual): :math:`\mathbf{M}` is then not positive definite and the
    iterates would be meaningless."""
    check_stopping_rule(tol, max_iter)
    squeeze = rhs.dim() == 1
    b = rhs.unsqueeze(-1) if squeeze else rhs
    if b.dim() != 2 or matrix.dim() != 2 or matrix.size(0) != matrix.size(1) \
            or matrix.size(0) != b.size(0):
        raise ValueError(f"'matrix' must be square with as many rows as 'rhs' "
                         f"(got {list(matrix.shape)} and {list(rhs.shape)})")
    if b.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"'rhs' must be float32 or float64 (got {b.dtype}): conjugate gradient "
                        f"in half precision stalls at its rounding; solve in float32 "
                        f"('rhs.float()' and 'matrix.float()') and cast the result back")
    if matrix.dtype != b.dtype:
        raise TypeError(f"'matrix' is {matrix.dtype} but 'rhs' is {b.dtype}: cast one to the "
                        f"other's dtype (e.g. 'matrix.to(rhs.dtype)')")
    check_finite('rhs', b)
    check_finite('matrix', matrix)
    blocks = _Blocks(batch, check_batch(batch, b.size(0), batch_size, b.device,
                                        contiguous=False), b.dtype)
    if start is not None:
        if start.shape != rhs.shape or start.dtype != rhs.dtype:
            raise ValueError(f"'start' must be shaped and typed as 'rhs' ({list(rhs.shape)}, "
                             f"{rhs.dtype}; got {list(start.shape)}, {start.dtype})")
        check_finite('start', start)
    diag = diagonal(matrix)
    if b.numel() and not bool((diag > 0).all()):
        raise ValueError("'matrix' has a non-positive diagonal entry, so it is not positive "
                         "definite; conjugate gradient needs a symmetric positive definite "
                         "matrix (check the regulariser's operator())")
    inv_diag = diag.reciprocal().unsqueeze(-1)
    # Each column scaled by the power of two that brings its largest entry to
    # [1/2, 1) (not its norm, whose squares may underflow): exact, so the
    # iterates are the unscaled ones wherever those stay normal numbers, but a
    # column of tiny norm (a nearly vanished gradient) no longer runs into
    # subnormal products r^T z, where it would stall far above tol.
    finfo = torch.finfo(b.dtype)
    largest = int(math.log2(finfo.max)) - 1  # 2 ** +-largest are normal numbers
    top = blocks.amax(b.abs())
    shift = (-torch.frexp(top).exponent).clamp(-largest, largest)
    scale = torch.exp2(shift.to(torch.float64)).to(b.dtype)  # exact in b's dtype
    top, scale = blocks.rows(top), blocks.rows(scale)  # [F], or each row's graph's [N, F]
    b = b * scale
    b_norm = blocks.norms(b).clamp_min(finfo.tiny)

    def product(x: Tensor) -> Tensor:
        out = matrix @ x if matmul is None else matmul(matrix, x)
        if out.shape != x.shape:  # e.g. a product written for vectors, broadcast
            raise ValueError(f"'matmul' must return M @ x shaped as x, an [N, F] block "
                             f"(got {list(out.shape)} for {list(x.shape)})")
        return out

    if start is None:
        y, r = torch.zeros_like(b), b.clone()
    else:  # scaled as the columns of b; a zero column's solution is zero
        y = torch.where(top > 0, (start.unsqueeze(-1) if squeeze else start).detach() * scale,
                        0.0)
        if not all_finite(y):
            raise ValueError("'start' is too large for the scale of 'rhs' (a column of it "
                             "overflows once scaled as that column of 'rhs'); pass a start of "
                             "the solution's size, or none")
        r = b - product(y)
    iteration, restarted = 0, math.inf
    while True:
        residual = float((blocks.norms(r) / b_norm).max().detach()) if b.numel() else 0.0
        if residual <= tol or iteration >= max_iter or residual > restarted / 2:
            break  # converged, out of iterations, or at the floor of the dtype
        # A restart aims below tol: from a true residual under 2 tol, one that
        # stopped at tol could not halve it, and CG would give up a step short.
        target = tol if restarted == math.inf else tol / 2
        restarted = residual
        y, iteration = _iterate(product, y, r, b_norm, inv_diag, target, max_iter, iteration,
                                blocks)
        r = b - product(y)  # the true residual: the recurrence's drifts in finite precision
    y = y / scale
    if b.numel() and not all_finite(y):  # the unscaled solution beyond the dtype's range
        raise ValueError(f"The solution of the system overflows {b.dtype}: M^-1 B has entries "
                         f"beyond {finfo.max:.2g} ('rhs' too large for the smallest "
                         f"eigenvalues of 'matrix'); scale 'rhs' down or solve in float64")
    return CGResult(y.squeeze(-1) if squeeze else y, residual, iteration)


class _Blocks:
    r"""The reductions of CG over the rows of each column (:obj:`batch`
    :obj:`None`), or over each graph's rows of each column: a sum, the
    largest entry and the Euclidean norm of an :obj:`[N, F]` block,
    :obj:`[F]` or :obj:`[B, F]`, and :meth:`rows`, which spreads such
    per-graph values back to the rows they came from. A batch's sums are
    one product with the sparse :obj:`[B, N]` matrix of its graphs' rows
    (built once, :math:`O(N)`), several times faster on CPU than
    :meth:`~torch.Tensor.index_add_`."""
    def __init__(self, batch: Optional[Tensor], batch_size: Optional[int],
                 dtype: torch.dtype) -> None:
        self.batch = None if batch is None else batch.long()
        self.size = batch_size
        if self.batch is not None:
            count = torch.bincount(self.batch, minlength=batch_size)
            crow = torch.cat([count.new_zeros(1), count.cumsum(0)])
            self.members = csr_matrix(  # each graph's rows in order: sorted columns
                crow, self.batch.argsort(stable=True),
                torch.ones(self.batch.numel(), dtype=dtype, device=self.batch.device),
                (batch_size, self.batch.numel()))

    def sum(self, x: Tensor) -> Tensor:
        return x.sum(dim=0) if self.batch is None else self.members @ x

    def amax(self, x: Tensor) -> Tensor:
        r"""Of non-negative entries (0 for no rows)."""
        if self.batch is None:
            return x.amax(dim=0) if x.size(0) else x.new_zeros(x.size(1))
        index = self.batch.view(-1, 1).expand_as(x)
        return x.new_zeros(self.size, x.size(1)).scatter_reduce_(0, index, x, 'amax')

    def norms(self, x: Tensor) -> Tensor:
        r"""The Euclidean norms, as the square root of the sum of squares: a
        reduction over rows, several times faster on CPU than
        :meth:`~torch.Tensor.norm` over :obj:`dim=0`. Every column of the
        right-hand side is scaled to a largest entry near one, so the
        squares stay normal numbers down to CG's tolerances; a residual
        grown past the square root of the dtype's largest number reads as
        infinite, which CG reports as divergence."""
        return self.sum(x * x).sqrt()

    def rows(self, value: Tensor) -> Tensor:
        return value if self.batch is None else value.index_select(0, self.batch)


def _iterate(product: Callable[[Tensor], Tensor], y: Tensor, r: Tensor, b_norm: Tensor,
             inv_diag: Tensor, tol: float, max_iter: int, iteration: int, blocks: _Blocks
             ) -> Tuple[Tensor, int]:
    r"""CG's iterations from :obj:`y` and its residual :obj:`r` until the
    recurrence's relative residual reaches :obj:`tol` or :obj:`max_iter`
    iterations have run in all; returns :obj:`y` and the iteration count.
    Each column (of each graph, with :obj:`blocks` of a batch) takes its
    own steps."""
    z = inv_diag * r
    p = z.clone()
    rz = blocks.sum(r * z)
    relative = blocks.norms(r) / b_norm
    dtype, residual = r.dtype, float(relative.max().detach())
    while residual > tol and iteration < max_iter:
        iteration += 1
        mp = product(p)
        curvature = blocks.sum(p * mp)
        # Columns still above tol need p^T M p > 0 (converged ones may underflow).
        breakdown = ((curvature <= 0) & (relative > tol)).any()
        step = blocks.rows(rz / curvature.clamp_min(torch.finfo(dtype).tiny))
        y = torch.addcmul(y, step, p)
        r = torch.addcmul(r, step, mp, value=-1)
        z = inv_diag * r
        rz, rz_old = blocks.sum(r * z), rz
        p = torch.addcmul(z, blocks.rows(rz / rz_old.clamp_min(torch.finfo(dtype).tiny)), p)
        relative = blocks.norms(r) / b_norm
        residual, broke = torch.stack([relative.max(), breakdown.to(dtype)]).detach().tolist()
        if broke:
            raise ValueError(
                f"Conjugate gradient broke down at iteration {iteration}: a search direction "
                f"p has p^T M p <= 0, so 'matrix' is not positive definite (a regulariser's "
                f"operator() must return a symmetric positive definite M), or too badly "
                f"conditioned for {dtype} (solve in float64)")
        if not math.isfinite(residual):  # overflow: never hand back plausible numbers
            raise ValueError(f"Conjugate gradient diverged at iteration {iteration} (the "
                             f"residual is {residual}); 'matrix' is not positive definite or "
                             f"too badly scaled for {dtype}")
    return y, iteration


#: :obj:`(batch, batch_size)` of :func:`conjugate_gradient`, or :obj:`None`.
Graphs = Optional[Tuple[Tensor, Optional[int]]]


def _solve(matrix: Tensor, rhs: Tensor, tol: float, max_iter: int,
           matmul: Optional[MatMul], start: Optional[Tensor] = None,
           graphs: Graphs = None) -> Tensor:
    y, residual, iteration = conjugate_gradient(matrix, rhs, tol, max_iter, matmul, start,
                                                *(graphs or (None, None)))
    if residual > tol:
        fix = ("raise 'max_iter' or 'tol'" if iteration >= max_iter else
               f"restarts no longer halve it: the rounding of {rhs.dtype} limits this "
               f"system; solve in float64 or raise 'tol'")
        warnings.warn(
            f"Conjugate gradient stopped after {iteration} iterations with relative residual "
            f"{residual:.2e} > tol={tol:.0e}; {fix}", UserWarning,
            stacklevel=outside_stacklevel())
    return y


class _CGSolve(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, matrix: Tensor, rhs: Tensor, tol: float, max_iter: int,
                matmul: Optional[MatMul], graphs: Graphs, *params: Tensor) -> Tensor:
        ctx.matrix, ctx.tol, ctx.max_iter, ctx.matmul = matrix, tol, max_iter, matmul
        ctx.graphs = graphs
        y = _solve(matrix, rhs, tol, max_iter, matmul, graphs=graphs)
        if params:
            ctx.save_for_backward(y, *params)
        return y

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Optional[Tensor], ...]:
        solved = _gradient_solve(ctx.matrix, grad, ctx.tol, ctx.max_iter, ctx.matmul,
                                 ctx.graphs)
        params = ctx.saved_tensors[1:] if ctx.saved_tensors else ()
        wanted = [p for p, need in zip(params, ctx.needs_input_grad[6:]) if need]
        grads: Tuple[Optional[Tensor], ...] = (None,) * len(params)
        if wanted:
            # Implicit differentiation: dL/dθ = -Gᵀ (∂M/∂θ) Y, by autograd through
            # one more product M(θ) Y. Where θ is a graph input (edge weights), that
            # runs through the operator's construction, which the rest of the
            # backward pass may cross again: it is kept.
            y, second = ctx.saved_tensors[0], torch.is_grad_enabled()  # create_graph=True
            with torch.enable_grad():
                product = ctx.matmul(ctx.matrix, y.detach())
                found = iter(torch.autograd.grad(product, wanted, -solved, allow_unused=True,
                                                 retain_graph=True))
            # Under create_graph=True each depends on the upstream gradient and the
            # params: differentiating it in any of them reaches the refusal.
            grads = tuple(_refused(next(found), _SECOND, grad, *wanted) if need and second
                          else next(found) if need else None
                          for need in ctx.needs_input_grad[6:])
        return (None, solved, None, None, None, None, *grads)


def _gradient_solve(matrix: Tensor, grad: Tensor, tol: float, max_iter: int,
                    matmul: Optional[MatMul], graphs: Graphs) -> Tensor:
    r"""For :math:`\mathbf{Y} = \mathbf{M}^{-1}\mathbf{B}` with :math:`\mathbf{M}`
    symmetric, :math:`\partial L/\partial\mathbf{B} = \mathbf{G} =
    \mathbf{M}^{-1}\,\partial L/\partial\mathbf{Y}`: one more solve. A column
    of the upstream gradient with a NaN or an infinity makes the whole column
    of :math:`\mathbf{G}` NaN, as the exact inverse would (with a warning)."""
    finite = grad.isfinite().all(dim=0)
    if bool(finite.all()):
        return _solve(matrix, grad, tol, max_iter, matmul, graphs=graphs)
    warnings.warn(f"A conjugate gradient solve received a non-finite gradient in "
                  f"{int((~finite).sum())} of {finite.numel()} columns; their gradient is NaN "
                  f"(the loss or a layer above produced NaN or infinity)", RuntimeWarning,
                  stacklevel=outside_stacklevel())
    solved = torch.full_like(grad, math.nan)
    if bool(finite.any()):
        solved[:, finite] = _solve(matrix, grad[:, finite], tol, max_iter, matmul,
                                   graphs=graphs)
    return solved


class _ImplicitSolution(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, y: Tensor, rhs: Tensor, moved: Tensor, matrix: Tensor,  # type: ignore[override]
                tol: float, max_iter: int, matmul: MatMul, graphs: Graphs) -> Tensor:
        ctx.matrix, ctx.tol, ctx.max_iter, ctx.matmul = matrix, tol, max_iter, matmul
        ctx.graphs = graphs
        return y.view_as(y)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Optional[Tensor], ...]:  # type: ignore[override]
        if torch.is_grad_enabled():
            raise RuntimeError("implicit_cg_solve's gradient holds the solution fixed: a "
                               "second derivative (create_graph=True) through it is not "
                               "supported")
        solved = _gradient_solve(ctx.matrix, grad, ctx.tol, ctx.max_iter, ctx.matmul,
                                 ctx.graphs)
        need_rhs, need_moved = ctx.needs_input_grad[1:3]
        return (None, solved if need_rhs else None, -solved if need_moved else None,
                None, None, None, None, None)


def implicit_cg_solve(product: Callable[[Tensor], Tensor], preconditioner: Tensor, rhs: Tensor,
                      tol: float = 1e-6, max_iter: int = 1000,
                      start: Optional[Tensor] = None, batch: Optional[Tensor] = None,
                      batch_size: Optional[int] = None) -> Tensor:
    r"""Returns :math:`\mathbf{Y} = \mathbf{M}(\theta)^{-1}\mathbf{B}` by
    conjugate gradient (from :obj:`start`, else zero), for the symmetric
    positive definite :math:`\mathbf{M}(\theta)` whose product
    :obj:`product(Y)` (always of an :obj:`[N, F]` block: a 1-D :obj:`rhs`
    is one column) is differentiable in whatever :math:`\theta` it reads
    (weights computed from other tensors, edge weights): autograd finds them.
    The backward pass solves once, :math:`\mathbf{G} = \mathbf{M}^{-1}\,
    \partial L/\partial\mathbf{Y}`, and gives :math:`\mathbf{B}` the gradient
    :math:`\mathbf{G}` and every :math:`\theta` :math:`-\mathbf{G}^{\top}
    (\partial\mathbf{M}/\partial\theta)\mathbf{Y}`, through one product at
    the solution (made in the forward pass). :obj:`preconditioner` is a
    matrix whose diagonal is :math:`\mathbf{M}`'s (Jacobi's preconditioner;
    only its diagonal is read). :obj:`batch` and :obj:`batch_size` solve
    each graph of a block-diagonal system as its own, both ways (see
    :func:`conjugate_gradient`). Warns, raises and stops as
    :func:`conjugate_gradient` and :func:`cg_solve`; a second derivative
    (:obj:`create_graph=True`) raises :class:`RuntimeError`. Cost: the
    solve, one more product, and one solve in the backward pass."""
    if rhs.dim() == 1:  # product() reads [N, F] blocks, in CG and at the solution alike
        return implicit_cg_solve(product, preconditioner, rhs.unsqueeze(-1), tol, max_iter,
                                 None if start is None else start.unsqueeze(-1), batch,
                                 batch_size).squeeze(-1)
    graphs = None if batch is None else (batch, batch_size)

    def matmul(_: Tensor, y: Tensor) -> Tensor:
        return product(y)

    with torch.no_grad():  # the iterations record nothing
        y = _solve(preconditioner, rhs.detach(), tol, max_iter, matmul, start, graphs)
    if not torch.is_grad_enabled():
        return y
    moved = product(y)  # M(θ) Y at the fixed solution, differentiable in θ
    if not (rhs.requires_grad or moved.requires_grad):
        return y
    return _ImplicitSolution.apply(y, rhs, moved, preconditioner, tol, max_iter, matmul,
                                   graphs)


#: Why a second derivative through CG's implicit gradient in its params is refused.
_SECOND = ("cg_solve's implicit gradient in what the product reads (learned coefficients, "
           "edge weights, an edge mask) holds the solution fixed, so its derivative would be "
           "wrong: a second derivative (create_graph=True) in them is not supported; for "
           "learned coefficients use solver='closed' (dense autograd)")


class _Refused(torch.autograd.Function):
    r""":obj:`value`, attached to the tensors it depends on (:obj:`inputs`)
    by a node whose backward pass raises: a gradient that must not be
    differentiated."""
    @staticmethod
    def forward(ctx: Any, value: Tensor, why: str, *inputs: Tensor) -> Tensor:
        ctx.why = why
        return value.clone()

    @staticmethod
    def backward(ctx: Any, *grads: Tensor) -> Tuple[None, ...]:
        raise RuntimeError(ctx.why)


def _refused(value: Optional[Tensor], why: str, *inputs: Tensor) -> Optional[Tensor]:
    return None if value is None else _Refused.apply(value.detach(), why, *inputs)


class _FirstOrder(torch.autograd.Function):
    r"""The identity, whose backward pass refuses to be differentiated."""
    @staticmethod
    def forward(ctx: Any, x: Tensor, what: str) -> Tensor:
        ctx.what = what
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Optional[Tensor], None]:
        if torch.is_grad_enabled():
            raise RuntimeError(f"{ctx.what} is differentiable once: a second derivative "
                               f"(create_graph=True) through it is not supported")
        return grad, None


def first_order(x: Tensor, what: str) -> Tensor:
    r""":obj:`x` itself, through a node whose backward pass raises
    :class:`RuntimeError` naming :obj:`what` under :obj:`create_graph=True`:
    for results whose gradient is right and whose second derivative is not."""
    return _FirstOrder.apply(x, what) if x.requires_grad else x


def cg_solve(matrix: Tensor, rhs: Tensor, tol: float = 1e-6, max_iter: int = 1000,
             matmul: Optional[MatMul] = None, params: Sequence[Tensor] = (),
             batch: Optional[Tensor] = None, batch_size: Optional[int] = None) -> Tensor:
    r"""Returns :math:`\mathbf{M}^{-1} \mathbf{B}` for a symmetric positive
    definite (typically sparse) :math:`\mathbf{M}` by conjugate gradient.

    The backward pass is implicit: the gradient with respect to
    :math:`\mathbf{B}` is :math:`\mathbf{G} = \mathbf{M}^{-1}` times the
    output gradient, one more solve with the same matrix, so memory does not
    grow with the number of iterations. :obj:`matrix` itself receives no
    gradient (a :obj:`matrix` that requires one is refused without
    :obj:`params`, rather than left without it); tensors :obj:`params` on
    which the product :obj:`matmul(matrix, Y)` depends (learned
    coefficients, an explainer's edge mask) receive
    :math:`-\mathbf{G}^{\top} (\partial \mathbf{M} / \partial \theta)
    \mathbf{Y}`, by autograd through one more product. Warns with the
    achieved residual (that of the solution returned) when :obj:`max_iter` is
    reached before :obj:`tol`, or when the dtype's rounding stops CG above it
    (see :func:`conjugate_gradient`). Under :obj:`create_graph=True` the
    backward pass is differentiable again in :math:`\mathbf{B}` (its solve
    runs under autograd); the gradients of :obj:`params` are not (the
    implicit formula holds :math:`\mathbf{Y}` fixed, so their derivative
    would be wrong): differentiating them raises :class:`RuntimeError`.

    :obj:`batch` and :obj:`batch_size` solve each graph of a block-diagonal
    system as its own, forward and backward (see :func:`conjugate_gradient`).
    Non-finite input raises :class:`ValueError` (see
    :func:`conjugate_gradient`); a non-finite output gradient gives NaN in
    the affected columns of the input gradient, with a
    :class:`RuntimeWarning`, never zeros."""
    if params and matmul is None:
        raise ValueError("'params' need 'matmul': the product through which they act")
    if not params and isinstance(matrix, Tensor) and matrix.requires_grad \
            and torch.is_grad_enabled():
        raise ValueError("'matrix' requires a gradient, which cg_solve passes on only through "
                         "'params' (the tensors it is built from) and 'matmul' (the product "
                         "through which they act): pass them, or 'matrix.detach()' to solve "
                         "without that gradient")
    graphs = None if batch is None else (batch, batch_size)
    if rhs.dim() == 1:
        return _CGSolve.apply(matrix, rhs.unsqueeze(-1), tol, max_iter, matmul, graphs,
                              *params).squeeze(-1)
    return _CGSolve.apply(matrix, rhs, tol, max_iter, matmul, graphs, *params)


# The old path of the stopping-rule check, now with the other argument checks.
__getattr__ = moved(__name__, {
    'check_arguments': 'torch_geometric_regcn.utils.validation:check_stopping_rule'})
