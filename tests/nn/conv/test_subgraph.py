"""Subgraphs: tsGCN's factors and semantic graph belong to one whole graph.

Only transductive use on the full graph is supported. Factors whose rows were
sliced (a loader, ``subgraph()``) are detected through V^T W, which is
diagonal (-Λ) for the factors of LowRankInverse; a semantic graph that was not
re-indexed is named in the error.
"""
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from tests.conftest import undirected_graph
from torch_geometric_regcn import LowRankInverse, RegularizerConv, SemanticGraph, TSGCNConv
from torch_geometric_regcn.linalg import factors_from_eigenpairs, woodbury_apply
from torch_geometric_regcn.linalg.woodbury import _relative_off_diagonal, eigenpair_tolerance
from torch_geometric_regcn.transforms import factor_cache
from torch_geometric_regcn.utils.validation import check_edge_index

N, F_IN, F_OUT = 60, 6, 3
SLICED = 'not those of one whole graph'


def graph(dtype=torch.float64, n=N):
    ei, _ = undirected_graph(0, n)
    x = torch.randn(n, F_IN, dtype=dtype, generator=torch.Generator().manual_seed(0))
    return Data(x=x, edge_index=ei, semantic_edge_index=undirected_graph(5, n)[0])


def lowrank(data, rank=8, **kwargs):
    return LowRankInverse(1.0, 0.4, rank, progress=False, **kwargs)(data.clone())


def off_diagonal(w, v):
    return float(_relative_off_diagonal(v.T @ w))


def apply_both(data, w, v):
    """TSGCNConv and RegularizerConv('tsgcn', solver='lowrank') on the factors."""
    conv = TSGCNConv(F_IN, F_OUT).to(w.dtype)
    layer = RegularizerConv(F_IN, F_OUT, 'tsgcn', solver='lowrank', alpha=1.0,
                            beta=0.4).to(w.dtype)
    x = data.x.to(w.dtype)
    return conv(x, w, v), layer(x, data.edge_index, lowrank_w=w, lowrank_v=v)


def cast(data, dtype):
    return Data(x=data.x, edge_index=data.edge_index, lowrank_w=data.lowrank_w.to(dtype),
                lowrank_v=data.lowrank_v.to(dtype))


#: Factors of one whole graph, as they reach a layer in practice.
WHOLE_GRAPH = {
    'rank 8, float64': lambda: lowrank(graph()),
    'rank 8, float32': lambda: lowrank(graph(torch.float32)),
    'full rank': lambda: lowrank(graph(), rank=N, tol=1e-12),
    "which='LM'": lambda: lowrank(graph(), which='LM'),
    "method='power'": lambda: lowrank(graph(), method='power', tol=1e-3, max_iter=500),
    'float64 .to(float32)': lambda: cast(lowrank(graph()), torch.float32),
}


@pytest.mark.parametrize('case', list(WHOLE_GRAPH))
def test_factors_of_the_whole_graph_pass(case):
    data = WHOLE_GRAPH[case]()
    w, v = data.lowrank_w, data.lowrank_v
    # V^T W = -Λ up to rounding: the relative off-diagonal part (the cosines
    # between eigenvectors) stays 100 times below the tolerance.
    assert off_diagonal(w, v) < eigenpair_tolerance(w.dtype) / 100
    for out in apply_both(data, w, v):
        assert torch.isfinite(out).all()


def test_factors_reloaded_from_the_cache_pass(tmp_path):
    transform = LowRankInverse(1.0, 0.4, 8, progress=False, cache_dir=str(tmp_path))
    first = transform(graph(torch.float32))
    again = transform(graph(torch.float32))
    assert len(list(tmp_path.iterdir())) == 1  # the second call loaded the file
    torch.testing.assert_close(again.lowrank_w, first.lowrank_w, rtol=0, atol=0)
    saved = factor_cache.load(str(next(tmp_path.iterdir())))
    assert saved is not None
    apply_both(again, again.lowrank_w, again.lowrank_v)


