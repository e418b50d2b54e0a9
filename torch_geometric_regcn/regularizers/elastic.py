r"""ElasticGNN's regulariser: :math:`\ell_1` or :math:`\ell_{21}` graph trend
filtering with Laplacian smoothing, solved by elastic message passing."""
import math
from typing import Any, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from torch_geometric_regcn.linalg.incidence import Incidence, weight_sqrt
from torch_geometric_regcn.regularizers.graph import GraphOperators
from torch_geometric_regcn.regularizers.iterative import (
    IterativeRegularizer,
    System,
    check_steps,
    smoothing_system,
)
from torch_geometric_regcn.regularizers.penalties import L1Penalty
from torch_geometric_regcn.regularizers.registry import register
from torch_geometric_regcn.utils.validation import check_choice, check_real

#: The norms of :class:`ElasticRegularizer`'s trend filtering term.
NORMS = ('l21', 'l1')


@register
class ElasticRegularizer(IterativeRegularizer):
    r"""The regulariser of ElasticGNN (`"Elastic Graph Neural Networks"
    <https://arxiv.org/abs/2107.06996>`_, Liu et al., ICML 2021): the layer
    returns the minimiser of

    .. math::
        E(\mathbf{H}) = \tfrac{1}{2}\|\mathbf{H} - \mathbf{X}\|_F^2 +
        \tfrac{\lambda_2}{2}\mathrm{Tr}(\mathbf{H}^{\top}\tilde{\mathbf{L}}
        \mathbf{H}) + \lambda_1 \|\mathbf{B}\mathbf{H}\|_{p},

    with :math:`\tilde{\mathbf{L}} = \mathbf{I} - \hat{\mathbf{A}}` and the
    normalised incidence matrix :math:`\mathbf{B}` (one row
    :math:`\sqrt{w_{ij}}(\mathbf{h}_i/\sqrt{\tilde d_i} -
    \mathbf{h}_j/\sqrt{\tilde d_j})` per edge, degrees with the self loop,
    so :math:`\mathbf{B}^{\top}\mathbf{B} = \tilde{\mathbf{L}}`; see
    :func:`~torch_geometric_regcn.linalg.incidence.normalized_incidence`).
    :math:`\|\cdot\|_{21}` sums the :math:`\ell_2` norms of the rows (one
    edge's difference vector: piecewise constant features, with whole
    edges switched off), :math:`\|\cdot\|_1` the absolute entries (per
    feature). The trend filtering term smooths less across large
    differences than the Laplacian does, so it keeps sharp changes between
    communities and resists inserted edges. :math:`\lambda_1 = 0` is
    APPNP's energy with teleport :math:`1/(1 + \lambda_2)`.

    **Solvers.** :obj:`"emp"` (default): the paper's elastic message
    passing, :obj:`K` steps from :math:`\mathbf{H}_0 = \mathbf{X}` and the
    dual :math:`\mathbf{Z}_0 = \mathbf{0}`, with :math:`\gamma = 1/(1 +
    \lambda_2)` and :math:`\beta = 1/(2\gamma)`,

    .. math::
        \mathbf{Y} &= \gamma\mathbf{X} + (1 - \gamma)\hat{\mathbf{A}}\mathbf{H}_k \\
        \mathbf{Z}_{k+1} &= \Pi_{\lambda_1}\big(\mathbf{Z}_k + \beta\mathbf{B}
            (\mathbf{Y} - \gamma\mathbf{B}^{\top}\mathbf{Z}_k)\big) \\
        \mathbf{H}_{k+1} &= \mathbf{Y} - \gamma\mathbf{B}^{\top}\mathbf{Z}_{k+1},

    where :math:`\Pi_{\lambda_1}` projects each row of :math:`\mathbf{Z}`
    onto the :math:`\ell_2` ball of radius :math:`\lambda_1` (for
    :math:`\ell_{21}`) or each entry onto :math:`[-\lambda_1, \lambda_1]`
    (for :math:`\ell_1`). A primal-dual method: the energy converges to the
    minimum but need not fall at every step. :obj:`"irls"`: iteratively
    reweighted least squares (see
    :class:`~torch_geometric_regcn.regularizers.iterative.IterativeRegularizer`)
    on the energy with the norm smoothed below :obj:`eps`
    (:class:`~torch_geometric_regcn.regularizers.penalties.L1Penalty`,
    within :math:`\lambda_1\epsilon/2` per edge or entry of the exact one),
    each reweighting one conjugate gradient solve of :math:`(\mathbf{I} +
    \mathbf{B}^{\top}(\lambda_2 + \lambda_1\mathbf{W})\mathbf{B})\mathbf{H} =
    \mathbf{X}`; its energy never increases.

    Costs per step: :math:`O(E F)`, about twice APPNP's step for
    :obj:`"emp"` (one product with :math:`\hat{\mathbf{A}}`, one with
    :math:`\mathbf{B}` and one with :math:`\mathbf{B}^{\top}`, whose result
    the next step reuses); memory :math:`O(E F)` for the dual, per step kept
    for the backward pass.

    **Projection: identity, decoupled** (:obj:`decoupled=True`), as in the
    paper: a network transforms the features first (an MLP) and propagates
    once.

    Args:
        lambda1 (float, optional): :math:`\lambda_1 \geq 0`, the weight of
            the trend filtering term. (default: :obj:`3.0`)
        lambda2 (float, optional): :math:`\lambda_2 \geq 0`, the weight of
            Laplacian smoothing. (default: :obj:`3.0`)
        norm (str, optional): :obj:`"l21"` or :obj:`"l1"`.
            (default: :obj:`"l21"`)
        K (int, optional): Steps of :obj:`"emp"`; the most reweightings of
            :obj:`"irls"`. (default: :obj:`10`)
        eps (float, optional): The smoothing width of :obj:`"irls"`.
            (default: :obj:`1e-4`)
        irls_tol (float, optional): The relative change (the largest
            over the graph's connected components) at which :obj:`"irls"` stops.
            (default: :obj:`1e-3`)
    """
    name = 'elastic'
    projection = 'identity'
    scales = ('lambda1', 'lambda2')
    solvers = ('emp', 'irls')
    default_solver = 'emp'

    def __init__(self, lambda1: float = 3.0, lambda2: float = 3.0, norm: str = 'l21',
                 K: int = 10, eps: float = 1e-4, irls_tol: float = 1e-3) -> None:
        self.lambda1 = check_real('lambda1', lambda1, 0.0, math.inf)
        self.lambda2 = check_real('lambda2', lambda2, 0.0, math.inf)
        self.norm = check_choice('norm', norm, NORMS)
        self.K, self.irls_tol = check_steps(K, irls_tol)
        self.eps = L1Penalty(eps).eps

    def _row_norms(self, d: Tensor) -> Tensor:
        return d.norm(dim=-1) if self.norm == 'l21' else d.abs()

    def objective(self, h: Tensor, x: Tensor, graph: GraphOperators) -> Tensor:
        r""":math:`E(\mathbf{H})` with the norm smoothed below :obj:`eps`, the
        energy :obj:`"irls"` minimises: within :math:`\lambda_1\epsilon/2` per
        edge (or entry) of the exact one, a bound that matters only where
        the edge differences are as small as :obj:`eps`."""
        d = self.incidence(graph).gradient(h)
        smooth = (d * d).sum()  # Tr(H^T L~ H) = ||B H||_F^2
        return (0.5 * (h - x).square().sum() + 0.5 * self.lambda2 * smooth
                + self.lambda1 * L1Penalty(self.eps).value(self._row_norms(d)).sum())

    def system(self, h: Tensor, x: Tensor, graph: GraphOperators) -> System:
        inc = self.incidence(graph)
        t = self._row_norms(inc.gradient(h))
        return smoothing_system(inc, self.lambda2 + self.lambda1 * L1Penalty(self.eps).weight(t),
                               x)

    def step(self, solver: str, h: Tensor, x: Tensor, graph: GraphOperators,
             state: Any) -> Tuple[Tensor, Any]:
        gamma = 1.0 / (1.0 + self.lambda2)
        if state is None:
            state = self._start(x, graph, gamma)
        y = (torch.add(state.scaled_x, graph.matmul(graph.adj, h, symmetric=True),
                       alpha=1.0 - gamma) if self.lambda2 > 0 else x)
        if self.lambda1 == 0:
            return y, state
        base, step_size, q, moved = state.base, state.step_size, state.q, state.moved
        step = base.gradient(y if moved is None else torch.add(y, moved, alpha=-gamma))
        if q is None:
            q_bar = step_size * step
        else:
            q_bar = (torch.add(q, step, alpha=step_size) if not isinstance(step_size, Tensor)
                     else torch.addcmul(q, step_size, step))
        q = self._project(q_bar, state.radius)
        moved = base.divergence(q)
        return torch.add(y, moved, alpha=-gamma), state._replace(q=q, moved=moved)

    def _start(self, x: Tensor, graph: GraphOperators, gamma: float) -> '_Dual':
        r"""What every step of :obj:`"emp"` reads: :math:`\gamma\mathbf{X}`,
        :math:`\mathbf{B}_0`, the dual's step and the radius of the projection
        on each edge, and the dual, zero at the start."""
        scaled_x = gamma * x if self.lambda2 > 0 else x
        if self.lambda1 == 0:
            return _Dual(scaled_x, None, 0.0, self.lambda1)
        # In the variable Q = diag(sqrt(w)) Z, with B = diag(sqrt(w)) B0, the
        # graph's weights enter linearly but for the radius of each row's
        # ball, lambda1 sqrt(w_e) (where Q is small next to it, near w_e = 0,
        # the projection is the identity): so the gradient in an edge weight
        # is exact also at zero, where that of sqrt(w) in B is not.
        base, w = self.incidence(graph).split()
        beta = 0.5 / gamma
        if w is None:
            return _Dual(scaled_x, base, beta, self.lambda1)
        w = w.unsqueeze(-1)
        radius = self.lambda1 * weight_sqrt(w)
        if self.norm == 'l21' and x.dtype != torch.float64:
            # Compared with the rows' norms, summed in float64; at least the
            # smallest normal number, so that a zero row of a zero-weight edge
            # is inside its ball (scaled by 1, as the float64 route takes it).
            radius = radius.double().clamp_min(torch.finfo(torch.float64).tiny)
        return _Dual(scaled_x, base, beta * w, radius)

    def _project(self, q: Tensor, radius: Union[float, Tensor]) -> Tensor:
        r"""Each row (:obj:`"l21"`) or entry (:obj:`"l1"`) of :math:`\mathbf{Q}`
        onto the ball of radius :math:`\lambda_1\sqrt{w_e}` (:obj:`radius`,
        :obj:`[E', 1]` or a number): :math:`\mathbf{Z}`'s projection onto
        radius :math:`\lambda_1`, in the variable :math:`\mathbf{Q}`."""
        if self.norm == 'l1':  # each entry onto [-radius, radius]
            return q.clamp(-radius, radius)
        if q.size(-1) == 0:
            return q
        if q.dtype != torch.float64:
            return _RowProjection.apply(q, radius)
        # Float64: each row divided by its largest magnitude first, with
        # ||q|| = largest * norm never formed: its squares and the norm itself
        # may overflow for finite q (radius / inf would zero the row).
        tiny = torch.finfo(q.dtype).tiny
        largest = q.abs().amax(dim=-1, keepdim=True)
        unit = q / largest.clamp_min(tiny)  # largest magnitude 1 (a zero row stays 0)
        norm = unit.norm(dim=-1, keepdim=True)  # >= 1 but for a zero row
        inside = largest * norm <= radius
        # Clamped at 1, not at tiny: radius / tiny overflows, and the branch
        # torch.where leaves out still passes 0 * inf = NaN to the gradient.
        return torch.where(inside, q, unit * (radius / norm.clamp_min(1.0)))


