r"""How the benchmarks write their reports: a markdown document printed as it
grows, its tables and numbers, and the command line that reproduces it."""
import math
import os
import os.path as osp
import shlex
import sys
import time
from typing import Any, Iterable, List, Optional, Sequence

from harness.data import REPO

#: Where the benchmarks write their reports and results.
RESULTS = osp.join(REPO, 'benchmarks', 'results')

#: Where the figure scripts write their images: the documentation's folder,
#: whose pages show them.
FIGURES = osp.join(REPO, 'docs')


class Report:
    r"""A markdown document: each call appends a line (a paragraph, a
    heading) and prints it, so a long run shows its progress.

    Example::

        rep = Report()
        rep('# Title')
        rep()
        rep.table(['a', 'b'], [[1, 2]])
        rep.write('/tmp/report.md')
    """

    def __init__(self):
        self.lines: List[str] = []

    def __call__(self, text: str = '') -> None:
        r"""Appends :obj:`text` (an empty line by default) and prints it."""
        print(text, flush=True)
        self.lines.append(text)

    def table(self, header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> None:
        r"""Appends a markdown table and the empty line after it."""
        self('| ' + ' | '.join(str(c) for c in header) + ' |')
        self('|' + '|'.join('---' for _ in header) + '|')
        for row in rows:
            self('| ' + ' | '.join(str(c) for c in row) + ' |')
        self()

    def header(self, title: str, module: str, argv: Optional[Sequence[str]], threads: int,
               quick: bool = False, isolated: Optional[bool] = True) -> None:
        r"""Opens a benchmark's report: the title (marked as a smoke test with
        :obj:`quick`), the command that reproduces it and the machine
        (:func:`harness.measure.describe_machine`: :obj:`isolated` says whether
        each measurement ran in a spawned process of its own, or
        :obj:`None`: the report says where each part ran)."""
        from harness.measure import describe_machine
        self(f'# {title}' + (' (--quick smoke test)' if quick else ''))
        self()
        self(f'Command (from the repository root): `{command_line(module, argv)}`')
        self()
        self(describe_machine(threads, isolated))
        self()

    def finish(self, start: float, path: str) -> None:
        r"""Closes a benchmark's report with its wall time since :obj:`start`
        (a :func:`time.perf_counter` reading) and the load, and writes it."""
        from harness.measure import load_average
        self(f'Total wall time {(time.perf_counter() - start) / 60:.1f} min; load average at '
             f'the end: {load_average()}.')
        self.write(path)
        print(f'\nWritten to {path}')

    def text(self) -> str:
        r"""The document: its lines and a final newline."""
        return '\n'.join(self.lines) + '\n'

    def write(self, path) -> None:
        r"""Writes the document to :obj:`path`, creating its folder."""
        os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
        with open(path, 'w') as f:
            f.write(self.text())


def fmt(x: Any, spec: str = '.3g') -> str:
    r"""``format(x, spec)``, with ``'-'`` for :obj:`None` and ``'n/a'`` for
    NaN."""
    if x is None:
        return '-'
    if isinstance(x, float) and math.isnan(x):
        return 'n/a'
    return format(x, spec)


def command_line(module: str, argv: Optional[Sequence[str]] = None) -> str:
    r"""The command that runs :obj:`module` (``'benchmarks.scale'``) from the
    repository root with the arguments :obj:`argv` (default: this process's),
    for a report to say how it was made."""
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(['python', '-m', module] + args)
