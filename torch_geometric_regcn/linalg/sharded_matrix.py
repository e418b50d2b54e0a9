r"""A sparse symmetric matrix split by rows over the ranks of a process group."""
from typing import Optional

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, agree_arguments, all_gather
from torch_geometric_regcn.distributed.halo import HaloPlan
from torch_geometric_regcn.distributed.row_partition import RowPartition, check_partition
from torch_geometric_regcn.utils.sparse import compact_csr


class ShardedMatrix:
    r"""This rank's rows of a symmetric sparse :math:`N \times N` matrix whose
    rows are split over a process group by a
    :class:`~torch_geometric_regcn.distributed.RowPartition`.
    :obj:`matrix @ x` takes this rank's rows of a block :math:`\mathbf{X}` and
    returns its rows of :math:`\mathbf{S}\mathbf{X}`: the halo rows are
    fetched by one :func:`all_to_all` (:math:`O(h b)` bytes for :math:`h`
    halo nodes and :math:`b` columns), then one local sparse product runs.
    The eigensolvers accept it as their :obj:`operator` and then work on row
    shards of their vectors (see :func:`~torch_geometric_regcn.linalg.block_lanczos`).
    Before the first exchange the ranks agree that each one's
    :obj:`partition` is its part of the same row blocks and that the entries
    have one dtype and device type
    (:func:`~torch_geometric_regcn.distributed.collectives.agree_arguments`).

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
        if group is not None:
            error, same = None, {}
            try:
                check_partition(partition, group, 'partition')
                same = {"the row blocks of 'partition'": partition.bounds,
                        "the dtype and device of 'values'": (values.dtype, values.device.type)}
            except (TypeError, ValueError) as failure:
                error = failure
            agree_arguments(group, 'ShardedMatrix', same, error)
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


def gather_dense(matrix: ShardedMatrix) -> Tensor:
    r"""The whole matrix, densely, on every rank: for problems so small that
    the eigensolvers solve them densely."""
    return torch.cat(all_gather(matrix.dense_rows(), matrix.group))
