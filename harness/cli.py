"""Argument types of the examples' and benchmarks' command lines: argparse
refuses a bad value naming the option, before any work."""
import argparse
import math
from typing import Callable


def _number(kind: Callable[[str], float], text: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be {'an integer' if kind is int else 'a number'} (got {text!r})") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f'must be finite (got {text!r})')
    return value


def positive_int(text: str) -> int:
    r"""An integer of at least 1."""
    value = int(_number(int, text))
    if value < 1:
        raise argparse.ArgumentTypeError(f'must be a positive integer (got {value})')
    return value


def non_negative_int(text: str) -> int:
    r"""An integer of at least 0."""
    value = int(_number(int, text))
    if value < 0:
        raise argparse.ArgumentTypeError(f'must be a non-negative integer (got {value})')
    return value


def positive_float(text: str) -> float:
    r"""A finite number above 0."""
    value = _number(float, text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f'must be positive (got {value:g})')
    return value


def non_negative_float(text: str) -> float:
    r"""A finite number of at least 0."""
    value = _number(float, text)
    if value < 0:
        raise argparse.ArgumentTypeError(f'must be non-negative (got {value:g})')
    return value


def unit_interval(text: str) -> float:
    r"""A number in :math:`[0, 1]`."""
    value = _number(float, text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f'must lie in [0, 1] (got {value:g})')
    return value


def fraction(text: str) -> float:
    r"""A number in :math:`(0, 1]`."""
    value = _number(float, text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f'must lie in (0, 1] (got {value:g})')
    return value
