r"""The tsGCN regulariser: topological and semantic, and its operator
:math:`\mathbf{S}`."""
from typing import Any, FrozenSet, List, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, agree_arguments
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.linalg.graph_operator import coo_entries, linear_combination
from torch_geometric_regcn.linalg.sharded_matrix import ShardedMatrix
from torch_geometric_regcn.linalg.woodbury import WoodburyCache, woodbury_apply
from torch_geometric_regcn.regularizers.base import Regularizer
from torch_geometric_regcn.regularizers.graph import GraphOperators, Operator
from torch_geometric_regcn.regularizers.registry import register
from torch_geometric_regcn.utils.deprecation import warn_deprecated
from torch_geometric_regcn.utils.validation import (
    check_coefficient,
    check_flag,
    check_int,
    check_real,
)


def check_tsgcn_coefficients(alpha: float, beta: float, k: int) -> Tuple[float, float, int]:
    r"""The checks of tsGCN's :math:`\alpha`, :math:`\beta` and :math:`k`,
    shared by the regulariser and :class:`~torch_geometric_regcn.LowRankInverse`;
    returns them as :obj:`(float, float, int)`."""
    alpha, beta = check_real('alpha', alpha, 0.0), check_real('beta', beta, 0.0)
    if alpha == 0 and beta == 0:
        raise ValueError("'alpha' and 'beta' cannot both be zero: the propagation would be "
                         "the identity; use a plain MLP instead")
    return alpha, beta, check_int('k', k)


def tsgcn_adjacency(graph: GraphOperators, alpha: float, beta: float,
                    k: int = 10) -> Operator:
    r"""The operator of tsGCN,

    .. math::
        \mathbf{S} = \frac{\alpha \hat{\mathbf{A}}_G + \beta \hat{\mathbf{A}}_X}
        {1 + \alpha + \beta},
        \qquad
        \mathbf{I} + \alpha \tilde{\mathbf{L}}_G + \beta \tilde{\mathbf{L}}_X
        = (1 + \alpha + \beta)(\mathbf{I} - \mathbf{S}),

    with :math:`\hat{\mathbf{A}}_G` the renormalised adjacency of the graph
    and :math:`\hat{\mathbf{A}}_X` that of its semantic graph (given, or the
    cosine :obj:`k`-NN graph of the features; see
    :meth:`GraphOperators.semantic_adjacency`). A term whose coefficient is
    zero is never built. Every tsGCN solver and
    :class:`~torch_geometric_regcn.LowRankInverse` use this one function, in
    one process and on row shards.

    Args:
        graph (GraphOperators): The graph; with a :obj:`partition` and a
            :obj:`group`, this rank's shard of it.
        alpha (float or torch.Tensor): The weight :math:`\alpha \geq 0` of
            the graph, a finite real number or, learned, a one-element
            tensor (through which the gradient flows).
        beta (float or torch.Tensor): The weight :math:`\beta \geq 0` of
            the semantic graph, likewise; not both zero.
        k (int, optional): Neighbours of a semantic graph built from the
            features. (default: :obj:`10`)

    Returns:
        :math:`\mathbf{S}`, sparse CSR :obj:`[N, N]`; on shards, this rank's
        rows as a :class:`~torch_geometric_regcn.linalg.ShardedMatrix`.

    Cost: the two normalised adjacencies (:math:`O(E \log E)`, plus the
    :math:`k`-NN search when the semantic graph is built from the features)
    and one sort of their entries, each built and added by chunks of rows
    directly in CSR form: the peak memory while :math:`\mathbf{S}` is built
    is :math:`O(\mathrm{nnz}(\mathbf{S}))` (this rank's rows on shards), no
    dense :math:`N \times N` matrix (``benchmarks/results/operator_build.md``
    measures the constant). With
    fixed coefficients the terms are freed once added (unless the graph keeps
    them already, e.g. for a regulariser's :attr:`~GraphOperators.adj`);
    learned ones keep them with the graph, which reuses them every step.
    """
    error, same = None, {}  # on shards agreed first: every rank builds the same terms
    try:  # learned coefficients are one-element tensors, read without their gradient
        a, b, k = check_tsgcn_coefficients(check_coefficient('alpha', alpha),
                                           check_coefficient('beta', beta), k)
        if b > 0 and graph.semantic_edge_index is None and graph.x is None:
            raise ValueError("beta > 0 needs node features 'data.x' or a precomputed "
                             "'data.semantic_edge_index' (see SemanticGraph); use beta=0 "
                             "for the topology-only model (tsGCN-t)")
        same = {"'alpha'": a, "'beta'": b, "'k'": k}
    except (TypeError, ValueError) as failure:
        error = failure
    agree_arguments(graph.group, 'tsgcn_adjacency', same, error)
    # The checked floats (NumPy's as Python's); a learned tensor stays, for its gradient.
    alpha, beta = (c if isinstance(c, Tensor) else f for c, f in ((alpha, a), (beta, b)))
    scale = 1.0 + alpha + beta
    # Learned coefficients change every step and reuse the terms: kept with the
    # graph. Fixed ones build S once: the terms are freed once added.
    keep = isinstance(alpha, Tensor) or isinstance(beta, Tensor)
    terms = []
    if a > 0:
        _check_edges(graph)
        terms.append((graph.adjacency_rows(keep), alpha / scale))
    if b > 0:
        terms.append((graph.semantic_adjacency_rows(k, keep), beta / scale))
    return graph.sparse(terms)


