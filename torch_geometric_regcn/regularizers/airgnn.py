r"""AirGNN's regulariser: Laplacian smoothing with an :math:`\ell_{21}`
adaptive residual, solved by adaptive message passing."""
from typing import Any, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.regularizers.graph import GraphOperators
from torch_geometric_regcn.regularizers.iterative import (
    IterativeRegularizer,
    System,
    check_steps,
)
from torch_geometric_regcn.regularizers.penalties import L1Penalty
from torch_geometric_regcn.regularizers.registry import register
from torch_geometric_regcn.utils.validation import check_real


@register
class AdaptiveResidualRegularizer(IterativeRegularizer):
    r"""The regulariser of AirGNN (`"Graph Neural Networks with Adaptive
    Residual" <https://openreview.net/forum?id=hfkER_KJiNw>`_, Liu et al.,
    NeurIPS 2021): the layer returns the minimiser of

    .. math::
        E(\mathbf{H}) = (1 - \lambda)\,\mathrm{Tr}(\mathbf{H}^{\top}
        \tilde{\mathbf{L}}\mathbf{H}) + \lambda\sum_i \|\mathbf{h}_i -
        \mathbf{x}_i\|_2,

    Laplacian smoothing with an :math:`\ell_{21}` penalty on the residual
    instead of the squared one: a node whose features disagree with the
    smoothed ones by much (abnormal features) keeps a small residual
    weight, and is smoothed over rather than pulling its neighbours.
    :math:`\lambda \in [0, 1]`; :math:`\lambda = 0` is pure smoothing,
    :math:`\lambda = 1` returns :math:`\mathbf{X}`.

    **Solvers.** :obj:`"amp"` (default): the paper's adaptive message
    passing, :obj:`K` proximal gradient steps from :math:`\mathbf{H}_0 =
    \mathbf{X}` with step :math:`\gamma = 1/(2(1 - \lambda))`,

    .. math::
        \mathbf{Y} = \mathbf{H}_k - 2\gamma(1 - \lambda)\tilde{\mathbf{L}}
        \mathbf{H}_k = \hat{\mathbf{A}}\mathbf{H}_k, \qquad
        \mathbf{h}_{k+1,i} = \mathbf{x}_i + \max\Big(0, 1 -
        \frac{\gamma\lambda}{\|\mathbf{y}_i - \mathbf{x}_i\|}\Big)
        (\mathbf{y}_i - \mathbf{x}_i),

    the second step the proximal map of the residual term (row-wise soft
    thresholding; the factor is the node's adaptive score). The smooth term
    has the Lipschitz constant :math:`L = 2(1 - \lambda)\mu_{\max}` for the
    largest eigenvalue :math:`\mu_{\max} < 2` of :math:`\tilde{\mathbf{L}}`
    (the self loops keep it below 2), so each step lowers the energy by at
    least :math:`(1/\gamma - L/2)\|\mathbf{H}_{k+1} - \mathbf{H}_k\|^2 =
    (1 - \lambda)(2 - \mu_{\max})\|\mathbf{H}_{k+1} - \mathbf{H}_k\|^2`:
    the (exact) energy never increases. :obj:`"irls"`: each reweighting solves
    :math:`(2(1 - \lambda)\tilde{\mathbf{L}} + \lambda\mathbf{U})\mathbf{H} =
    \lambda\mathbf{U}\mathbf{X}` with :math:`u_i = 1/\max(\|\mathbf{h}_i -
    \mathbf{x}_i\|, \epsilon)` by conjugate gradient, from one
    :obj:`"amp"` step (at :math:`\mathbf{X}` every residual is zero), on the energy with the
    residual norm smoothed below :obj:`eps`; its energy never increases
    (needs :math:`0 < \lambda`).

    Cost per :obj:`"amp"` step: one product with :math:`\hat{\mathbf{A}}`,
    :math:`O(E F)`, as APPNP's.

    **Projection: identity, decoupled**, as in the paper (an MLP, then one
    propagation).

    Args:
        lam (float, optional): :math:`\lambda \in [0, 1]`.
            (default: :obj:`0.5`)
        K (int, optional): Steps of :obj:`"amp"`; the most reweightings of
            :obj:`"irls"`. (default: :obj:`10`)
        eps (float, optional): The smoothing width of :obj:`"irls"`.
            (default: :obj:`1e-4`)
        irls_tol (float, optional): The relative change (the largest
            over the graph's connected components) at which :obj:`"irls"` stops.
            (default: :obj:`1e-3`)
    """
    name = 'airgnn'
    projection = 'identity'
    solvers = ('amp', 'irls')
    default_solver = 'amp'

    def __init__(self, lam: float = 0.5, K: int = 10, eps: float = 1e-4,
                 irls_tol: float = 1e-3) -> None:
        self.lam = check_real('lam', lam, 0.0, 1.0)
        self.K, self.irls_tol = check_steps(K, irls_tol)
        self.eps = L1Penalty(eps).eps

    def objective(self, h: Tensor, x: Tensor, graph: GraphOperators) -> Tensor:
        r""":math:`E(\mathbf{H})` with the residual norm smoothed below
        :obj:`eps`, the energy :obj:`"irls"` minimises: within
        :math:`\lambda\epsilon/2` per node of the exact one."""
        d = self.incidence(graph).gradient(h)
        return ((1.0 - self.lam) * (d * d).sum()
                + self.lam * L1Penalty(self.eps).value((h - x).norm(dim=-1)).sum())

    def irls_start(self, x: Tensor, graph: GraphOperators) -> Tensor:
        r"""One :obj:`"amp"` step from :math:`\mathbf{X}`, where every residual
        is zero and every weight :math:`u_i` would be capped at
        :math:`1/\epsilon`: a first reweighting there barely moves. The step
        lowers the exact energy, hence the smoothed one (equal at
        :math:`\mathbf{X}`, below it elsewhere)."""
        return self.step('amp', x, x, graph, None)[0]

    def system(self, h: Tensor, x: Tensor, graph: GraphOperators) -> System:
        if self.lam == 0:
            raise ValueError("AdaptiveResidualRegularizer(lam=0) has no unique minimiser (pure "
                             "smoothing): use solver='amp' or lam > 0")
        inc = self.incidence(graph)
        u = self.lam * L1Penalty(self.eps).weight((h - x).norm(dim=-1)).unsqueeze(-1)
        smooth = 2.0 * (1.0 - self.lam)

        base, scale = inc.scaled(None)  # the graph's weights, once for every product

        def product(y: Tensor) -> Tensor:
            return smooth * base.weighted_laplacian(y, scale) + u * y

        ones = u.new_ones(inc.num_edges)
        diag = smooth * base.weighted_diagonal(ones if scale is None else scale) \
            + u.detach().squeeze(-1)
        return product, diag, u * x

    def step(self, solver: str, h: Tensor, x: Tensor, graph: GraphOperators,
             state: Any) -> Tuple[Tensor, Any]:
        # H - 2 gamma (1 - lam) L~ H with gamma = 1/(2(1 - lam))
        y = graph.matmul(graph.adj, h, symmetric=True)
        if self.lam == 0:  # no residual term: pure smoothing
            return y, None
        if self.lam == 1:  # gamma infinite: the residual term alone, minimised by X
            return x, None
        threshold = self.lam / (2.0 * (1.0 - self.lam))  # gamma * lam
        r = y - x
        norm = r.norm(dim=-1, keepdim=True)
        # 1 - threshold / max(norm, threshold), without the reciprocal of a
        # subnormal threshold (infinite: NaN for a zero residual).
        floor = max(threshold, torch.finfo(r.dtype).tiny)
        return x + ((norm - threshold).clamp_min(0.0) / norm.clamp_min(floor)) * r, None
