"""Argument types of the examples' and benchmarks' command lines: argparse
refuses a bad value naming the option, before any work. (The examples that
need nothing but the package check their values inline.)"""
import argparse
import math
from typing import Callable


def _at_least(kind: Callable[[str], float], text: str, low: float, rule: str) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'must be {rule} (got {text!r})') from None
    if not (math.isfinite(value) and value >= low):
        raise argparse.ArgumentTypeError(f'must be {rule} (got {text})')
    return value


def positive_int(text: str) -> int:
    r"""An integer of at least 1."""
    return int(_at_least(int, text, 1, 'a positive integer'))


def non_negative_float(text: str) -> float:
    r"""A finite number of at least 0."""
    return _at_least(float, text, 0.0, 'a finite non-negative number')
