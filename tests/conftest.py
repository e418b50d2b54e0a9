import warnings

import pytest
import torch

from harness.data import SHARED_DATA, has_offline_copy, offline_root

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global random state, so its unseeded
    draws (and module initialisations) do not depend on which tests ran before
    it: `pytest -m "not slow"`, `-k` and the full run see the same inputs."""
    torch.manual_seed(0)


def messy_graph(num_nodes: int = 40, num_edges: int = 120, seed: int = 0) -> torch.Tensor:
    """A random directed edge list with duplicate edges, self loops already
    present and (for num_nodes >= 40) isolated nodes 0..2."""
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(3, num_nodes, (2, num_edges), generator=gen)
    extra = torch.tensor([[5, 5, 7, 8], [6, 6, 7, 8]])  # a duplicate and two self loops
    return torch.cat([edge_index, extra], dim=1)


def undirected_graph(seed=0, n=30, weighted=False):
    """Random undirected graph with isolated nodes 0-2 and self loops on 5 and 6."""
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(3, n, (2, 3 * n), generator=gen)
    ei = torch.cat([ei, ei.flip(0), torch.tensor([[5, 6], [5, 6]])], dim=1)
    ei = torch.unique(ei, dim=1)
    weight = None
    if weighted:  # small symmetric weights keep Â diagonally dominant, hence positive definite
        w = 0.05 * torch.rand(n, n, generator=gen, dtype=torch.float64)
        weight = (w + w.T)[ei[0], ei[1]]
    return ei, weight


def dense_normalized_adjacency(edge_index, num_nodes, edge_weight=None, reduce='sum'):
    """Dense float64 reference of the renormalised adjacency: repeated pairs
    add up (reduce='sum', how the library's graph operators read every graph
    input) or count once (reduce='max', normalized_adjacency's default)."""
    a = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
    w = torch.ones(edge_index.size(1), dtype=torch.float64) if edge_weight is None \
        else edge_weight.double()
    for (i, j), value in zip(edge_index.T.tolist(), w.tolist()):
        a[i, j] = a[i, j] + value if reduce == 'sum' else max(a[i, j], value)
    a = torch.maximum(a, a.T)
    a.fill_diagonal_(1.0)
    d = a.sum(1).rsqrt()
    return d[:, None] * a * d[None, :]


def brute_force(x, k):
    """Dense float64 cosine kNN, ties to the lower index, then symmetrised."""
    x = x.double()
    xn = x / x.norm(dim=1, keepdim=True).clamp_min(1e-300)
    sim = xn @ xn.T
    sim.fill_diagonal_(-float('inf'))
    edges = set()
    for i, row in enumerate(sim.tolist()):
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))[:k]
        edges |= {(i, j) for j in order} | {(j, i) for j in order}
    return torch.tensor(sorted(edges)).T


def clustered(n=3000, clusters=30, d=16, seed=3):
    gen = torch.Generator().manual_seed(seed)
    centers = torch.randn(clusters, d, generator=gen)
    return centers[torch.randint(0, clusters, (n,), generator=gen)] + \
        0.6 * torch.randn(n, d, generator=gen)


@pytest.fixture(scope='session')
def shared_root(tmp_path_factory):
    """A writable root (PyG writes processed/ next to raw/) into which
    ``shared_root(name)`` copies dataset `name`'s raw files from
    ../shared/data, laid out as its loader expects; returns the root."""
    root = str(tmp_path_factory.mktemp('data'))

    def copy(name: str) -> str:
        if not has_offline_copy(name):
            pytest.skip(f'{name} is not in {SHARED_DATA}')
        return offline_root(name, root)

    return copy


@pytest.fixture(autouse=True)
def _quiet_sparse_beta_warning():
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='Sparse CSR tensor support is in beta')
        warnings.filterwarnings('ignore', message='Sparse invariant checks')
        yield


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(config, items):
    """The README's and docs' snippets run once per session: where the wheel
    test of tests/test_install.py runs, the pages' tests of
    tests/test_doc_snippets.py run after it and skip each page it ran (in the
    wheel's environment, which holds less than this one); a page it did not
    reach (the install failed first) runs here."""
    wheel = [i for i, item in enumerate(items) if item.nodeid.startswith(
        'tests/test_install.py::test_wheel_installs_into_a_fresh_environment')]
    if not wheel:
        return
    pages = [item for item in items if item.nodeid.startswith(
        'tests/test_doc_snippets.py::test_snippets_run_as_written')]
    rest = [item for item in items if item not in pages]
    at = rest.index(items[wheel[0]]) + 1
    items[:] = rest[:at] + pages + rest[at:]
