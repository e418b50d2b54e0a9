r"""The tsGCN regulariser: topological and semantic."""
from typing import Optional

import torch
from torch import Tensor

from torch_geometric_regcn.linalg.graph_operator import linear_combination
from torch_geometric_regcn.linalg.woodbury import WoodburyCache, woodbury_apply
from torch_geometric_regcn.regularizers.base import GraphOperators, Regularizer
from torch_geometric_regcn.regularizers.spectral import check_range, check_steps


class TSGCN(Regularizer):
    r"""tsGCN (Wang et al., AAAI 2023): :math:`\mathbf{R} = \mathbf{I} +
    \alpha\tilde{\mathbf{L}}_G + \beta\tilde{\mathbf{L}}_X`, rule
    :math:`(\mathbf{I} + \alpha\tilde{\mathbf{L}}_G + \beta\tilde{\mathbf{L}}_X)^{-1}
    \mathbf{H}\mathbf{\Theta}`, with :math:`\tilde{\mathbf{L}}_X` the Laplacian of
    the semantic (cosine :obj:`k`-NN) graph. :obj:`"series"` is
    :math:`(1+\alpha+\beta)^{-1}\sum_{k<K}\mathbf{S}^k` with :math:`\mathbf{S} =
    (\alpha\hat{\mathbf{A}}_G + \beta\hat{\mathbf{A}}_X)/(1+\alpha+\beta)`;
    :obj:`"lowrank"` uses the factors of
    :class:`~torch_geometric_regcn.LowRankInverse`. Projection: ReLU.

    Args:
        alpha (float, optional): Weight of the topological regulariser.
            (default: :obj:`1.0`)
        beta (float, optional): Weight of the semantic regulariser.
            (default: :obj:`0.2`)
        k (int, optional): Neighbours of the semantic graph, when it is built
            from the features. (default: :obj:`10`)
        K (int, optional): Terms of the :obj:`"series"` solver. (default: :obj:`10`)
    """
    name = 'tsgcn'
    solvers = ('closed', 'series', 'cg', 'lowrank')

    def __init__(self, alpha: float = 1.0, beta: float = 0.2, k: int = 10,
                 K: int = 10) -> None:
        check_range('alpha', alpha, 0.0, float('inf'))
        check_range('beta', beta, 0.0, float('inf'))
        if alpha == 0 and beta == 0:
            raise ValueError("'alpha' and 'beta' cannot both be zero: the propagation would be "
                             "the identity")
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"'k' must be a positive integer (got {k!r})")
        check_steps(K)
        self.alpha, self.beta, self.k, self.K = alpha, beta, k, K

    @property
    def needs_semantic(self) -> bool:
        return self.beta > 0

    def _combination(self, graph: GraphOperators, identity: float, sign: float) -> Tensor:
        r""":math:`c\mathbf{I} + s(\alpha\hat{\mathbf{A}}_G + \beta\hat{\mathbf{A}}_X)`."""
        matrices, coefficients = [graph.adj], [sign * self.alpha]
        if self.beta > 0:
            matrices.append(graph.semantic)
            coefficients.append(sign * self.beta)
        if identity:
            matrices.append(graph.identity())
            coefficients.append(identity)
        return linear_combination(matrices, coefficients)

    def operator(self, graph: GraphOperators) -> Tensor:
        return self._combination(graph, 1 + self.alpha + self.beta, -1.0)

    def series(self, x: Tensor, graph: GraphOperators,
               module: Optional[torch.nn.Module] = None) -> Tensor:
        scale = 1 + self.alpha + self.beta
        adj = graph.memo((self, 'adjacency'), lambda: self._combination(graph, 0.0, 1.0))
        term = x / scale
        out = term
        for _ in range(self.K - 1):
            term = (adj @ term) / scale
            out = out + term
        return out

    def lowrank(self, x: Tensor, graph: GraphOperators) -> Tensor:
        if graph.lowrank is None:
            raise ValueError("solver='lowrank' needs the factors: pass 'lowrank_w=' and "
                             "'lowrank_v=' (see LowRankInverse)")
        core = graph.memo('woodbury', WoodburyCache)(*graph.lowrank)
        return woodbury_apply(x, *graph.lowrank, core) / (1 + self.alpha + self.beta)

    def frequency_response(self, lam: Tensor, lam_x: Optional[Tensor] = None) -> Tensor:
        r"""The gain on a common eigenvector of :math:`\hat{\mathbf{A}}_G` and
        :math:`\hat{\mathbf{A}}_X` with eigenvalues :obj:`lam` and :obj:`lam_x`
        (default: the same)."""
        lam_x = lam if lam_x is None else lam_x
        return 1.0 / (1 + self.alpha * (1 - lam) + self.beta * (1 - lam_x))
