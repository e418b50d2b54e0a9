r"""The Python snippets of ``README.md`` and ``docs/*.md`` (and the
``.. code-block:: python`` directives of ``docs/*.rst``), and how to run them
as a reader would: the blocks of one page in page order, in one fresh
interpreter (a page is one session), from a folder where the datasets the
snippets load lie offline as they would after a download.

Two markers, on a block's first line, change how it runs:

- ``# fragment: <why>`` -- a deliberate fragment (it continues code the page
  does not show); it is counted, not run. Fragments are the exception.
- ``# torchrun --nproc_per_node=P <name>.py`` -- a program of its own for
  several processes: it runs alone, under ``python -m torch.distributed.run
  --standalone --nproc_per_node=P``.

Used by ``tests/test_doc_snippets.py`` (in this environment) and by
``tests/test_install.py`` (in a fresh environment holding only the wheel)."""
import os
import os.path as osp
import re
import subprocess
import sys
import textwrap
from typing import Dict, List, NamedTuple, Optional, Set

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

#: The pages tests/test_install.py ran without a failure in the wheel's
#: environment in this session (``config.stash``): tests/test_doc_snippets.py
#: does not run them again.
RAN_IN_WHEEL = pytest.StashKey[Set[str]]()

#: The pages whose Python blocks are run, relative to the repository.
PAGES = ['README.md'] + sorted(osp.join('docs', name) for name in os.listdir(osp.join(REPO, 'docs'))
                               if name.endswith(('.md', '.rst')))

#: Where the snippets' datasets are laid under the folder they run from,
#: and which dataset of ``harness.data.SHARED_LAYOUT`` goes there. PyG's
#: ``Planetoid('data/Planetoid', 'Cora')`` finds ``data/Planetoid/Cora/raw``;
#: ``load_dataset('Cora', 'data')`` finds ``data/Cora/raw``.
DATA_ROOTS = {'data/Planetoid': ['Cora'], 'data': ['Cora', 'ACM']}

FRAGMENT = '# fragment:'
TORCHRUN = re.compile(r'^# torchrun --nproc_per_node=(\d+) \S+\.py$')


class Block(NamedTuple):
    page: str  #: relative to the repository
    line: int  #: of the code's first line, counted from 1
    code: str
    processes: Optional[int]  #: for a ``# torchrun`` program
    fragment: bool


def blocks(page: str) -> List[Block]:
    r"""The Python blocks of :obj:`page`, in page order."""
    with open(osp.join(REPO, page), encoding='utf-8') as f:
        text = f.read()
    if page.endswith('.rst'):
        pattern = r'^( *)\.\. code-block:: python\n\n((?:\1 {4}.*\n|\n)+)'
        found = [(m.start(2), textwrap.dedent(m.group(2)))
                 for m in re.finditer(pattern, text, re.M)]
    else:
        found = [(m.start(1), m.group(1))
                 for m in re.finditer(r'^```python\n(.*?)^```', text, flags=re.S | re.M)]
    result = []
    for start, code in found:
        first = code.split('\n', 1)[0].strip()
        launch = TORCHRUN.match(first)
        result.append(Block(page, text.count('\n', 0, start) + 1, code,
                            int(launch.group(1)) if launch else None, first.startswith(FRAGMENT)))
    return result


def needs_data(page: str) -> bool:
    r"""Whether the snippets of :obj:`page` read a dataset root."""
    return any(re.search(r"['\"]data[/'\"]", block.code) for block in blocks(page))


def lay_datasets(folder: str) -> None:
    r"""Copies the raw files of :data:`DATA_ROOTS` into :obj:`folder` (needs the
    repository's ``harness``; raises :class:`FileNotFoundError` where a
    dataset has no offline copy)."""
    sys.path.insert(0, REPO)
    try:
        from harness.data import offline_root
    finally:
        sys.path.remove(REPO)
    for root, names in DATA_ROOTS.items():
        for name in names:
            offline_root(name, osp.join(folder, root))


def on_page_lines(parts: List[Block]) -> str:
    r"""The code of :obj:`parts`, each block on its own lines of the page
    (blank lines between), so that a traceback's line numbers are the page's."""
    code = ''
    for b in parts:
        code += '\n' * (b.line - 1 - code.count('\n')) + b.code
    return code


def run_page(page: str, python: str, cwd: str, env: Optional[Dict[str, str]] = None,
             timeout: float = 900) -> List[str]:
    r"""Runs the snippets of :obj:`page` with the interpreter :obj:`python`
    from :obj:`cwd`; returns one failure message per program that did not
    exit 0 (an empty list: every snippet ran)."""
    session = [b for b in blocks(page) if not b.fragment and b.processes is None]
    programs = [(['-c', on_page_lines(session)], session)] if session else []
    for b in blocks(page):
        if b.processes is not None:
            script = osp.join(cwd, f'snippet_{b.line}.py')
            with open(script, 'w', encoding='utf-8') as f:
                f.write(on_page_lines([b]))
            programs.append((['-m', 'torch.distributed.run', '--standalone',
                              f'--nproc_per_node={b.processes}', script], [b]))
    failures = []
    for args, parts in programs:
        out = subprocess.run([python, *args], cwd=cwd, env=env, capture_output=True, text=True,
                             timeout=timeout)
        if out.returncode != 0:
            lines = ', '.join(str(b.line) for b in parts)
            failures.append(f'{page} (blocks at lines {lines}; the traceback counts the '
                            f'lines of the page) exited {out.returncode}:\n'
                            f'{out.stdout[-2000:]}\n{out.stderr[-4000:]}')
    return failures
