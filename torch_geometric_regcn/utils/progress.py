r"""The progress bars of the library's long computations, in one place.

Where a bar goes depends on the standard error stream :obj:`sys.stderr` when
the bar is made (:func:`progress_mode`): a terminal gets a :class:`tqdm.tqdm`
bar redrawn in place, a Jupyter notebook :mod:`tqdm.auto`'s bar (a widget
with :obj:`ipywidgets`), and anything else (a file, a pipe, a log collector)
gets plain status lines (:class:`LogProgress`), as carriage-return redraws
would pile up there. Either way a bar appears only once its work has run
:data:`PROGRESS_DELAY` seconds: a bar is redrawn at most every
:data:`PROGRESS_INTERVAL` seconds, a status line is written at most every
:data:`PROGRESS_LOG_INTERVAL` seconds, plus a last one when the work ends.
tqdm's environment variable :obj:`TQDM_DISABLE` silences every bar, as it
silences tqdm's own."""
import math
import os
import sys
import time
from collections import OrderedDict
from typing import Any, Dict, Mapping, Optional, TextIO, Tuple, Union

import tqdm.autonotebook as autonotebook
import tqdm.std as std
from torch import Tensor
from tqdm.auto import tqdm

#: Seconds of work before a bar appears, and between two redraws.
PROGRESS_DELAY, PROGRESS_INTERVAL = 1.0, 0.5
#: Seconds between two status lines where the stream is not a terminal.
PROGRESS_LOG_INTERVAL = 30.0
#: The filtered cycles an eigensolve is assumed to take until it shows its
#: pace (default solves take a few).
PRIOR_CYCLES = 4  # measured: 1-5 (PubMed, CSBM graphs of 30,000-50,000 nodes)


def progress_mode(stream: Optional[TextIO] = None) -> str:
    r"""How a bar is shown on :obj:`stream` (default: :obj:`sys.stderr` now).

    :obj:`"notebook"`: in a Jupyter kernel with :obj:`ipywidgets`, where
    :mod:`tqdm.auto` draws a widget; :obj:`"terminal"`: a stream whose
    :meth:`isatty` says so, or a Jupyter kernel's output stream (which
    redraws carriage returns in place); :obj:`"log"`: anything else, also a
    stream without a working :meth:`isatty`, and :obj:`"off"` for no stream
    (:obj:`sys.stderr` is :obj:`None` under :obj:`pythonw`)."""
    stream = sys.stderr if stream is None else stream
    if stream is None:
        return 'off'
    if autonotebook.tqdm is not std.tqdm:  # tqdm.auto chose its widget
        return 'notebook'
    try:
        terminal = bool(stream.isatty())
    except Exception:  # no isatty, a closed file, a wrapper that fails
        terminal = False
    if terminal or type(stream).__module__.split('.')[0] == 'ipykernel':
        return 'terminal'
    return 'log'


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f'{seconds}s'
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f'{minutes}m{seconds:02d}s'
    hours, minutes = divmod(minutes, 60)
    return f'{hours}h{minutes:02d}m'


