r"""Sparse graph operators: the normalised adjacency, in one process or on
row shards, and linear combinations of sparse matrices."""
from typing import Any, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.utils import coalesce, remove_self_loops

from torch_geometric_regcn.distributed.collectives import Group, agree_arguments
from torch_geometric_regcn.distributed.halo import HaloPlan, reversed_edges
from torch_geometric_regcn.distributed.row_partition import (
    RowPartition,
    check_partition,
    check_shard_edges,
)
from torch_geometric_regcn.utils.deprecation import warn_deprecated
from torch_geometric_regcn.utils.sparse import to_csr
from torch_geometric_regcn.utils.validation import (
    check_choice,
    check_coefficient,
    check_dtype,
    check_edge_index,
    check_int,
)

Edges = Tuple[Tensor, Tensor]

#: How :func:`normalized_adjacency` combines duplicate edges.
REDUCE = ('max', 'sum')


def normalized_adjacency(
    edge_index: Tensor,
    num_nodes: int,
    edge_weight: Optional[Tensor] = None,
    dtype: torch.dtype = torch.float32,
    name: str = 'edge_index',
    weight_name: str = 'edge_weight',
    *,
    self_loops: bool = True,
    reduce: str = 'sum',
    partition: Optional[RowPartition] = None,
    group: Group = None,
    return_degree: bool = False,
) -> Union[Edges, Tuple[Tensor, Tensor, Tensor]]:
    r"""Returns the normalised adjacency of a graph as a pair
    :obj:`(edge_index, edge_weight)`: by default the renormalised adjacency
    of `Kipf and Welling (ICLR 2017) <https://arxiv.org/abs/1609.02907>`_,
    with :obj:`self_loops=False` that of PyG's symmetric normalised Laplacian
    (:func:`~torch_geometric.utils.get_laplacian`,
    :math:`\mathbf{L} = \mathbf{I} - \hat{\mathbf{A}}`),

    .. math::
        \hat{\mathbf{A}} = \hat{\mathbf{D}}^{-1/2} (\mathbf{A} + \mathbf{I})
        \hat{\mathbf{D}}^{-1/2}
        \quad\text{or}\quad
        \hat{\mathbf{A}} = \mathbf{D}^{-1/2} \mathbf{A} \mathbf{D}^{-1/2},
        \qquad
        \mathbf{A}_{ij} = \max(w_{ij}, w_{ji}).

    Self loops of the input are dropped, duplicate edges are combined by
    :obj:`reduce` (:obj:`"sum"`: their weights add up, as in PyG's
    :class:`~torch_geometric.nn.conv.GCNConv` and Laplacian; :obj:`"max"`:
    they count once), and the graph is made symmetric by
    the maximum, which leaves an undirected graph as it is. With
    :obj:`self_loops=True` unit self loops are added, so every node has
    degree at least one; without, edges of weight zero are dropped and a node
    without edges is isolated (no entry, degree zero).

    With a :obj:`partition` (and the process :obj:`group` whose ranks hold
    its parts) the edges are this rank's shard (first index among its nodes,
    global indices) and the result is this rank's rows of the same matrix:
    each reversed edge is sent to the owner of its new row and the degrees of
    the halo are fetched, each by one :func:`all_to_all`; the shard's checks
    are agreed across the ranks first, so a bad shard makes every rank raise.
    Without, the graph is one part of :math:`N` rows and every collective is
    the identity.

    Args:
        edge_index (torch.Tensor): The edge indices, shape :obj:`[2, E]`.
        num_nodes (int): The number of nodes :math:`N` (of the whole graph).
        edge_weight (torch.Tensor, optional): Non-negative edge weights, shape
            :obj:`[E]`; the result is in their dtype. (default: :obj:`None`,
            all ones)
        dtype (torch.dtype, optional): The floating-point dtype of the
            result when :obj:`edge_weight` is :obj:`None` (checked also when
            it is given). (default: :obj:`torch.float32`)
        name (str, optional): The name of :obj:`edge_index` in error messages.
            (default: :obj:`"edge_index"`)
        weight_name (str, optional): The name of :obj:`edge_weight` in error
            messages. (default: :obj:`"edge_weight"`)
        self_loops (bool, optional): Add unit self loops (Kipf and Welling);
            if :obj:`False`, PyG's Laplacian convention. (default: :obj:`True`)
        reduce (str, optional): :obj:`"sum"` or :obj:`"max"`, how duplicate
            edges combine. (default: :obj:`"sum"`)
        partition (RowPartition, optional): The row blocks, seen from this
            rank. (default: :obj:`None`, one process)
        group (torch.distributed.ProcessGroup, optional): The ranks holding
            the parts of :obj:`partition`. (default: :obj:`None`)
        return_degree (bool, optional): Also return the degrees
            :math:`\hat{d}_i` of this rank's nodes, shape :obj:`[n]`.
            (default: :obj:`False`)

    Shapes:
        - **output:** edge indices :obj:`[2, E']` (global, first index among
          this rank's :math:`n` nodes) and weights :obj:`[E']`, where
          :math:`E' \leq 2E + n`; with :obj:`self_loops=True` the unit self
          loops come last; otherwise the edges are sorted.

    Cost: :math:`O(E \log E)` for the sorts (with :obj:`reduce="sum"`, the
    one that sums duplicates is skipped after an :math:`O(E)` pass finds the
    edges sorted by row and column without a repeated pair, as PyG's datasets
    hold them); on shards, two all-to-alls of
    :math:`O(E_{\text{cut}} + h)` numbers (:math:`h` halo nodes).
    """
    part = _checked_partition(edge_index, num_nodes, edge_weight, name, weight_name,
                              reduce, partition, group, {
                                  "'self_loops'": bool(self_loops), "'reduce'": reduce,
                                  "whether 'edge_weight' is given": edge_weight is not None,
                                  "the dtype of the result": dtype if edge_weight is None
                                  else getattr(edge_weight, 'dtype', None)}, dtype)
    if edge_weight is None:
        edge_weight = torch.ones(edge_index.size(1), dtype=dtype, device=edge_index.device)
    edge_index, edge_weight = remove_self_loops(edge_index, edge_weight)
    if reduce == 'sum' and not _sorted_unique(edge_index):  # PyG datasets are
        edge_index, edge_weight = coalesce(edge_index, edge_weight, part.num_nodes,
                                           reduce='sum')
    if not self_loops:
        keep = edge_weight > 0
        edge_index, edge_weight = edge_index[:, keep], edge_weight[keep]
    edge_index, edge_weight = _symmetrized(edge_index, edge_weight, part, group)
    if self_loops:  # appended, not coalesced: the order the CSR operators are built from
        loops = torch.arange(part.start, part.end, device=edge_index.device)
        edge_index = torch.cat([edge_index, torch.stack([loops, loops])], dim=1)
        edge_weight = torch.cat([edge_weight, edge_weight.new_ones(loops.numel())])
    row, col = edge_index
    local = row - part.start
    degree = torch.zeros(part.num_local, dtype=edge_weight.dtype, device=edge_weight.device)
    degree.scatter_add_(0, local, edge_weight)
    plan = HaloPlan.build(col, part, group)
    if self_loops:  # every degree is at least one
        scale = plan.extended(degree.rsqrt()[:, None])[:, 0]
        edge_weight = scale[local] * edge_weight * scale[plan.compact(col)]
    else:  # an isolated node has degree zero and no edge
        root = plan.extended(degree.sqrt()[:, None])[:, 0]
        edge_weight = edge_weight / (root[local] * root[plan.compact(col)])
    if return_degree:
        return edge_index, edge_weight, degree
    return edge_index, edge_weight


