r"""GPR-GNN, written from its paper: Chien et al., `"Adaptive Universal
Generalized PageRank Graph Neural Network" <https://arxiv.org/abs/2006.07988>`_
(ICLR 2021), a baseline of the heterophily comparison (issue 29, item 4)."""
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from torch_geometric_regcn.utils.fingerprint import fingerprint
from torch_geometric_regcn.utils.validation import check_int


def ppr_weights(K: int, alpha: float) -> Tensor:
    r"""The personalised-PageRank initialisation of GPR-GNN's weights,
    :obj:`[K + 1]` in float64:
    :math:`\gamma_k = \alpha (1 - \alpha)^k` for :math:`k < K` and
    :math:`\gamma_K = (1 - \alpha)^K`, which sum to one (the tail of the
    geometric series goes to the last hop)."""
    k = torch.arange(K + 1, dtype=torch.float64)
    gamma = alpha * (1 - alpha) ** k
    gamma[K] = (1 - alpha) ** K
    return gamma


class _Propagate(MessagePassing):
    r""":math:`\hat{\mathbf{A}} \mathbf{Z}` for the weighted edges of
    :func:`~torch_geometric.nn.conv.gcn_conv.gcn_norm` (messages from
    :obj:`edge_index[0]` to :obj:`edge_index[1]`, summed)."""
    def __init__(self) -> None:
        super().__init__(aggr='add')

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor) -> Tensor:
        return self.propagate(edge_index, x=x, edge_weight=edge_weight)

    def message(self, x_j: Tensor, edge_weight: Tensor) -> Tensor:
        return edge_weight.view(-1, 1) * x_j


class GPRGNN(torch.nn.Module):
    r"""The Generalized PageRank GNN of `"Adaptive Universal Generalized
    PageRank Graph Neural Network" <https://arxiv.org/abs/2006.07988>`_: a
    two-layer MLP predicts :math:`\mathbf{Z}`, and a learned polynomial of
    the normalised adjacency propagates it,

    .. math::
        \mathbf{Z} = \mathbf{W}_2\, \mathrm{ReLU}(\mathbf{W}_1 \mathbf{X}
        + \mathbf{b}_1) + \mathbf{b}_2, \qquad
        \mathbf{H} = \sum_{k=0}^{K} \gamma_k \hat{\mathbf{A}}^k \mathbf{Z},

    with :math:`\hat{\mathbf{A}} = \tilde{\mathbf{D}}^{-1/2} (\mathbf{A} +
    \mathbf{I}) \tilde{\mathbf{D}}^{-1/2}` (self loops added; PyG's
    :func:`~torch_geometric.nn.conv.gcn_conv.gcn_norm`). The weights
    :math:`\gamma` are parameters, initialised to the personalised PageRank
    weights of :func:`ppr_weights`; learning them lets the filter become
    high-pass (signed weights), which is how GPR-GNN adapts to heterophily.
    Dropout with probability :obj:`dropout` comes before each linear layer
    and, with probability :obj:`dprate`, on :math:`\mathbf{Z}` before the
    propagation, as in the paper.

    :math:`\hat{\mathbf{A}}` is built from :obj:`edge_index` as stored,
    messages flowing from :obj:`edge_index[0]` to :obj:`edge_index[1]`: on
    an undirected graph (both directions stored) it is the paper's symmetric
    operator; on a directed one it is PyG's GCN normalisation by in-degree,
    as :class:`~torch_geometric.nn.conv.GCNConv` reads it. It is computed
    once and kept while the forward calls pass the same :obj:`edge_index`
    tensor (same storage, shape, version and node count); another graph
    builds it anew. Cost per forward: two dense layers and :math:`K`
    sparse products of :math:`|E| + N` nonzeros by :obj:`out_channels`
    columns.

    Args:
        in_channels (int): Input features per node.
        hidden_channels (int): Width of the MLP's hidden layer.
        out_channels (int): Outputs per node (classes).
        K (int, optional): Hops of the propagation, :math:`K \geq 0`.
            (default: :obj:`10`)
        alpha (float, optional): Teleport probability of the PPR
            initialisation of :math:`\gamma`, in :math:`[0, 1]`.
            (default: :obj:`0.1`)
        dropout (float, optional): Dropout before each linear layer.
            (default: :obj:`0.5`)
        dprate (float, optional): Dropout on :math:`\mathbf{Z}` before the
            propagation. (default: :obj:`0.5`)

    Shapes:
        - **input:** node features :math:`(|\mathcal{V}|, F_{in})`, edge
          indices :math:`(2, |\mathcal{E}|)`
        - **output:** :math:`(|\mathcal{V}|, F_{out})`
    """
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int, K: int = 10,
                 alpha: float = 0.1, dropout: float = 0.5, dprate: float = 0.5) -> None:
        super().__init__()
        self.K = check_int('K', K, 0)
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"'alpha' must be a teleport probability in [0, 1] (got {alpha})")
        for name, p in (('dropout', dropout), ('dprate', dprate)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"'{name}' must be a probability in [0, 1] (got {p})")
        self.alpha, self.dropout, self.dprate = alpha, dropout, dprate
        self.lin1 = torch.nn.Linear(in_channels, hidden_channels)
        self.lin2 = torch.nn.Linear(hidden_channels, out_channels)
        self.gamma = torch.nn.Parameter(torch.empty(K + 1))
        self.propagation = _Propagate()
        self._cache: Optional[Tuple[tuple, Tensor, Tensor]] = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin1.reset_parameters()
        self.lin2.reset_parameters()
        with torch.no_grad():
            self.gamma.copy_(ppr_weights(self.K, self.alpha))
        self._cache = None

    def adjacency(self, edge_index: Tensor, num_nodes: int,
                  dtype: torch.dtype) -> Tuple[Tensor, Tensor]:
        r"""The edges and weights of :math:`\hat{\mathbf{A}}` (self loops
        included), from the cache when :obj:`edge_index` holds the numbers of
        the last call (its fingerprint: one pass over it)."""
        key = (fingerprint(edge_index), num_nodes, dtype)  # sees every write to the edges
        if self._cache is None or self._cache[0] != key:
            index, weight = gcn_norm(edge_index, None, num_nodes, add_self_loops=True,
                                     dtype=dtype)
            self._cache = (key, index, weight)
        return self._cache[1], self._cache[2]

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = F.dropout(x, self.dropout, self.training)
        x = F.relu(self.lin1(x))
        x = F.dropout(x, self.dropout, self.training)
        z = F.dropout(self.lin2(x), self.dprate, self.training)
        index, weight = self.adjacency(edge_index, z.size(0), z.dtype)
        out = self.gamma[0] * z
        for k in range(1, self.K + 1):
            z = self.propagation(z, index, weight)
            out = out + self.gamma[k] * z
        return out

    def __repr__(self) -> str:
        return (f'{self.__class__.__name__}({self.lin1.in_features}, '
                f'{self.lin2.out_features}, K={self.K}, alpha={self.alpha})')