def _check_edges(graph: GraphOperators) -> None:
    r"""Raises :class:`ValueError` where :obj:`edge_index` has no edges (an
    empty one, as a forgotten graph gives), for a topological term."""
    if graph.num_edges() == 0:  # the same total on every rank: all raise, or none
        where = '' if graph.group is None else ' on any rank'
        raise ValueError(f"'edge_index' has no edges{where}, so the topological "
                         f"regulariser vanishes; use alpha=0 for the semantic-only model "
                         f"(tsGCN-s)")


def sharded_tsgcn_adjacency(partition: RowPartition, group: Group, alpha: float, beta: float,
                            edge_index: Optional[Tensor], semantic_edge_index: Optional[Tensor],
                            edge_weight: Optional[Tensor] = None,
                            dtype: torch.dtype = torch.float32) -> ShardedMatrix:
    r"""Deprecated: :func:`tsgcn_adjacency` of a :class:`GraphOperators`
    with :obj:`partition` and :obj:`group`."""
    warn_deprecated("'sharded_tsgcn_adjacency' is deprecated; use tsgcn_adjacency("
                    "GraphOperators(partition.num_nodes, edge_index, edge_weight, dtype, "
                    "semantic_edge_index=..., partition=partition, group=group), alpha, beta)")
    graph = GraphOperators(partition.num_nodes, edge_index, edge_weight, dtype,
                           semantic_edge_index=semantic_edge_index, partition=partition,
                           group=group)
    operator = tsgcn_adjacency(graph, alpha, beta)
    if isinstance(operator, ShardedMatrix):
        return operator
    # One process: a ShardedMatrix of one part, as this function returned.
    return ShardedMatrix(*coo_entries(operator), partition, group)