def _sorted_unique(edge_index: Tensor) -> bool:
    r"""Whether the edges are sorted by row, then column, without a repeated
    pair: what :func:`~torch_geometric.utils.coalesce` returns unchanged, so
    its :math:`O(E \log E)` sort can be skipped. One :math:`O(E)` pass and
    one synchronisation."""
    if edge_index.size(1) < 2:
        return True
    row, col = edge_index
    same = row[1:] == row[:-1]
    return bool(((row[1:] > row[:-1]) | (same & (col[1:] > col[:-1]))).all())


def _checked_partition(edge_index: Tensor, num_nodes: int, edge_weight: Optional[Tensor],
                       name: str, weight_name: str, reduce: str,
                       partition: Optional[RowPartition], group: Group,
                       arguments: Mapping[str, Any],
                       dtype: torch.dtype = torch.float32) -> RowPartition:
    r"""Checks the input of :func:`normalized_adjacency` (on shards: on
    every rank, agreed, with the :obj:`arguments` and the row blocks the
    same on every rank) and returns the row blocks: one part without a
    :obj:`partition`."""
    if partition is None:
        if group is not None:
            raise ValueError("'group' needs the 'partition' of the shards (a RowPartition, "
                             "as torch_geometric_regcn.distributed.partition() gives it)")
        check_choice('reduce', reduce, REDUCE)
        num_nodes = _check_size(num_nodes, dtype)
        check_edge_index(edge_index, num_nodes, edge_weight, name, weight_name)
        return RowPartition((0, num_nodes), 0)
    error, same = None, {}
    try:
        check_choice('reduce', reduce, REDUCE)
        num_nodes = _check_size(num_nodes, dtype)
        check_partition(partition, group, 'partition')
        if num_nodes != partition.num_nodes:
            raise ValueError(f"'num_nodes' ({num_nodes}) must be the number of nodes of the "
                             f"whole graph, {partition.num_nodes} in 'partition'")
        check_shard_edges(edge_index, partition, edge_weight, name)
        same = {**arguments, "the row blocks of 'partition'": partition.bounds}
    except (TypeError, ValueError) as failure:
        error = failure
    agree_arguments(group, 'normalized_adjacency', same, error)
    return partition


