"""The documentation: the Sphinx site builds without a warning, and the
examples in the docstrings of the main classes run as written."""
import importlib.util
import inspect
import os.path as osp
import re
import subprocess
import sys
import textwrap

import pytest

import torch_geometric_regcn as regcn

DOCS = osp.join(osp.dirname(osp.dirname(osp.abspath(__file__))), 'docs')

MISSING = [name for name in ('sphinx', 'myst_parser') if importlib.util.find_spec(name) is None]


@pytest.mark.skipif(bool(MISSING), reason=f'the docs build needs {" and ".join(MISSING)} '
                                          f'(pip install -e ".[docs]")')
def test_docs_build_without_warnings(tmp_path):
    out = tmp_path / 'html'
    cmd = [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b', 'html',
           '-d', str(tmp_path / 'doctrees'), DOCS, str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f'{" ".join(cmd)} failed:\n{result.stderr[-5000:]}'

    page = out / 'api' / 'nn' / 'TSGCNConv.html'
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
        assert (out / f'{doc}.html').is_file()
    assert (out / '_images' / 'sensitivity_rank.png').is_file()
    # The deprecated module shims are no API.
    pages = [p.name for p in out.rglob('*.html')]
    assert not [p for p in pages if 'cosine_knn' in p or 'experiments' in p]


EXAMPLES = [regcn.TSGCNConv, regcn.TSGCN, regcn.RegularizerConv, regcn.RegularizerGNN,
            regcn.LowRankInverse, regcn.SemanticGraph]


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