@pytest.mark.parametrize('how', ['data.subgraph', 'utils.subgraph mask', 'first rows'])
def test_factors_of_a_subgraph_are_rejected(how):
    data = lowrank(graph())
    keep = torch.zeros(N, dtype=torch.bool)
    keep[torch.randperm(N, generator=torch.Generator().manual_seed(1))[:40]] = True
    if how == 'data.subgraph':  # what a loader does too: node attributes row by row
        sub = data.subgraph(keep)
    elif how == 'utils.subgraph mask':
        edge_index, _ = subgraph(keep, data.edge_index, relabel_nodes=True, num_nodes=N)
        sub = Data(x=data.x[keep], edge_index=edge_index, lowrank_w=data.lowrank_w[keep],
                   lowrank_v=data.lowrank_v[keep])
    else:
        edge_index, _ = subgraph(torch.arange(45), data.edge_index, relabel_nodes=True)
        sub = Data(x=data.x[:45], edge_index=edge_index, lowrank_w=data.lowrank_w[:45],
                   lowrank_v=data.lowrank_v[:45])
    w, v = sub.lowrank_w, sub.lowrank_v
    assert off_diagonal(w, v) > 10 * eigenpair_tolerance(w.dtype)
    conv = TSGCNConv(F_IN, F_OUT).double()
    with pytest.raises(ValueError, match=f'{SLICED}.*loader or subgraph.*full graph.*'
                       'MiniBatchTSGCN.*torch_geometric_regcn.loader.SeedNodeLoader.*'
                       'docs/minibatch.md'):
        conv(sub.x, w, v)
    layer = RegularizerConv(F_IN, F_OUT, 'tsgcn', solver='lowrank').double()
    with pytest.raises(ValueError, match=SLICED):
        layer(sub.x, sub.edge_index, lowrank_w=w, lowrank_v=v)
    # Why: the sliced factors give rows that differ from the full graph's.
    h = data.x @ conv.lin.weight.T
    rows = torch.nonzero(keep).flatten() if how != 'first rows' else torch.arange(45)
    full = woodbury_apply(h, data.lowrank_w, data.lowrank_v)[rows]
    assert (woodbury_apply(h[rows], w, v) - full).abs().max() > 1e-3


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('factor, raises', [(0.5, False), (2.0, True)])
def test_tolerance_on_both_sides(dtype, factor, raises):
    # Eigenvectors u_1, u_2 bent towards each other by a cosine of factor x the
    # tolerance: the check reads exactly that cosine, whatever the eigenvalues.
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(50, 4, dtype=torch.float64, generator=gen))
    cosine = factor * eigenpair_tolerance(dtype)
    u[:, 1] = cosine * u[:, 0] + (1 - cosine**2) ** 0.5 * u[:, 1]
    lam = torch.tensor([0.9, 1e-6, -0.3, 0.5], dtype=torch.float64)
    w, v = (t.to(dtype) for t in factors_from_eigenpairs(lam, u))
    assert off_diagonal(w, v) == pytest.approx(cosine, rel=1e-3)
    conv = TSGCNConv(3, 2).to(dtype)
    x = torch.randn(50, 3, dtype=dtype, generator=gen)
    if raises:
        with pytest.raises(ValueError, match=SLICED):
            conv(x, w, v)
    else:
        conv(x, w, v)


def test_a_zero_eigenvalue_passes_and_a_zero_diagonal_with_couplings_fails():
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(20, 3, dtype=torch.float64, generator=gen))
    w, v = factors_from_eigenpairs(torch.tensor([0.5, 0.0, -0.2], dtype=torch.float64), u)
    vtw = v.T @ w
    assert vtw[1].abs().max() == vtw[:, 1].abs().max() == 0  # a zero column and row
    assert off_diagonal(w, v) < 1e-12  # 0 / 0 counts as nothing off the diagonal
    conv = TSGCNConv(3, 2).double()
    x = torch.randn(20, 3, dtype=torch.float64, generator=gen)
    conv(x, w, v)
    v = v.clone()
    v[:, 1] = v[:, 0]  # column 1 of V^T W: zero diagonal, non-zero off-diagonal
    assert off_diagonal(w, v) == float('inf')
    with pytest.raises(ValueError, match=SLICED):
        conv(x, w, v)


def test_a_semantic_graph_left_unindexed_is_named():
    data = graph()
    sub = data.subgraph(torch.arange(40))
    # PyG re-indexes 'edge_index' only; the semantic graph keeps indices up to N - 1.
    assert torch.equal(sub.semantic_edge_index, data.semantic_edge_index)
    message = ("'semantic_edge_index' refers to nodes outside \\[0, 39\\]; .*larger graph.*"
               "SemanticGraph")
    layer = RegularizerConv(F_IN, F_OUT, 'tsgcn', solver='closed').double()
    with pytest.raises(ValueError, match=message):
        layer(sub.x, sub.edge_index, semantic_edge_index=sub.semantic_edge_index)
    with pytest.raises(ValueError, match=message):
        LowRankInverse(1.0, 0.4, 4, progress=False)(sub)
    # Rebuilt for the subgraph, it is accepted.
    rebuilt = SemanticGraph(3, progress=False)(sub.clone())
    layer(sub.x, sub.edge_index, semantic_edge_index=rebuilt.semantic_edge_index)
    # A bad 'edge_index' is still named as such.
    with pytest.raises(ValueError, match="'edge_index' refers to nodes outside.*'num_nodes'"):
        layer(sub.x, data.edge_index, semantic_edge_index=rebuilt.semantic_edge_index)


@pytest.mark.parametrize('name', ['edge_index', 'semantic_edge_index'])
def test_check_edge_index_names_its_argument(name):
    with pytest.raises(ValueError, match=f"'{name}' must have shape \\[2, num_edges\\]"):
        check_edge_index(torch.zeros(3, 4, dtype=torch.long), 5, name=name)
    with pytest.raises(TypeError, match=f"'{name}' must hold integer.*'{name}.long\\(\\)'"):
        check_edge_index(torch.zeros(2, 4), 5, name=name)
    with pytest.raises(ValueError, match=f"'{name}' refers to nodes outside \\[0, 4\\]"):
        check_edge_index(torch.tensor([[0, 5], [1, 2]]), 5, name=name)
