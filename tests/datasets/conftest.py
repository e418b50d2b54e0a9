r"""Fixtures shared by the tests of :mod:`torch_geometric_regcn.datasets`."""
import pytest

from torch_geometric_regcn.datasets import load_dataset


@pytest.fixture(scope='module')
def load(shared_root):
    """Loads each real dataset once per module: returns (dataset, root)."""
    cache = {}

    def get(name: str):
        if name not in cache:
            root = shared_root(name)
            cache[name] = (load_dataset(name, root), root)
        return cache[name]

    return get
