from unittest import mock

import pytest
import torch
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import coalesce, to_undirected

from tests.conftest import dense_normalized_adjacency, messy_graph
from torch_geometric_regcn.linalg import combine, graph_operator, normalized_adjacency


def to_dense(edge_index, edge_weight, n):
    return torch.sparse_coo_tensor(edge_index, edge_weight, (n, n)).to_dense()


@pytest.mark.parametrize('reduce', [None, 'sum', 'max'])
def test_normalized_adjacency_matches_dense_reference(reduce):
    # messy_graph repeats pairs: the default sums them, as PyG's GCNConv does.
    edge_index = messy_graph()
    options = {} if reduce is None else {'reduce': reduce}
    ei, ew = normalized_adjacency(edge_index, 40, dtype=torch.float64, **options)
    expected = dense_normalized_adjacency(edge_index, 40, reduce=reduce or 'sum')
    torch.testing.assert_close(to_dense(ei, ew, 40), expected, rtol=1e-12, atol=1e-12)
    assert torch.allclose(to_dense(ei, ew, 40)[0, 0], torch.tensor(1.0, dtype=torch.float64))


@pytest.mark.parametrize('reduce', ['sum', 'max'])
def test_normalized_adjacency_weighted(reduce):
    edge_index = messy_graph(seed=1)
    weight = torch.rand(edge_index.size(1), generator=torch.Generator().manual_seed(1))
    ei, ew = normalized_adjacency(edge_index, 40, weight.double(), reduce=reduce)
    expected = dense_normalized_adjacency(edge_index, 40, weight, reduce=reduce)
    torch.testing.assert_close(to_dense(ei, ew, 40), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize('self_loops', [True, False])
def test_sorted_unique_edges_skip_the_summing_sort_bit_for_bit(self_loops):
    # PyG's datasets hold their edges coalesced (sorted by row, then column, no
    # repeated pair): reduce='sum' skips its sort for them, and the result must be
    # that of the sorting path bit for bit (the sort has nothing to move or add).
    generator = torch.Generator().manual_seed(3)
    edge_index = coalesce(to_undirected(torch.randint(0, 50, (2, 300), generator=generator)))
    weight = torch.rand(edge_index.size(1), generator=generator, dtype=torch.float64) + 0.1
    assert graph_operator._sorted_unique(edge_index)
    chunks = graph_operator._chunk_entries
    with mock.patch.object(graph_operator, '_chunk_entries', wraps=chunks) as spy:
        fast = normalized_adjacency(edge_index, 50, weight, self_loops=self_loops)
    assert not any(call.args[6] for call in spy.call_args_list)  # 'summed': no repeat to add
    with mock.patch.object(graph_operator, '_sorted_unique', return_value=False), \
            mock.patch.object(graph_operator, '_chunk_entries', wraps=chunks) as spy:
        slow = normalized_adjacency(edge_index, 50, weight, self_loops=self_loops)
    assert all(call.args[6] for call in spy.call_args_list)
    assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])