class _Dual(NamedTuple):
    r"""The state of :obj:`"emp"` between steps."""
    #: :math:`\gamma\mathbf{X}`
    scaled_x: Tensor
    #: :math:`\mathbf{B}_0`, the incidence matrix without the weights
    #: (:obj:`None` without trend filtering, :math:`\lambda_1 = 0`)
    base: Optional[Incidence]
    #: the dual's step :math:`\beta w_e` on each edge, :obj:`[E', 1]` (a
    #: number: :math:`\beta`, for rows without weights)
    step_size: Union[float, Tensor]
    #: the radius of each row's ball, :math:`\lambda_1\sqrt{w_e}` (in float64
    #: for the rows' norms of a narrower :math:`\mathbf{Q}`)
    radius: Union[float, Tensor]
    #: the dual :math:`\mathbf{Q}` (:obj:`None`: zero, the start)
    q: Optional[Tensor] = None
    #: :math:`\mathbf{B}_0^{\top}\mathbf{Q}`, kept for the next step's
    #: extrapolation :math:`\mathbf{Y} - \gamma\mathbf{B}^{\top}\mathbf{Z}`
    moved: Optional[Tensor] = None


class _RowProjection(torch.autograd.Function):
    r"""Each row :math:`\mathbf{q}_e` of a float32 (or narrower)
    :math:`\mathbf{Q}` onto the :math:`\ell_2` ball of radius :math:`r_e > 0`:
    scaled by :math:`s_e = r_e / \max(\|\mathbf{q}_e\|, r_e)`, with the norm's
    squares summed in float64, where no such row overflows. The backward pass
    is written out, :math:`s_e(\mathbf{g}_e - \mathbf{q}_e(\mathbf{q}_e \cdot
    \mathbf{g}_e)/\|\mathbf{q}_e\|^2)` for a row outside its ball and
    :math:`\mathbf{g}_e` inside, and :math:`(\mathbf{q}_e \cdot
    \mathbf{g}_e)/\|\mathbf{q}_e\|` for a radius outside (a few operations,
    where autograd runs about twenty); under :obj:`create_graph=True`, autograd
    through the same formula, so that second derivatives are right."""
    @staticmethod
    def scales(q: Tensor, radius: Union[float, Tensor]) -> Tuple[Tensor, Tensor]:
        r"""The rows' norms (in float64) and :math:`s_e`."""
        norm = torch.linalg.vector_norm(q, dim=-1, keepdim=True, dtype=torch.float64)
        bound = (torch.maximum(norm, radius) if isinstance(radius, Tensor)
                 else norm.clamp_min(radius))
        return norm, radius / bound

    @staticmethod
    def forward(ctx, q: Tensor, radius: Union[float, Tensor]) -> Tensor:  # type: ignore[override]
        norm, scale = _RowProjection.scales(q, radius)
        is_tensor = isinstance(radius, Tensor)
        ctx.save_for_backward(q, norm, scale, radius if is_tensor else None)
        ctx.radius = None if is_tensor else radius
        return q * scale.to(q.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        q, norm, scale, radius = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: the formula, differentiated again
            return _RowProjection._differentiable_backward(ctx, q, radius, grad)
        outside = norm > (radius if radius is not None else ctx.radius)
        inverse = torch.where(outside, norm.reciprocal(), 0.0)  # a zero row is inside
        ratio = (q * grad).sum(dim=-1, keepdim=True, dtype=torch.float64) * inverse
        # s (g - q (q . g) / ||q||^2): the factor (q . g) / ||q||^2 ~ |g| / ||q|| is
        # rounded to q's dtype, not s times it (~ r |g| / ||q||^2, which underflows
        # float32 for rows far outside their ball and dropped the projection's term)
        coef = (ratio * inverse).to(q.dtype)
        grad_q = torch.addcmul(grad, q, coef, value=-1.0) * scale.to(q.dtype)
        grad_radius = ratio if radius is not None and ctx.needs_input_grad[1] else None
        return grad_q, grad_radius

    @staticmethod
    def _differentiable_backward(ctx, q: Tensor, radius: Optional[Tensor], grad: Tensor):
        # Under create_graph=True: autograd through the projection's formula
        # (the same numbers), so that a second derivative is right.
        r = radius if radius is not None else ctx.radius
        wanted = [t if t is not None and t.requires_grad and need else None
                  for t, need in zip((q, radius), ctx.needs_input_grad)]
        inputs = [t for t in wanted if t is not None]
        if not inputs:
            return None, None
        with torch.enable_grad():
            out = q * _RowProjection.scales(q, r)[1].to(q.dtype)
            found = iter(torch.autograd.grad(out, inputs, grad, create_graph=True,
                                             allow_unused=True))
        return tuple(None if t is None else next(found) for t in wanted)
