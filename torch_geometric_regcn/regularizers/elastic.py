r"""ElasticGNN's regulariser: :math:`\ell_1` or :math:`\ell_{21}` graph trend
filtering with Laplacian smoothing, solved by elastic message passing."""
import math
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.linalg.incidence import weight_sqrt
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
    :math:`\mathbf{B}` and two with :math:`\mathbf{B}^{\top}`); memory
    :math:`O(E F)` for the dual, per step kept for the backward pass.

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
        y = gamma * x + (1.0 - gamma) * graph.matmul(graph.adj, h) if self.lambda2 > 0 else x
        if self.lambda1 == 0:
            return y, None
        # In the variable Q = diag(sqrt(w)) Z, with B = diag(sqrt(w)) B0, the
        # graph's weights enter linearly but for the radius of each row's
        # ball, lambda1 sqrt(w_e) (where Q is small next to it, near w_e = 0,
        # the projection is the identity): so the gradient in an edge weight
        # is exact also at zero, where that of sqrt(w) in B is not.
        base, w = self.incidence(graph).split()
        q = state if state is not None else x.new_zeros(base.num_edges, x.size(-1))
        w = w.unsqueeze(-1) if w is not None else None
        step = base.gradient(y - gamma * base.divergence(q))
        q_bar = q + (0.5 / gamma) * (step if w is None else w * step)
        q = self._project(q_bar, w)
        return y - gamma * base.divergence(q), q

    def _project(self, q: Tensor, w: Optional[Tensor]) -> Tensor:
        r"""Each row (:obj:`"l21"`) or entry (:obj:`"l1"`) of :math:`\mathbf{Q}`
        onto the ball of radius :math:`\lambda_1\sqrt{w_e}` (:obj:`w` :obj:`[E',
        1]`; :obj:`None`: ones): :math:`\mathbf{Z}`'s projection onto radius
        :math:`\lambda_1`, in the variable :math:`\mathbf{Q}`."""
        radius = self.lambda1 if w is None else self.lambda1 * weight_sqrt(w)
        if self.norm == 'l1':  # each entry onto [-radius, radius]
            return q.clamp(-radius, radius)
        if q.size(-1) == 0:
            return q
        # Each row onto the l2 ball, q * min(1, radius / ||q||), with ||q|| =
        # largest * norm never formed: its squares and the norm itself may
        # overflow for finite q (radius / inf would zero the row).
        tiny = torch.finfo(q.dtype).tiny
        largest = q.abs().amax(dim=-1, keepdim=True)
        unit = q / largest.clamp_min(tiny)  # largest magnitude 1 (a zero row stays 0)
        norm = unit.norm(dim=-1, keepdim=True)  # >= 1 but for a zero row
        inside = largest * norm <= radius
        # Clamped at 1, not at tiny: radius / tiny overflows, and the branch
        # torch.where leaves out still passes 0 * inf = NaN to the gradient.
        return torch.where(inside, q, unit * (radius / norm.clamp_min(1.0)))
