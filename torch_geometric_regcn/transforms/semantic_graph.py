r"""The semantic graph of tsGCN: a symmetrised cosine k-nearest-neighbour graph."""
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import to_undirected

from torch_geometric_regcn._validation import check_finite


def _row_normalized(x: Tensor) -> Tensor:
    """Rows scaled to unit L2 norm; zero rows stay zero (never NaN)."""
    if x.layout == torch.strided:
        return x / x.norm(dim=1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    x = x.to_sparse_coo().coalesce()
    row, col = x.indices()
    norm = torch.zeros(x.size(0), dtype=x.dtype, device=x.device)
    norm.index_add_(0, row, x.values().square())
    values = x.values() / norm.sqrt().clamp_min(torch.finfo(x.dtype).tiny)[row]
    return torch.sparse_coo_tensor(x.indices(), values, x.shape).coalesce()


def _dense_rows(x: Tensor, start: int, end: int) -> Tensor:
    """Rows :obj:`start:end` of a dense or coalesced COO matrix, as a dense block."""
    if x.layout == torch.strided:
        return x[start:end]
    row, col = x.indices()
    lo, hi = torch.searchsorted(row, torch.tensor([start, end], device=row.device)).tolist()
    block = torch.zeros(end - start, x.size(1), dtype=x.dtype, device=x.device)
    block[row[lo:hi] - start, col[lo:hi]] = x.values()[lo:hi]
    return block


def _top_k_lowest_index(scores: Tensor, k: int) -> Tensor:
    """Column indices of each row's :obj:`k` largest scores; ties are broken
    towards the lower column index, so the result is deterministic."""
    kth = scores.topk(k, dim=1).values[:, -1:]
    above = scores > kth
    tied = scores == kth
    need = k - above.sum(dim=1, keepdim=True)
    chosen = above | (tied & (tied.cumsum(dim=1) <= need))
    return chosen.nonzero()[:, 1].view(-1, k)


def knn_graph_cosine(x: Tensor, k: int, block_size: Optional[int] = None) -> Tensor:
    r"""Returns the symmetrised :obj:`k`-nearest-neighbour graph of the rows
    of :obj:`x` under cosine similarity, as :obj:`edge_index` without self
    loops. Similarities are computed :obj:`block_size` rows at a time, so
    memory stays :math:`O(N \cdot \text{block\_size} + N k)`."""
    n = x.size(0)
    if not 0 < k < n:
        raise ValueError(f"'k' must lie in [1, {n - 1}] for a graph of {n} nodes (got {k})")
    if block_size is None:  # about 2**24 similarities (64 MB in float32) per block
        block_size = max(1, min(n, 2**24 // n))
    xn = _row_normalized(x)
    if xn.layout != torch.strided:
        xn_csr = xn.to_sparse_csr()
    neighbours = []
    for start in range(0, n, block_size):
        end = min(start + block_size, n)
        block = _dense_rows(xn, start, end)
        if xn.layout == torch.strided:
            scores = block @ xn.T
        else:
            scores = (xn_csr @ block.T).T
        own = torch.arange(start, end, device=x.device)
        scores[own - start, own] = -float('inf')
        neighbours.append(_top_k_lowest_index(scores, k))
    col = torch.cat(neighbours).view(-1)
    row = torch.arange(n, device=x.device).repeat_interleave(k)
    return to_undirected(torch.stack([row, col]), num_nodes=n)


class SemanticGraph(BaseTransform):
    r"""Adds the semantic graph of the tsGCN model from the `"Beyond Graph
    Convolutional Network: An Interpretable Regularizer-centered Optimization
    Framework" <https://arxiv.org/abs/2301.04318>`_ paper (AAAI 2023) as
    :obj:`data.semantic_edge_index`: each node is linked to its :obj:`k`
    nearest neighbours under cosine similarity of the node features,

    .. math::
        \mathcal{N}_k(i) = \operatorname{top-}k_{j \neq i}\;
        \frac{\mathbf{x}_i^{\top}\mathbf{x}_j}{\|\mathbf{x}_i\|\,\|\mathbf{x}_j\|},

    and the graph is symmetrised (:math:`j \in \mathcal{N}_k(i)` or
    :math:`i \in \mathcal{N}_k(j)`). Ties go to the lower node index; a zero
    feature row has similarity zero to every node.

    Similarities are computed in row blocks, so memory is
    :math:`O(N \cdot \text{block\_size} + N k)` and no :math:`N \times N` matrix
    is formed; time is :math:`O(N^2 d)`. Dense and sparse :obj:`data.x` are
    supported.

    Args:
        k (int): The number of neighbours of each node.
        block_size (int, optional): Rows per block. (default: :obj:`None`, about
            :math:`2^{24} / N` rows)
    """
    def __init__(self, k: int, block_size: Optional[int] = None) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ValueError(f"'k' must be a positive integer (got {k!r})")
        if block_size is not None and block_size <= 0:
            raise ValueError(f"'block_size' must be a positive integer (got {block_size!r})")
        self.k = k
        self.block_size = block_size

    def forward(self, data: Data) -> Data:
        if data.x is None:
            raise ValueError("SemanticGraph needs node features 'data.x'")
        check_finite('data.x', data.x)
        data.semantic_edge_index = knn_graph_cosine(data.x, self.k, self.block_size)
        return data

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(k={self.k})'
