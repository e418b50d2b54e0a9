r"""The few :mod:`torch.distributed` collectives the library calls: the only
module of the package that talks to :mod:`torch.distributed`.

Every function takes a process :obj:`group`; :obj:`None` means a single
process (no communication at all: the collective returns its input), which
keeps the distributed code paths the same as the single-process ones. For all
processes pass :obj:`torch.distributed.group.WORLD`.

Each collective adds the bytes this rank sends to
:data:`~torch_geometric_regcn.distributed.TRAFFIC` under the current
:func:`~torch_geometric_regcn.distributed.traffic_stage`, and turns a failure
(a peer that raised, died or ran past the process group's :obj:`timeout`) into
a :class:`DistributedError` that names this rank and the operation.
"""
import copy
import hashlib
import json
import math
import numbers
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from torch_geometric_regcn.distributed.traffic import count as _count
from torch_geometric_regcn.distributed.traffic import nbytes as _nbytes
from torch_geometric_regcn.utils.validation import is_boolean

Group = Any  # a torch.distributed.ProcessGroup, or None for a single process


class DistributedError(RuntimeError):
    r"""A collective failed on this rank: a peer raised, died, or did not
    reach it within the process group's timeout."""


def rank_of(group: Group) -> int:
    r"""This process's rank in :obj:`group` (:obj:`0` without one)."""
    if group is None:
        return 0
    return dist.get_rank(group)


def size_of(group: Group) -> int:
    r"""The number of processes in :obj:`group` (:obj:`1` without one)."""
    if group is None:
        return 1
    return dist.get_world_size(group)


def processes() -> int:
    r"""The number of processes of the default group where
    :mod:`torch.distributed` is initialised (:obj:`1` where it is not): how
    many processes may be training one model, e.g. under
    :class:`~torch.nn.parallel.DistributedDataParallel`."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size()


def check_group(group: Group, name: str = 'group') -> Group:
    r"""Checks that :obj:`group` is :obj:`None` or a process group of an
    initialised :mod:`torch.distributed`; returns it."""
    if group is None:
        return None
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


class SharesGroup:
    r"""A mixin for objects that keep a process group in their attribute
    :obj:`group` (a :class:`torch.nn.Module` listed after it, e.g.
    :class:`~torch_geometric_regcn.TSGCNConv`). A process group is a handle
    of this process's :mod:`torch.distributed`, not data, so:

    - :func:`copy.deepcopy` copies everything else and shares the group
      (an EMA or best-model copy runs on the same ranks, with the same
      collectives); :func:`copy.copy` shares it too;
    - pickling (:func:`torch.save` of the object, or sending it to another
      process) raises :class:`TypeError` naming :obj:`group`: a handle
      cannot travel, and one dropped silently would make the loaded copy
      compute on one rank's rows as if they were the whole graph. Save the
      :meth:`~torch.nn.Module.state_dict` and build the object with the
      loading process's group. Without a group it pickles as before."""

    def __getstate__(self) -> Dict[str, Any]:
        if self.__dict__.get('group') is not None:
            raise TypeError(
                f"{type(self).__name__} holds a torch.distributed process group in 'group', "
                f"which cannot be pickled (a handle of this process, not data); save "
                f"'state_dict()' instead and build the module with group= in the process "
                f"that loads it, or copy it within this process with copy.deepcopy, which "
                f"shares the group")
        return self._state()

    def _state(self) -> Dict[str, Any]:
        # The next class's state: a Module's, or (a plain object, as a
        # transform) its __dict__, which object.__getstate__ gives from 3.11.
        parent = getattr(super(), '__getstate__', None)
        return dict(self.__dict__) if parent is None else parent()

    def _copy(self, memo: Optional[Dict[int, Any]]) -> Any:
        cls = type(self)
        new = cls.__new__(cls)
        state = self._state()
        if memo is not None:
            memo[id(self)] = new
            group = self.__dict__.get('group')
            if group is not None:  # shared, never copied
                memo[id(group)] = group
            state = copy.deepcopy(state, memo)
        if hasattr(new, '__setstate__'):
            new.__setstate__(state)
        else:
            new.__dict__.update(state)
        return new

    def __copy__(self) -> Any:
        return self._copy(None)

    def __deepcopy__(self, memo: Dict[int, Any]) -> Any:
        return self._copy(memo)


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
    out = tensor.detach().clone().contiguous()
    _count('all_reduce', _nbytes(out) if size_of(group) > 1 else 0)  # one process sends nothing
    with _named_failure('all_reduce', group):
        dist.all_reduce(out, group=group)
    return out


