"""The package as a user imports it: the library only, and the 0.1 paths of
moved names still work, with a DeprecationWarning."""
import importlib
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_import_loads_the_library_only():
    script = ('import sys, torch_geometric_regcn; '
              'print(sorted(m for m in sys.modules if m.split(".")[0] in '
              '("harness", "benchmarks", "examples", "docs", "sklearn", "matplotlib") '
              'or m == "torch_geometric_regcn.experiments"))')
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == '[]'


@pytest.mark.parametrize('module, name, new', [
    ('torch_geometric_regcn.regularizers', 'TSGCN',
     'torch_geometric_regcn.regularizers.TSGCNRegularizer'),
    ('torch_geometric_regcn.regularizers', 'APPNP',
     'torch_geometric_regcn.regularizers.APPNPRegularizer'),
    ('torch_geometric_regcn.transforms.cosine_knn', 'knn_graph_cosine',
     'torch_geometric_regcn.knn.knn_graph_cosine'),
    ('torch_geometric_regcn.experiments', 'PAPER_SETTINGS',
     'torch_geometric_regcn.datasets.settings.PAPER_SETTINGS'),
    ('torch_geometric_regcn.linalg.eigensolver', 'METHODS',
     'torch_geometric_regcn.linalg.eigensolver.EIGENSOLVER_METHODS'),
    ('torch_geometric_regcn.linalg.subspace_iteration', 'METHODS',
     'torch_geometric_regcn.linalg.subspace_iteration.SUBSPACE_METHODS'),
])
def test_moved_names_keep_their_old_path(module, name, new):
    target_module, _, target_name = new.rpartition('.')
    expected = getattr(importlib.import_module(target_module), target_name)
    with pytest.warns(DeprecationWarning, match=f"'{module}.{name}' moved to '{new}'"):
        assert getattr(importlib.import_module(module), name) is expected


def test_unknown_names_still_raise_attribute_errors():
    with pytest.raises(AttributeError, match="has no attribute 'fit'"):
        importlib.import_module('torch_geometric_regcn.experiments').fit  # noqa: B018


#: What each layer of the package may import (docs/architecture.md).
LAYERS = {
    'utils': {'utils'},
    'distributed': {'distributed', 'utils'},
    'datasets': {'datasets', 'distributed', 'utils'},
    'knn': {'knn', 'distributed', 'utils'},
    'linalg': {'linalg', 'distributed', 'utils'},
    'regularizers': {'regularizers', 'linalg', 'knn', 'distributed', 'utils'},
    'transforms': {'transforms', 'regularizers', 'linalg', 'knn', 'distributed', 'utils'},
    'nn': {'nn', 'regularizers', 'linalg', 'distributed', 'utils'},
    'loader': {'loader', 'utils'},
}


def test_layers_import_only_downward():
    import ast
    import pathlib

    import torch_geometric_regcn
    root = pathlib.Path(torch_geometric_regcn.__file__).parent
    assert sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != '__pycache__') \
        == sorted(LAYERS)
    for layer, allowed in LAYERS.items():
        for path in (root / layer).rglob('*.py'):
            for node in ast.walk(ast.parse(path.read_text())):
                names = [node.module or ''] if isinstance(node, ast.ImportFrom) else \
                    [a.name for a in node.names] if isinstance(node, ast.Import) else []
                for name in names:
                    parts = name.split('.')
                    if parts[0] == 'torch_geometric_regcn':
                        assert len(parts) > 1 and parts[1] in allowed | {'version'}, \
                            f'{path.relative_to(root)} imports {name}'


def test_only_the_collectives_talk_to_torch_distributed():
    import ast
    import pathlib

    import torch_geometric_regcn
    root = pathlib.Path(torch_geometric_regcn.__file__).parent
    talkers = []
    for path in root.rglob('*.py'):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ''] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            # Also through the attribute, torch.distributed.f() (a model read
            # the world size that way, past the import check).
            used = isinstance(node, ast.Attribute) and node.attr == 'distributed' \
                and isinstance(node.value, ast.Name) and node.value.id == 'torch'
            if used or any(n == 'torch.distributed' or n.startswith('torch.distributed.')
                           for n in names):
                talkers.append(path.relative_to(root).as_posix())
    assert sorted(set(talkers)) == ['distributed/collectives.py']
