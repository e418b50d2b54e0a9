r"""The normalised adjacency of a directed graph, one operator per direction."""
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.utils import coalesce

from torch_geometric_regcn.utils.sparse import divided_by_largest, to_csr
from torch_geometric_regcn.utils.validation import (
    check_choice,
    check_dtype,
    check_edge_index,
)

#: The directions of :func:`directed_adjacency`.
DIRECTIONS = ('in', 'out')


def directed_adjacency(edge_index: Tensor, num_nodes: int, edge_weight: Optional[Tensor] = None,
                       dtype: torch.dtype = torch.float32, direction: str = 'in',
                       name: str = 'edge_index') -> Tensor:
    r"""The normalised adjacency of a directed graph along one direction, as
    Dir-GNN normalises it (`"Edge Directionality Improves Learning on
    Heterophilic Graphs" <https://arxiv.org/abs/2305.10498>`_, Rossi et al.,
    LoG 2023): for the edges :math:`j \to i` (:obj:`edge_index[0]` the
    source, :obj:`edge_index[1]` the target, PyG's flow) with weights
    :math:`w_{ji}`,

    .. math::
        \mathbf{P}_{\mathrm{in}} = \mathbf{D}_{\mathrm{in}}^{-1/2}\mathbf{A}^{\top}
        \mathbf{D}_{\mathrm{out}}^{-1/2}, \qquad
        \mathbf{P}_{\mathrm{out}} = \mathbf{P}_{\mathrm{in}}^{\top},

    with :math:`\mathbf{A}_{ji} = w_{ji}` and the weighted in- and
    out-degrees :math:`d^{\mathrm{in}}_i = \sum_j w_{ji}`,
    :math:`d^{\mathrm{out}}_j = \sum_i w_{ji}`: row :math:`i` of
    :math:`\mathbf{P}_{\mathrm{in}}\mathbf{X}` gathers the in-neighbours of
    :math:`i` (PyG's message passing), row :math:`j` of
    :math:`\mathbf{P}_{\mathrm{out}}\mathbf{X}` its out-neighbours. Repeated
    edges add up, self loops are kept as stored (none is added), a node
    without edges in a direction has an empty row. Both operators have
    spectral norm at most one (Schur's test), so the Neumann series of a
    regulariser built on them converges as on :math:`\hat{\mathbf{A}}`;
    neither is symmetric.

    Args:
        edge_index (torch.Tensor): The directed edges, shape :obj:`[2, E]`.
        num_nodes (int): The number of nodes :math:`N`.
        edge_weight (torch.Tensor, optional): Non-negative weights :obj:`[E]`;
            only their ratios matter, so they are divided by the largest
            before the cast to :obj:`dtype` (:class:`ValueError` where a
            positive ratio is below :obj:`dtype`'s smallest normal number).
            (default: :obj:`None`, all ones)
        dtype (torch.dtype, optional): The dtype of the result.
            (default: :obj:`torch.float32`)
        direction (str, optional): :obj:`"in"` or :obj:`"out"`.
            (default: :obj:`"in"`)
        name (str, optional): The name of :obj:`edge_index` in errors.
            (default: :obj:`"edge_index"`)

    Returns: sparse CSR :obj:`[N, N]`. Cost: :math:`O(E \log E)`.
    """
    direction = check_choice('direction', direction, DIRECTIONS)
    dtype = check_dtype('dtype', dtype)
    check_edge_index(edge_index, num_nodes, edge_weight, name=name)
    edge_index = edge_index.long()  # any integer dtype passes the check; scatter needs int64
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    else:  # non-negative, finite: checked above
        # The operator does not change with the weights' scale: divided by the
        # largest first, in float64, they keep their ratios in 'dtype'
        # whatever their magnitude (cast as they were, weights below float32's
        # smallest normal number became zeros, and the graph lost its edges).
        ratio = divided_by_largest(edge_weight)
        edge_weight = ratio.to(dtype)
        tiny = torch.finfo(dtype).tiny
        if bool(((ratio > 0) & (edge_weight.detach() < tiny)).any()):  # one sync
            smallest = float(ratio[ratio > 0].amin())
            raise ValueError(f"'edge_weight' spans more than {dtype} holds: its smallest "
                             f"positive weight is {smallest:.3g} times its largest, below "
                             f"{dtype}'s smallest normal number {tiny:.3g}; use a float64 "
                             f"layer ('.double()') or drop the negligible edges")
    source, target = edge_index
    out_degree = torch.zeros(num_nodes, dtype=dtype, device=edge_index.device)
    in_degree = torch.zeros_like(out_degree)
    out_degree.scatter_add_(0, source, edge_weight)
    in_degree.scatter_add_(0, target, edge_weight)
    root_out, root_in = out_degree.sqrt(), in_degree.sqrt()
    # Entries of weight zero are kept where both degrees are positive: their value
    # is zero, but their gradient in the weight is not (dropped, an edge weight of
    # exactly 0 got the degrees' part of its gradient alone).
    keep = (root_in[target] > 0) & (root_out[source] > 0)
    source, target, weight = source[keep], target[keep], edge_weight[keep]
    weight = weight / (root_in[target] * root_out[source])
    rows, cols = (target, source) if direction == 'in' else (source, target)
    index, value = coalesce(torch.stack([rows, cols]), weight, num_nodes, reduce='sum')
    return to_csr(torch.sparse_coo_tensor(index, value, (num_nodes, num_nodes),
                                          check_invariants=False))