def all_gather(tensor: Tensor, group: Group) -> List[Tensor]:
    r"""The :obj:`tensor` of every rank, in rank order. The shapes may differ
    along the first dimension only."""
    if group is None:
        return [tensor]
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
    rank = rank_of(group)
    send_counts = [c.size(0) for c in chunks]
    if recv_counts is None:
        recv_counts = [row[rank] for row in all_gather_ints(send_counts, group)]
    recv_counts = list(recv_counts)
    tail = chunks[0].shape[1:]
    width = math.prod(tail)
    send = torch.cat([c.detach().reshape(c.size(0), width) for c in chunks])
    recv = send.new_empty((sum(recv_counts), width))
    all_to_all_into(recv, send, recv_counts, send_counts, group)
    return [part.reshape(-1, *tail) for part in recv.split(recv_counts)]


def all_to_all_into(out: Tensor, send: Tensor, recv_counts: Sequence[int],
                    send_counts: Sequence[int], group: Group) -> Tensor:
    r"""The all-to-all of :func:`all_to_all` on buffers the caller holds: the
    rows of :obj:`send` go in consecutive runs of :obj:`send_counts[q]` rows
    to rank :obj:`q`, and the runs received, :obj:`recv_counts[q]` rows from
    rank :obj:`q`, are written to :obj:`out` in rank order (both contiguous,
    of the same dtype and row shape). Returns :obj:`out`."""
    if group is None:
        return out.copy_(send)
    rank = rank_of(group)
    row = _nbytes(send[:1]) if send.size(0) else 0
    _count('all_to_all', row * (sum(send_counts) - send_counts[rank]))
    with _named_failure('all_to_all', group):
        dist.all_to_all_single(out, send.detach().contiguous(), list(recv_counts),
                               list(send_counts), group=group)
    return out


def broadcast(tensor: Tensor, group: Group, src: int = 0) -> Tensor:
    r"""The :obj:`tensor` of the rank :obj:`src` (its rank in :obj:`group`),
    on every rank; every rank passes a tensor of the same shape and dtype."""
    if group is None:
        return tensor
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
    input cannot leave the others waiting in a collective.
    :func:`agree_arguments` does the same and also compares the arguments."""
    agree_arguments(group, what, {}, error)


#: The fix named when the ranks disagree, unless the caller names another.
SAME_ARGUMENTS = ('every rank of the group must call it with the same arguments and tensors '
                  'of the same widths and dtypes (build them from one configuration on every '
                  'rank, or broadcast them from rank 0), each with its shard of one partition')


def describe(value: Any) -> str:
    r"""The description of :obj:`value` that :func:`agree_arguments`
    compares and shows: the shape, dtype and device type of a tensor (never
    its numbers), the exact :func:`repr` of anything else (a float's
    :func:`repr` is exact) after :func:`plain`, so that the type of a
    number does not count where its value is the same (NumPy's or
    Python's); tuples and lists are described item by item, both as a
    tuple, so that :obj:`(0, 60, 120)` and :obj:`[0, 60, 120]` agree."""
    if isinstance(value, torch.Tensor):
        return f'a tensor of shape {list(value.shape)}, {value.dtype}, on {value.device.type}'
    return repr(plain(value))


def plain(value: Any) -> Any:
    r"""A number as the Python number of its kind: a boolean (Python's or
    NumPy's) as :class:`bool`, an integer as :class:`int`, another real
    number as :class:`float`; tuples and lists item by item, as a
    :class:`tuple` (a sequence of the same numbers is one value); anything
    else as it is. :obj:`1` and :obj:`1.0` stay different (an integer argument
    is not a float); pass a real coefficient through :func:`real` to compare
    it by value."""
    kind = type(value)
    if kind in (tuple, list):
        return tuple(plain(item) for item in value)
    if is_boolean(value):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def real(value: Any) -> Any:
    r"""A real coefficient (:math:`\alpha`, a tolerance) as
    :func:`agree_arguments` should compare it: a non-boolean real number
    (Python's or NumPy's, integer or not) as a :class:`float`, so that
    :obj:`alpha=1` on one rank and :obj:`alpha=1.0` on another agree;
    anything else (a boolean, a string, a tensor) as it is, for the
    caller's own check to name."""
    if isinstance(value, numbers.Real) and not isinstance(plain(value), bool):
        return float(value)
    return value


def _digest(descriptions: Sequence[Tuple[str, str]]) -> int:
    text = json.dumps(list(descriptions))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), 'little',
                          signed=True)


