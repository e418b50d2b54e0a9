r"""The halo of a row shard: which rows of other ranks a sparse product on
this rank's rows reads, fetched by one all-to-all."""
import math
from typing import List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, all_to_all, all_to_all_into
from torch_geometric_regcn.distributed.row_partition import RowPartition


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
        :obj:`columns` (any integer dtype; exchanged as int64, so that ranks
        holding int32 and int64 indices pair up): one :func:`all_to_all` of
        the requested indices."""
        columns = columns.long()
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
        return self._receive(x, x.new_empty((self.halo.numel(), *x.shape[1:])))

    def extended(self, x: Tensor, buffer: Optional[Tensor] = None) -> Tensor:
        r"""This rank's rows followed by the halo's: the rows the local block
        of the matrix multiplies. The halo is received straight into the
        result, from one gathered block of the rows sent (already grouped by
        destination). Both live in :obj:`buffer` where given (a flat tensor
        of :obj:`x`'s dtype and device with at least :meth:`buffer_size`
        elements, which the caller reuses: the result is a view of it), else
        in two new tensors."""
        if self.group is None:
            return x
        n, h, s = x.size(0), self.halo.numel(), self.send_index.numel()
        width = math.prod(x.shape[1:])
        if buffer is None:
            out, send = x.new_empty((n + h, *x.shape[1:])), None
        else:
            out = buffer[:(n + h) * width].view(n + h, *x.shape[1:])
            send = buffer[(n + h) * width:(n + h + s) * width].view(s, *x.shape[1:])
        self._receive(x, out[n:], send)
        out[:n] = x  # after the exchange, which autograd does not see: x's gradient flows
        return out

    def _receive(self, x: Tensor, out: Tensor, send: Optional[Tensor] = None) -> Tensor:
        r"""Writes the halo's rows to :obj:`out` (contiguous), sending this
        rank's rows :obj:`x` gathered into :obj:`send` (a new tensor if
        :obj:`None`); returns :obj:`out`."""
        width, index = math.prod(x.shape[1:]), self.send_index.to(x.device)
        send = torch.index_select(x.detach(), 0, index, out=send)
        all_to_all_into(out.view(self.halo.numel(), width), send.view(index.numel(), width),
                        self.recv_counts, self.send_counts, self.group)
        return out

    def buffer_size(self, x: Tensor) -> int:
        r"""The elements of the :obj:`buffer` that :meth:`extended` takes for
        :obj:`x`."""
        return (x.size(0) + self.halo.numel() + self.send_index.numel()) * math.prod(x.shape[1:])

    def compact(self, columns: Tensor) -> Tensor:
        r"""Global column indices as indices into :meth:`extended` (the halo's
        searched, the own rows' shifted), int64."""
        part, columns = self.partition, columns.long()
        out = columns - part.start
        remote = (out < 0) | (out >= part.num_local)
        out[remote] = torch.searchsorted(self.halo, columns[remote]) + part.num_local
        return out


def reversed_edges(edge_index: Tensor, partition: RowPartition, group: Group,
                   edge_weight: Optional[Tensor] = None) -> Tuple[Tensor, Optional[Tensor]]:
    r"""The reverses :math:`(j, i)` of the edges :math:`(i, j)` of every
    rank's shard that fall in this rank's rows: each is sent to the owner of
    its new first index :math:`j` by one :func:`all_to_all` (two with
    :obj:`edge_weight`), which makes a shard's edges symmetric once they are
    joined to its own. In one part they are this rank's edges, flipped.

    Returns :obj:`(edge_index, edge_weight)` of the received edges (global
    indices), :obj:`edge_weight` :obj:`None` when none was given."""
    reverse, weight = edge_index.long().flip(0), edge_weight  # int64 on every rank
    counts = [reverse.size(1)]
    if partition.num_parts > 1:  # grouped by the rank that owns their new row
        owner = partition.owner(reverse[0])
        order = owner.argsort(stable=True)
        counts = torch.bincount(owner, minlength=partition.num_parts).tolist()
        reverse = reverse[:, order]
        weight = None if weight is None else weight[order]
    received = all_to_all(list(reverse.T.split(counts)), group)
    index = torch.cat(received).T
    if weight is None:
        return index, None
    weights = all_to_all(list(weight.split(counts)), group, [r.size(0) for r in received])
    return index, torch.cat(weights)
