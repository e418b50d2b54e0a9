r"""Sparse matrices and tall blocks split by rows over the ranks of a process
group: the halo exchange of a sparse product, the renormalised adjacency of a
row shard, and the inner products and QR of row-sharded blocks.

With :obj:`group=None` everything reduces to its single-process form.
"""
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import coalesce, remove_self_loops

from torch_geometric_regcn.utils.distributed import (
    Group,
    RowPartition,
    all_gather,
    all_reduce,
    all_to_all,
    rank_of,
)
from torch_geometric_regcn.utils.sparse import compact_csr


class HaloPlan(NamedTuple):
    r"""Which rows of other ranks this rank reads (its halo) and which of its
    rows the others read: the fixed pattern of the :func:`all_to_all` of a
    row-sharded sparse product."""
    partition: RowPartition  #: the row blocks
    group: Group  #: the process group
    halo: Tensor  #: the global indices read from other ranks, ascending (so grouped by owner)
    recv_counts: List[int]  #: how many of them each rank owns
    send_index: Tensor  #: local rows sent, grouped by the rank that reads them
    send_counts: List[int]  #: how many go to each rank

    @staticmethod
    def build(columns: Tensor, partition: RowPartition, group: Group) -> 'HaloPlan':
        r"""The plan for a sparse matrix whose local rows read the global
        :obj:`columns`: one :func:`all_to_all` of the requested indices."""
        owner = partition.owner(columns)
        halo = columns[owner != partition.rank].unique()
        counts = torch.bincount(partition.owner(halo), minlength=partition.num_parts)
        recv_counts = counts.tolist()
        requested = all_to_all(list(halo.split(recv_counts)), group)
        send_index = torch.cat(requested) - partition.start
        return HaloPlan(partition, group, halo, recv_counts, send_index,
                        [r.numel() for r in requested])

    def exchange(self, x: Tensor) -> Tensor:
        r"""The rows of the halo, given this rank's rows :obj:`x`."""
        if self.group is None:
            return x[:0]
        parts = all_to_all(list(x[self.send_index].split(self.send_counts)), self.group,
                           self.recv_counts)
        return torch.cat(parts)

    def extended(self, x: Tensor) -> Tensor:
        r"""This rank's rows followed by the halo's: the rows the local block
        of the matrix multiplies."""
        return torch.cat([x, self.exchange(x)]) if self.group is not None else x

    def compact(self, columns: Tensor) -> Tensor:
        r"""Global column indices as indices into :meth:`extended`."""
        part = self.partition
        local = part.owner(columns) == part.rank
        out = torch.searchsorted(self.halo, columns) + part.num_local
        return torch.where(local, columns - part.start, out)


