"""The package as a user installs it: the wheel built from the repository,
installed without extras into a fresh virtual environment (no system site
packages), then used from a folder outside the repository. It checks that the
wheel holds the library and nothing else, that its metadata is what
pyproject.toml and version.py say, that the package imports, that
``examples/csbm.py`` (which needs nothing but the package) runs, and that
every Python block of the README and of ``docs/`` runs as written.

It installs torch and PyG into the new environment (under a minute here,
torch's wheel coming from the machine's disk, the rest from PyPI), then
runs the pages two at a time. It skips
only where this Python cannot make a virtual environment with pip; any other
failure (the build, the install, the import, the example) fails."""
import concurrent.futures
import importlib.util
import os
import os.path as osp
import re
import shutil
import subprocess
import sys
import warnings
import zipfile

import pytest

from harness.data import has_offline_copy
from tests.doc_snippets import (
    DATA_ROOTS,
    PAGES,
    RAN_IN_WHEEL,
    blocks,
    lay_datasets,
    needs_data,
    run_page,
)

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
PACKAGE = 'torch_geometric_regcn'
#: What stays in the repository and must not be installed.
REPOSITORY_ONLY = ('harness', 'tests', 'benchmarks', 'examples', 'docs')
#: Left out of the copy the wheel is built from: VCS data, CI's environment,
#: earlier builds (a stale build/lib would leak deleted modules into the
#: wheel), data, caches.
TOP_LEVEL_NOT_COPIED = {'.git', '.ci', 'build', 'dist', 'data'}
NOT_COPIED_ANYWHERE = shutil.ignore_patterns('__pycache__', '*.egg-info', '.pytest_cache',
                                             '.ruff_cache')


def not_copied(folder, names):
    skipped = set(NOT_COPIED_ANYWHERE(folder, names))
    if osp.samefile(folder, REPO):
        skipped |= TOP_LEVEL_NOT_COPIED & set(names)
    return skipped


def _why_no_venv():
    for module in ('venv', 'ensurepip'):
        if importlib.util.find_spec(module) is None:
            return f'this Python has no {module} module, so no virtual environment with pip'
    if subprocess.run([sys.executable, '-m', 'pip', '--version'],
                      capture_output=True).returncode != 0:
        return 'pip is not available to this Python, so no wheel can be built'
    return None


WHY_NOT = _why_no_venv()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))


def run(args, cwd, timeout, env=None):
    """Runs `args`; fails with its output unless it exits 0."""
    out = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                         timeout=timeout, env=env)
    assert out.returncode == 0, (f'{" ".join(map(str, args))} exited {out.returncode}\n'
                                 f'{out.stdout[-3000:]}\n{out.stderr[-3000:]}')
    return out.stdout


