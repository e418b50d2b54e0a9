r"""Repeated entries in a graph input (issue 27, class 3): an :obj:`edge_index`
that lists a pair more than once is read as PyG reads it, a :obj:`torch.sparse`
matrix as the matrix torch means (duplicates add up), and the caller's tensors
and their flags are never touched (docs/reliability.md).

References: PyG's own :class:`GCNConv`, :class:`SGConv` and :class:`APPNP` on
the same multigraph, and dense float64 computations of the summed matrix.
Tolerances: float64 throughout, a few dozen roundings per entry
(:math:`\epsilon \approx 1.1 \cdot 10^{-16}`), hence :obj:`1e-10` relative
with room to spare; the dense solves of graphs of 40 nodes whose systems have
condition numbers below 100 lose at most two more digits."""
import pytest
import torch
from torch_geometric.nn import APPNP, GCNConv, SGConv

from torch_geometric_regcn import LowRankInverse, RegularizerConv
from torch_geometric_regcn.nn.conv.edge_masking import EdgeMasking
from torch_geometric_regcn.regularizers.graph import GraphOperators
from torch_geometric_regcn.regularizers.tsgcn import tsgcn_adjacency

N, F_IN, F_OUT = 40, 6, 3
TOL = {'rtol': 1e-10, 'atol': 1e-12}


def multigraph(seed=0, weighted=False, loops=True):
    r"""An undirected multigraph on nodes 0..36 (37..39 isolated): random
    pairs, a third of them repeated once and five of them twice more, each
    listed in both directions with the same weight; without weights, two
    repeated unit self loops (which PyG and the library both read as one
    unit loop)."""
    gen = torch.Generator().manual_seed(seed)
    pairs = torch.randint(0, N - 3, (2, 3 * N), generator=gen)
    pairs = pairs[:, pairs[0] != pairs[1]]
    pairs = torch.cat([pairs, pairs[:, :N], pairs[:, :5], pairs[:, :5]], dim=1)
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
    weight = None
    if weighted:
        w = torch.rand(pairs.size(1), dtype=torch.float64, generator=gen) + 0.1
        weight = torch.cat([w, w])
    elif loops:
        edge_index = torch.cat([edge_index, torch.tensor([[4, 4, 9], [4, 4, 9]])], dim=1)
    return edge_index, weight


