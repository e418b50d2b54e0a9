r"""pGNN's regulariser: the :math:`p`-Laplacian energy, solved by pGNN's
fixed-point message passing."""
import math
from typing import Any, Tuple

from torch import Tensor

from torch_geometric_regcn.regularizers.graph import GraphOperators
from torch_geometric_regcn.regularizers.iterative import (
    IterativeRegularizer,
    System,
    check_steps,
    smoothing_system,
)
from torch_geometric_regcn.regularizers.penalties import PowerPenalty
from torch_geometric_regcn.regularizers.registry import register
from torch_geometric_regcn.utils.validation import check_real


@register
class PLaplacianRegularizer(IterativeRegularizer):
    r"""The regulariser of pGNN (`"p-Laplacian Based Graph Neural Networks"
    <https://arxiv.org/abs/2111.07337>`_, Fu et al., ICML 2022): the layer
    minimises the :math:`p`-Laplacian energy with a fitting term,

    .. math::
        E(\mathbf{H}) = \tfrac{1}{2}\|\mathbf{H} - \mathbf{X}\|_F^2 +
        \frac{1}{2\mu}\sum_{\{i,j\} \in \mathcal{E}} \Big\|\sqrt{\tfrac{w_{ij}}
        {d_i}}\mathbf{h}_i - \sqrt{\tfrac{w_{ij}}{d_j}}\mathbf{h}_j\Big\|^p,

    (the paper's :math:`\mu\|\mathbf{H} - \mathbf{X}\|^2 + \mathcal{S}_p(\mathbf{H})`
    divided by :math:`2\mu`), with the degrees :math:`d_i = \sum_j w_{ij}`
    of the graph without self loops (as the paper's; so a node whose only
    edge has weight :math:`w` reads :math:`\sqrt{w / d_i} = 1` for every
    :math:`w > 0`: the output is discontinuous at :math:`w = 0`, where
    autograd's derivative is zero), :math:`1 \leq p \leq 2`. :math:`p = 2`
    is Laplacian smoothing (a linear filter); as :math:`p` falls towards 1
    (total variation) large differences between neighbours cost less, so
    heterophilous edges are smoothed less.

    **Solvers.** :obj:`"fixed_point"` (default): pGNN's message passing,
    :obj:`K` steps from :math:`\mathbf{H}_0 = \mathbf{X}`,

    .. math::
        \mathbf{h}_i^{(k+1)} = \alpha_i \sum_j \frac{M_{ij}}{\sqrt{d_i d_j}}
        \mathbf{h}_j^{(k)} + \beta_i \mathbf{x}_i, \quad
        M_{ij} = w_{ij}\Big\|\sqrt{\tfrac{w_{ij}}{d_i}}\mathbf{h}_i^{(k)} -
        \sqrt{\tfrac{w_{ij}}{d_j}}\mathbf{h}_j^{(k)}\Big\|^{p-2},

    :math:`\alpha_i = 1/(\sum_j M_{ij}/d_i + 2\mu/p)`, :math:`\beta_i =
    (2\mu/p)\,\alpha_i` (the paper's equations). Each step is one Jacobi sweep
    of the reweighted least-squares problem at :math:`\mathbf{H}_k`, which
    majorises the energy, and a Jacobi sweep of a problem whose matrix is
    :math:`\mathbf{I}` plus a weighted Laplacian never raises it: the energy
    never increases. :obj:`"irls"` solves each reweighted problem exactly by
    conjugate gradient instead (fewer, dearer iterations). Both smooth
    :math:`\|\cdot\|^{p-2}` below :obj:`eps` (see
    :class:`~torch_geometric_regcn.regularizers.penalties.PowerPenalty`);
    pGNN's code sets the weight of an edge with a zero difference to zero
    instead. This class follows the paper's equations; pGNN's code
    (``src/pgnn_conv.py``) differs from them: it takes :math:`\alpha` of the
    sending node of each message, uses :math:`\beta_i = (4\mu/p)\,\alpha_i`
    (so an isolated node returns :math:`2\mathbf{x}_i`), keeps self loops of
    the input in the edges and degrees, and reads a directed
    :obj:`edge_index` as given (this layer symmetrises the graph and drops
    self loops, as every regulariser of the package reads a graph).

    Cost per step: :math:`O(E F)`, about twice APPNP's step.

    **Projection: identity, decoupled**: an MLP, then one propagation (pGNN
    propagates its hidden features and then applies a linear layer).

    Args:
        p (float, optional): :math:`p \in [1, 2]`. (default: :obj:`1.5`)
        mu (float, optional): :math:`\mu > 0`, the weight of the fitting
            term. (default: :obj:`0.1`)
        K (int, optional): Steps of :obj:`"fixed_point"`; the most
            reweightings of :obj:`"irls"`. (default: :obj:`4`)
        eps (float, optional): The smoothing width. (default: :obj:`1e-4`)
        irls_tol (float, optional): The relative change (the largest
            over the graph's connected components) at which :obj:`"irls"` stops.
            (default: :obj:`1e-3`)
    """
    name = 'pgnn'
    projection = 'identity'
    solvers = ('fixed_point', 'irls')
    default_solver = 'fixed_point'
    self_loops = False

    def __init__(self, p: float = 1.5, mu: float = 0.1, K: int = 4, eps: float = 1e-4,
                 irls_tol: float = 1e-3) -> None:
        penalty = PowerPenalty(p, eps)
        self.p, self.eps = penalty.p, penalty.eps
        self.mu = check_real('mu', mu, 0.0, math.inf, low_open=True)
        self.K, self.irls_tol = check_steps(K, irls_tol)

    def objective(self, h: Tensor, x: Tensor, graph: GraphOperators) -> Tensor:
        r""":math:`E(\mathbf{H})` with the smoothed penalty: where every edge
        difference exceeds :obj:`eps`, the exact energy less the constant
        :math:`(1 - p/2)\epsilon^p / (2\mu)` per edge."""
        t = self.incidence(graph).gradient(h).norm(dim=-1)
        penalty = PowerPenalty(self.p, self.eps)
        return 0.5 * (h - x).square().sum() + penalty.value(t).sum() / (2.0 * self.mu)

    def system(self, h: Tensor, x: Tensor, graph: GraphOperators) -> System:
        inc = self.incidence(graph)
        t = inc.gradient(h).norm(dim=-1)
        return smoothing_system(inc, PowerPenalty(self.p, self.eps).weight(t) / (2.0 * self.mu), x)

    def step(self, solver: str, h: Tensor, x: Tensor, graph: GraphOperators,
             state: Any) -> Tuple[Tensor, Any]:
        product, diag, rhs = self.system(h, x, graph)  # one Jacobi sweep
        return h + (rhs - product(h)) / diag.unsqueeze(-1), None