@register
class TSGCNRegularizer(Regularizer):
    r"""The topological and semantic regulariser of tsGCN from the `"Beyond
    Graph Convolutional Network: An Interpretable Regularizer-centered
    Optimization Framework" <https://arxiv.org/abs/2301.04318>`_ paper (Wang
    et al., AAAI 2023), with :math:`\tilde{\mathbf{L}}_X` the Laplacian of
    the semantic (cosine :obj:`k`-NN) graph and :math:`\mathbf{S}` of
    :func:`tsgcn_adjacency`,

    .. math::
        \mathbf{R} = \mathbf{I} + \alpha\tilde{\mathbf{L}}_G +
        \beta\tilde{\mathbf{L}}_X = (1 + \alpha + \beta)(\mathbf{I} - \mathbf{S}),
        \qquad
        \mathbf{P} = (\mathbf{I} - \mathbf{S})^{-1}
        = (1 + \alpha + \beta)\,\mathbf{R}^{-1}

    by default (:obj:`normalize=True`): the library's one convention, shared
    with :class:`~torch_geometric_regcn.TSGCNConv`, with gain one where
    :math:`\mathbf{S}` vanishes. :obj:`normalize=False` propagates with
    :math:`\mathbf{R}^{-1}` itself, the paper's formula and the authors'
    code. The constant is not absorbed by :math:`\mathbf{\Theta}` under
    weight decay, so the two conventions train differently; they are
    compared in ``benchmarks/results/scaling.md``. The matrix of
    the framework follows the propagation: with :obj:`normalize=True`,
    :meth:`regularizer_matrix` and :meth:`energy` use
    :math:`\mathbf{R} / (1 + \alpha + \beta) = \mathbf{I} - \mathbf{S}`
    (eigenvalues at least :math:`1 / (1 + \alpha + \beta)`), with
    :obj:`normalize=False` :math:`\mathbf{R}` itself (at least 1).
    :obj:`"series"` is :math:`\sum_{k<K}\mathbf{S}^k` (times the same
    constant); :obj:`"lowrank"` applies the factors of
    :class:`~torch_geometric_regcn.LowRankInverse`. Projection: ReLU.

    Args:
        alpha (float, optional): Weight of the topological regulariser.
            (default: :obj:`1.0`)
        beta (float, optional): Weight of the semantic regulariser.
            (default: :obj:`0.2`)
        k (int, optional): Neighbours of the semantic graph, when it is built
            from the features. (default: :obj:`10`)
        K (int, optional): Terms of the :obj:`"series"` solver. (default: :obj:`10`)
        normalize (bool, optional): Propagate with :math:`(\mathbf{I} -
            \mathbf{S})^{-1}`; if :obj:`False`, with :math:`\mathbf{R}^{-1}`.
            (default: :obj:`True`)
    """
    name = 'tsgcn'
    solvers = ('closed', 'series', 'cg', 'lowrank')
    learnable = {'alpha': 'positive', 'beta': 'positive'}

    def __init__(self, alpha: float = 1.0, beta: float = 0.2, k: int = 10, K: int = 10,
                 normalize: bool = True) -> None:
        self.alpha, self.beta, self.k = check_tsgcn_coefficients(alpha, beta, k)
        self.K = check_int('K', K)
        self.normalize = check_flag('normalize', normalize)

    @property
    def gain(self) -> float:
        r"""The factor of :math:`(\mathbf{I} - \mathbf{S})^{-1}` in the
        propagation: one, or :math:`1 / (1 + \alpha + \beta)` without
        :obj:`normalize`."""
        return 1.0 if self.normalize else 1.0 / (1.0 + self.alpha + self.beta)

    def unread(self, solver: str) -> FrozenSet[str]:
        r""":obj:`"lowrank"` reads the factors, which hold the coefficients
        :class:`~torch_geometric_regcn.LowRankInverse` computed them for, and
        :obj:`alpha` and :obj:`beta` only for the gain of
        :obj:`normalize=False`; :obj:`K` is the series' alone."""
        if solver == 'lowrank':
            return frozenset({'k', 'K'} | ({'alpha', 'beta'} if self.normalize else set()))
        return frozenset() if solver == 'series' else frozenset({'K'})

    def requires(self, solver: str) -> FrozenSet[str]:
        if solver == 'lowrank':
            return frozenset({'lowrank'})
        learned = self.learned  # a learned coefficient may reach zero only by underflow
        return frozenset({'adj'} if 'alpha' in learned or self.alpha > 0 else set()) | frozenset(
            {'semantic'} if 'beta' in learned or self.beta > 0 else set())

    def adjacency(self, graph: GraphOperators) -> Tensor:
        r""":math:`\mathbf{S}` of :obj:`graph`, built once per graph."""
        if self.learned:  # changes with every step
            return tsgcn_adjacency(graph, self.alpha, self.beta, self.k)
        return graph.memo((self, 'adjacency'),
                          lambda: tsgcn_adjacency(graph, self.alpha, self.beta, self.k),
                          version=self.assignments)

    def operator_terms(self, graph: GraphOperators) -> List[Tuple[Any, Optional[Tensor]]]:
        r""":math:`\mathbf{M} = (\mathbf{I} - \mathbf{S}) / \text{gain}` as
        :math:`\mathbf{I}`, :math:`\hat{\mathbf{A}}_G` and
        :math:`\hat{\mathbf{A}}_X` with coefficients in :math:`\alpha, \beta`."""
        scale, gain = 1.0 + self.alpha + self.beta, self.gain
        terms: List[Tuple[Any, Optional[Tensor]]] = [(1.0 / gain, None)]
        if 'alpha' in self.learned or self.alpha > 0:
            _check_edges(graph)
            terms.append((-self.alpha / (scale * gain), graph.adj))
        if 'beta' in self.learned or self.beta > 0:
            terms.append((-self.beta / (scale * gain), graph.semantic_adjacency(self.k)))
        return terms

    def operator(self, graph: GraphOperators) -> Tensor:
        r""":math:`\mathbf{M} = (\mathbf{I} - \mathbf{S}) / \text{gain}`, so
        that :math:`\mathbf{M}^{-1}` is the propagation."""
        return linear_combination([graph.identity(), self.adjacency(graph)],
                                  [1.0 / self.gain, -1.0 / self.gain])

    def series(self, x: Tensor, graph: GraphOperators) -> Tensor:
        if self.learned:  # S y from its parts, differentiable in alpha and beta
            gain, parts = self.gain, self.operator_terms(graph)[1:]

            def step(y: Tensor) -> Tensor:
                return sum(-c * gain * graph.matmul(m, y, symmetric=True) for c, m in parts)
        else:
            adjacency = self.adjacency(graph)

            def step(y: Tensor) -> Tensor:
                return graph.matmul(adjacency, y, symmetric=True)
        term = self.gain * x
        out = term
        for _ in range(self.K - 1):
            term = step(term)
            out = out + term
        return out

    def lowrank(self, x: Tensor, graph: GraphOperators) -> Tensor:
        r"""The propagation with the factors of
        :class:`~torch_geometric_regcn.LowRankInverse`,
        :math:`\text{gain}\cdot(\mathbf{I} - \mathbf{W}(\mathbf{I}_r +
        \mathbf{V}^{\top}\mathbf{W})^{-1}\mathbf{V}^{\top})\mathbf{X}`; with
        the graph's :attr:`~torch_geometric_regcn.regularizers.GraphOperators.batch`,
        each graph of a batch with its own factors and core."""
        if self.learned:
            raise ValueError(f"solver='lowrank' cannot learn {list(self.learned)}: the factors "
                             f"are computed for fixed alpha and beta; use solver='cg'")
        if graph.lowrank is None:
            raise ValueError("solver='lowrank' needs the factors: pass 'lowrank_w=' and "
                             "'lowrank_v=' (see LowRankInverse)")
        w, v = graph.lowrank
        batch, batch_size = graph.batch or (None, None)
        core = graph.memo('woodbury', WoodburyCache)(w, v, from_eigenpairs=True, batch=batch,
                                                      batch_size=batch_size)
        out = woodbury_apply(x, w, v, core, batch=batch, batch_size=batch_size)
        return out if self.normalize else out * self.gain

    def frequency_response(self, lam: Tensor, lam_x: Optional[Tensor] = None) -> Tensor:
        r"""The gain on a common eigenvector of :math:`\hat{\mathbf{A}}_G` and
        :math:`\hat{\mathbf{A}}_X` with eigenvalues :obj:`lam` and :obj:`lam_x`
        (default: the same)."""
        lam_x = lam if lam_x is None else lam_x
        scale = 1.0 + self.alpha + self.beta
        return scale * self.gain / (1 + self.alpha * (1 - lam) + self.beta * (1 - lam_x))
