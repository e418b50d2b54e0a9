r"""Row blocks of a graph split over processes, and the few
:mod:`torch.distributed` collectives the library calls on them.

Every function takes a process :obj:`group`; :obj:`None` means a single
process (no communication at all: the collective returns its input), which
keeps the distributed code paths the same as the single-process ones. For all
processes pass :obj:`torch.distributed.group.WORLD`.

Each collective adds the bytes this rank sends to :data:`TRAFFIC` under the
current :func:`traffic_stage`, and turns a failure (a peer that raised, died
or ran past the process group's :obj:`timeout`) into a
:class:`DistributedError` that names this rank and the operation.
"""
import math
from collections import defaultdict
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.utils.validation import check_edge_index

Group = Any  # a torch.distributed.ProcessGroup, or None for a single process


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


class DistributedError(RuntimeError):
    r"""A collective failed on this rank: a peer raised, died, or did not
    reach it within the process group's timeout."""


#: Bytes sent by this rank, per stage and operation (see :func:`traffic_stage`).
TRAFFIC: Dict[Tuple[str, str], int] = defaultdict(int)
_STAGE = ['other']


@contextmanager
def traffic_stage(name: str) -> Iterator[None]:
    r"""Counts the bytes of the collectives run inside the block under
    :obj:`name` in :data:`TRAFFIC`. Counted is what this rank sends of the
    payload: an all-reduce its tensor (a ring all-reduce sends about
    :math:`2(P-1)/P` of it), an all-gather its part once per peer, an
    all-to-all the chunks for the other ranks, a broadcast the tensor once per
    peer on the source rank."""
    previous = _STAGE[0]
    _STAGE[0] = name
    try:
        yield
    finally:
        _STAGE[0] = previous


def traffic(stage: Optional[str] = None) -> int:
    r"""The bytes counted so far, of one stage or of all."""
    return sum(n for (s, _), n in TRAFFIC.items() if stage is None or s == stage)


def rank_of(group: Group) -> int:
    r"""This process's rank in :obj:`group` (:obj:`0` without one)."""
    if group is None:
        return 0
    import torch.distributed as dist
    return dist.get_rank(group)


def size_of(group: Group) -> int:
    r"""The number of processes in :obj:`group` (:obj:`1` without one)."""
    if group is None:
        return 1
    import torch.distributed as dist
    return dist.get_world_size(group)


def check_group(group: Group, name: str = 'group') -> Group:
    r"""Checks that :obj:`group` is :obj:`None` or a process group of an
    initialised :mod:`torch.distributed`; returns it."""
    if group is None:
        return None
    import torch.distributed as dist
    if not dist.is_available():
        raise ValueError(f"'{name}' needs torch.distributed, which this torch build lacks; "
                         f"pass {name}=None for a single process")
    if not dist.is_initialized():
        raise ValueError(f"'{name}' needs an initialised process group: call "
                         f"torch.distributed.init_process_group() first (torchrun sets its "
                         f"environment), or pass {name}=None for a single process")
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"'{name}' must be a torch.distributed.ProcessGroup (e.g. "
                        f"torch.distributed.group.WORLD) or None (got {type(group).__name__})")
    return group


def check_partition(partition: Any, group: Group, name: str = 'data.partition') -> RowPartition:
    r"""Checks that a shard's :obj:`partition` matches :obj:`group` (as many
    parts as processes, this process's rank)."""
    if not isinstance(partition, RowPartition):
        raise ValueError(f"'{name}' is missing: a distributed transform needs this rank's "
                         f"shard of the graph, as torch_geometric_regcn.distributed.partition() "
                         f"or load_partition() return it")
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


def _count(operation: str, nbytes: int) -> None:
    TRAFFIC[(_STAGE[0], operation)] += int(nbytes)


def _nbytes(tensor: Tensor) -> int:
    return tensor.numel() * tensor.element_size()


@contextmanager
def _named_failure(operation: str, group: Group) -> Iterator[None]:
    try:
        yield
    except DistributedError:
        raise
    except RuntimeError as error:  # DistBackendError is a RuntimeError
        raise DistributedError(
            f"rank {rank_of(group)} of {size_of(group)}: {operation} failed ({error}). A "
            f"peer rank raised, died or ran past the process group's timeout (see its own "
            f"error: torchrun and torch.multiprocessing name the failing rank); pass "
            f"timeout= to init_process_group to bound the wait") from error


def all_reduce(tensor: Tensor, group: Group) -> Tensor:
    r"""The sum of :obj:`tensor` over the ranks of :obj:`group`, as a new
    tensor (the input is left as it is)."""
    if group is None:
        return tensor
    import torch.distributed as dist
    out = tensor.detach().clone().contiguous()
    _count('all_reduce', _nbytes(out))
    with _named_failure('all_reduce', group):
        dist.all_reduce(out, group=group)
    return out


