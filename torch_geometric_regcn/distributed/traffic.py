r"""The bytes this rank sends through the library's collectives, counted
per stage (:func:`traffic_stage`)."""
from collections import defaultdict
from contextlib import contextmanager
from typing import Dict, Iterator, Optional, Tuple

from torch import Tensor

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


def count(operation: str, nbytes: int) -> None:
    TRAFFIC[(_STAGE[0], operation)] += int(nbytes)


def nbytes(tensor: Tensor) -> int:
    return tensor.numel() * tensor.element_size()
