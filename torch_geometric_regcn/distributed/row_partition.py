r"""Contiguous row blocks of a graph split over the ranks of a process
group, and the checks of a rank's shard against them."""
import numbers
from typing import Any, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, rank_of, size_of
from torch_geometric_regcn.utils.validation import check_edge_index


class RowPartition(NamedTuple):
    r"""Contiguous row blocks of an :math:`N`-node graph: rank :math:`p` owns
    the nodes :obj:`bounds[p]` to :obj:`bounds[p + 1] - 1`."""
    bounds: Tuple[int, ...]  #: :math:`P + 1` non-decreasing offsets, from 0 to :math:`N`
    rank: int  #: the rank whose shard this is

    @property
    def num_nodes(self) -> int:
        r"""The number of nodes :math:`N` of the whole graph."""
        return self.bounds[-1]

    @property
    def num_parts(self) -> int:
        r"""The number of parts :math:`P`."""
        return len(self.bounds) - 1

    @property
    def start(self) -> int:
        r"""The first node of this rank."""
        return self.bounds[self.rank]

    @property
    def end(self) -> int:
        r"""One past the last node of this rank."""
        return self.bounds[self.rank + 1]

    @property
    def num_local(self) -> int:
        r"""The number of nodes of this rank."""
        return self.end - self.start

    def owner(self, index: Tensor) -> Tensor:
        r"""The rank that owns each (global) node of :obj:`index`."""
        bounds = torch.tensor(self.bounds[1:-1], dtype=index.dtype, device=index.device)
        return torch.bucketize(index, bounds, right=True)

    def of_rank(self, rank: int) -> 'RowPartition':
        r"""The same blocks, seen from :obj:`rank`."""
        return self._replace(rank=rank)

    @staticmethod
    def even(num_nodes: int, num_parts: int, rank: int = 0) -> 'RowPartition':
        r"""Blocks of :math:`\lceil N / P \rceil` or :math:`\lfloor N / P
        \rfloor` rows, the larger first."""
        size, extra = divmod(num_nodes, num_parts)
        bounds = [0]
        for p in range(num_parts):
            bounds.append(bounds[-1] + size + (p < extra))
        return RowPartition(tuple(bounds), rank)


def check_partition(partition: Any, group: Group, name: str = 'data.partition') -> RowPartition:
    r"""Checks that a shard's :obj:`partition` is row blocks (integer bounds
    from 0, never decreasing) and matches :obj:`group` (as many parts as
    processes, this process's rank)."""
    if not isinstance(partition, RowPartition):
        raise ValueError(f"'{name}' is missing: a distributed transform needs this rank's "
                         f"shard of the graph, as torch_geometric_regcn.distributed.partition() "
                         f"or load_partition() return it")
    bounds = partition.bounds
    if len(bounds) < 2 or not all(isinstance(b, numbers.Integral) and not isinstance(b, bool)
                                  for b in bounds) \
            or bounds[0] != 0 or any(b > c for b, c in zip(bounds, bounds[1:])):
        raise ValueError(f"'{name}' must have integer bounds that start at 0 and never "
                         f"decrease, from 0 to the number of nodes (got {bounds}); build it "
                         f"with RowPartition.even() or partition()")
    size, rank = size_of(group), rank_of(group)
    if partition.num_parts != size or partition.rank != rank:
        raise ValueError(f"'{name}' is part {partition.rank} of {partition.num_parts}, but this "
                         f"process is rank {rank} of {size} in 'group'; load the shard of "
                         f"rank {rank} of a partition into {size} parts")
    return partition


def check_shard_edges(edge_index: Tensor, partition: RowPartition,
                      edge_weight: Optional[Tensor] = None, name: str = 'edge_index') -> None:
    r"""Checks a shard's edges: global indices below :math:`N` (and weights,
    as :func:`~torch_geometric_regcn.utils.validation.check_edge_index` does)
    whose first index is one of this rank's nodes."""
    check_edge_index(edge_index, partition.num_nodes, edge_weight, name=name,
                     weight_name='edge_weight')
    rows = edge_index[0]
    if rows.numel() and (int(rows.min()) < partition.start or int(rows.max()) >= partition.end):
        raise ValueError(f"'{name}' of rank {partition.rank} has edges whose first index is "
                         f"not one of its nodes [{partition.start}, {partition.end - 1}]; a "
                         f"shard holds the edges of its own rows (see partition())")
