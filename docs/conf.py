"""Sphinx configuration of the documentation site.

Build it from the repository root with::

    pip install -e ".[docs]"
    python -m sphinx -W -b html docs docs/_build

The API pages are generated on every build from the packages' ``__all__``
(autosummary, with the templates in ``docs/_templates/autosummary/``) into
``docs/api/generated/``, which git ignores.

The build needs no network: MathJax is loaded by the reader's browser, and
links into the documentation of Python, torch and PyG (intersphinx) are only
fetched when ``REGCN_DOCS_INTERSPHINX=1`` is set.
"""
import importlib
import inspect
import os
import os.path as osp
import pkgutil
import re
import shutil
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
templates_path = ['_templates']
exclude_patterns = ['_build', '_templates', 'Thumbs.db', '.DS_Store']

# autodoc: the docstrings are the reference; signatures as written in the code.
autodoc_member_order = 'bysource'
autodoc_typehints = 'signature'
autodoc_preserve_defaults = True
autodoc_inherit_docstrings = False  # a subclass's method is not described by its base's text

# autosummary: api/index.rst lists the public packages; each gets a page from
# _templates/autosummary/package.rst with every name of its __all__, and each
# class and function a page of its own. The pages are build outputs, written
# to api/generated/ (git-ignored) afresh on every build.
PACKAGE = 'torch_geometric_regcn'
GENERATED = osp.join(osp.dirname(osp.abspath(__file__)), 'api', 'generated')
autosummary_generate = True
autosummary_ignore_module_all = False  # a package's page lists its __all__, and only that

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


def _public_packages() -> list:
    r"""The package root and its subpackages (the deprecated module shims are
    modules, not packages)."""
    root = importlib.import_module(PACKAGE)
    return [root] + [importlib.import_module(info.name)
                     for info in pkgutil.iter_modules(root.__path__, PACKAGE + '.')
                     if info.ispkg]


def _api_context() -> dict:
    r"""What the package template needs beyond autosummary's own lists, per
    package: ``at_root``, the names it shares with the root's ``__all__`` (their
    pages are the root's), and ``data``, its constants, each with whether its
    value is shown."""
    packages = _public_packages()
    root = packages[0]
    at_root, data = {}, {}
    for package in packages:
        names = getattr(package, '__all__', [])
        at_root[package.__name__] = [
            name for name in names if package is not root
            and name in root.__all__ and getattr(root, name) is getattr(package, name)]
        data[package.__name__] = [
            (name, _is_plain_value(getattr(package, name))) for name in names
            if not name.startswith('_') and not _has_page(getattr(package, name))]
    return {'root': PACKAGE, 'at_root': at_root, 'data': data}


def _has_page(obj) -> bool:
    r"""Classes and functions get a page; modules none (they are packages'
    attributes, not API); anything else is a constant."""
    return inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj)


def _is_plain_value(obj) -> bool:
    r"""A constant's value is shown when it is a number, a string or a tuple
    of them; a table (``REGISTRY``, ``PAPER_SETTINGS``) or a counter is
    described by its comment alone."""
    plain = (bool, int, float, str)
    return isinstance(obj, plain) or (isinstance(obj, tuple)
                                      and all(isinstance(x, plain) for x in obj))


autosummary_context = _api_context()


def _clear_generated(app) -> None:
    r"""Removes the pages of the previous build before autosummary writes
    them, so that a name no longer exported leaves no page behind."""
    shutil.rmtree(GENERATED, ignore_errors=True)


def _constant_doc(app, what, name, obj, options, lines) -> None:
    r"""A constant's description is its ``#:`` comment where it is defined
    (``torch_geometric_regcn.datasets.registry.DATASETS``), also when it is
    documented at the package that exports it (``...datasets.DATASETS``); a
    constant without one gets no description (autodoc would show the
    docstring of its type: ``tuple``, ``dict``)."""
    if what != 'data':
        return
    from sphinx.pycode import ModuleAnalyzer, PycodeError
    package, _, attr = name.rpartition('.')
    lines[:] = []
    for module_name, module in sorted(sys.modules.items()):
        inside = module_name == package or module_name.startswith(package + '.')
        if not inside or module is None or vars(module).get(attr) is not obj:
            continue
        try:
            comment = ModuleAnalyzer.for_module(module_name).find_attr_docs().get(('', attr))
        except PycodeError:
            continue
        if comment:
            lines[:] = list(comment)
            return


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
    app.connect('builder-inited', _clear_generated, priority=100)  # before autosummary's
    app.connect('autodoc-process-docstring', _constant_doc)
    app.connect('autodoc-process-signature', _regularizer_signature)
    app.connect('source-read', _outside_links)
