r"""The progress bars of the library's long computations, in one place: each
appears only once its work has run :data:`PROGRESS_DELAY` seconds and is
redrawn at most every :data:`PROGRESS_INTERVAL` seconds."""
from typing import Any

from tqdm.auto import tqdm

#: Seconds of work before a bar appears, and between two redraws.
PROGRESS_DELAY, PROGRESS_INTERVAL = 1.0, 0.5


def progress_bar(total: int, desc: str, unit: str, enabled: bool = True, **kwargs: Any) -> tqdm:
    r"""A :class:`tqdm.tqdm` bar of :obj:`total` steps of :obj:`unit`, or a
    silent one when not :obj:`enabled`."""
    kwargs.setdefault('delay', PROGRESS_DELAY)
    kwargs.setdefault('mininterval', PROGRESS_INTERVAL)
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, **kwargs)
