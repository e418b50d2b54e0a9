"""The optional faiss backend (method='faiss'): the same cells and probes as
the pure-torch IVF, searched by faiss; against the float64 brute force."""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce

from tests.conftest import clustered
from torch_geometric_regcn import SemanticGraph
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.knn import checks, faiss_knn_cosine, ivf_knn_cosine, knn_graph_cosine

needs_faiss = pytest.mark.skipif(not checks.faiss_available(),
                                 reason='faiss is not installed')


def _exact(x, k):
    """The float64 brute force: each row's k most similar other rows, ascending."""
    xd = x.double() / x.double().norm(dim=1, keepdim=True)
    sim = xd @ xd.T
    sim.fill_diagonal_(-float('inf'))
    return sim.topk(k, dim=1).indices.sort(dim=1).values


def _recall(approx, exact):
    return float((approx[:, :, None] == exact[:, None, :]).any(dim=2).sum()) / exact.numel()


@needs_faiss
def test_faiss_probing_every_cell_is_the_brute_force():
    # Gaussian rows: distinct similarities, far apart compared with float32
    # rounding (about 1e-7 here), so the float32 search finds the float64 set.
    x = torch.randn(600, 12, generator=torch.Generator().manual_seed(1))
    got = faiss_knn_cosine(x, 5, cells=8, probes=8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(got, _exact(x, 5))


@needs_faiss
def test_faiss_on_float64_features_ranks_in_float64():
    # Five near-copies of each of 40 rows, 1e-6 apart: float32 cannot order them, and faiss
    # (which scores in float32) returned float32 neighbours. The 2k + 1 = 7 candidates of a
    # query hold its 4 copies, which the float64 re-scoring orders.
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(40, 16, dtype=torch.float64, generator=gen)
    x = base.repeat_interleave(5, 0) + 1e-6 * torch.randn(200, 16, dtype=torch.float64,
                                                          generator=gen)
    got = faiss_knn_cosine(x, 3, cells=4, probes=4, generator=torch.Generator().manual_seed(0))
    assert torch.equal(got, _exact(x, 3))

@needs_faiss
@pytest.mark.parametrize('features', ['clustered', 'noise'])
def test_faiss_recall_reaches_the_target_and_no_node_is_its_own_neighbour(features):
    # The tuned probes of the pure-torch search, with cells ranked per query:
    # a recall of at least the 0.95 target (aimed two standard errors above).
    x = clustered() if features == 'clustered' else torch.randn(
        3000, 32, generator=torch.Generator().manual_seed(5))
    exact = _exact(x, 10)
    approx = faiss_knn_cosine(x, 10, generator=torch.Generator().manual_seed(0))
    assert approx.shape == exact.shape and approx.dtype == torch.long
    assert bool((approx != torch.arange(3000)[:, None]).all())
    assert bool((approx[:, 1:] > approx[:, :-1]).all())  # ascending, distinct
    assert _recall(approx, exact) >= 0.95
    torch_ivf = ivf_knn_cosine(x, 10, generator=torch.Generator().manual_seed(0),
                               progress=False)
    assert _recall(approx, exact) >= _recall(torch_ivf, exact) - 0.01


@needs_faiss
def test_faiss_searches_exactly_where_the_probed_cells_are_too_small():
    # Zero rows and duplicates (degenerate cells); one probe of tiny cells
    # leaves rows with fewer than k candidates: those are searched exactly.
    x = torch.cat([torch.zeros(5, 4), torch.eye(4).repeat(3, 1), torch.randn(30, 4,
                   generator=torch.Generator().manual_seed(2))])
    got = faiss_knn_cosine(x, 6, cells=12, probes=1, generator=torch.Generator().manual_seed(0))
    assert got.shape == (x.size(0), 6)
    assert bool((got >= 0).all()) and bool((got < x.size(0)).all())
    assert bool((got != torch.arange(x.size(0))[:, None]).all())


@needs_faiss
def test_faiss_graph_and_transform_are_the_symmetrised_neighbours():
    x = clustered(n=400)
    col = faiss_knn_cosine(x, 4, generator=torch.Generator().manual_seed(3))
    row = torch.arange(400).repeat_interleave(4)
    edges = torch.cat([torch.stack([row, col.view(-1)]), torch.stack([col.view(-1), row])], 1)
    expected = coalesce(edges, num_nodes=400)
    assert torch.equal(knn_graph_cosine(x, 4, method='faiss',
                                        generator=torch.Generator().manual_seed(3)), expected)
    data = SemanticGraph(4, method='faiss', seed=3, progress=False)(Data(x=x))
    assert torch.equal(data.semantic_edge_index, expected)


def test_faiss_errors_name_the_fix(monkeypatch):
    x = torch.randn(20, 3)
    with pytest.raises(ValueError, match="needs dense features"):
        knn_graph_cosine(x.to_sparse(), 3, method='faiss')
    with pytest.raises(ValueError, match="one process; use method='ivf'"):
        checks.check_faiss(RowPartition.even(20, 2, rank=0))
    monkeypatch.setattr(checks, 'faiss_available', lambda: False)
    with pytest.raises(ImportError, match="pip install faiss-cpu"):
        knn_graph_cosine(x, 3, method='faiss')
