r"""Row shards in transit for the kNN search: the ring that shows every rank
each block of rows in turn, rows of a sharded tensor gathered by global node
index, and lookups by the owner of a node. With :obj:`group=None` (one part)
nothing moves: the ring has one step, and a gather is an indexing."""
from typing import Iterator, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import (
    Group,
    all_gather,
    all_to_all,
    rank_of,
    size_of,
)
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.utils.sparse import to_csr

Payload = Tuple[Tensor, ...]


def ring(payload: Payload, group: Group) -> Iterator[Tuple[int, Payload]]:
    r"""Yields :obj:`(src, payload)` for the tensors of every rank
    :obj:`src`, this rank's first: at step :math:`s` rank :math:`r` holds
    those of rank :math:`(r - s) \bmod P`. Between two steps each rank passes
    what it holds to the next rank and receives from the previous one (one
    block in flight per rank), so each rank sends every block but the next
    rank's once."""
    size, rank = size_of(group), rank_of(group)
    for step in range(size):
        yield (rank - step) % size, payload
        if step < size - 1:
            payload = tuple(_pass_on(tensor, group) for tensor in payload)


def _pass_on(tensor: Tensor, group: Group) -> Tensor:
    size, rank = size_of(group), rank_of(group)
    chunks = [tensor if q == (rank + 1) % size else tensor[:0] for q in range(size)]
    return all_to_all(chunks, group)[(rank - 1) % size]


def pack(xn: Tensor) -> Payload:
    r"""Feature rows as tensors that travel: dense, or the coalesced COO
    indices (local rows) and values."""
    if xn.layout == torch.strided:
        return (xn,)
    return xn.indices().T.contiguous(), xn.values()


def unpack(payload: Payload, rows: int, cols: int) -> Tensor:
    r"""The rows that :func:`pack` sent: dense, or sparse as CSR."""
    if len(payload) == 1:
        return payload[0]
    indices, values = payload  # (to_sparse_csr misreads non-contiguous COO indices)
    coo = torch.sparse_coo_tensor(indices.T.contiguous(), values, (rows, cols),
                                  is_coalesced=True, check_invariants=False)
    return to_csr(coo)


def gather_shard_rows(local: Tensor, rows: Tensor, partition: RowPartition,
                      group: Group) -> Tensor:
    r"""The rows :obj:`rows` (global node indices) of a row-sharded tensor,
    on every rank, in the order of :obj:`rows`: each owner sends its own."""
    if partition.num_parts == 1:
        return local[rows]
    owner = partition.owner(rows)
    mine = rows[owner == partition.rank] - partition.start
    out = local.new_empty((rows.numel(), *local.shape[1:]))
    out[owner.argsort(stable=True)] = torch.cat(all_gather(local[mine], group))
    return out


def owned_lookup(local: Tensor, index: Tensor, partition: RowPartition) -> Tensor:
    r""":obj:`local[index - start]` where this rank owns :obj:`index`, else 0:
    summed over the ranks, every entry is looked up by its owner."""
    if partition.num_parts == 1:
        return local[index]
    owned = (index >= partition.start) & (index < partition.end)
    out = torch.zeros_like(index)
    out[owned] = local[index[owned] - partition.start]
    return out
