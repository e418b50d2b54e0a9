r"""An explainer's edge mask on the sparse operators of
:class:`~torch_geometric_regcn.RegularizerConv`."""
from typing import Dict, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import to_edge_index


class EdgeMasking:
    r"""An explainer's edge mask :math:`\mathbf{m}` on the operators of one
    graph: entry :math:`(i, j)` of an operator is scaled by

    .. math::
        \frac{[j \to i]\, m_{j \to i} + [i \to j]\, m_{i \to j}}
        {[j \to i] + [i \to j]}

    where :math:`[j \to i]` is one if the edge is a column of
    :obj:`edge_index` (the mean of the masks of the edges present in either
    direction; one where neither is: self loops, semantic edges), so
    symmetric operators stay symmetric and conjugate gradient applies.

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

    def weights(self, matrix: Tensor) -> Tensor:
        r"""One weight per stored entry of the sparse :obj:`matrix`, in the
        order of :func:`~torch_geometric.utils.to_edge_index`:
        :math:`O(\mathrm{nnz} \log |\mathcal{E}|)` the first time a matrix
        is seen, :math:`O(\mathrm{nnz})` after."""
        forward, backward = self._edge_ids(matrix)
        mask = self.mask.sigmoid() if self.apply_sigmoid else self.mask
        if mask.numel() == 0:  # no edges to mask
            return torch.ones(forward.numel(), dtype=mask.dtype, device=mask.device)
        count = (forward >= 0).to(mask.dtype) + (backward >= 0).to(mask.dtype)
        total = (torch.where(forward >= 0, mask[forward.clamp_min(0)], 0.0)
                 + torch.where(backward >= 0, mask[backward.clamp_min(0)], 0.0))
        return torch.where(count > 0, total / count.clamp_min(1), 1.0)

    def apply(self, matrix: Tensor, x: Tensor) -> Tensor:
        r"""The masked product :obj:`matrix @ x`, without message passing."""
        (row, col), values = to_edge_index(matrix)
        messages = (values * self.weights(matrix).to(values.dtype)).view(-1, 1) * x[col]
        return torch.zeros_like(x).index_add_(0, row, messages)

    def _edge_ids(self, matrix: Tensor) -> Tuple[Tensor, Tensor]:
        # The index of the edge j -> i and of the edge i -> j of each entry
        # (i, j) (-1 where absent), once per operator.
        key = id(matrix)
        if key not in self._ids or self._ids[key][0] is not matrix:
            n, edge_index = matrix.size(0), self.edge_index
            (row, col), _ = to_edge_index(matrix)
            keys = edge_index[1] * n + edge_index[0]  # target * n + source
            order = keys.argsort()
            ordered = keys[order]

            def lookup(query: Tensor) -> Tensor:
                if ordered.numel() == 0:
                    return torch.full_like(query, -1)
                pos = torch.searchsorted(ordered, query).clamp_max(ordered.numel() - 1)
                return torch.where(ordered[pos] == query, order[pos], -1)

            self._ids[key] = (matrix, lookup(row * n + col), lookup(col * n + row))
        return self._ids[key][1:]
