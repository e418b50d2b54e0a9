r"""Every Python block of ``README.md`` and ``docs/*.md`` runs as written: the
blocks of a page in order, in one fresh interpreter, from an empty folder
where the datasets they load lie offline (``tests/doc_snippets.py`` says
how). ``tests/test_install.py`` runs them in an environment that holds the
wheel and nothing else; in a session that runs it, these tests run after it
(``tests/conftest.py``) and skip the pages it ran."""
import os
import re
import sys

import pytest

from harness.data import has_offline_copy
from tests.doc_snippets import (
    DATA_ROOTS,
    PAGES,
    RAN_IN_WHEEL,
    REPO,
    blocks,
    lay_datasets,
    needs_data,
    run_page,
)

OFFLINE = all(has_offline_copy(name) for names in DATA_ROOTS.values() for name in names)


def test_the_readme_and_the_docs_have_snippets():
    found = [b for page in PAGES for b in blocks(page)]
    assert len([b for b in found if b.page == 'README.md' and not b.fragment]) >= 6
    # Fragments are the exception (tests/doc_snippets.py, FRAGMENT).
    assert len([b for b in found if b.fragment]) <= 2, [b for b in found if b.fragment]


@pytest.mark.slow
@pytest.mark.parametrize('page', [page for page in PAGES if blocks(page)])
def test_snippets_run_as_written(page, tmp_path, pytestconfig):
    if page in pytestconfig.stash.get(RAN_IN_WHEEL, set()):
        pytest.skip('run as written in the wheel environment by tests/test_install.py')
    if needs_data(page) and not OFFLINE:
        pytest.skip(f'{page} loads datasets that are not in ../shared/data')
    if needs_data(page):
        lay_datasets(str(tmp_path))
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}
    failures = run_page(page, sys.executable, str(tmp_path), env)
    assert not failures, '\n\n'.join(failures)


def test_the_readme_names_every_public_name():
    r"""The README's table of names is complete: every name of the ``__all__``
    of the package root and of each subpackage appears in it, quoted."""
    import importlib
    import pkgutil

    import torch_geometric_regcn as regcn
    with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as f:
        readme = f.read()
    packages = [regcn] + [importlib.import_module(info.name) for info in
                          pkgutil.iter_modules(regcn.__path__, 'torch_geometric_regcn.')
                          if info.ispkg]
    names = {name for package in packages for name in package.__all__
             if not name.startswith('_')}
    assert names, 'no public names found'
    missing = sorted(name for name in names
                     if not re.search(rf'`(\w+\.)?{name}[`(]', readme))
    assert not missing, f'README.md does not name {missing}'


def test_every_name_of_the_readme_table_exists():
    r"""The other way round: each name the README's table of names gives
    (``name(...)``, or ``package``: ``name``, ...) is a public name of the
    package root or of that subpackage, so a renamed one cannot linger."""
    import importlib

    import torch_geometric_regcn as regcn
    with open(os.path.join(REPO, 'README.md'), encoding='utf-8') as f:
        readme = f.read()
    table = readme[readme.index('## Names'):].split('\n## ', 1)[0]
    rows = [line.split('|')[1].strip() for line in table.splitlines()
            if line.startswith('| `')]
    assert len(rows) >= 15, rows
    stale = []
    for cell in rows:
        names = re.findall(r'`(\w+)[`(]', cell)
        package = regcn
        if cell.startswith(f'`{names[0]}`:'):  # a subpackage and its names
            package = importlib.import_module(f'torch_geometric_regcn.{names[0]}')
            names = names[1:]
        stale += [f'{package.__name__}.{name}' for name in names
                  if name not in package.__all__]
    assert not stale, f'the README names {stale}, which the package does not export'
