"""Sphinx configuration of the documentation site.

Build it from the repository root with::

    pip install -e ".[docs]"
    python -m sphinx -W -b html docs docs/_build

The build needs no network: MathJax is loaded by the reader's browser, and
links into the documentation of Python, torch and PyG (intersphinx) are only
fetched when ``REGCN_DOCS_INTERSPHINX=1`` is set.
"""
import inspect
import os
import os.path as osp
import re
import sys

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, ROOT)  # the package, also from a checkout that is not installed

with open(osp.join(ROOT, 'torch_geometric_regcn', 'version.py'), encoding='utf-8') as f:
    release = re.search(r"__version__ = '(.+)'", f.read()).group(1)
version = release

project = 'torch_geometric_regcn'
author = 'The torch_geometric_regcn developers'
copyright = author

extensions = [
    'sphinx.ext.autodoc',
    'sphinx.ext.autosummary',
    'sphinx.ext.napoleon',
    'sphinx.ext.mathjax',
    'sphinx.ext.viewcode',
    'myst_parser',
]

source_suffix = {'.rst': 'restructuredtext', '.md': 'markdown'}
root_doc = 'index'
exclude_patterns = ['_build', 'Thumbs.db', '.DS_Store']

# autodoc: the docstrings are the reference; signatures as written in the code.
autodoc_member_order = 'bysource'
autodoc_typehints = 'signature'
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = False  # a subclass's method is not described by its base's text
autosummary_generate = False  # the pages under api/ are written by hand, one per object

# napoleon: Google-style "Args:" sections, as PyG writes them; "Shapes:" as PyG's.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_custom_sections = ['Shapes']

# MyST: the narrative Markdown pages of docs/, readable on GitHub as they are.
myst_heading_anchors = 3

html_theme = 'alabaster'
html_title = f'{project} {release}'
html_theme_options = {
    'description': 'tsGCN and the regularizer-centred GCN framework (AAAI 2023) '
                   'for PyTorch Geometric',
    'fixed_sidebar': True,
    'page_width': '1100px',
    'sidebar_width': '240px',
}
html_sidebars = {'**': ['about.html', 'navigation.html', 'relations.html', 'searchbox.html']}

if os.environ.get('REGCN_DOCS_INTERSPHINX') == '1':  # off by default: it needs the network
    extensions.append('sphinx.ext.intersphinx')
    intersphinx_mapping = {
        'python': ('https://docs.python.org/3', None),
        'torch': ('https://docs.pytorch.org/docs/stable', None),
        'torch_geometric': ('https://pytorch-geometric.readthedocs.io/en/latest', None),
    }


def _regularizer_signature(app, what, name, obj, options, signature, return_annotation):
    """A regulariser's signature is that of its ``__init__``: ``Regularizer``
    defines ``__new__(*args, **kwargs)`` (so a subclass may set coefficients
    before ``super().__init__()``), which autodoc would show instead."""
    from sphinx.util.inspect import stringify_signature

    from torch_geometric_regcn.regularizers import Regularizer

    if what != 'class' or not (isinstance(obj, type) and issubclass(obj, Regularizer)):
        return None
    init = inspect.signature(obj.__init__)
    init = init.replace(parameters=list(init.parameters.values())[1:])  # without self
    return stringify_signature(init, show_return_annotation=False), None


#: A Markdown link out of docs/, e.g. to a results file in ../benchmarks/results/.
OUTSIDE_LINK = re.compile(r'\]\((\.\./[^)\s]+)\)')


def _outside_links(app, docname, source):
    """Links from the narrative pages to files outside ``docs/`` (the results
    in ``benchmarks/results/``) link to a copy of the file in the built site;
    MyST would otherwise look for a page of that name. The pages themselves
    keep their relative links, which work on GitHub as they are."""
    if str(app.env.doc2path(docname)).endswith('.md'):
        source[0] = OUTSIDE_LINK.sub(r'](path:\1)', source[0])


def setup(app):
    app.connect('autodoc-process-signature', _regularizer_signature)
    app.connect('source-read', _outside_links)