def features(seed=0):
    return torch.randn(N, F_IN, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def dense_adjacency(edge_index, weight=None):
    r"""The renormalised adjacency of the matrix with the entries of
    :obj:`edge_index` summed, made symmetric by the maximum, self loops
    replaced by unit ones: dense float64, by :func:`index_put_`."""
    weight = torch.ones(edge_index.size(1), dtype=torch.float64) if weight is None \
        else weight.double()
    a = torch.zeros(N, N, dtype=torch.float64).index_put_(tuple(edge_index), weight,
                                                          accumulate=True)
    a.fill_diagonal_(0.0)
    a = torch.maximum(a, a.T) + torch.eye(N, dtype=torch.float64)
    d = a.sum(1).rsqrt()
    return d[:, None] * a * d[None, :]


def layer(regularizer, **kwargs):
    torch.manual_seed(0)
    return RegularizerConv(F_IN, F_OUT, regularizer, bias=False, **kwargs).double()


# -- edge_index: PyG's reading ----------------------------------------------------------

@pytest.mark.parametrize('weighted', [False, True])
def test_gcn_equals_pyg_gcnconv_on_a_multigraph(weighted):
    x, (edge_index, weight) = features(), multigraph(weighted=weighted)
    ours = layer('gcn')
    theirs = GCNConv(F_IN, F_OUT, bias=False).double()
    theirs.lin.weight.data.copy_(ours.lin.weight)
    torch.testing.assert_close(ours(x, edge_index, weight), theirs(x, edge_index, weight),
                               **TOL)


@pytest.mark.parametrize('weighted', [False, True])
@pytest.mark.parametrize('K', [1, 3])
def test_sgc_equals_pyg_sgconv_on_a_multigraph(K, weighted):
    x, (edge_index, weight) = features(), multigraph(weighted=weighted)
    ours = layer('sgc', K=K)
    theirs = SGConv(F_IN, F_OUT, K=K, bias=False).double()
    theirs.lin.weight.data.copy_(ours.lin.weight)
    torch.testing.assert_close(ours(x, edge_index, weight), theirs(x, edge_index, weight),
                               **TOL)


@pytest.mark.parametrize('weighted', [False, True])
@pytest.mark.parametrize('K, alpha', [(10, 0.1), (3, 0.5)])
def test_appnp_series_equals_pyg_appnp_on_a_multigraph(K, alpha, weighted):
    x, (edge_index, weight) = features(), multigraph(weighted=weighted)
    ours = layer('appnp', K=K, alpha=alpha, solver='series')
    expected = APPNP(K, alpha)(x @ ours.lin.weight.T, edge_index, weight)
    torch.testing.assert_close(ours(x, edge_index, weight), expected, **TOL)


@pytest.mark.parametrize('solver', ['closed', 'cg'])
def test_appnp_limit_is_ppnp_of_the_summed_matrix(solver):
    # closed/cg give the K -> inf limit of PyG's APPNP: alpha (I - (1-alpha) Â)^-1.
    x, (edge_index, weight) = features(), multigraph(weighted=True)
    ours = layer('appnp', alpha=0.2, solver=solver, tol=1e-12)
    a = dense_adjacency(edge_index, weight)
    expected = 0.2 * torch.linalg.solve(torch.eye(N, dtype=torch.float64) - 0.8 * a,
                                        x @ ours.lin.weight.T)
    # CG stops at a relative residual of 1e-12; the condition number is below 10.
    torch.testing.assert_close(ours(x, edge_index, weight), expected, rtol=1e-9, atol=1e-10)


def test_tsgcn_operator_sums_repeats_of_both_graphs():
    # The one tsGCN operator (every tsGCN solver, LowRankInverse) reads the
    # graph and the semantic graph as the other regularisers do.
    (edge_index, weight), (semantic, _) = multigraph(0, weighted=True), multigraph(1)
    graph = GraphOperators(N, edge_index, weight, torch.float64, semantic_edge_index=semantic)
    expected = (1.0 * dense_adjacency(edge_index, weight) + 0.5 * dense_adjacency(semantic)) / 2.5
    torch.testing.assert_close(tsgcn_adjacency(graph, 1.0, 0.5).to_dense(), expected, **TOL)


def test_lowrank_and_closed_tsgcn_read_a_multigraph_alike():
    # LowRankInverse's factors and the layer's own solve see the same matrix.
    from torch_geometric.data import Data
    (edge_index, _), (semantic, _) = multigraph(0), multigraph(1, loops=False)
    x = features()
    data = LowRankInverse(1.0, 0.5, rank=N, tol=1e-12, progress=False)(
        Data(x=x, edge_index=edge_index, semantic_edge_index=semantic, num_nodes=N))
    closed = layer('tsgcn', alpha=1.0, beta=0.5, solver='closed')
    lowrank = layer('tsgcn', alpha=1.0, beta=0.5, solver='lowrank')
    expected = closed(x, edge_index, semantic_edge_index=semantic)
    # Full-rank factors of eigenpairs to 1e-12; I - S has condition number below 10.
    torch.testing.assert_close(
        lowrank(x, edge_index, lowrank_w=data.lowrank_w, lowrank_v=data.lowrank_v),
        expected, rtol=1e-8, atol=1e-9)


# -- torch.sparse: the matrix torch means -------------------------------------------------

def sparse_multigraph(layout, seed=0):
    r"""A weighted multigraph as an uncoalesced COO tensor (repeats stored
    apart, in random order) or as CSR."""
    edge_index, weight = multigraph(seed, weighted=True)
    order = torch.randperm(edge_index.size(1), generator=torch.Generator().manual_seed(seed))
    adj = torch.sparse_coo_tensor(edge_index[:, order], weight[order], (N, N))
    return adj if layout == 'coo' else adj.coalesce().to_sparse_csr()


def dense_propagation(regularizer, a, h):
    eye = torch.eye(N, dtype=torch.float64)
    if regularizer == 'gcn':
        return a @ h
    if regularizer == 'appnp':  # alpha = 0.1
        return 0.1 * torch.linalg.solve(eye - 0.9 * a, h)
    if regularizer == 'gnn_hf':  # alpha = 0.1, beta = 1: {11 I - 10 Â}^-1 (2 I - Â)
        return torch.linalg.solve(11 * eye - 10 * a, 2 * h - a @ h)
    raise ValueError(regularizer)


@pytest.mark.parametrize('layout', ['coo', 'csr'])
@pytest.mark.parametrize('regularizer, solver', [('gcn', 'series'), ('appnp', 'closed'),
                                                 ('appnp', 'cg'), ('gnn_hf', 'cg')])
def test_sparse_adjacency_is_the_summed_matrix(layout, regularizer, solver):
    x, adj = features(), sparse_multigraph(layout)
    conv = layer(regularizer, solver=solver, tol=1e-12)
    a = dense_adjacency(*multigraph(weighted=True))
    expected = dense_propagation(regularizer, a, x @ conv.lin.weight.T)
    torch.testing.assert_close(conv(x, adj), expected, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize('regularizer, solver', [('appnp', 'series'), ('tsgcn', 'closed'),
                                                 ('sgc', 'series')])
def test_uncoalesced_matrix_equals_the_same_matrix_coalesced(regularizer, solver):
    # The measure: 1.3-2.8 % apart. The same matrix is the same
    # result, to rounding: the repeats are summed in another order.
    x, adj = features(), sparse_multigraph('coo')
    coalesced = adj.coalesce()  # before the layer sees adj (which must not mark it)
    kwargs = {'semantic_edge_index': multigraph(1)[0]} if regularizer == 'tsgcn' else {}
    conv = layer(regularizer, solver=solver)
    torch.testing.assert_close(conv(x, adj, **kwargs), conv(x, coalesced, **kwargs), **TOL)


def test_sparse_adjacency_equals_its_edge_index_and_weights():
    x, (edge_index, weight) = features(), multigraph(weighted=True)
    adj = torch.sparse_coo_tensor(edge_index, weight, (N, N))
    conv = layer('appnp')
    torch.testing.assert_close(conv(x, adj), conv(x, edge_index, weight), **TOL)


# -- the caller's tensors ---------------------------------------------------------------

def snapshot(tensor):
    if tensor.layout == torch.sparse_coo:
        return (tensor.is_coalesced(), tensor._version, tensor._indices().clone(),
                tensor._values().clone(), tensor._indices()._version, tensor._values()._version)
    if tensor.layout == torch.sparse_csr:
        return (tensor._version, tensor.crow_indices().clone(), tensor.col_indices().clone(),
                tensor.values().clone())
    return tensor._version, tensor.clone()


def assert_untouched(before, tensor):
    after = snapshot(tensor)
    assert len(before) == len(after)
    for old, new in zip(before, after):
        if isinstance(old, torch.Tensor):
            assert torch.equal(old, new)
        else:
            assert old == new


@pytest.mark.parametrize('cached', [False, True])
@pytest.mark.parametrize('regularizer, solver', [('appnp', 'series'), ('tsgcn', 'cg'),
                                                 ('gnn_lf', 'closed')])
def test_the_callers_sparse_matrix_keeps_its_entries_and_flags(regularizer, solver, cached):
    # The issue: PyG's to_edge_index marked the caller's tensor as coalesced
    # without merging, so a later A.coalesce() returned the unsummed repeats.
    x, adj = features(), sparse_multigraph('coo')
    assert not adj.is_coalesced()
    kwargs = {'semantic_edge_index': multigraph(1)[0]} if regularizer == 'tsgcn' else {}
    before = snapshot(adj)
    expected = torch.zeros(N, N, dtype=torch.float64).index_put_(
        tuple(adj._indices()), adj._values(), accumulate=True)
    conv = layer(regularizer, solver=solver, cached=cached)
    conv(x, adj, **kwargs)
    conv(x, adj, **kwargs)
    assert_untouched(before, adj)
    merged = adj.coalesce()
    assert merged._nnz() < adj._nnz()  # the repeats are merged, their values summed
    # Up to four numbers summed in another order: a few units in the last place.
    torch.testing.assert_close(merged.to_dense(), expected, rtol=1e-14, atol=0)


@pytest.mark.parametrize('layout', ['strided', 'csr'])
def test_the_callers_edge_index_weights_and_csr_matrix_are_untouched(layout):
    x, (edge_index, weight) = features(), multigraph(weighted=True)
    conv = layer('appnp', cached=True)
    if layout == 'csr':
        adj = sparse_multigraph('csr')
        before = snapshot(adj)
        conv(x, adj)
        assert_untouched(before, adj)
    else:
        before = snapshot(edge_index), snapshot(weight)
        conv(x, edge_index, weight)
        assert_untouched(before[0], edge_index)
        assert_untouched(before[1], weight)


# -- explainer masks on a multigraph -------------------------------------------------------

def test_explainer_mask_of_a_repeated_pair_is_the_mean_over_its_columns():
    # Entry (i, j) is scaled by the mean of the masks of every column joining
    # i and j, in either direction (a loop over the columns as reference).
    edge_index, _ = multigraph(loops=False)
    mask = torch.rand(edge_index.size(1), dtype=torch.float64,
                      generator=torch.Generator().manual_seed(3))
    matrix = GraphOperators(N, edge_index, None, torch.float64).adj
    weights = EdgeMasking(mask, False, edge_index).weights(matrix)
    sums, counts = {}, {}
    for (s, t), m in zip(edge_index.T.tolist(), mask.tolist()):
        key = (min(s, t), max(s, t))
        sums[key], counts[key] = sums.get(key, 0.0) + m, counts.get(key, 0) + 1
    row = torch.repeat_interleave(torch.arange(N), matrix.crow_indices().diff())
    col = matrix.col_indices()
    expected = [sums[key] / counts[key] if key in sums else 1.0
                for key in zip(torch.minimum(row, col).tolist(),
                               torch.maximum(row, col).tolist())]
    torch.testing.assert_close(weights, torch.tensor(expected, dtype=torch.float64), **TOL)
    # A mask that is the same on every column of a pair scales its entry by it,
    # as PyG's explainers do when every message of the pair is scaled alike.
    pair_mask = torch.tensor([sums[(min(s, t), max(s, t))] / counts[(min(s, t), max(s, t))]
                              for s, t in edge_index.T.tolist()], dtype=torch.float64)
    torch.testing.assert_close(EdgeMasking(pair_mask, False, edge_index).weights(matrix),
                               weights, **TOL)