@pytest.mark.parametrize('order', ['sorted', 'unsorted'])
def test_repeated_pairs_still_sum_whatever_their_order(order):
    # A multigraph sorted by row and column but repeating a pair is not coalesced:
    # its repeats must still add up (dense float64 reference; 1e-12 is far above
    # float64 rounding of sums of a few terms).
    edge_index = coalesce(messy_graph(seed=2))
    edge_index = torch.cat([edge_index, edge_index[:, ::3]], dim=1)
    edge_index = edge_index[:, torch.argsort(edge_index[0] * 40 + edge_index[1], stable=True)]
    if order == 'unsorted':
        edge_index = edge_index.flip(1)
    assert not graph_operator._sorted_unique(edge_index)
    ei, ew = normalized_adjacency(edge_index, 40, dtype=torch.float64)
    expected = dense_normalized_adjacency(edge_index, 40, reduce='sum')
    torch.testing.assert_close(to_dense(ei, ew, 40), expected, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(expected, dense_normalized_adjacency(edge_index, 40, reduce='max'))


def test_sorted_unique_detects_order_and_repeats():
    assert graph_operator._sorted_unique(torch.tensor([[0, 0, 1, 2], [1, 2, 0, 0]]))
    assert graph_operator._sorted_unique(torch.zeros(2, 0, dtype=torch.long))
    assert not graph_operator._sorted_unique(torch.tensor([[0, 0, 1], [2, 1, 0]]))  # column
    assert not graph_operator._sorted_unique(torch.tensor([[1, 0], [0, 1]]))  # row
    assert not graph_operator._sorted_unique(torch.tensor([[0, 0, 1], [1, 1, 0]]))  # repeat


def test_normalized_adjacency_equals_pyg_gcn_norm_on_clean_graphs():
    edge_index = coalesce(to_undirected(torch.randint(0, 30, (2, 80))))
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    ei, ew = normalized_adjacency(edge_index, 30, dtype=torch.float64)
    ref_ei, ref_ew = gcn_norm(edge_index, torch.ones(edge_index.size(1), dtype=torch.float64),
                              30, add_self_loops=True)
    torch.testing.assert_close(to_dense(ei, ew, 30), to_dense(ref_ei, ref_ew, 30))


def test_combine_scales_and_sums():
    a = normalized_adjacency(messy_graph(seed=2), 40, dtype=torch.float64)
    b = normalized_adjacency(messy_graph(seed=3), 40, dtype=torch.float64)
    out = combine([a, b], [0.25, 0.5], 40)
    assert out.layout == torch.sparse_csr
    expected = 0.25 * to_dense(*a, 40) + 0.5 * to_dense(*b, 40)
    torch.testing.assert_close(out.to_dense(), expected)
    with pytest.raises(ValueError, match='non-zero'):
        combine([a], [0.0], 40)


@pytest.mark.parametrize('bad, message', [
    (torch.tensor([[0, 1, 2]]), 'shape'),
    (torch.tensor([[0.0], [1.0]]), 'integer'),
    (torch.tensor([[0], [40]]), 'outside'),
])
def test_normalized_adjacency_rejects_bad_edge_index(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        normalized_adjacency(bad, 40)


def test_normalized_adjacency_rejects_bad_weights():
    edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match='non-negative'):
        normalized_adjacency(edge_index, 3, torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match='NaN'):
        normalized_adjacency(edge_index, 3, torch.tensor([1.0, float('nan')]))
    with pytest.raises(ValueError, match='shape'):
        normalized_adjacency(edge_index, 3, torch.tensor([1.0]))


def test_pyg_laplacian_convention_matches_get_laplacian():
    from torch_geometric.utils import get_laplacian
    # An undirected graph (symmetric weights) with duplicate edges in both
    # directions and a self loop: PyG sums the duplicates and drops the loop.
    gen = torch.Generator().manual_seed(4)
    symmetric = torch.rand(32, 32, generator=gen, dtype=torch.float64) + 0.1
    symmetric = symmetric + symmetric.T
    edge_index = torch.cat([to_undirected(torch.randint(0, 30, (2, 60), generator=gen)),
                            to_undirected(torch.randint(0, 30, (2, 8), generator=gen)),
                            torch.tensor([[3], [3]])], dim=1)
    weight = symmetric[edge_index[0], edge_index[1]]
    ei, ew, degree = normalized_adjacency(edge_index, 32, weight, self_loops=False,
                                          reduce='sum', return_degree=True)
    assert not bool((ei[0] == ei[1]).any())  # no self loops
    index, value = get_laplacian(edge_index, weight, 'sym', num_nodes=32)
    expected = torch.eye(32, dtype=torch.float64) - to_dense(index, value, 32)
    torch.testing.assert_close(to_dense(ei, ew, 32), expected, rtol=1e-12, atol=1e-12)
    no_loops = edge_index[0] != edge_index[1]
    dense_degree = torch.zeros(32, dtype=torch.float64).index_add_(
        0, edge_index[0, no_loops], weight[no_loops])
    torch.testing.assert_close(degree, dense_degree, rtol=1e-12, atol=0)
    assert degree[30] == degree[31] == 0  # isolated: no entry, degree zero


def test_pyg_convention_drops_zero_weights_and_isolates_their_nodes():
    edge_index = torch.tensor([[0, 1, 2], [1, 0, 3]])
    ei, ew = normalized_adjacency(edge_index, 4, torch.tensor([1.0, 1.0, 0.0]),
                                  self_loops=False)
    assert ei.tolist() == [[0, 1], [1, 0]] and ew.tolist() == [1.0, 1.0]


def test_one_part_partition_is_the_single_process_result_bit_for_bit():
    from torch_geometric_regcn.distributed import RowPartition
    edge_index = messy_graph(seed=5)
    weight = torch.rand(edge_index.size(1), generator=torch.Generator().manual_seed(5))
    for kwargs in ({}, {'self_loops': False, 'reduce': 'sum'}):
        plain = normalized_adjacency(edge_index, 40, weight, **kwargs)
        parted = normalized_adjacency(edge_index, 40, weight, **kwargs,
                                      partition=RowPartition.even(40, 1))
        assert all(torch.equal(a, b) for a, b in zip(plain, parted))


def test_self_loops_come_last_after_the_sorted_edges():
    ei, _ = normalized_adjacency(messy_graph(seed=6), 40)
    loops = ei[:, -40:]
    assert torch.equal(loops[0], torch.arange(40)) and torch.equal(loops[1], torch.arange(40))
    key = ei[0, :-40] * 40 + ei[1, :-40]
    assert bool((key.diff() > 0).all())


def test_sharded_normalized_adjacency_is_deprecated():
    from torch_geometric_regcn.distributed import RowPartition
    from torch_geometric_regcn.linalg import sharded_normalized_adjacency
    edge_index = messy_graph(seed=7)
    with pytest.warns(DeprecationWarning, match='normalized_adjacency'):
        old = sharded_normalized_adjacency(edge_index, RowPartition.even(40, 1), None,
                                           dtype=torch.float64)
    # The same entries, sorted (coalesced) as the old function returned them.
    new = coalesce(*normalized_adjacency(edge_index, 40, dtype=torch.float64), 40)
    assert all(torch.equal(a, b) for a, b in zip(old, new))


def test_bad_convention_and_partition_arguments():
    from torch_geometric_regcn.distributed import RowPartition
    edge_index = messy_graph()
    with pytest.raises(ValueError, match="'reduce' must be one of"):
        normalized_adjacency(edge_index, 40, reduce='mean')
    with pytest.raises(ValueError, match="'group' needs the 'partition'"):
        normalized_adjacency(edge_index, 40, group=object())
    with pytest.raises(ValueError, match="'num_nodes' \\(41\\)"):
        normalized_adjacency(edge_index, 41, partition=RowPartition.even(40, 1))
    with pytest.raises(ValueError, match='is part 1 of 2'):  # a shard needs its group
        normalized_adjacency(edge_index, 40, partition=RowPartition.even(40, 2, rank=1))


def _tsgcn_graph(dtype):
    """A weighted multigraph (unsorted, repeated pairs, self loops, isolated
    nodes) and a semantic graph sorted by row, as a k-NN graph is."""
    generator = torch.Generator().manual_seed(11)
    edge_index = messy_graph(num_nodes=60, num_edges=400, seed=4)
    weight = torch.rand(edge_index.size(1), generator=generator, dtype=dtype) + 0.05
    semantic = torch.stack([torch.arange(60).repeat_interleave(3),
                            torch.randint(0, 60, (180,), generator=generator)])
    return edge_index, weight, semantic


def _dense_tsgcn(edge_index, weight, semantic, alpha, beta):
    """(alpha Â_G + beta Â_X) / (1 + alpha + beta), densely in float64."""
    a_g = dense_normalized_adjacency(edge_index, 60, weight, reduce='sum')
    a_x = dense_normalized_adjacency(semantic, 60, reduce='sum')
    return (alpha * a_g + beta * a_x) / (1 + alpha + beta)


@pytest.mark.parametrize('chunk', [None, 7])
@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_tsgcn_operator_built_by_chunks_is_the_dense_formula(monkeypatch, chunk, dtype):
    # S built directly in CSR by chunks of rows (7 entries: dozens of chunks, rows
    # longer than a chunk among them) against the dense float64 formula. Every
    # entry is a product and a sum of a few numbers of size <= 1, so float64
    # rounding stays below 1e-14 and float32 rounding below ~1e-6 (eps 6e-8
    # times a few dozen operations, the degree sums included).
    from torch_geometric_regcn.regularizers import GraphOperators, tsgcn_adjacency
    if chunk is not None:
        monkeypatch.setattr(graph_operator, 'CHUNK_ENTRIES', chunk)
    edge_index, weight, semantic = _tsgcn_graph(dtype)
    graph = GraphOperators(60, edge_index, weight, dtype, semantic_edge_index=semantic)
    s = tsgcn_adjacency(graph, 1.0, 0.4)
    expected = _dense_tsgcn(edge_index, weight, semantic, 1.0, 0.4)
    assert s.layout == torch.sparse_csr and s.dtype == dtype
    assert s.crow_indices().dtype == torch.int64  # as kept in one process, compacted later
    tol = 1e-12 if dtype == torch.float64 else 2e-6
    torch.testing.assert_close(s.to_dense().double(), expected, rtol=tol, atol=tol)
    stored = torch.zeros(60, 60, dtype=torch.bool)
    stored[torch.repeat_interleave(torch.arange(60), s.crow_indices().diff()),
           s.col_indices()] = True
    assert torch.equal(stored, expected != 0)  # the pattern: every non-zero, nothing else
    assert 'adj' not in graph.derived  # fixed coefficients: the terms were freed


def test_chunks_change_no_bit(monkeypatch):
    # The chunks only bound the work arrays: each row's sums run in the same order,
    # so the result is the same to the bit for any chunk size.
    from torch_geometric_regcn.regularizers import GraphOperators, tsgcn_adjacency
    edge_index, weight, semantic = _tsgcn_graph(torch.float32)

    def build():
        graph = GraphOperators(60, edge_index, weight, semantic_edge_index=semantic)
        return tsgcn_adjacency(graph, 1.0, 0.3), normalized_adjacency(
            edge_index, 60, weight, self_loops=False, return_degree=True)
    whole = build()
    monkeypatch.setattr(graph_operator, 'CHUNK_ENTRIES', 3)
    chunked = build()
    for a, b in [(whole[0].crow_indices(), chunked[0].crow_indices()),
                 (whole[0].col_indices(), chunked[0].col_indices()),
                 (whole[0].values(), chunked[0].values()), *zip(whole[1], chunked[1])]:
        assert torch.equal(a, b)


def test_combine_of_csr_rows_equals_combine_of_pairs():
    # The chunked sum of CSR terms against the pairs' (sorted COO) sum, with a
    # learned coefficient whose gradient flows (a + b is exact in either order).
    edge_index, weight, semantic = _tsgcn_graph(torch.float64)
    a = graph_operator.normalized_rows(edge_index, 60, weight)[0]
    b = graph_operator.normalized_rows(semantic, 60, dtype=torch.float64)[0]
    assert a.crow_indices().dtype == torch.int32  # 32-bit indices where they fit
    c = torch.tensor(0.3, dtype=torch.float64, requires_grad=True)
    rows = combine([a, b], [0.5, c], 60)
    pairs = combine([graph_operator.coo_entries(a), graph_operator.coo_entries(b)], [0.5, c], 60)
    assert torch.equal(rows.crow_indices(), pairs.crow_indices())
    assert torch.equal(rows.col_indices(), pairs.col_indices())
    assert torch.equal(rows.values(), pairs.values())
    x = torch.randn(60, 2, dtype=torch.float64)
    grad, = torch.autograd.grad((rows @ x).sum(), c)
    torch.testing.assert_close(grad, (b.to_dense() @ x).sum(), rtol=1e-12, atol=1e-12)
    assert combine([a, b], [0.5, 0.3], 60, compact=True).col_indices().dtype == torch.int32
    three = combine([a, b, b], [0.5, 0.25, 0.5], 60)  # more terms: sorted together
    torch.testing.assert_close(three.to_dense(), 0.5 * a.to_dense() + 0.75 * b.to_dense(),
                               rtol=1e-15, atol=1e-15)  # one rounding per addition


def test_normalized_adjacency_takes_int32_indices():
    # A narrower index dtype names the same edges: the same operator as int64.
    edge_index = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 3]])
    wide = normalized_adjacency(edge_index, 4)
    narrow = normalized_adjacency(edge_index.int(), 4)
    assert torch.equal(narrow[0], wide[0]) and torch.equal(narrow[1], wide[1])