def all_gather(tensor: Tensor, group: Group) -> List[Tensor]:
    r"""The :obj:`tensor` of every rank, in rank order. The shapes may differ
    along the first dimension only."""
    if group is None:
        return [tensor]
    import torch.distributed as dist
    tensor = tensor.detach().contiguous()
    size = size_of(group)
    counts = all_gather_ints([tensor.size(0)], group)
    padded = tensor.new_zeros((max(c[0] for c in counts), *tensor.shape[1:]))
    padded[:tensor.size(0)] = tensor
    parts = [torch.empty_like(padded) for _ in range(size)]
    _count('all_gather', _nbytes(tensor) * (size - 1))
    with _named_failure('all_gather', group):
        dist.all_gather(parts, padded, group=group)
    return [part[:c[0]] for part, c in zip(parts, counts)]


def all_gather_ints(values: Sequence[int], group: Group) -> List[List[int]]:
    r"""A few integers of every rank (the same number on each), in rank order."""
    if group is None:
        return [list(values)]
    import torch.distributed as dist
    mine = torch.tensor(list(values), dtype=torch.long)
    parts = [torch.empty_like(mine) for _ in range(size_of(group))]
    _count('all_gather', _nbytes(mine) * (len(parts) - 1))
    with _named_failure('all_gather', group):
        dist.all_gather(parts, mine, group=group)
    return [part.tolist() for part in parts]


def all_to_all(chunks: Sequence[Tensor], group: Group,
               recv_counts: Optional[Sequence[int]] = None) -> List[Tensor]:
    r"""Sends :obj:`chunks[q]` to rank :obj:`q` and returns what each rank sent
    here, in rank order. Chunks may have different lengths along the first
    dimension; the other dimensions and the dtype must agree. The lengths to
    receive are exchanged first unless :obj:`recv_counts` gives them (a fixed
    pattern, as a halo exchange)."""
    if group is None:
        return [chunks[0]]
    import torch.distributed as dist
    rank = rank_of(group)
    send_counts = [c.size(0) for c in chunks]
    if recv_counts is None:
        recv_counts = [row[rank] for row in all_gather_ints(send_counts, group)]
    recv_counts = list(recv_counts)
    tail = chunks[0].shape[1:]
    width = math.prod(tail)
    send = torch.cat([c.detach().reshape(c.size(0), width) for c in chunks]).contiguous()
    recv = send.new_empty((sum(recv_counts), width))
    _count('all_to_all', sum(_nbytes(c) for q, c in enumerate(chunks) if q != rank))
    with _named_failure('all_to_all', group):
        dist.all_to_all_single(recv, send, recv_counts, send_counts, group=group)
    return [part.reshape(-1, *tail) for part in recv.split(recv_counts)]


def broadcast(tensor: Tensor, group: Group, src: int = 0) -> Tensor:
    r"""The :obj:`tensor` of the rank :obj:`src` (its rank in :obj:`group`),
    on every rank; every rank passes a tensor of the same shape and dtype."""
    if group is None:
        return tensor
    import torch.distributed as dist
    out = tensor.detach().clone().contiguous()
    if rank_of(group) == src:
        _count('broadcast', _nbytes(out) * (size_of(group) - 1))
    with _named_failure('broadcast', group):
        dist.broadcast(out, dist.get_global_rank(group, src), group=group)
    return out


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: Tensor, group: Group) -> Tensor:
        ctx.group = group
        return all_reduce(tensor, group)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Tensor, None]:
        # out_p = sum_q t_q on every rank p, so dL/dt_q = sum_p dL/dout_p.
        return all_reduce(grad, ctx.group), None


def differentiable_all_reduce(tensor: Tensor, group: Group) -> Tensor:
    r""":func:`all_reduce` through which gradients flow: the backward pass
    all-reduces the incoming gradients, as every rank's output depends on
    every rank's input."""
    if group is None:
        return tensor
    return _AllReduceSum.apply(tensor, group)


def agree(error: Optional[BaseException], group: Group, what: str) -> None:
    r"""Raises on every rank if the checks of :obj:`what` failed on any: the
    rank's own :obj:`error` where it has one, else a :class:`ValueError`
    naming the ranks that failed. Called after a rank's checks of its shard,
    before the first collective of the heavy work, so that a rank with bad
    input cannot leave the others waiting in a collective."""
    if group is None:
        if error is not None:
            raise error
        return
    failed = [r for r, (flag,) in enumerate(all_gather_ints([error is not None], group))
              if flag]
    if error is not None:
        raise error
    if failed:
        raise ValueError(f"{what} failed its checks on rank(s) {failed} of "
                         f"{size_of(group)} (see their errors); rank {rank_of(group)} stops "
                         f"too")
