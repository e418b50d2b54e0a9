r"""The regularisers of Table 1 that are functions of one graph: GCN, SGC,
APPNP, JKNet, DAGNN, GNN-LF and GNN-HF.

Each is data: its coefficients and the two affine functions of
:math:`\hat{\mathbf{A}}` that define it, :math:`\mathbf{M} = m_0\mathbf{I} +
m_1\hat{\mathbf{A}}` and :math:`\mathbf{B} = b_0\mathbf{I} + b_1\hat{\mathbf{A}}`,
so that :math:`\mathbf{R} = \mathbf{B}^{-1}\mathbf{M}` and the propagation is
:math:`\mathbf{M}^{-1}\mathbf{B}`, with frequency response
:math:`(b_0 + b_1\lambda) / (m_0 + m_1\lambda)`. The paper's :math:`K`-term rules
are Neumann series of :math:`\mathbf{M}^{-1} = m_0^{-1}\sum_k
(-m_1\hat{\mathbf{A}}/m_0)^k`.
"""
import math
from typing import Any, List, Optional, Tuple

import torch
from torch import Tensor
from torch.nn.parameter import is_lazy
from torch_geometric.nn.dense.linear import Linear

from torch_geometric_regcn.linalg.graph_operator import linear_combination
from torch_geometric_regcn.regularizers.base import GraphOperators, Regularizer
from torch_geometric_regcn.regularizers.registry import register
from torch_geometric_regcn.utils.validation import check_flag, check_int, check_real


def check_system_range(regularizer: 'AffineRegularizer', dtype: torch.dtype) -> None:
    r"""Raises :class:`ValueError` where a fixed coefficient of
    :math:`\mathbf{M} = m_0\mathbf{I} + m_1\hat{\mathbf{A}}` lies beyond
    the range of :obj:`dtype` (e.g. the signed regulariser's :math:`1 +
    \alpha` at :math:`\alpha = 10^{39}` in float32), where the solvers would
    turn it into an infinity: conjugate gradient then blames its matrix,
    and the series returns zeros."""
    largest = torch.finfo(dtype).max
    beyond = [value for value in regularizer.m
              if not isinstance(value, Tensor) and abs(value) > largest]
    if beyond:
        raise ValueError(f"{regularizer!r}: its system M = m0 I + m1 A^ has the coefficients "
                         f"{tuple(regularizer.m)}, beyond the range of {dtype} (largest "
                         f"{largest:.3g}); choose smaller coefficients or solve in float64")


class AffineRegularizer(Regularizer):
    r"""Base class of a regulariser affine in :math:`\hat{\mathbf{A}}` on both
    sides,

    .. math::
        \mathbf{R} = (b_0\mathbf{I} + b_1\hat{\mathbf{A}})^{-1}
        (m_0\mathbf{I} + m_1\hat{\mathbf{A}}), \qquad
        g(\lambda) = \frac{b_0 + b_1\lambda}{m_0 + m_1\lambda};

    subclasses set :obj:`m` :math:`= (m_0, m_1)` and :obj:`b` :math:`= (b_0,
    b_1)` (default :math:`(1, 0)`); :math:`g` is the frequency response of
    the exact propagation :math:`\mathbf{M}^{-1}\mathbf{B}` on an eigenvalue
    :math:`\lambda` of :math:`\hat{\mathbf{A}}`. :obj:`"series"` is the
    :obj:`K`-term Neumann series :math:`m_0^{-1}\sum_{k<K}(-m_1\hat{\mathbf{A}}
    /m_0)^k\mathbf{B}\mathbf{X}`: :math:`K - 1` sparse products, one more
    where :math:`b_1 \neq 0`."""
    projection = 'identity'
    default_solver = 'series'

    @property
    def m(self) -> Tuple[float, float]:
        raise NotImplementedError

    @property
    def b(self) -> Tuple[float, float]:
        return (1.0, 0.0)

    def operator(self, graph: GraphOperators) -> Tensor:
        check_system_range(self, graph.dtype)
        return linear_combination([graph.identity(), graph.adj], self.m)

    def operator_terms(self, graph: GraphOperators) -> List[Tuple[Any, Optional[Tensor]]]:
        m0, m1 = self.m
        return [(m0, None), (m1, graph.adj)]

    def numerator(self, x: Tensor, graph: GraphOperators) -> Tensor:
        b0, b1 = self.b
        return b0 * x + b1 * graph.matmul(graph.adj, x, symmetric=True) if b1 else b0 * x

    def neumann(self, x: Tensor, graph: GraphOperators, terms: int) -> Tensor:
        r""":math:`m_0^{-1}\sum_{k<\text{terms}} (-m_1\hat{\mathbf{A}}/m_0)^k
        \mathbf{B}\mathbf{X}`."""
        m0, m1 = self.m
        term = self.numerator(x, graph) / m0
        out = term
        for _ in range(terms - 1):
            term = (-m1 / m0) * graph.matmul(graph.adj, term, symmetric=True)
            out = out + term
        return out

    def neumann_response(self, lam: Tensor, terms: int) -> Tensor:
        (m0, m1), (b0, b1) = self.m, self.b
        powers = (-m1 / m0 * lam).unsqueeze(-1) ** torch.arange(terms, dtype=lam.dtype,
                                                                 device=lam.device)
        return (b0 + b1 * lam) / m0 * powers.sum(-1)

    def series(self, x: Tensor, graph: GraphOperators) -> Tensor:
        return self.neumann(x, graph, self.K)

    def frequency_response(self, lam: Tensor) -> Tensor:
        if self.default_solver == 'series':
            return self.neumann_response(lam, self.K)
        (m0, m1), (b0, b1) = self.m, self.b
        return (b0 + b1 * lam) / (m0 + m1 * lam)


