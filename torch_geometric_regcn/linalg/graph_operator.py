r"""Sparse graph operators: the renormalised adjacency and its combinations."""
from typing import Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import add_self_loops, coalesce, remove_self_loops, to_undirected

from torch_geometric_regcn.distributed.collectives import Group, all_to_all
from torch_geometric_regcn.distributed.halo import HaloPlan
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.utils.sparse import to_csr
from torch_geometric_regcn.utils.validation import check_edge_index

Edges = Tuple[Tensor, Tensor]


def normalized_adjacency(
    edge_index: Tensor,
    num_nodes: int,
    edge_weight: Optional[Tensor] = None,
    dtype: torch.dtype = torch.float32,
    name: str = 'edge_index',
    weight_name: str = 'edge_weight',
) -> Edges:
    r"""Returns the renormalised adjacency
    :math:`\hat{\mathbf{A}} = \hat{\mathbf{D}}^{-1/2} (\mathbf{A} + \mathbf{I})
    \hat{\mathbf{D}}^{-1/2}` of `Kipf and Welling (ICLR 2017)
    <https://arxiv.org/abs/1609.02907>`_ as a pair :obj:`(edge_index,
    edge_weight)`.

    The input is made symmetric first: :math:`\mathbf{A}_{ij} =
    \max(\mathbf{A}_{ij}, \mathbf{A}_{ji})`, so a directed edge counts in both
    directions, duplicate edges count once and an undirected weighted graph is
    left as it is. Self loops present in the input are replaced by unit self
    loops, so every node, isolated ones included, has degree at least one.

    Args:
        edge_index (torch.Tensor): The edge indices, shape :obj:`[2, E]`.
        num_nodes (int): The number of nodes :math:`N`.
        edge_weight (torch.Tensor, optional): Non-negative edge weights, shape
            :obj:`[E]`. (default: :obj:`None`, all ones)
        dtype (torch.dtype, optional): The dtype of the returned weights, used
            when :obj:`edge_weight` is :obj:`None`. (default: :obj:`torch.float32`)
        name (str, optional): The name of :obj:`edge_index` in error messages.
            (default: :obj:`"edge_index"`)
        weight_name (str, optional): The name of :obj:`edge_weight` in error
            messages. (default: :obj:`"edge_weight"`)
    """
    check_edge_index(edge_index, num_nodes, edge_weight, name, weight_name)
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    edge_index, edge_weight = remove_self_loops(edge_index, edge_weight)
    edge_index, edge_weight = to_undirected(edge_index, edge_weight, num_nodes, reduce='max')
    edge_index, edge_weight = add_self_loops(edge_index, edge_weight, fill_value=1.0,
                                             num_nodes=num_nodes)
    row, col = edge_index
    deg = torch.zeros(num_nodes, dtype=edge_weight.dtype, device=edge_weight.device)
    deg.scatter_add_(0, row, edge_weight)
    deg_inv_sqrt = deg.rsqrt()
    return edge_index, deg_inv_sqrt[row] * edge_weight * deg_inv_sqrt[col]


def sharded_normalized_adjacency(edge_index: Tensor, partition: RowPartition, group: Group,
                                 edge_weight: Optional[Tensor] = None,
                                 dtype: torch.dtype = torch.float32) -> Tuple[Tensor, Tensor]:
    r"""This rank's rows of
    :func:`~torch_geometric_regcn.linalg.normalized_adjacency` of a graph
    whose edges are split by their first index: the same symmetrisation
    (:math:`\mathbf{A}_{ij} = \max(\mathbf{A}_{ij}, \mathbf{A}_{ji})`, unit
    self loops), with the reversed edges sent to the owner of their new row
    and the degrees of halo nodes fetched, each by one :func:`all_to_all`.
    Returns :obj:`(edge_index, edge_weight)` with global indices, the weights
    in :obj:`dtype`."""
    part = partition
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    edge_weight = edge_weight.to(dtype)
    edge_index, edge_weight = remove_self_loops(edge_index, edge_weight)
    reverse = edge_index.flip(0)
    owner = part.owner(reverse[0])
    order = owner.argsort(stable=True)
    counts = torch.bincount(owner, minlength=part.num_parts).tolist()
    received = all_to_all(list(reverse[:, order].T.split(counts)), group)
    received_weight = all_to_all(list(edge_weight[order].split(counts)), group,
                                 [r.size(0) for r in received])
    edge_index = torch.cat([edge_index, torch.cat(received).T], dim=1)
    edge_weight = torch.cat([edge_weight, *received_weight])
    edge_index, edge_weight = coalesce(edge_index, edge_weight, part.num_nodes, reduce='max')
    loops = torch.arange(part.start, part.end, device=edge_index.device)
    edge_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
    edge_weight = torch.cat([edge_weight, edge_weight.new_ones(loops.numel())])
    edge_index, edge_weight = coalesce(edge_index, edge_weight, part.num_nodes)
    row, col = edge_index
    deg = torch.zeros(part.num_local, dtype=edge_weight.dtype, device=edge_weight.device)
    deg.index_add_(0, row - part.start, edge_weight)
    plan = HaloPlan.build(col, part, group)
    scale = plan.extended(deg.rsqrt()[:, None])[:, 0]
    return edge_index, scale[row - part.start] * edge_weight * scale[plan.compact(col)]


def linear_combination(matrices: Sequence[Tensor], coefficients: Sequence[float]) -> Tensor:
    r"""Returns :math:`\sum_i c_i \mathbf{M}_i` of sparse matrices (COO or CSR)
    of one shape, as sparse CSR."""
    pairs = []
    for matrix in matrices:
        coo = matrix.to_sparse_coo().coalesce()
        pairs.append((coo.indices(), coo.values()))
    return combine(pairs, coefficients, matrices[0].size(0))


def combine(operators: Sequence[Edges], coefficients: Sequence[float], num_nodes: int) -> Tensor:
    r"""Returns :math:`\sum_i c_i \mathbf{M}_i` as a sparse CSR matrix, where each
    :math:`\mathbf{M}_i` is given as a pair :obj:`(edge_index, edge_weight)`.
    Terms whose coefficient is zero are skipped."""
    terms = [(ei, c * ew) for (ei, ew), c in zip(operators, coefficients) if c != 0]
    if not terms:
        raise ValueError('combine() needs at least one non-zero coefficient')
    index = torch.cat([ei for ei, _ in terms], dim=1)
    value = torch.cat([ew for _, ew in terms])
    matrix = torch.sparse_coo_tensor(index, value, (num_nodes, num_nodes),
                                     check_invariants=False)
    return to_csr(matrix)
