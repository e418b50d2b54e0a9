"""The documentation: the Sphinx site builds without a warning, and the
examples in the docstrings of the main classes run as written."""
import importlib
import importlib.util
import inspect
import os.path as osp
import pathlib
import pkgutil
import re
import subprocess
import sys
import textwrap

import pytest

import torch_geometric_regcn as regcn

DOCS = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'docs')

MISSING = [name for name in ('sphinx', 'myst_parser') if importlib.util.find_spec(name) is None]


@pytest.fixture(scope='module')
def site(tmp_path_factory) -> pathlib.Path:
    r"""The site, built once for the tests of this module: every warning is
    an error (``-W``)."""
    if MISSING:
        pytest.skip(f'the docs build needs {" and ".join(MISSING)} (pip install -e ".[docs]")')
    tmp = tmp_path_factory.mktemp('docs')
    out = tmp / 'html'
    cmd = [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html',
           '-d', str(tmp / 'doctrees'), DOCS, str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f'{" ".join(cmd)} failed:\n{result.stderr[-5000:]}'
    return out


@pytest.mark.slow
def test_docs_build_without_warnings(site):
    page = site / 'api' / 'generated' / 'torch_geometric_regcn.TSGCNConv.html'
    assert page.is_file(), 'the API page of TSGCNConv is missing'
    html = page.read_text(encoding='utf-8')
    assert 'torch_geometric_regcn.TSGCNConv' in html
    # The formula, for MathJax to render in the browser.
    assert r'\mathbf{V}^{\top}\mathbf{W})^{-1}\mathbf{V}^{\top}' in html
    assert r'\tilde{\mathbf{L}}_G' in html
    for name in ('in_channels', 'out_channels', 'scale'):  # the arguments
        assert name in html
    # The narrative pages and their figures are part of the site.
    for doc in ('tsgcn', 'framework', 'datasets', 'architecture'):
        assert (site / f'{doc}.html').is_file()
    assert (site / '_images' / 'sensitivity_rank.png').is_file()
    # The deprecated module shims are no API.
    pages = [p.name for p in site.rglob('*.html')]
    assert not [p for p in pages if 'cosine_knn' in p or 'experiments' in p]


def public_names():
    r"""``(package, name, object)`` for every name of the ``__all__`` of the
    package root and of each of its subpackages."""
    packages = [regcn] + [importlib.import_module(info.name) for info in
                          pkgutil.iter_modules(regcn.__path__, 'torch_geometric_regcn.')
                          if info.ispkg]
    return [(package, name, getattr(package, name)) for package in packages
            for name in package.__all__ if not name.startswith('_')]


@pytest.mark.slow
def test_every_public_name_is_documented(site):
    r"""The API pages are generated from the packages' ``__all__``: a name
    added to one appears on its package's page, a class or function with a
    page of its own, documented at the root's path when the root exports it
    too; a name no longer exported leaves no page behind."""
    generated = site / 'api' / 'generated'
    pages = {p.name for p in generated.glob('*.html')}
    expected = set()
    for package, name, obj in public_names():
        if inspect.ismodule(obj):
            continue
        html = (generated / f'{package.__name__}.html').read_text('utf-8')
        at_root = name in regcn.__all__ and getattr(regcn, name) is obj
        full = f'torch_geometric_regcn.{name}' if at_root else f'{package.__name__}.{name}'
        if inspect.isclass(obj) or inspect.isroutine(obj):
            expected.add(f'{full}.html')
            assert f'href="{full}.html#{full}"' in html, f'{package.__name__} lists no {name}'
            page = (generated / f'{full}.html').read_text('utf-8')
            assert f'id="{full}"' in page  # autodoc described the object there
        else:  # a constant, described on its package's page
            assert f'id="{full}"' in html, f'{package.__name__} does not describe {name}'
    packages = {f'{package.__name__}.html' for package, _, _ in public_names()}
    assert pages == expected | packages


@pytest.mark.slow
def test_constants_have_their_comment(site):
    r"""A constant documented at its package's path gets the ``#:`` comment of
    the module that defines it, not the docstring of its type."""
    html = (site / 'api' / 'generated' / 'torch_geometric_regcn.datasets.html').read_text('utf-8')
    assert 'in the order of the paper' in html  # DATASETS' comment in datasets/registry.py
    assert 'Built-in immutable sequence' not in html and 'dict() -&gt;' not in html


@pytest.mark.slow
def test_capacity_plan_is_what_the_script_computes():
    r"""The tables of the capacity plan in ``docs/distributed.md`` are the
    output of ``python -m benchmarks.capacity_plan``, line for line."""
    out = subprocess.run([sys.executable, '-m', 'benchmarks.capacity_plan'], cwd=osp.dirname(DOCS),
                         capture_output=True, text=True, timeout=60, check=True).stdout
    with open(osp.join(DOCS, 'distributed.md'), encoding='utf-8') as f:
        page = f.read()
    lines = [line for line in out.splitlines() if line.startswith('|')]
    assert len(lines) >= 3 * 8  # three tables of a header, a rule and six rows
    assert [line for line in lines if line not in page] == []


EXAMPLES = [regcn.TSGCNConv, regcn.TSGCN, regcn.RegularizerConv, regcn.RegularizerGNN,
            regcn.LowRankInverse, regcn.SemanticGraph, regcn.MiniBatchTSGCN,
            regcn.PropagateFeatures, regcn.LaplacianEigenPE, regcn.loader.SeedNodeLoader,
            regcn.regularizers.param_groups]


def python_blocks(obj):
    r"""The bodies of the :obj:`.. code-block:: python` directives of a docstring."""
    doc = inspect.getdoc(obj) or ''
    pattern = r'^( *)\.\. code-block:: python\n\n((?:\1 {4}.*\n|\n)+)'
    return [textwrap.dedent(body) for _, body in re.findall(pattern, doc + '\n', re.M)]


@pytest.mark.parametrize('obj', EXAMPLES, ids=lambda obj: obj.__name__)
def test_docstring_example_runs(obj):
    blocks = python_blocks(obj)
    assert blocks, f'{obj.__name__} has no example in its docstring'
    for block in blocks:
        exec(compile(block, f'<{obj.__name__} example>', 'exec'), {})