def check_reciprocal_alpha(alpha: float) -> float:
    r"""Returns :obj:`alpha` of APPNP, GNN-LF or GNN-HF, in :math:`(0, 1]`
    with :math:`1/\alpha` finite: their :math:`\mathbf{M}` holds
    :math:`1/\alpha`, which overflows for a subnormal :obj:`alpha`."""
    alpha = check_real('alpha', alpha, 0.0, 1.0, low_open=True)
    if math.isinf(1.0 / alpha):
        raise ValueError(f"'alpha' = {alpha!r} is so small that 1 / alpha, a coefficient of "
                         f"the system matrix M, overflows; use alpha >= 1e-300")
    return alpha

@register
class GCNRegularizer(AffineRegularizer):
    r"""The regulariser of GCN from the `"Semi-supervised Classification with
    Graph Convolutional Networks" <https://arxiv.org/abs/1609.02907>`_ paper
    (Kipf and Welling, ICLR 2017),

    .. math::
        \mathbf{R} = \tilde{\mathbf{L}} = \mathbf{I} - \hat{\mathbf{A}},
        \qquad \mathbf{H}^{\prime} = \hat{\mathbf{A}}\mathbf{H}\mathbf{\Theta},

    the rule being the renormalised first-order truncation of
    :math:`(\mathbf{I} - \tilde{\mathbf{A}})^{-1} = \sum_k \tilde{\mathbf{A}}^k`.
    :math:`\tilde{\mathbf{L}}` is singular, so the exact minimiser does not exist
    and only :obj:`"series"` is offered. Projection: ReLU."""
    name = 'gcn'
    projection = 'relu'
    solvers = ('series',)
    m = (1.0, 0.0)
    b = (0.0, 1.0)
    K = 1

    def regularizer_matrix(self, graph: GraphOperators) -> Tensor:
        return linear_combination([graph.identity(), graph.adj], (1.0, -1.0)).to_dense()

    def frequency_response(self, lam: Tensor) -> Tensor:
        return lam


@register
class SGCRegularizer(GCNRegularizer):
    r"""The regulariser of SGC from the `"Simplifying Graph Convolutional
    Networks" <https://arxiv.org/abs/1902.07153>`_ paper (Wu et al., ICML
    2019),

    .. math::
        \mathbf{R} = \tilde{\mathbf{L}}, \qquad
        \mathbf{X}^{\prime} = \hat{\mathbf{A}}^K\mathbf{X}\mathbf{\Theta},

    only :obj:`"series"` (:math:`K` sparse products). Projection: identity.

    Args:
        K (int, optional): Number of hops. (default: :obj:`2`)
    """
    name = 'sgc'
    projection = 'identity'

    def __init__(self, K: int = 2) -> None:
        self.K = check_int('K', K)

    def series(self, x: Tensor, graph: GraphOperators) -> Tensor:
        for _ in range(self.K):
            x = graph.matmul(graph.adj, x, symmetric=True)
        return x

    def frequency_response(self, lam: Tensor) -> Tensor:
        return lam**self.K