def user_env():
    """The environment less anything that would put the repository on the path
    or point pip at another environment, and with Python's default of writing
    bytecode caches (the wheel is installed without compiling every module of
    torch; the first import compiles what is imported, once)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ('PYTHONPATH', 'PYTHONHOME', 'VIRTUAL_ENV', 'PIP_REQUIRE_VIRTUALENV',
                        'PYTHONDONTWRITEBYTECODE')}
    env['PIP_NO_INPUT'] = '1'
    return env


def repository_version():
    with open(osp.join(REPO, PACKAGE, 'version.py'), encoding='utf-8') as f:
        return re.search(r"__version__ = '(.+)'", f.read()).group(1)


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_environment_and_runs_the_example(tmp_path, pytestconfig):
    env = user_env()

    # The wheel, built from a clean copy of the working tree.
    source = tmp_path / 'source'
    shutil.copytree(REPO, source, ignore=not_copied)
    dist = tmp_path / 'dist'
    run([sys.executable, '-m', 'pip', 'wheel', '--no-deps', '-w', dist, source],
        cwd=tmp_path, timeout=600, env=env)
    wheels = sorted(dist.glob('*.whl'))
    assert len(wheels) == 1, wheels
    wheel = wheels[0]

    # Only the library is in it, all of it, with the metadata we declare.
    version = repository_version()
    dist_info = f'{PACKAGE}-{version}.dist-info'
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata = zf.read(f'{dist_info}/METADATA').decode()
    assert {n.split('/')[0] for n in names} == {PACKAGE, dist_info}, sorted(names)
    modules = {osp.relpath(osp.join(d, f), REPO).replace(os.sep, '/')
               for d, _, files in os.walk(osp.join(REPO, PACKAGE)) for f in files
               if f.endswith('.py')}
    assert modules == {n for n in names if n.endswith('.py')}
    assert f'Version: {version}' in metadata.splitlines()
    for requirement in ('torch>=2.3', 'torch_geometric>=2.5', 'numpy', 'pandas', 'scipy',
                        'tqdm'):
        assert f'Requires-Dist: {requirement}' in metadata.splitlines(), metadata[:3000]
    assert f'{dist_info}/licenses/LICENSE' in names

    # A fresh environment, the wheel without extras; torch pinned as CI pins it.
    venv = tmp_path / 'venv'
    run([sys.executable, '-m', 'venv', venv], cwd=tmp_path, timeout=300, env=env)
    python = venv / ('Scripts' if os.name == 'nt' else 'bin') / 'python'
    # --no-compile: byte-compiling all of torch took most of the install's time.
    run([python, '-m', 'pip', 'install', '--no-compile', '-c', osp.join(REPO, 'constraints.txt'),
         wheel], cwd=tmp_path, timeout=1500, env=env)
    run([python, '-m', 'pip', 'check'], cwd=tmp_path, timeout=120, env=env)

    # From a folder outside the repository: the installed package, nothing else.
    user = tmp_path / 'user'
    user.mkdir()
    script = ('import importlib.util, torch_geometric_regcn as m; '
              'print(m.__file__); print(m.__version__); '
              f'print([n for n in {REPOSITORY_ONLY!r} if importlib.util.find_spec(n)])')
    location, installed_version, importable = \
        run([python, '-c', script], cwd=user, timeout=300, env=env).splitlines()[-3:]
    assert osp.realpath(location).startswith(osp.realpath(venv)), location
    assert installed_version == version
    assert importable == '[]', f'the repository-only packages {importable} are importable'

    shutil.copy(osp.join(REPO, 'examples', 'csbm.py'), user / 'csbm.py')
    out = run([python, 'csbm.py', '--nodes', '1600', '--epochs', '2', '--seeds', '1'],
              cwd=user, timeout=600, env=env)
    assert re.search(r'^tsGCN\s+test accuracy: \d', out, flags=re.M), out
    assert re.search(r'^GCN\s+test accuracy: \d', out, flags=re.M), out

    # Every Python block of the README and of docs/, as a reader runs them: with
    # the wheel and nothing else, each page from an empty folder where the datasets
    # it loads lie offline (tests/doc_snippets.py). tests/test_doc_snippets.py runs
    # in this environment the pages not run here (all, in sessions without this test).
    offline = all(has_offline_copy(name) for names in DATA_ROOTS.values() for name in names)
    pages = [page for page in PAGES if blocks(page) and (offline or not needs_data(page))]
    if not offline:
        warnings.warn(f'the snippets of {[p for p in PAGES if needs_data(p)]} were not run: '
                      f'they load datasets that are not in ../shared/data', stacklevel=1)
    # Two pages at a time, each process on one thread (the machine's two cores;
    # a page's time is mostly the import of torch and PyG).
    folders = [tmp_path / f'snippets{number}' for number in range(len(pages))]
    for page, folder in zip(pages, folders):
        folder.mkdir()
        if needs_data(page):
            lay_datasets(str(folder))
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        failed = list(pool.map(lambda page, folder: run_page(
            page, str(python), str(folder), {**env, 'OMP_NUM_THREADS': '1'}), pages, folders))
    ran = pytestconfig.stash.setdefault(RAN_IN_WHEEL, set())
    ran.update(page for page, f in zip(pages, failed) if not f)
    failures = [message for f in failed for message in f]
    assert not failures, '\n\n'.join(failures)
