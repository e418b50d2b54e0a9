"""The eigensolver's progress bar of LowRankInverse."""
import contextlib
import io
import math
import re

import pytest
from torch_geometric.data import Data

import torch_geometric_regcn.transforms.low_rank_inverse as module
from tests.conftest import messy_graph
from torch_geometric_regcn import LowRankInverse


def graph(n=300):
    return Data(edge_index=messy_graph(n, num_edges=3 * n), num_nodes=n,
                semantic_edge_index=messy_graph(n, num_edges=2 * n, seed=100))


def run(monkeypatch, delay=0.0, **kwargs):
    """The transform's stderr, written to a file (not a terminal)."""
    monkeypatch.setattr(module, 'PROGRESS_DELAY', delay)
    monkeypatch.setattr(module, 'PROGRESS_INTERVAL', 0.0)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        LowRankInverse(1.0, 0.4, rank=6, tol=1e-5, **kwargs)(graph())
    return err.getvalue()


def percentages(text):
    return [int(p) for p in re.findall(r'eigenpairs:\s*(\d+)%', text)]


def test_the_bar_moves_during_the_solve_and_ends_its_line(monkeypatch):
    text = run(monkeypatch)
    assert text.endswith('\n') and text.count('\n') == 1  # one bar, one line, closed
    frames = text.split('\r')
    assert any('spectrum located' in frame for frame in frames)
    shown = percentages(text)
    assert shown[-1] == 100 and 'residual=' in frames[-1]
    assert shown == sorted(shown)  # never goes back
    assert any(0 < p < 100 for p in shown)  # intermediate progress, not 0 then 100
    assert len(set(shown)) >= 3


def test_a_quick_solve_prints_nothing(monkeypatch):
    assert run(monkeypatch, delay=60.0) == ''
    assert run(monkeypatch, progress=False) == ''


@pytest.mark.parametrize('residual, percent', [(1.0, 0), (1e-5, 50), (1e-9, 90),
                                               (1e-10, 100), (2.0, 0)])
def test_percent_counts_the_decades_of_residual_gained(residual, percent):
    progress = module._EigenProgress(1e-10, disable=True)
    progress(1, residual)
    assert progress.percent == percent
    progress(2, 1.0)  # a worse residual later does not move the bar back
    assert progress.percent == percent
    progress(3, math.inf)  # the located spectrum: a report, not progress
    assert progress.percent == percent


def test_steps_move_the_bar_within_a_cycle_and_never_past_99():
    progress = module._EigenProgress(1e-10, disable=True)
    for i in range(1, 5):  # locating the spectrum: no percent
        progress.step(0, i, 4)
    assert progress.percent == 0
    progress.step(1, 2, 4)  # the first cycle heads for half the way: 50 %
    assert progress.percent == 25
    progress.step(1, 4, 4)
    assert progress.percent == 50
    progress(1, 1e-2)  # it reached 20 %: the bar waits there
    assert progress.percent == 50
    progress(2, 1e-4)  # 40 %, a gain of 20 per cycle
    assert progress.percent == 50
    progress.step(3, 3, 4)  # 40 + 3/4 * 20
    assert progress.percent == 55
    progress(3, 1e-8)
    for i in range(1, 5):
        progress.step(4, i, 4)  # heads for 80 + 40, capped
    assert progress.percent == 99
    progress.finish(converged=True)
    assert progress.percent == 100