class ShardedMatrix:
    r"""This rank's rows of a symmetric sparse :math:`N \times N` matrix whose
    rows are split over a process group by a
    :class:`~torch_geometric_regcn.utils.distributed.RowPartition`.
    :obj:`matrix @ x` takes this rank's rows of a block :math:`\mathbf{X}` and
    returns its rows of :math:`\mathbf{S}\mathbf{X}`: the halo rows are
    fetched by one :func:`all_to_all` (:math:`O(h b)` bytes for :math:`h`
    halo nodes and :math:`b` columns), then one local sparse product runs.
    The eigensolvers accept it as their :obj:`operator` and then work on row
    shards of their vectors (see :func:`~torch_geometric_regcn.linalg.block_lanczos`).

    Args:
        edge_index (torch.Tensor): The entries' global indices, shape
            :obj:`[2, nnz]`, the first (row) index among this rank's nodes.
        values (torch.Tensor): The entries, shape :obj:`[nnz]`.
        partition (RowPartition): The row blocks, seen from this rank.
        group (ProcessGroup, optional): The process group; :obj:`None` for a
            single process holding every row.
    """
    def __init__(self, edge_index: Tensor, values: Tensor, partition: RowPartition,
                 group: Group) -> None:
        self.partition, self.group = partition, group
        self.plan = HaloPlan.build(edge_index[1], partition, group)
        rows = edge_index[0] - partition.start
        cols = self.plan.compact(edge_index[1])
        width = partition.num_local + self.plan.halo.numel()
        self.local = compact_csr(torch.sparse_coo_tensor(
            torch.stack([rows, cols]), values, (partition.num_local, width),
            check_invariants=False).coalesce())

    @property
    def shape(self) -> torch.Size:
        n = self.partition.num_nodes
        return torch.Size((n, n))

    def size(self, dim: Optional[int] = None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return 2

    @property
    def dtype(self) -> torch.dtype:
        return self.local.dtype

    @property
    def device(self) -> torch.device:
        return self.local.device

    @property
    def layout(self) -> torch.layout:
        return self.local.layout

    @property
    def is_cuda(self) -> bool:
        return self.local.is_cuda

    def values(self) -> Tensor:
        r"""This rank's entries."""
        return self.local.values()

    def __matmul__(self, x: Tensor) -> Tensor:
        return self.local @ self.plan.extended(x)

    def addmm(self, x: Tensor, y: Tensor, beta: float, alpha: float) -> Tensor:
        r""":math:`\beta x + \alpha\,\mathbf{S} y` on this rank's rows."""
        return torch.addmm(x, self.local, self.plan.extended(y), beta=beta, alpha=alpha)

    def dense_rows(self) -> Tensor:
        r"""This rank's rows as a dense :math:`n \times N` block (small
        problems only)."""
        part = self.partition
        coo = self.local.to_sparse_coo().coalesce()
        rows, cols = coo.indices()
        glob = torch.cat([torch.arange(part.start, part.end, device=cols.device),
                          self.plan.halo.to(cols.device)])
        out = torch.zeros(part.num_local, part.num_nodes, dtype=self.dtype, device=self.device)
        out[rows, glob[cols]] = coo.values()
        return out

    def __repr__(self) -> str:
        part = self.partition
        return (f'{self.__class__.__name__}(rows={part.start}:{part.end} of '
                f'{part.num_nodes}, nnz={self.local._nnz()}, halo={self.plan.halo.numel()})')


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


def gram(a: Tensor, b: Tensor, group: Group) -> Tensor:
    r""":math:`\mathbf{A}^{\top}\mathbf{B}` of row-sharded blocks: the local
    product, all-reduced (:math:`k \times m` entries)."""
    return all_reduce(a.T @ b, group)


def column_norms(a: Tensor, group: Group) -> Tensor:
    r"""The Euclidean norm of each column of a row-sharded block."""
    return all_reduce(a.square().sum(dim=0), group).sqrt()


def tall_qr(block: Tensor, group: Group) -> Tuple[Tensor, Tensor]:
    r"""The reduced QR factorisation of a tall row-sharded block
    :math:`\mathbf{B} = \mathbf{Q}\mathbf{R}` (:math:`N \times b`): this
    rank's rows of :math:`\mathbf{Q}` and the :math:`b \times b`
    :math:`\mathbf{R}`, the same on every rank. TSQR (Demmel et al., 2012):
    each rank factorises its rows, the :math:`b \times b` factors are
    all-gathered and factorised once more, as stable as a Householder QR of
    the whole block."""
    if group is None:
        return torch.linalg.qr(block)
    b = block.size(1)
    q_local, r_local = torch.linalg.qr(block)  # at most n_local x b and b x b
    q = block.new_zeros(block.size(0), b)
    q[:, :q_local.size(1)] = q_local
    r = block.new_zeros(b, b)
    r[:r_local.size(0)] = r_local
    q_top, r_top = torch.linalg.qr(torch.cat(all_gather(r, group)))
    rank = rank_of(group)
    return q @ q_top[rank * b:(rank + 1) * b], r_top


def gather_dense(matrix: ShardedMatrix) -> Tensor:
    r"""The whole matrix, densely, on every rank: for problems so small that
    the eigensolvers solve them densely."""
    return torch.cat(all_gather(matrix.dense_rows(), matrix.group))


__all__ = ['HaloPlan', 'ShardedMatrix', 'column_norms', 'gather_dense', 'gram',
           'sharded_normalized_adjacency', 'tall_qr']