@register
class APPNPRegularizer(AffineRegularizer):
    r"""The regulariser of APPNP from the `"Predict then Propagate: Graph
    Neural Networks meet Personalized PageRank"
    <https://arxiv.org/abs/1810.05997>`_ paper (Klicpera et al., ICLR 2019):
    the fixed point of the rule

    .. math::
        \mathbf{H}^{(k+1)} = (1-\alpha)\hat{\mathbf{A}}\mathbf{H}^{(k)} +
        \alpha\mathbf{H}^{(0)}, \qquad
        \mathbf{R} = \frac{\mathbf{I} - (1-\alpha)\hat{\mathbf{A}}}{\alpha},

    minimises the energy with that :math:`\mathbf{R}` (each step minimises the
    paper's per-step regulariser :math:`\frac{1}{1-\alpha}\hat{\mathbf{A}}^{-1}
    (\mathbf{H} - 2\alpha\mathbf{H}^{(0)})`). :obj:`"series"` runs the :obj:`K`
    steps, as PyG's :class:`~torch_geometric.nn.conv.APPNP`. Projection: identity.

    Args:
        K (int, optional): Number of steps. (default: :obj:`10`)
        alpha (float, optional): Teleport probability in :math:`(0, 1]`.
            (default: :obj:`0.1`)
    """
    name = 'appnp'
    decoupled = True
    learnable = {'alpha': 'unit'}
    open_ends = {'alpha': frozenset({'low'})}  # M = (I - (1 - alpha) A^) / alpha

    def __init__(self, K: int = 10, alpha: float = 0.1) -> None:
        self.K = check_int('K', K)
        self.alpha = check_reciprocal_alpha(alpha)

    @property
    def m(self) -> Tuple[float, float]:
        return (1.0 / self.alpha, -(1.0 - self.alpha) / self.alpha)

    def series(self, x: Tensor, graph: GraphOperators) -> Tensor:
        h = x
        for _ in range(self.K):
            h = (1.0 - self.alpha) * graph.matmul(graph.adj, h, symmetric=True) + self.alpha * x
        return h

    def frequency_response(self, lam: Tensor) -> Tensor:
        ratio = (1.0 - self.alpha) * lam
        powers = ratio.unsqueeze(-1) ** torch.arange(self.K, dtype=lam.dtype, device=lam.device)
        return self.alpha * powers.sum(-1) + ratio**self.K


@register
class JKNetRegularizer(AffineRegularizer):
    r"""The regulariser of JKNet from the `"Representation Learning on Graphs
    with Jumping Knowledge Networks" <https://arxiv.org/abs/1806.03536>`_
    paper (Xu et al., ICML 2018),

    .. math::
        \mathbf{R} = \hat{\mathbf{A}}^{-1}(\mathbf{I} + \beta\tilde{\mathbf{L}}),
        \qquad \mathbf{H}^{\prime} = \sum_{k=1}^{K}\alpha_k
        \hat{\mathbf{A}}^k\mathbf{H}\mathbf{\Theta}, \quad
        \alpha_k = \frac{\beta^{k-1}}{(1+\beta)^k}.

    :math:`\mathbf{R}` is indefinite where :math:`\hat{\mathbf{A}}` has
    negative eigenvalues, so the rule is a
    stationary point of the energy, a minimum only on graphs with
    :math:`\hat{\mathbf{A}} \succ 0`. Projection: identity.

    Args:
        K (int, optional): Number of hops. (default: :obj:`4`)
        beta (float, optional): :math:`\beta \geq 0`. (default: :obj:`1.0`)
    """
    name = 'jknet'
    learnable = {'beta': 'positive'}

    def __init__(self, K: int = 4, beta: float = 1.0) -> None:
        self.K = check_int('K', K)
        self.beta = check_real('beta', beta, 0.0, math.inf)

    @property
    def m(self) -> Tuple[float, float]:
        return (1.0 + self.beta, -self.beta)

    b = (0.0, 1.0)


