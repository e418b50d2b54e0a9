import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce

from tests.conftest import brute_force, clustered
from torch_geometric_regcn import SemanticGraph
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.knn import ivf_knn_cosine


@pytest.mark.parametrize('block_size', [None, 1, 7])
def test_matches_brute_force(block_size):
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(0))
    out = SemanticGraph(4, block_size=block_size)(Data(x=x)).semantic_edge_index
    assert torch.equal(coalesce(out), brute_force(x, 4))


def test_sparse_features_equal_dense():
    x = torch.randn(60, 20, generator=torch.Generator().manual_seed(1))
    x[x.abs() < 1.0] = 0
    dense = SemanticGraph(5)(Data(x=x)).semantic_edge_index
    for sparse in (x.to_sparse(), x.to_sparse_csr()):
        got = SemanticGraph(5, block_size=13)(Data(x=sparse)).semantic_edge_index
        assert torch.equal(coalesce(got), coalesce(dense))
    assert torch.equal(coalesce(dense), brute_force(x, 5))


def test_zero_rows_and_ties_are_deterministic():
    x = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    first = SemanticGraph(2)(Data(x=x)).semantic_edge_index
    assert torch.equal(coalesce(first), brute_force(x, 2))
    for block_size in (1, 2, 4):
        again = SemanticGraph(2, block_size=block_size)(Data(x=x)).semantic_edge_index
        assert torch.equal(again, first)


def test_no_self_loops_and_symmetric():
    x = torch.randn(30, 3)
    ei = SemanticGraph(3)(Data(x=x)).semantic_edge_index
    assert bool((ei[0] != ei[1]).all())
    assert torch.equal(coalesce(ei), coalesce(ei.flip(0)))


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="'k' must be a positive"):
        SemanticGraph(0)
    with pytest.raises(ValueError, match="'k' must lie in"):
        SemanticGraph(5)(Data(x=torch.randn(5, 2)))
    with pytest.raises(ValueError, match='NaN'):
        SemanticGraph(1)(Data(x=torch.tensor([[1.0], [float('nan')], [2.0]])))
    with pytest.raises(ValueError, match="needs node features"):
        SemanticGraph(1)(Data(num_nodes=3))
    with pytest.raises(ValueError, match="'data.x' has 5 rows but the graph has 8 nodes"):
        SemanticGraph(2)(Data(x=torch.randn(5, 2), num_nodes=8))
    with pytest.raises(ValueError, match="'method' must be one of"):
        SemanticGraph(3, method='hnsw')
    with pytest.raises(ValueError, match='needs dense features'):
        SemanticGraph(2, method='ivf')(Data(x=torch.eye(5).to_sparse()))
    x = torch.randn(5, 2)
    with pytest.raises(TypeError, match="'data.x' must be real"):
        SemanticGraph(2)(Data(x=torch.complex(x, x.flip(0))))
    with pytest.raises(ValueError, match="'data.x' is a hybrid sparse tensor"):
        SemanticGraph(2)(Data(x=x.to_sparse(1)))
    assert torch.equal(SemanticGraph(2)(Data(x=x.long())).semantic_edge_index,
                       SemanticGraph(2)(Data(x=x.long().float())).semantic_edge_index)
    with pytest.raises(ValueError, match="'probes'"):
        ivf_knn_cosine(torch.randn(10, 2), 2, probes=0)
    assert repr(SemanticGraph(7)) == "SemanticGraph(k=7, method='auto')"
    assert repr(SemanticGraph(7, seed=5)) == "SemanticGraph(k=7, method='auto', seed=5)"


def test_ivf_is_reproducible_and_auto_is_exact_on_small_graphs():
    x = clustered(n=500)
    runs = [SemanticGraph(5, method='ivf', seed=1)(Data(x=x)).semantic_edge_index
            for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    auto = SemanticGraph(5)(Data(x=x)).semantic_edge_index
    assert torch.equal(coalesce(auto), coalesce(SemanticGraph(5, method='exact')(
        Data(x=x)).semantic_edge_index))


def test_a_shard_without_a_group_is_one_part_or_rejected():
    # data.partition of one part is the whole graph; a shard of a partition
    # into several parts needs the group of its ranks.
    x = torch.randn(30, 4, generator=torch.Generator().manual_seed(2))
    whole = SemanticGraph(3)(Data(x=x)).semantic_edge_index
    one = SemanticGraph(3)(Data(x=x, partition=RowPartition.even(30, 1)))
    assert torch.equal(one.semantic_edge_index, whole)
    with pytest.raises(ValueError, match="'data.partition' is part 0 of 2"):
        SemanticGraph(3)(Data(x=x[:15], partition=RowPartition.even(30, 2)))
    # A 'partition' attribute of another kind is the user's own data, left alone.
    other = SemanticGraph(3)(Data(x=x, partition=torch.arange(30) % 3))
    assert torch.equal(other.semantic_edge_index, whole)


def test_a_batch_of_several_graphs_is_refused_before_the_search():
    # A kNN search over a Batch's rows links nodes of different graphs; one graph
    # per Batch is a graph.
    from torch_geometric.data import Batch
    gen = torch.Generator().manual_seed(0)
    graphs = [Data(x=torch.randn(n, 3, generator=gen)) for n in (8, 9)]
    with pytest.raises(ValueError, match=r'^SemanticGraph got a Batch of 2 graphs.*each graph '
                                         r'before batching'):
        SemanticGraph(3, progress=False)(Batch.from_data_list(graphs))
    one = SemanticGraph(3, progress=False)(Batch.from_data_list(graphs[:1]))
    assert torch.equal(one.semantic_edge_index,
                       SemanticGraph(3, progress=False)(graphs[0]).semantic_edge_index)


def test_a_batch_of_one_graph_gives_its_new_graph_back():
    # The Batch's slice records kept the old semantic graph's size, so
    # to_data_list() and get_example() cut the new one short (106 of 380 edges)
    # (review s55/transforms2). Reference: the kNN graph of the graph itself.
    from torch_geometric.data import Batch
    gen = torch.Generator().manual_seed(0)
    data = Data(x=torch.randn(40, 5, generator=gen), edge_index=torch.tensor([[0, 1], [1, 0]]))
    batch = SemanticGraph(k=8)(Batch.from_data_list([SemanticGraph(k=2)(data)]))
    expected = SemanticGraph(k=8)(data.clone()).semantic_edge_index
    assert torch.equal(batch.to_data_list()[0].semantic_edge_index, expected)
    assert torch.equal(batch.get_example(0).semantic_edge_index, expected)
    # and where the graph had none before: the attribute was missing (s55/diff55)
    batch = SemanticGraph(k=8)(Batch.from_data_list([data.clone()]))
    assert torch.equal(batch.to_data_list()[0].semantic_edge_index, expected)
    assert torch.equal(batch.get_example(0).semantic_edge_index, expected)