class LogProgress:
    r"""A progress bar for a stream that is not a terminal: newline-ended,
    self-contained status lines such as

    .. code-block:: text

        semantic kNN (exact): 45% 4500/10000 node, 12s elapsed, ETA 15s

    The first once the work has run :obj:`delay` seconds, then at most one
    every :obj:`interval` seconds, and a last one on :meth:`close` when any
    was written or the work ran :obj:`delay` seconds, unless it would repeat
    the last line written (the same steps and postfix, no ETA in either: the
    update that ended the work wrote it). No carriage returns, so
    a log file gets at most :math:`2 + \text{duration} / \text{interval}`
    lines per bar. It offers the :class:`tqdm.tqdm` methods the library uses
    (:meth:`update`, :meth:`set_postfix`, :meth:`set_postfix_str`,
    :meth:`close`, a context manager); the ETA assumes the average rate so
    far.

    Args:
        total (int): The steps of the work.
        desc (str): The label.
        unit (str): The unit of a step (:obj:`"%"`: the line shows the
            percentage alone).
        stream (io.TextIOBase): Where the lines go.
        delay (float, optional): Seconds before the first line.
            (default: :data:`PROGRESS_DELAY`)
        interval (float, optional): Seconds between two lines.
            (default: :data:`PROGRESS_LOG_INTERVAL`)
    """
    #: The clock, in seconds (replaceable in tests).
    clock = staticmethod(time.monotonic)

    def __init__(self, total: int, desc: str, unit: str, stream: TextIO,
                 delay: Optional[float] = None, interval: Optional[float] = None) -> None:
        self.total, self.desc, self.unit, self.stream = total, desc, unit, stream
        self.delay = PROGRESS_DELAY if delay is None else delay
        self.interval = PROGRESS_LOG_INTERVAL if interval is None else interval
        self.n, self.postfix = 0, ''
        self.start = self.clock()
        self.last: Optional[float] = None  # when the last line was written
        self.written: Optional[Tuple[int, str, bool]] = None  # its (n, postfix, ETA shown)
        self.closed = False

    def line(self) -> str:
        r"""The current status line (without its newline)."""
        elapsed = self.clock() - self.start
        parts = [f'{self.desc}: ']
        if self.total:
            parts.append(f'{math.floor(100 * self.n / self.total)}%')
            if self.unit != '%':
                parts.append(f' {self.n}/{self.total} {self.unit}')
        else:
            parts.append(f'{self.n} {self.unit}')
        parts.append(f', {_duration(elapsed)} elapsed')
        if self._eta_shown():
            parts.append(f', ETA {_duration(elapsed * (self.total - self.n) / self.n)}')
        if self.postfix:
            parts.append(f', {self.postfix}')
        return ''.join(parts)

    def _eta_shown(self) -> bool:
        return bool(self.total) and 0 < self.n < self.total and not self.closed

    def _write(self) -> None:
        self.last = self.clock()
        self.written = (self.n, self.postfix, self._eta_shown())
        try:
            self.stream.write(self.line() + '\n')
            flush = getattr(self.stream, 'flush', None)
            if flush is not None:
                flush()
        except (ValueError, OSError):  # a closed stream: no more lines, as tqdm
            self.closed = True

    def _poll(self) -> None:
        now = self.clock()
        if not self.closed and (now - self.start >= self.delay if self.last is None
                                else now - self.last >= self.interval):
            self._write()

    def update(self, n: int = 1) -> None:
        r"""Adds :obj:`n` steps; writes a line when one is due."""
        self.n += n
        self._poll()

    def set_postfix(self, ordered_dict: Optional[Mapping[str, Any]] = None,
                    refresh: bool = True, **kwargs: Any) -> None:
        r"""Sets the text after the numbers, :obj:`key=value` pairs as
        :meth:`tqdm.tqdm.set_postfix` (keyword arguments sorted)."""
        items: Dict[str, Any] = OrderedDict(ordered_dict or {})
        items.update((key, kwargs[key]) for key in sorted(kwargs))
        self.set_postfix_str(', '.join(f'{k}={v}' for k, v in items.items()), refresh)

    def set_postfix_str(self, s: str = '', refresh: bool = True) -> None:
        r"""Sets the text after the numbers; writes a line when one is due
        and :obj:`refresh`."""
        self.postfix = str(s)
        if refresh:
            self._poll()

    def close(self) -> None:
        r"""Writes the last line (no ETA) if a line was written or the work
        ran :obj:`delay` seconds, and the last line written differs; later
        calls do nothing."""
        if self.closed:
            return
        shown = self.last is not None or self.clock() - self.start >= self.delay
        self.closed = True
        if shown and self.written != (self.n, self.postfix, False):
            self._write()

    def __enter__(self) -> 'LogProgress':
        return self

    def __exit__(self, *args: object) -> None:
        self.close()


def tqdm_disabled() -> bool:
    r"""Whether the environment disables tqdm's bars now: a non-empty
    :obj:`TQDM_DISABLE` (:obj:`"0"` too), as recent tqdm releases read it
    for their :obj:`disable` default (:obj:`bool` of the string). tqdm reads
    it once, on import, as a default that an explicit :obj:`disable=`
    overrides; this reads it on every call, for the library's bars, which
    pass :obj:`disable=` explicitly, whatever the installed tqdm."""
    return bool(os.environ.get('TQDM_DISABLE'))


#: A bar of :func:`progress_bar`.
ProgressBar = Union[tqdm, LogProgress]