@register
class DAGNNRegularizer(AffineRegularizer):
    r"""The regulariser of DAGNN from the `"Towards Deeper Graph Neural
    Networks" <https://arxiv.org/abs/2007.09296>`_ paper (Liu et al., KDD
    2020),

    .. math::
        \mathbf{R} = \mathbf{I} + \beta\tilde{\mathbf{L}}, \qquad
        \mathbf{H}^{\prime} = \sum_{k=0}^{K} \mathbf{s}_k \odot
        \hat{\mathbf{A}}^k\mathbf{H}^{(0)}, \quad
        \mathbf{s}_k = \sigma(\hat{\mathbf{A}}^k\mathbf{H}^{(0)}\mathbf{q} + b),

    where the per-node retainment scores :math:`\mathbf{s}_k` are learned by
    the gate :obj:`gate` (a linear map to one channel, its input size that
    of the layer's output, or inferred on the first call when the
    regulariser is used alone). With :obj:`adaptive=False` the weights are
    the Neumann ones :math:`\beta^k/(1+\beta)^{k+1}`, which the frequency
    response reports. Projection: identity.

    Args:
        K (int, optional): Number of hops. (default: :obj:`10`)
        beta (float, optional): :math:`\beta \geq 0`. (default: :obj:`1.0`)
        adaptive (bool, optional): Learn the retainment scores, which only
            :obj:`"series"` reads; :obj:`"closed"` and :obj:`"cg"` solve with
            :math:`\mathbf{R}` and need :obj:`adaptive=False`.
            (default: :obj:`True`)
    """
    name = 'dagnn'
    decoupled = True
    structural = frozenset({'adaptive'})  # whether the gate exists

    def __init__(self, K: int = 10, beta: float = 1.0, adaptive: bool = True) -> None:
        self.K = check_int('K', K)
        self.beta = check_real('beta', beta, 0.0, math.inf)
        self.adaptive = check_flag('adaptive', adaptive)
        self.register_module('gate', Linear(-1, 1) if self.adaptive else None)

    @property
    def m(self) -> Tuple[float, float]:
        return (1.0 + self.beta, -self.beta)

    def series(self, x: Tensor, graph: GraphOperators) -> Tensor:
        if self.gate is None:  # the Neumann weights of k = 0..K
            return self.neumann(x, graph, self.K + 1)
        hops = [x]
        for _ in range(self.K):
            hops.append(graph.matmul(graph.adj, hops[-1], symmetric=True))
        stack = torch.stack(hops, dim=1)  # [N, K + 1, F]
        # The gate in its own dtype (half precision is solved in float32).
        weight = self.gate.weight
        scores = torch.sigmoid(self.gate(stack.to(weight.dtype))).to(stack.dtype)  # [N, K+1, 1]
        return (scores * stack).sum(dim=1)

    def check_solver(self, solver: Optional[str]) -> str:
        r"""As :meth:`Regularizer.check_solver
        <torch_geometric_regcn.regularizers.Regularizer.check_solver>`; the
        learned gate is read by :obj:`"series"` only (the exact solvers solve
        with :math:`\mathbf{R}`, which it is not part of), so with
        :obj:`adaptive=True` any other raises: its parameters would never be
        used or trained."""
        solver = super().check_solver(solver)
        if self.gate is not None and solver != 'series':
            raise ValueError(f"solver={solver!r} solves with R = I + beta L and never reads "
                             f"DAGNN's learned gate (adaptive=True): use solver='series' to "
                             f"propagate with the gate, or adaptive=False for the closed form")
        return solver

    def initialize_channels(self, channels: int) -> None:
        # The gate's input size, known to a layer: no lazy parameter left in
        # a fresh layer's state_dict (torch.load(weights_only=True) refuses one).
        if self.gate is not None and is_lazy(self.gate.weight):
            self.register_module('gate', Linear(channels, 1))

    def frequency_response(self, lam: Tensor) -> Tensor:
        r"""The Neumann weights' response, :math:`\sum_{k=0}^{K}\beta^k
        \lambda^k/(1+\beta)^{k+1}`, the propagation of :obj:`adaptive=False`.
        With the learned gate (:obj:`adaptive=True`) the scores differ per node
        and per input, so the propagation has no frequency response:
        :class:`ValueError`."""
        if self.gate is not None:
            raise ValueError(f"{self!r} propagates with per-node scores learned by its gate, "
                             f"which depend on the input: it has no frequency response. "
                             f"DAGNNRegularizer(adaptive=False) propagates with the Neumann "
                             f"weights, whose response this reports")
        return self.neumann_response(lam, self.K + 1)


