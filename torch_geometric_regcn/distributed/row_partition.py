r"""Contiguous row blocks of a graph split over the ranks of a process
group, and the checks of a rank's shard against them."""
import numbers
from typing import Any, List, NamedTuple, Optional, Tuple

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
    processes, this process's rank); returns it with its bounds a tuple of
    Python integers (PyG's :meth:`Data.clone` and :meth:`Data.to` give
    them back as a list, which keyed the factor cache differently)."""
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
    return RowPartition(tuple(int(b) for b in bounds), int(partition.rank))


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


#: Odd 64-bit constants (as int64) of the mixing hash of :func:`id_hash_sum`
#: (splitmix64's multipliers, the first its increment, the golden ratio).
MIX = tuple(c - (1 << 64) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9,
                                    0x94D049BB133111EB))
#: Node indices hashed at a time where :func:`id_hash_sum` covers :math:`[0, N)`.
HASH_CHUNK = 1 << 20


def id_hash_sum(ids: Tensor, salt: int) -> int:
    r"""The sum, wrapped to 64 bits, of a mixing hash of each index of
    :obj:`ids` (multiplications and shifts of int64 values, which wrap alike
    on every device): the ranks' sums add up to that of :math:`[0, N)` where
    their indices are a permutation of it, and, with two salts, almost
    surely not otherwise (repeats and gaps whose plain sums and sums of
    squares agree included). :math:`O(|\text{ids}|)`."""
    x = (ids.long() + salt) * MIX[0]
    x = (x ^ (x >> 30)) * MIX[1]
    x = (x ^ (x >> 27)) * MIX[2]
    return int((x ^ (x >> 31)).sum())


def permutation_hash_sums(num_nodes: int, device: torch.device) -> List[int]:
    r"""The two :func:`id_hash_sum` values of :math:`[0, N)`, wrapped to 64
    bits, in chunks of :data:`HASH_CHUNK` indices: :math:`O(N)` time,
    :math:`O(\text{HASH\_CHUNK})` memory."""
    totals = [0, 0]
    for start in range(0, num_nodes, HASH_CHUNK):
        ids = torch.arange(start, min(start + HASH_CHUNK, num_nodes), device=device)
        totals = [t + id_hash_sum(ids, salt) for t, salt in zip(totals, (1, 2))]
    return [t % (1 << 64) for t in totals]


def check_node_id(node_id: Optional[Tensor], rows: int, num_nodes: int,
                  device: Optional[torch.device] = None, what: str = 'this shard') -> None:
    r"""A shard's :obj:`node_id` (the original index of each of its
    :obj:`rows` rows, as :func:`~torch_geometric_regcn.distributed.partition`
    writes it), or :obj:`None`: a 1-D int64 tensor of one distinct index in
    :math:`[0, N)` per row, on :obj:`device` when given. Over the ranks it
    must be a permutation of :math:`[0, N)`: :func:`node_id_sums` and
    :func:`check_node_id_sums` check that in the caller's agreement.
    :math:`O(n \log n)`."""
    if node_id is None:
        return
    if not isinstance(node_id, Tensor) or node_id.dtype != torch.int64 \
            or node_id.dim() != 1:
        got = (f'{node_id.dtype} of shape {list(node_id.shape)}' if isinstance(node_id, Tensor)
               else type(node_id).__name__)
        raise TypeError(f"'node_id' must be a 1-D int64 tensor, the index of each row in the "
                        f"whole graph's original numbering (a shard's 'data.node_id', see "
                        f"partition()); got {got}")
    if node_id.numel() != rows or (device is not None and node_id.device != device):
        where = '' if device is None else f', on {device}'
        raise ValueError(f"'node_id' must hold one index per row of {what} ({rows}{where}), "
                         f"got {node_id.numel()} on {node_id.device}")
    if node_id.numel() and (int(node_id.min()) < 0 or int(node_id.max()) >= num_nodes
                            or int(node_id.unique().numel()) != node_id.numel()):
        raise ValueError(f"'node_id' must hold distinct indices in [0, {num_nodes - 1}], "
                         f"one per node of the whole graph (a shard's 'data.node_id')")


def node_id_sums(node_id: Optional[Tensor], group: Group) -> List[int]:
    r"""This rank's two :func:`id_hash_sum` values of :obj:`node_id` (zeros
    without one, or without a :obj:`group`), to share in the caller's
    agreement."""
    if group is None or node_id is None or node_id.numel() == 0:
        return [0, 0]
    return [id_hash_sum(node_id, salt) for salt in (1, 2)]


def check_node_id_sums(shared: List[List[int]], node_id: Optional[Tensor], num_nodes: int,
                       group: Group) -> None:
    r"""Raises on every rank unless the ranks' :func:`node_id_sums`
    (:obj:`shared`, one list per rank) are those of a permutation of
    :math:`[0, N)`: repeats or gaps across the ranks, which each rank's
    :func:`check_node_id` cannot see. Nothing without a :obj:`group` or a
    :obj:`node_id`."""
    if group is None or node_id is None:
        return
    totals = [sum(r[i] for r in shared) % (1 << 64) for i in (0, 1)]
    if totals != permutation_hash_sums(num_nodes, node_id.device):
        raise ValueError(f"'node_id' must hold each index in [0, {num_nodes - 1}] once over "
                         f"all ranks, one per node of the whole graph (a shard's "
                         f"'data.node_id'); the ranks' indices repeat or miss some")