@pytest.mark.parametrize('self_loops', [True, False])
def test_weights_whose_degree_overflows_are_refused(self_loops):
    # Finite weights of 3e38 sum to infinity in float32: every entry became 0.
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    with pytest.raises(ValueError, match="'edge_weight' overflows torch.float32"):
        normalized_adjacency(edge_index, 3, torch.full((4,), 3e38), torch.float32,
                             self_loops=self_loops)
    _, weight = normalized_adjacency(edge_index, 3, torch.full((4,), 3e38, dtype=torch.float64),
                                     torch.float64, self_loops=self_loops)
    assert bool((weight > 0).all())


def test_the_gradient_in_a_pair_of_zero_weights_is_exact():
    # The symmetrising max of the two directions started from zeros, which
    # torch's scatter_reduce backward counted as a third tied value: the
    # gradient in an edge weight of exactly zero was 2/3 of the truth (for
    # every regulariser, e.g. an attack's candidate edges). A path 0-1-2-3
    # with w(1, 2) = 0 in both directions: a^_12 = w / sqrt(d~_1 d~_2) with
    # d~_1 = d~_2 = 2 there, so its derivative in the shared w is 1/2.
    ei = torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]])
    w = torch.zeros((), dtype=torch.float64, requires_grad=True)
    one = torch.ones((), dtype=torch.float64)
    index, value = normalized_adjacency(ei, 4, torch.stack([one, one, w, w, one, one]),
                                        dtype=torch.float64)
    entry = ((index[0] == 1) & (index[1] == 2)).nonzero().item()
    grad, = torch.autograd.grad(value[entry], w)
    # Two float64 reciprocal square roots and a product: a few ulps (the
    # bug was a factor 2/3).
    assert float(grad) == pytest.approx(0.5, rel=1e-14)