@register
class GNNLFRegularizer(AffineRegularizer):
    r"""The low-pass regulariser of GNN-LF from the `"Interpreting and Unifying
    Graph Neural Networks with An Optimization Framework"
    <https://arxiv.org/abs/2101.11859>`_ paper (Zhu et al., WWW 2021), rule

    .. math::
        \mathbf{H}^{\prime} = \{\mu\mathbf{I} + (1-\mu)\hat{\mathbf{A}} +
        (1/\alpha - 1)(\mathbf{I} - \hat{\mathbf{A}})\}^{-1}
        \{\mu\mathbf{I} + (1-\mu)\hat{\mathbf{A}}\}\mathbf{H}\mathbf{\Theta},

    the tsGCN paper's :math:`(\mathbf{I} +
    \lambda\hat{\mathbf{A}})^{-1}(\mathbf{I} + \mu'\hat{\mathbf{A}})` up to a scale.
    Needs :math:`2\mu + 2/\alpha > 3` for :math:`\mathbf{M} \succ 0`.
    Projection: ReLU.

    Args:
        alpha (float, optional): :math:`\alpha \in (0, 1]`. (default: :obj:`0.1`)
        mu (float, optional): :math:`\mu \in [0, 1]`. (default: :obj:`0.9`)
        K (int, optional): Terms of the :obj:`"series"` solver. (default: :obj:`10`)
    """
    name = 'gnn_lf'
    decoupled = True  # Zhu et al. propagate MLP(X) once
    projection = 'relu'
    default_solver = 'cg'

    def __init__(self, alpha: float = 0.1, mu: float = 0.9, K: int = 10) -> None:
        alpha = check_reciprocal_alpha(alpha)
        mu = check_real('mu', mu, 0.0, 1.0)
        if not 2 * mu + 2 / alpha > 3:
            raise ValueError(f"GNN-LF needs 2 * mu + 2 / alpha > 3 for a positive definite "
                             f"system (got alpha={alpha}, mu={mu}); lower 'alpha' or raise 'mu'")
        self.alpha, self.mu, self.K = alpha, mu, check_int('K', K)

    @property
    def m(self) -> Tuple[float, float]:
        return (self.mu + 1 / self.alpha - 1, 2 - self.mu - 1 / self.alpha)

    @property
    def b(self) -> Tuple[float, float]:
        return (self.mu, 1 - self.mu)


@register
class GNNHFRegularizer(AffineRegularizer):
    r"""The high-pass regulariser of GNN-HF from the `"Interpreting and
    Unifying Graph Neural Networks with An Optimization Framework"
    <https://arxiv.org/abs/2101.11859>`_ paper (Zhu et al., WWW 2021), rule

    .. math::
        \mathbf{H}^{\prime} = \{(\beta + 1/\alpha)\mathbf{I} +
        (1 - \beta - 1/\alpha)\hat{\mathbf{A}}\}^{-1}
        (\mathbf{I} + \beta\tilde{\mathbf{L}})\mathbf{H}\mathbf{\Theta},

    the tsGCN paper's :math:`(\mathbf{I} + \lambda\hat{\mathbf{L}})^{-1}(\mathbf{I} +
    \mu\hat{\mathbf{L}})` with :math:`\lambda = \beta + 1/\alpha - 1`,
    :math:`\mu = \beta`. Projection: ReLU.

    Args:
        alpha (float, optional): :math:`\alpha \in (0, 1]`. (default: :obj:`0.1`)
        beta (float, optional): :math:`\beta \geq 0`. (default: :obj:`1.0`)
        K (int, optional): Terms of the :obj:`"series"` solver. (default: :obj:`10`)
    """
    name = 'gnn_hf'
    decoupled = True  # Zhu et al. propagate MLP(X) once
    projection = 'relu'
    default_solver = 'cg'

    def __init__(self, alpha: float = 0.1, beta: float = 1.0, K: int = 10) -> None:
        self.alpha = check_reciprocal_alpha(alpha)
        self.beta = check_real('beta', beta, 0.0, math.inf)
        self.K = check_int('K', K)

    @property
    def m(self) -> Tuple[float, float]:
        return (self.beta + 1 / self.alpha, 1 - self.beta - 1 / self.alpha)

    @property
    def b(self) -> Tuple[float, float]:
        return (1 + self.beta, -self.beta)
