r"""A robust regulariser: a penalty on the norms of the edge differences that
grows slower than the square, solved by iteratively reweighted least squares."""
import math
from typing import Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.regularizers.graph import GraphOperators
from torch_geometric_regcn.regularizers.iterative import (
    IterativeRegularizer,
    System,
    check_steps,
    smoothing_system,
)
from torch_geometric_regcn.regularizers.penalties import (
    PENALTIES,
    HuberPenalty,
    L1Penalty,
    MCPPenalty,
    Penalty,
)
from torch_geometric_regcn.regularizers.registry import register
from torch_geometric_regcn.utils.validation import check_choice, check_real


@register
class RobustRegularizer(IterativeRegularizer):
    r"""Robust graph smoothing, in the spirit of TWIRLS (`"Graph Neural
    Networks Inspired by Classical Iterative Algorithms"
    <https://arxiv.org/abs/2103.06064>`_, Yang et al., ICML 2021) and RUNG
    (`"Robust Graph Neural Networks via Unbiased Aggregation"
    <https://arxiv.org/abs/2311.14934>`_, Hou et al., NeurIPS 2024): the layer
    minimises

    .. math::
        E(\mathbf{H}) = \tfrac{1}{2}\|\mathbf{H} - \mathbf{X}\|_F^2 +
        \lambda\sum_{\{i,j\} \in \mathcal{E}}\rho\big(\|(\mathbf{B}\mathbf{H})_{ij}\|\big),

    with :math:`(\mathbf{B}\mathbf{H})_{ij} = \sqrt{w_{ij}}(\mathbf{h}_i/
    \sqrt{\tilde d_i} - \mathbf{h}_j/\sqrt{\tilde d_j})` and a penalty
    :math:`\rho` that grows slower than :math:`t^2/2`: :obj:`"huber"`
    (quadratic up to :obj:`threshold`, then linear), :obj:`"mcp"` (the
    minimax concave penalty, constant beyond :obj:`threshold`: an edge
    whose endpoints differ by more stops pulling them together, as an
    adversarial edge between classes should) or :obj:`"l1"` (total
    variation). See :mod:`~torch_geometric_regcn.regularizers.penalties`.
    A quadratic :math:`\rho = t^2/2` would be the APPNP-type energy with
    :math:`\mathbf{R} = \mathbf{I} + \lambda\tilde{\mathbf{L}}`.

    **Solver** :obj:`"irls"`: each reweighting solves :math:`(\mathbf{I} +
    \lambda\mathbf{B}^{\top}\mathbf{W}\mathbf{B})\mathbf{H} = \mathbf{X}`,
    :math:`\mathbf{W} = \mathrm{diag}(\rho'(t_e)/t_e)` at the current
    differences, by conjugate gradient; since :math:`\rho(\sqrt{s})` is
    concave, the energy never increases (majorise-minimise). The edge
    weights of the last reweighting, :math:`\lambda w_{ij}\rho'(t_e)/t_e`
    (zero on an edge that :obj:`"mcp"` cut), are :meth:`edge_weights`, the
    regulariser's own explanation of which edges it trusted.

    Cost per reweighting: a conjugate gradient solve, :math:`O(E F)` per CG
    iteration, about :math:`\sqrt{\kappa}` iterations for the condition
    number :math:`\kappa \leq 1 + 2\lambda\max_e w_e` (see :obj:`eps`).

    **Projection: identity, decoupled** (an MLP, then one propagation).

    Args:
        lam (float, optional): :math:`\lambda > 0`. (default: :obj:`3.0`)
        penalty (str, optional): :obj:`"huber"`, :obj:`"mcp"` or
            :obj:`"l1"`. (default: :obj:`"mcp"`)
        threshold (float, optional): Huber's :math:`\delta` or the MCP's
            :math:`\gamma` (with unit slope at zero), in units of the
            normalised difference. (default: :obj:`1.0`)
        K (int, optional): The most reweightings. (default: :obj:`10`)
        eps (float, optional): The smoothing width of :obj:`"mcp"` and
            :obj:`"l1"` at zero, which caps the weights at :math:`1/\epsilon`
            and so the condition number of each solve at :math:`1 +
            2\lambda/\epsilon`: a smaller one is closer to the unsmoothed
            penalty and slower to solve. (default: :obj:`0.1`)
        irls_tol (float, optional): The relative change (the largest
            over the graph's connected components) at which the iteration stops.
            (default: :obj:`1e-3`)
    """
    name = 'robust'
    scales = ('lam',)
    projection = 'identity'
    solvers = ('irls',)
    default_solver = 'irls'

    def __init__(self, lam: float = 3.0, penalty: str = 'mcp', threshold: float = 1.0,
                 K: int = 10, eps: float = 0.1, irls_tol: float = 1e-3) -> None:
        self.lam = check_real('lam', lam, 0.0, math.inf, low_open=True)
        self.penalty = check_choice('penalty', penalty, tuple(PENALTIES))
        self.threshold = check_real('threshold', threshold, 0.0, math.inf, low_open=True)
        self.K, self.irls_tol = check_steps(K, irls_tol)
        self.eps = check_real('eps', eps, 0.0, math.inf, low_open=True)
        if self.penalty == 'mcp' and not self.eps < self.threshold:
            raise ValueError(f"RobustRegularizer(penalty='mcp') needs eps < threshold (got "
                             f"eps={self.eps}, threshold={self.threshold}): the smoothing at "
                             f"zero must end before the penalty flattens; lower 'eps'")

    def rho(self) -> Penalty:
        r"""The penalty :math:`\rho`."""
        if self.penalty == 'huber':
            return HuberPenalty(self.threshold)
        if self.penalty == 'mcp':
            return MCPPenalty(1.0, self.threshold, self.eps)
        return L1Penalty(self.eps)

    def objective(self, h: Tensor, x: Tensor, graph: GraphOperators) -> Tensor:
        r""":math:`E(\mathbf{H})` (with :math:`\rho` smoothed below :obj:`eps`)."""
        t = self.incidence(graph).gradient(h).norm(dim=-1)
        return 0.5 * (h - x).square().sum() + self.lam * self.rho().value(t).sum()

    def edge_weights(self, h: Tensor, graph: GraphOperators) -> Tuple[Tensor, Tensor]:
        r"""The weight :math:`\lambda w_{ij}\rho'(t_e)/t_e` of each undirected
        edge :math:`e = \{i, j\}` in the reweighted problem at :obj:`h`: the
        graph's weight :math:`w_{ij}` (an explainer's mask included) scaled by
        the reweighting, so zero for an edge that :obj:`"mcp"` cut and for one
        of weight zero. Returns :obj:`(edge_index [2, E'], weight [E'])`,
        :math:`i < j`."""
        inc = self.incidence(graph)
        t = inc.gradient(h).norm(dim=-1)
        weight = inc.weight if inc.weight is not None else 1.0  # unit: rows without weights
        return torch.stack([inc.src, inc.dst]), self.lam * weight * self.rho().weight(t)

    def system(self, h: Tensor, x: Tensor, graph: GraphOperators) -> System:
        inc = self.incidence(graph)
        t = inc.gradient(h).norm(dim=-1)
        return smoothing_system(inc, self.lam * self.rho().weight(t), x)

