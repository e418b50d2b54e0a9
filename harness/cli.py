"""Argument types and checks of the examples' and benchmarks' command lines:
a bad value is refused, naming the option and the fix, before any work, so
that no run is lost to a late error. (The examples that need nothing but the
package check their values inline.)

Numbers: ``type=positive_int`` and its kin (argparse then prints ``argument
--epochs: must be a positive integer (got 0)`` and exits with status 2).
Outputs: :func:`check_writable`, called right after ``parse_args``."""
import argparse
import math
import os
import os.path as osp
from typing import Callable, List, Optional


def _at_least(kind: Callable[[str], float], text: str, low: float, rule: str,
              strict: bool = False) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'must be {rule} (got {text!r})') from None
    if not (math.isfinite(value) and (value > low if strict else value >= low)):
        raise argparse.ArgumentTypeError(f'must be {rule} (got {text})')
    return value


def positive_int(text: str) -> int:
    r"""An integer of at least 1."""
    return int(_at_least(int, text, 1, 'a positive integer'))


def non_negative_int(text: str) -> int:
    r"""An integer of at least 0."""
    return int(_at_least(int, text, 0, 'a non-negative integer'))


def int_at_least(low: int) -> Callable[[str], int]:
    r"""The type of an integer of at least :obj:`low` (``int_at_least(2)``:
    the standard deviation over the seeds needs two)."""
    def parse(text: str) -> int:
        return int(_at_least(int, text, low, f'an integer of at least {low}'))
    parse.__name__ = f'int_at_least_{low}'
    return parse


def positive_float(text: str) -> float:
    r"""A finite number above 0."""
    return _at_least(float, text, 0.0, 'a finite positive number', strict=True)


def non_negative_float(text: str) -> float:
    r"""A finite number of at least 0."""
    return _at_least(float, text, 0.0, 'a finite non-negative number')


def device_name(text: str) -> str:
    r"""A torch device that exists here (``cpu``, ``cuda``, ``cuda:1``, ...)."""
    import torch
    try:
        device = torch.device(text)
    except RuntimeError as error:
        raise argparse.ArgumentTypeError(f'not a torch device ({error})') from None
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f'{text}: CUDA is not available here; use cpu')
    return text


def comma_separated(kind: Callable[[str], float]) -> Callable[[str], List[float]]:
    r"""The type of a comma-separated list of :obj:`kind` (``'1e-3,1e-4'``
    with :func:`positive_float`), each item checked by it."""
    def parse(text: str) -> List[float]:
        items = [item.strip() for item in text.split(',')]
        if not all(items):
            raise argparse.ArgumentTypeError(f'must be a comma-separated list (got {text!r})')
        values = []
        for item in items:
            try:
                values.append(kind(item))
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f'{item!r} in {text!r} is not a valid {kind.__name__}') from None
            except argparse.ArgumentTypeError as error:
                raise argparse.ArgumentTypeError(f'each item {error}') from None
        return values
    parse.__name__ = f'comma_separated_{getattr(kind, "__name__", "values")}'
    return parse


def _unwritable(folder: str, create: bool) -> Optional[str]:
    r"""Why files cannot be written in :obj:`folder` (with :obj:`create`:
    once it is made), or :obj:`None`."""
    if osp.isdir(folder):
        return None if os.access(folder, os.W_OK | os.X_OK) else f'{folder} is not writable'
    if osp.exists(folder):
        return f'{folder} is not a folder'
    if not create:
        return f'the folder {folder} does not exist'
    parent = folder
    while not osp.exists(parent):  # the script makes the missing folders: can it?
        parent = osp.dirname(parent)
    if not osp.isdir(parent):
        return f'{parent} is not a folder'
    return None if os.access(parent, os.W_OK | os.X_OK) else f'{parent} is not writable'


def check_writable(parser: argparse.ArgumentParser, flag: str, path: str, *,
                   folder: bool = False, create: bool = False) -> None:
    r"""Exits through :obj:`parser`'s error (status 2, naming :obj:`flag`)
    unless the file :obj:`path` (with :obj:`folder`: files in the folder
    :obj:`path`) can be written. With :obj:`create`, a missing folder passes
    if it can be made (the script makes it, as
    :meth:`harness.report.Report.write` does). Call it right after
    ``parse_args``, for every path the script writes, so that a typo fails
    in a second rather than after hours of work."""
    path = str(path)
    full = osp.abspath(path)
    if not folder:
        if osp.isdir(full):
            parser.error(f'{flag} {path}: is a folder; name a file in it')
        if osp.exists(full) and not os.access(full, os.W_OK):
            parser.error(f'{flag} {path}: the file is read-only; choose another path')
    reason = _unwritable(full if folder else osp.dirname(full), create)
    if reason is not None:
        parser.error(f'{flag} {path}: {reason}; ' + (
            'create it first, or choose another path' if 'does not exist' in reason
            else 'choose another path'))
