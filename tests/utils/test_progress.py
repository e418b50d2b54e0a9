"""The library's progress bars: the factory and the eigensolver's bar."""
import contextlib
import io
import math

import pytest

import torch_geometric_regcn.utils.progress as module
from torch_geometric_regcn.utils.progress import EigensolverProgress, progress_bar


def test_progress_bar_waits_for_its_delay_and_can_be_silenced(monkeypatch):
    monkeypatch.setattr(module, 'PROGRESS_INTERVAL', 0.0)
    for delay, enabled, drawn in [(0.0, True, True), (60.0, True, False),
                                  (0.0, False, False)]:
        monkeypatch.setattr(module, 'PROGRESS_DELAY', delay)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            bar = progress_bar(3, 'work', 'item', enabled)
            bar.update(3)
            bar.close()
        assert ('work' in err.getvalue()) == drawn


@pytest.mark.parametrize('residual, percent', [(1.0, 0), (1e-5, 50), (1e-9, 90),
                                               (1e-10, 100), (2.0, 0)])
def test_percent_counts_the_decades_of_residual_gained(residual, percent):
    progress = EigensolverProgress(1e-10, enabled=False)
    progress(1, residual)
    assert progress.percent == percent
    progress(2, 1.0)  # a worse residual later does not move the bar back
    assert progress.percent == percent
    progress(3, math.inf)  # the located spectrum: a report, not progress
    assert progress.percent == percent


def test_steps_move_the_bar_within_a_cycle_and_never_past_99():
    progress = EigensolverProgress(1e-10, enabled=False)
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


def test_an_unconverged_solve_is_not_filled():
    with EigensolverProgress(1e-10, enabled=False) as progress:
        progress(1, 1e-5)
        progress.finish(converged=False)
    assert progress.percent == 50