def agree_arguments(group: Group, what: str, values: Mapping[str, Any],
                    error: Optional[BaseException] = None, *, share: Sequence[int] = (),
                    fix: str = SAME_ARGUMENTS) -> List[List[int]]:
    r"""Checks, before the first collective of :obj:`what`, that no rank's
    own checks failed and that every rank of :obj:`group` holds the same
    :obj:`values`: each argument and shape that the following collectives
    depend on (coefficients, ranks and widths, dtypes, iteration counts and
    tolerances, seeds, the row blocks), by its name in the errors. One
    all-gather of :math:`2 + |\text{share}|` integers (a flag and a 64-bit
    digest of the :func:`describe` of the values), so no disagreement ever
    reaches a collective whose shapes or count it would change:

    - a rank whose :obj:`error` is not :obj:`None` raises it, the others a
      :class:`ValueError` naming the failing ranks (as :func:`agree`);
    - else, when the values differ, every rank raises the same
      :class:`ValueError`, naming each value that differs with every rank's
      and :obj:`fix` (only then are the descriptions themselves gathered,
      by every rank, as all saw the same digests).

    Without a :obj:`group` only :obj:`error` is raised, and so it is before
    :func:`check_group`'s error where :obj:`group` is not a usable one. Returns the
    :obj:`share` integers of every rank, in rank order: a caller that must
    also learn something every rank may hold differently (whether its cache
    is fresh, a count) gets it from the same collective.

    Args:
        group (ProcessGroup, optional): The ranks; :obj:`None` for one process.
        what (str): The entry point, named in the errors.
        values (Mapping[str, Any]): The values every rank must hold alike,
            keyed by how the error names them (e.g. :obj:`"'alpha'"` or
            :obj:`"the width of 'w' (the rank r of the factors)"`).
        error (BaseException, optional): This rank's failed check.
        share (Sequence[int], optional): A few integers of this rank, the
            same number on every rank. (default: none)
        fix (str, optional): What to do when the values differ.
    """
    if group is None:
        if error is not None:
            raise error
        return [list(share)]
    try:
        check_group(group)
    except (TypeError, ValueError):  # no collective to join: this rank's own error first
        if error is not None:
            raise error from None
        raise
    descriptions = [] if error is not None else [(name, describe(value))
                                                 for name, value in values.items()]
    mine = [int(error is not None), _digest(descriptions)]
    table = all_gather_ints(mine + [int(s) for s in share], group)
    failed = [r for r, row in enumerate(table) if row[0]]
    if error is not None:
        raise error
    if failed:
        raise ValueError(f"{what} failed its checks on rank(s) {failed} of "
                         f"{size_of(group)} (see their errors); rank {rank_of(group)} stops "
                         f"too")
    if len({row[1] for row in table}) > 1:
        raise ValueError(_disagreement(what, descriptions, group, fix))
    return [row[2:] for row in table]


def _disagreement(what: str, descriptions: List[Tuple[str, str]], group: Group,
                  fix: str) -> str:
    r"""The message of :func:`agree_arguments` once the digests differ: the
    descriptions of every rank, gathered, and those that differ."""
    mine = torch.tensor(list(json.dumps(descriptions).encode()), dtype=torch.uint8)
    ranks: List[Dict[str, str]] = [dict(json.loads(bytes(part.tolist()).decode()))
                                   for part in all_gather(mine, group)]
    names = list(dict.fromkeys(name for seen in ranks for name in seen))
    differ = []
    for name in names:
        held = [seen.get(name, '(not given)') for seen in ranks]
        if len(set(held)) > 1:
            by_value = {value: [r for r, v in enumerate(held) if v == value] for value in held}
            held_by = ', '.join(f'{value} on rank{"s" * (len(rs) > 1)} {", ".join(map(str, rs))}'
                                for value, rs in by_value.items())
            differ.append(f'{name} must be the same on every rank ({held_by})')
    return (f"{what}: {'; '.join(differ)}. Otherwise the ranks would run different "
            f"collectives (a hang, an abort or a silently wrong result); {fix}")


def any_rank(flags: Sequence[bool], group: Group) -> List[bool]:
    r"""Each of :obj:`flags` where it holds on any rank of :obj:`group` (one
    all-reduce of a few integers): for a yes-or-no decision that each rank
    takes from the same all-reduced numbers through a local LAPACK call
    (whose bits may differ with the thread count or the machine), where
    "yes" is the safe branch (a fallback, a refill), so that every rank
    takes it, and the same collectives, whenever one rank does. Without a
    :obj:`group`, :obj:`flags` themselves."""
    if group is None:
        return [bool(flag) for flag in flags]
    counts = all_reduce(torch.tensor([int(bool(flag)) for flag in flags], dtype=torch.long),
                        group)
    return [count > 0 for count in counts.tolist()]


def consensus(values: Sequence[int], group: Group) -> List[int]:
    r"""Rank 0's :obj:`values` on every rank (one broadcast of a few
    integers): for a decision that each rank takes from the same all-reduced
    numbers but through a local LAPACK call (an eigensolver's Ritz values),
    whose bits can differ between kinds of hardware, so that every rank
    leaves a loop or changes its step at the same iteration. Without a
    :obj:`group`, :obj:`values` themselves."""
    if group is None:
        return list(values)
    return broadcast(torch.tensor(list(values), dtype=torch.long), group).tolist()
