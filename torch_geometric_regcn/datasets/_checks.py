r"""Argument checks of the dataset helpers, and the safe reading of processed
files. Each check raises an error that names the argument and says how to fix
it, before any work is done."""
import math
import numbers
import operator
import os
import os.path as osp
import re
import warnings
import zipfile
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch


def as_count(name: str, value: Any, minimum: int = 0) -> int:
    r"""Returns :obj:`value` as a Python :obj:`int` (NumPy and other integer
    scalars are accepted through :func:`operator.index`); rejects
    :obj:`bool`, non-integers and values below :obj:`minimum`."""
    if isinstance(value, bool):
        raise TypeError(f"'{name}' must be an integer, not a bool (got {value!r})")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"'{name}' must be an integer (got {type(value).__name__} "
                        f"{value!r}); pass e.g. int({name})") from None
    if value < minimum:
        raise ValueError(f"'{name}' must be at least {minimum} (got {value})")
    return value


def as_seed(value: Any) -> int:
    r"""Returns the random seed :obj:`value` as a Python :obj:`int`."""
    return as_count('seed', value, minimum=-2**63)


def check_real(name: str, value: Any, low: Optional[float] = None,
               high: Optional[float] = None) -> None:
    r"""Checks that :obj:`value` is a finite real number (not a :obj:`bool`)
    in :obj:`[low, high]`; the value itself is used unchanged."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"'{name}' must be a real number (got {type(value).__name__} "
                        f"{value!r})")
    if not math.isfinite(float(value)):
        raise ValueError(f"'{name}' must be finite (got {value})")
    if low is not None and high is not None and not low <= value <= high:
        raise ValueError(f"'{name}' must lie in [{low}, {high}] (got {value})")
    if low is not None and value < low:
        raise ValueError(f"'{name}' must be at least {low} (got {value})")
    if high is not None and value > high:
        raise ValueError(f"'{name}' must be at most {high} (got {value})")


def as_root(root: Any, name: str = 'root') -> str:
    r"""Returns the dataset folder :obj:`root` (a :obj:`str` or
    :class:`os.PathLike`) as a :obj:`str`."""
    if isinstance(root, (bytes, bytearray)) or not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"'{name}' must be a folder path, a str or os.PathLike such as "
                        f"pathlib.Path (got {type(root).__name__} {root!r})")
    root = os.fspath(root)
    if not isinstance(root, str):
        raise TypeError(f"'{name}' must name a folder as text, not bytes (got {root!r}); "
                        f"decode it with os.fsdecode")
    if not root:
        raise ValueError(f"'{name}' must not be empty; pass a folder such as 'data' "
                         f"(the dataset's folder is made below it)")
    return root


def check_callable(name: str, value: Optional[Callable]) -> None:
    r"""Checks that :obj:`value` is :obj:`None` or callable."""
    if value is not None and not callable(value):
        raise TypeError(f"'{name}' must be None or callable, e.g. a transform of "
                        f"torch_geometric.transforms (got {type(value).__name__} {value!r})")


def safe_torch_load(path: str, mmap: bool = False, map_location: Any = None) -> Any:
    r"""Loads :obj:`path` with :obj:`torch.load(weights_only=True)` and no
    fallback: an object of a class that is not allowlisted, or any code the
    file would run, raises an error instead of being unpickled."""
    mmap = mmap and zipfile.is_zipfile(path)  # mmap needs torch.save's zip format
    return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)


def load_error(e: Exception) -> str:
    r"""The gist of why :func:`safe_torch_load` failed, without PyTorch's
    advice to retry with :obj:`weights_only=False`."""
    text = str(e)
    match = re.search(r'WeightsUnpickler error: *([^\n]*)', text)
    if match is not None:
        return match.group(1).split('. Please use')[0].rstrip('. ')
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__


#: The files PyG's Dataset opens in processed/ besides the processed data itself.
PYG_RECORDS = ('pre_transform.pt', 'pre_filter.pt')


def unsafe_files(folder: str, names: Sequence[str]) -> List[Tuple[str, str]]:
    r"""Returns :obj:`(path, reason)` for every file :obj:`names` in
    :obj:`folder` that :obj:`torch.load(weights_only=True)` refuses or cannot
    read. The tensors are memory-mapped, not read."""
    found = []
    for name in names:
        path = osp.join(folder, name)
        if osp.isfile(path):
            try:
                safe_torch_load(path, mmap=True, map_location='cpu')
            except Exception as e:  # refused or unreadable: either way, process again
                found.append((path, load_error(e)))
    return found


def vet_processed(folder: str, processed_names: Sequence[str], force_reload: bool) -> bool:
    r"""Returns the :obj:`force_reload` to pass to a dataset whose processed
    files :obj:`processed_names` lie in :obj:`folder`: :obj:`True` (with a
    warning per file) when one of them, or PyG's :obj:`pre_transform.pt` or
    :obj:`pre_filter.pt` there, does not load with
    :obj:`torch.load(weights_only=True)`. The dataset is then processed again
    from its raw files, which overwrites the file before PyG, which unpickles
    some of these files with :obj:`weights_only=False`, opens it."""
    if force_reload:
        return True
    bad = unsafe_files(folder, [*processed_names, *PYG_RECORDS])
    for path, reason in bad:
        warnings.warn(
            f"'{path}' does not load with torch.load(weights_only=True) ({reason}), so it is "
            f"not opened: the dataset is processed again from its raw files. A file that was "
            f"planted in the dataset folder could otherwise run code; if your pre_transform "
            f"stores objects of your own classes, allowlist them with "
            f"torch.serialization.add_safe_globals([...]) so this is not repeated",
            UserWarning, stacklevel=3)
    return bool(bad)
