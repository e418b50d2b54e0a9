r"""The progress bars of the library's long computations, in one place: each
appears only once its work has run :data:`PROGRESS_DELAY` seconds and is
redrawn at most every :data:`PROGRESS_INTERVAL` seconds."""
import math
from typing import Any, Optional

from tqdm.auto import tqdm

#: Seconds of work before a bar appears, and between two redraws.
PROGRESS_DELAY, PROGRESS_INTERVAL = 1.0, 0.5


def progress_bar(total: int, desc: str, unit: str, enabled: bool = True, **kwargs: Any) -> tqdm:
    r"""A :class:`tqdm.tqdm` bar of :obj:`total` steps of :obj:`unit`, or a
    silent one when not :obj:`enabled`."""
    kwargs.setdefault('delay', PROGRESS_DELAY)
    kwargs.setdefault('mininterval', PROGRESS_INTERVAL)
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, **kwargs)


class EigensolverProgress:
    r"""The progress bar of an iterative eigensolver, and its callbacks
    (:obj:`callback` and :obj:`step_callback` of
    :func:`~torch_geometric_regcn.linalg.extreme_eigenpairs`).

    At the end of each cycle (or iteration) the percentage is the share of
    the decades of relative residual gained so far, from one (a random
    start) down to :obj:`tol`,

    .. math::
        100 \cdot \frac{\log(1 / \text{residual})}{\log(1 / \text{tol})}.

    Within a cycle, which can take long on a large graph, it moves step by
    step towards an estimate of the cycle's outcome: the previous cycle's
    gain, or half the way left for the first one. It never goes back, and
    stops at 99 until the residual reaches :obj:`tol`. The postfix tells the
    stage (locating the spectrum, then each cycle, its step and the last
    residual). Use it as a context manager, which closes the bar.

    Args:
        tol (float): The relative residual the solver stops at.
        enabled (bool, optional): Draw the bar. (default: :obj:`True`)
        desc (str, optional): The bar's label. (default: :obj:`"eigenpairs"`)
    """
    def __init__(self, tol: float, enabled: bool = True, desc: str = 'eigenpairs') -> None:
        self.tol, self.span = tol, math.log(1.0 / tol)
        self.percent = 0  # shown
        self.reached, self.gain = 0.0, None  # at the last cycle's end; its gain
        self.residual: Optional[str] = None  # the last one, formatted
        self.bar = progress_bar(100, desc, '%', enabled, miniters=0)

    def __call__(self, iteration: int, residual: float) -> None:
        r"""The end of cycle :obj:`iteration` with the largest relative
        :obj:`residual` (:obj:`inf`: the spectrum was located, no pairs yet)."""
        if not math.isfinite(residual):
            self.bar.set_postfix_str('spectrum located', refresh=False)
            self.bar.update(0)
            return
        if residual <= self.tol:
            reached = 100.0
        elif self.span > 0:
            reached = min(99.0, max(0.0, 100 * math.log(1.0 / residual) / self.span))
        else:
            reached = 0.0
        self.gain = reached - self.reached if reached > self.reached else self.gain
        self.reached, self.residual = max(self.reached, reached), f'{residual:.1e}'
        self.bar.set_postfix(iteration=iteration, residual=self.residual, refresh=False)
        self._advance(self.reached)

    def step(self, cycle: int, step: int, steps: int) -> None:
        r"""Step :obj:`step` of :obj:`steps` of cycle :obj:`cycle` (:obj:`0`:
        locating the spectrum)."""
        if cycle == 0:
            self.bar.set_postfix_str(f'locating the spectrum, step {step}/{steps}',
                                     refresh=False)
            self.bar.update(0)
            return
        gain = (100 - self.reached) / 2 if self.gain is None else self.gain
        target = min(99.0, self.reached + gain)
        known = {} if self.residual is None else {'residual': self.residual}
        self.bar.set_postfix(iteration=cycle, step=f'{step}/{steps}', **known, refresh=False)
        self._advance(self.reached + (target - self.reached) * step / steps)

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