def progress_bar(total: int, desc: str, unit: str, enabled: bool = True,
                 **kwargs: Any) -> ProgressBar:
    r"""A progress bar of :obj:`total` steps of :obj:`unit` on
    :obj:`sys.stderr`, shown as :func:`progress_mode` says: a
    :class:`tqdm.auto.tqdm` bar in a terminal or a notebook (:obj:`kwargs` go
    to it), a :class:`LogProgress` of status lines elsewhere (which takes
    :obj:`delay` from :obj:`kwargs`), or a silent :class:`tqdm.tqdm` when not
    :obj:`enabled` or when tqdm's environment variable :obj:`TQDM_DISABLE`
    says so (:func:`tqdm_disabled`)."""
    kwargs.setdefault('delay', PROGRESS_DELAY)
    kwargs.setdefault('mininterval', PROGRESS_INTERVAL)
    mode = progress_mode() if enabled and not tqdm_disabled() else 'off'
    if mode == 'log':
        return LogProgress(total, desc, unit, sys.stderr, delay=kwargs['delay'])
    return tqdm(total=total, desc=desc, unit=unit, disable=mode == 'off', **kwargs)


class EigensolverProgress:
    r"""The progress bar of an iterative eigensolver, and its callbacks
    (:obj:`callback`, :obj:`residuals_callback` and :obj:`step_callback` of
    :func:`~torch_geometric_regcn.linalg.extreme_eigenpairs`).

    The bar counts cycles of work. After cycle :math:`c` it shows

    .. math::
        100 \cdot \frac{d}{d + R},

    with :math:`d` the cycles done (the filtered cycles, plus the one that
    located the spectrum) and :math:`R` the cycles still needed at the pace
    seen so far:

    - from the residual of each wanted pair (:meth:`pair_residuals`, which
      block Lanczos reports): a share :math:`q` of the pairs at or below
      :obj:`tol` after :math:`c` filtered cycles is a pace of :math:`q / c`,
      so :math:`R = c (1 - q) / q`. Pairs converge one after another, while
      the largest residual often stays far from :obj:`tol` until the last
      cycle;
    - from the largest residual alone (the other solvers): the pace is the
      decades of residual gained per cycle since the first report, and
      :math:`R` the decades still to go to :obj:`tol` over it;
    - before the first filtered cycle has ended, a solve is assumed to take
      :data:`PRIOR_CYCLES` of them; without a pace since (no pair converged,
      no decade gained), :math:`R = \infty`.

    :math:`R \geq 1` until the residual reaches :obj:`tol` (an unconverged
    solve runs at least one more cycle), so it shows 99 (whole percents,
    rounded down) only after 99 cycles; with :obj:`max_iter`, at least the
    share of the cycles allowed that are done. Within a cycle, which can
    take long on a large graph, the bar moves step by step half the way
    towards its value after that cycle if the pace holds (:math:`d + 1` done,
    :math:`\max(R - 1, 1)` left): a bar ahead of the work would have to
    wait. As it extrapolates the pace seen so far, the bar at each cycle's
    end follows the share of the time spent closely for the default basis (a
    few filtered cycles), and can run well ahead of it mid-way with a basis
    much smaller than the default (tens of cycles). The bar never goes back,
    shows at most 99 until the residual reaches :obj:`tol`, and 100 once it
    does (:meth:`finish`). The postfix tells the
    stage: locating the spectrum, then the cycle, its step, the last largest
    residual and the pairs converged. Use it as a context manager, which
    closes the bar.

    Args:
        tol (float): The relative residual the solver stops at.
        enabled (bool, optional): Draw the bar. (default: :obj:`True`)
        desc (str, optional): The bar's label. (default: :obj:`"eigenpairs"`)
        max_iter (int, optional): The most filtered cycles the solver runs.
            (default: :obj:`None`, not known)
    """
    def __init__(self, tol: float, enabled: bool = True, desc: str = 'eigenpairs',
                 max_iter: Optional[int] = None) -> None:
        self.tol, self.max_iter = tol, max_iter
        self.percent = 0  # shown
        self.located = 0  # one once the spectrum was located: a cycle of work
        self.cycle = 0  # the last filtered cycle reported
        self.estimate, self.remaining = 0.0, float(PRIOR_CYCLES + 1)  # after the last report
        self.first: Optional[Tuple[int, float]] = None  # (cycle, largest residual): 1st report
        self.pairs: Optional[Tuple[int, int, int]] = None  # (cycle, converged, wanted): last
        self.postfix: Dict[str, str] = {}
        self.bar = progress_bar(100, desc, '%', enabled, miniters=0)

    def percent_after(self, done: int, remaining: float) -> float:
        r"""The percentage with :obj:`done` cycles done and :obj:`remaining`
        estimated (:math:`\geq 1`, or :obj:`0` on convergence)."""
        if remaining <= 0:
            return 100.0
        percent = 100 * done / (done + max(remaining, 1.0))
        if self.max_iter is not None:  # the solver stops after max_iter cycles
            percent = max(percent, 100 * done / (self.max_iter + self.located))
        return min(percent, 99.0)

    def pair_residuals(self, iteration: int, residuals: Tensor) -> None:
        r"""The relative residual of each wanted pair at the end of cycle
        :obj:`iteration`, reported before :obj:`__call__` of that cycle."""
        converged = int((residuals <= self.tol).sum())  # NaN: not converged
        self.pairs = (iteration, converged, residuals.numel())

    def __call__(self, iteration: int, residual: float) -> None:
        r"""The end of cycle :obj:`iteration` with the largest relative
        :obj:`residual` (:obj:`inf`: the spectrum was located, no pairs yet)."""
        if residual == math.inf:
            self.located = 1
            self.estimate = self.percent_after(1, PRIOR_CYCLES)
            self.remaining = float(PRIOR_CYCLES)
            self._show(stage='spectrum located')
            self._advance(self.estimate)
            return
        self.cycle = iteration
        if self.first is None:
            self.first = (iteration, residual)
        self.remaining = self._remaining(iteration, residual)
        self.estimate = self.percent_after(iteration + self.located, self.remaining)
        shown = {'iteration': str(iteration), 'residual': f'{residual:.1e}'}
        if self.pairs is not None and self.pairs[0] == iteration:
            shown['converged'] = f'{self.pairs[1]}/{self.pairs[2]}'
        self._show(**shown)
        self._advance(self.estimate)

    def _remaining(self, iteration: int, residual: float) -> float:
        if residual <= self.tol:
            return 0.0
        filtered = iteration - self.first[0] + 1  # filtered cycles reported
        if self.pairs is not None and self.pairs[0] == iteration:
            _, converged, wanted = self.pairs
            share = converged / max(wanted, 1)
            return filtered * (1 - share) / share if share > 0 else math.inf
        if filtered == 1:  # one report: no pace yet
            return float(max(PRIOR_CYCLES - 1, 1))
        pace = math.log(self.first[1] / residual) / (filtered - 1)  # decades per cycle
        return math.log(residual / self.tol) / pace if pace > 0 else math.inf

    def step(self, cycle: int, step: int, steps: int) -> None:
        r"""Step :obj:`step` of :obj:`steps` of cycle :obj:`cycle` (:obj:`0`:
        locating the spectrum)."""
        if cycle == 0:  # towards the prior's value at the cycle's end
            start, target = 0.0, self.percent_after(1, PRIOR_CYCLES)
            self._show(stage=f'locating the spectrum, step {step}/{steps}')
        else:  # half the way towards the value if the pace holds
            done = self.cycle + self.located + 1
            start = self.estimate
            target = (start + self.percent_after(done, max(self.remaining - 1, 1.0))) / 2
            self._show(iteration=str(cycle), step=f'{step}/{steps}')
        self._advance(start + (max(target, start) - start) * step / steps)

    def _show(self, stage: Optional[str] = None, **items: str) -> None:
        if stage is not None:
            self.bar.set_postfix_str(stage, refresh=False)
            return
        self.postfix.pop('step', None)
        self.postfix.update(items)
        order = ('iteration', 'step', 'residual', 'converged')
        self.bar.set_postfix(OrderedDict((k, self.postfix[k]) for k in order
                                         if k in self.postfix), refresh=False)

    def _advance(self, percent: float) -> None:
        percent = min(100, int(round(percent, 6)))  # whole percents, none lost to rounding
        self.bar.update(max(0, percent - self.percent))
        self.percent = max(self.percent, percent)

    def finish(self, converged: bool) -> None:
        r"""Fills the bar when the solver converged (also when it reported
        nothing, as the dense solve of a small problem)."""
        if converged:
            self._advance(100)

    def __enter__(self) -> 'EigensolverProgress':
        return self

    def __exit__(self, *args: object) -> None:
        self.bar.close()
