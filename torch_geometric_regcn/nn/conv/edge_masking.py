r"""An explainer's edge mask on the sparse operators of
:class:`~torch_geometric_regcn.RegularizerConv`."""
from typing import Dict, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import to_edge_index


class EdgeMasking:
    r"""An explainer's edge mask :math:`\mathbf{m}` on the operators of one
    graph: entry :math:`(i, j)`, :math:`i \neq j`, of an operator is scaled by

    .. math::
        \frac{[j \to i]\, m_{j \to i} + [i \to j]\, m_{i \to j}}
        {[j \to i] + [i \to j]}

    where :math:`[j \to i]` is one if the edge is a column of
    :obj:`edge_index` (the mean of the masks of the edges present in either
    direction; one where neither is, e.g. semantic edges), so symmetric
    operators stay symmetric and conjugate gradient applies. The diagonal
    keeps weight one: the mask of a self-loop column of :obj:`edge_index` is
    ignored, as PyG's explainers leave self loops unmasked (the layer
    replaces them by its own, and the diagonal of :math:`\mathbf{M}` holds
    its identity term). A pair
    that :obj:`edge_index` repeats (a multigraph, whose entries the operators
    sum) takes the plain mean over all its columns, in either direction; for
    one direction and repeats of equal weight (an unweighted multigraph) this
    is what PyG's explainers give a layer that passes one message per column,
    the mask of each repeat scaling its share of the entry. Repeats of
    unequal weights still take the plain mean, where such a layer would
    weight the mask :math:`m_r` of each by its share
    :math:`w_r / \sum_s w_s` of the entry.

    The layer keeps one instance per call of its forward pass, so that the
    solvers' backward passes, which may run after the explainer has cleared
    its masks, apply the masking of that call (:meth:`apply`).

    Args:
        mask (torch.Tensor): The edge mask, one entry per column of
            :obj:`edge_index`.
        apply_sigmoid (bool): Whether the mask passes through a sigmoid
            first, as PyG's explainers set it.
        edge_index (torch.Tensor): The explained graph's edges.

    Shapes:
        - **mask:** :math:`(|\mathcal{E}|)`
        - **edge_index:** :math:`(2, |\mathcal{E}|)`
    """
    def __init__(self, mask: Tensor, apply_sigmoid: bool, edge_index: Tensor) -> None:
        self.mask, self.apply_sigmoid, self.edge_index = mask, apply_sigmoid, edge_index
        self._ids: Dict[int, Tuple[Tensor, Tensor, Tensor]] = {}
        self._distinct_edges: Optional[Tuple[int, Tensor, Tensor, Tensor]] = None

    def weights(self, matrix: Tensor) -> Tensor:
        r"""One weight per stored entry of the sparse :obj:`matrix`, in the
        order of :func:`~torch_geometric.utils.to_edge_index`:
        :math:`O(\mathrm{nnz} \log |\mathcal{E}|)` the first time a matrix
        is seen, :math:`O(\mathrm{nnz})` after."""
        return self._combine(*self._edge_ids(matrix), matrix.size(0))

    def entry_weights(self, index: Tensor, num_nodes: int) -> Tensor:
        r"""One weight per entry :obj:`(index[0], index[1])` of an operator on
        :obj:`num_nodes` nodes (an edge list of its entries):
        :math:`O(|\mathrm{index}| \log |\mathcal{E}|)`."""
        return self._combine(*self._lookup(index[0], index[1], num_nodes), num_nodes)

    def _combine(self, forward: Tensor, backward: Tensor, n: int) -> Tensor:
        mask = self.mask.sigmoid() if self.apply_sigmoid else self.mask
        if mask.numel() == 0:  # no edges to mask
            return torch.ones(forward.numel(), dtype=mask.dtype, device=mask.device)
        _, groups, sizes = self._distinct(n)
        # The masks of the columns of each distinct edge added up (a single
        # column's exactly: 0 + m), and how many columns each has.
        sums = mask.new_zeros(sizes.numel()).index_add(0, groups, mask)
        sizes = sizes.to(mask.dtype)
        count = (torch.where(forward >= 0, sizes[forward.clamp_min(0)], 0.0)
                 + torch.where(backward >= 0, sizes[backward.clamp_min(0)], 0.0))
        total = (torch.where(forward >= 0, sums[forward.clamp_min(0)], 0.0)
                 + torch.where(backward >= 0, sums[backward.clamp_min(0)], 0.0))
        return torch.where(count > 0, total / count.clamp_min(1), 1.0)

    def apply(self, matrix: Tensor, x: Tensor) -> Tensor:
        r"""The masked product :obj:`matrix @ x`, without message passing."""
        (row, col), values = to_edge_index(matrix)
        messages = (values * self.weights(matrix).to(values.dtype)).view(-1, 1) * x[col]
        return torch.zeros_like(x).index_add_(0, row, messages)

    def _edge_ids(self, matrix: Tensor) -> Tuple[Tensor, Tensor]:
        # The distinct edge j -> i and the distinct edge i -> j of each entry
        # (i, j), as indices into the sorted distinct columns of edge_index
        # (-1 where absent), once per operator.
        key = id(matrix)
        if key not in self._ids or self._ids[key][0] is not matrix:
            (row, col), _ = to_edge_index(matrix)
            self._ids[key] = (matrix, *self._lookup(row, col, matrix.size(0)))
        return self._ids[key][1:]

    def _lookup(self, row: Tensor, col: Tensor, n: int) -> Tuple[Tensor, Tensor]:
        # The distinct edge j -> i and i -> j of each entry (i, j) (-1 where absent).
        distinct = self._distinct(n)[0]

        def find(query: Tensor) -> Tensor:
            if distinct.numel() == 0:
                return torch.full_like(query, -1)
            pos = torch.searchsorted(distinct, query).clamp_max(distinct.numel() - 1)
            return torch.where(distinct[pos] == query, pos, -1)

        row, col = row.long(), col.long()  # int32 keys overflow beyond 46,340 nodes
        # The diagonal keeps weight one whatever the mask of a self loop in
        # edge_index: the layer replaces those by its own (as PyG's explainers
        # leave them unmasked), and the diagonal of M holds its identity term.
        loop = row == col
        return (torch.where(loop, -1, find(row * n + col)),
                torch.where(loop, -1, find(col * n + row)))

    def _distinct(self, n: int) -> Tuple[Tensor, Tensor, Tensor]:
        # The sorted distinct keys target * n + source of the columns of
        # edge_index, the distinct edge of each column and the number of
        # columns of each distinct edge, once.
        if self._distinct_edges is None or self._distinct_edges[0] != n:
            keys = self.edge_index[1].long() * n + self.edge_index[0].long()
            self._distinct_edges = (n, *torch.unique(keys, return_inverse=True,
                                                     return_counts=True))
        return self._distinct_edges[1:]