def _check_size(num_nodes: Any, dtype: Any) -> int:
    r"""The checks of :func:`normalized_adjacency`'s :obj:`num_nodes` (a
    non-negative integer, returned as :class:`int`) and :obj:`dtype` (a
    floating-point one: the normalisation divides)."""
    check_dtype('dtype', dtype)
    return check_int('num_nodes', num_nodes, minimum=0)


def _symmetrized(edge_index: Tensor, edge_weight: Tensor, part: RowPartition,
                 group: Group) -> Edges:
    r"""This rank's rows of :math:`\max(\mathbf{A}, \mathbf{A}^{\top})`,
    coalesced: each reversed edge goes to the owner of its new row (in one
    process, the reversed edges themselves)."""
    reverse, reverse_weight = reversed_edges(edge_index, part, group, edge_weight)
    edge_index = torch.cat([edge_index, reverse], dim=1)
    edge_weight = torch.cat([edge_weight, reverse_weight])
    return coalesce(edge_index, edge_weight, part.num_nodes, reduce='max')


def sharded_normalized_adjacency(edge_index: Tensor, partition: RowPartition, group: Group,
                                 edge_weight: Optional[Tensor] = None,
                                 dtype: torch.dtype = torch.float32) -> Edges:
    r"""Deprecated: :func:`normalized_adjacency` with :obj:`partition` and
    :obj:`group` (the weights cast to :obj:`dtype`)."""
    warn_deprecated("'sharded_normalized_adjacency' is deprecated; use normalized_adjacency("
                    "edge_index, partition.num_nodes, edge_weight, dtype, partition=partition, "
                    "group=group)")
    if edge_weight is not None:
        edge_weight = edge_weight.to(dtype)
    edge_index, edge_weight = normalized_adjacency(edge_index, partition.num_nodes, edge_weight,
                                                   dtype, partition=partition, group=group)
    return coalesce(edge_index, edge_weight, partition.num_nodes)  # sorted, as it returned


def linear_combination(matrices: Sequence[Tensor], coefficients: Sequence[float]) -> Tensor:
    r"""Returns :math:`\sum_i c_i \mathbf{M}_i` of sparse matrices (COO or CSR)
    of one shape, as sparse CSR."""
    return combine([coo_entries(matrix) for matrix in matrices], coefficients,
                   matrices[0].size(0))


def coo_entries(matrix: Tensor) -> Edges:
    r"""The coalesced :obj:`(indices, values)` of a sparse (COO or CSR)
    matrix."""
    coo = matrix.to_sparse_coo().coalesce()
    return coo.indices(), coo.values()


def combine(operators: Sequence[Edges], coefficients: Sequence[float], num_nodes: int) -> Tensor:
    r"""Returns :math:`\sum_i c_i \mathbf{M}_i` as a sparse CSR matrix, where each
    :math:`\mathbf{M}_i` is given as a pair :obj:`(edge_index, edge_weight)`.
    Terms whose coefficient is zero are skipped. Before any work: one
    coefficient per operator, each a finite real number or a one-element
    floating-point tensor (a learned coefficient, whose gradient flows), and
    a non-negative integer :obj:`num_nodes`."""
    operators, coefficients = list(operators), list(coefficients)
    if len(operators) != len(coefficients):
        raise ValueError(f"'operators' and 'coefficients' must have the same length, one "
                         f"coefficient per operator (got {len(operators)} and "
                         f"{len(coefficients)})")
    values = [check_coefficient(f'coefficients[{i}]', c) for i, c in enumerate(coefficients)]
    num_nodes = check_int('num_nodes', num_nodes, minimum=0)
    terms = [(ei, c * ew) for (ei, ew), c, value in zip(operators, coefficients, values)
             if value != 0]
    if not terms:
        raise ValueError('combine() needs at least one non-zero coefficient')
    index = torch.cat([ei for ei, _ in terms], dim=1)
    value = torch.cat([ew for _, ew in terms])
    matrix = torch.sparse_coo_tensor(index, value, (num_nodes, num_nodes),
                                     check_invariants=False)
    return to_csr(matrix)
