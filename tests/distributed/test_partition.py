"""partition(), save_partition() and load_partition(), in one process."""
import pytest
import torch

from torch_geometric_regcn.datasets import contextual_sbm
from torch_geometric_regcn.distributed import (
    RowPartition,
    load_partition,
    partition,
    save_partition,
)


def _graph():
    data = contextual_sbm(num_nodes=101, num_classes=3, num_features=4, seed=0)
    data.edge_weight = torch.rand(data.edge_index.size(1))
    data.semantic_edge_index = data.edge_index.flip(0)[:, ::2]
    data.train_mask = torch.arange(101) % 7 == 0
    return data


def _edges(data, key, weight=None):
    index = data[key]
    rows = [tuple(e) for e in index.T.tolist()]
    if weight is None:
        return sorted(rows)
    return sorted(zip(rows, data[weight].tolist()))


@pytest.mark.parametrize('num_parts', [1, 2, 3, 7])
def test_shards_hold_every_row_and_edge_once(num_parts):
    data = _graph()
    shards = partition(data, num_parts)
    bounds = RowPartition.even(101, num_parts).bounds
    assert [s.partition for s in shards] == [RowPartition(bounds, p) for p in range(num_parts)]
    for key in ('x', 'y', 'train_mask', 'node_id'):
        whole = torch.cat([s[key] for s in shards])
        assert torch.equal(whole, data[key] if key != 'node_id' else torch.arange(101))
    for s in shards:
        part = s.partition
        assert s.num_nodes == part.num_local
        for key in ('edge_index', 'semantic_edge_index'):
            assert bool(((s[key][0] >= part.start) & (s[key][0] < part.end)).all())
    merged = type(data)(edge_index=torch.cat([s.edge_index for s in shards], dim=1),
                        edge_weight=torch.cat([s.edge_weight for s in shards]),
                        semantic_edge_index=torch.cat([s.semantic_edge_index for s in shards],
                                                      dim=1))
    assert _edges(merged, 'edge_index', 'edge_weight') == _edges(data, 'edge_index',
                                                                 'edge_weight')
    assert _edges(merged, 'semantic_edge_index') == _edges(data, 'semantic_edge_index')


def test_saved_shards_load_one_per_rank(tmp_path):
    shards = partition(_graph(), 3)
    paths = save_partition(shards, tmp_path)
    assert [p.rsplit('/', 1)[1] for p in paths] == [f'part-{r}-of-3.pt' for r in range(3)]
    for rank, shard in enumerate(shards):
        loaded = load_partition(tmp_path, rank, 3)
        assert loaded.partition == shard.partition and loaded.num_nodes == shard.num_nodes
        for key, value in shard.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(loaded[key], value)
    with pytest.raises(FileNotFoundError, match='No shard 0 of 2'):
        load_partition(tmp_path, 0, 2)


def test_bad_arguments_are_named():
    data = _graph()
    with pytest.raises(ValueError, match="'num_parts' must not exceed the number of nodes 101"):
        partition(data, 102)
    with pytest.raises(ValueError, match="'method' must be one of"):
        partition(data, 2, method='random')
    with pytest.raises(ValueError, match="'num_parts' must be a positive integer"):
        partition(data, 0)
    bad = data.clone()
    bad.edge_index = bad.edge_index.clone()
    bad.edge_index[0, 0] = 500
    with pytest.raises(ValueError, match='data.edge_index'):
        partition(bad, 2)


def test_metis_is_named_when_unavailable():
    # tests/distributed/test_metis.py checks the parts themselves (with pymetis)
    import importlib.util

    from torch_geometric.typing import WITH_METIS
    if WITH_METIS or importlib.util.find_spec('pymetis') is not None:
        shards = partition(_graph(), 2, method='metis')
        node_id = torch.cat([s.node_id for s in shards])
        assert torch.equal(node_id.sort().values, torch.arange(101))
    else:
        with pytest.raises(ImportError, match=r"method='metis' needs pymetis \(pip install "
                                              r"torch_geometric_regcn\[metis\]\)"):
            partition(_graph(), 2, method='metis')


def test_an_edge_attribute_as_long_as_the_nodes_stays_with_its_edges():
    # With E == N, edge_type was sliced as a node attribute: the shard of
    # rows 0 and 1 got the types of the edges of rows 3 and 2.
    from torch_geometric.data import Data
    data = Data(x=torch.randn(4, 2), edge_index=torch.tensor([[3, 2, 1, 0], [0, 1, 2, 3]]),
                edge_type=torch.tensor([30, 20, 10, 0]), num_nodes=4)
    shards = partition(data, 2)
    for shard in shards:  # every edge's type, with its edge
        assert torch.equal(shard.edge_type, 10 * shard.edge_index[0])
    assert sum(shard.edge_type.numel() for shard in shards) == 4
    assert all('edge_type' not in shard.node_attrs() for shard in shards)


def _assert_semantic_weights_follow(data):
    r"""The shards of :obj:`data` in 3 parts hold every semantic edge once,
    each with its own :obj:`semantic_edge_weight`."""
    shards = partition(data, 3)
    merged = type(data)(
        semantic_edge_index=torch.cat([s.semantic_edge_index for s in shards], dim=1),
        semantic_edge_weight=torch.cat([s.semantic_edge_weight for s in shards]))
    assert _edges(merged, 'semantic_edge_index', 'semantic_edge_weight') == _edges(
        data, 'semantic_edge_index', 'semantic_edge_weight')


def test_attributes_of_the_semantic_edges_follow_them():
    # Edge attributes went to the first edge set of as many edges: with as
    # many semantic as graph edges, semantic_edge_weight was reordered by
    # edge_index's sort, silently. Reference: each edge's own weight.
    data = _graph()
    data.semantic_edge_index = data.edge_index.flip(0)[:, torch.randperm(
        data.edge_index.size(1), generator=torch.Generator().manual_seed(1))]
    data.semantic_edge_weight = torch.rand(data.semantic_edge_index.size(1))
    _assert_semantic_weights_follow(data)
    data.edge_weight = data.edge_weight[:-1]  # one short: was an IndexError, or cut silently
    with pytest.raises(ValueError, match=r"'data.edge_weight' must have one row per edge"):
        partition(data, 3)


@pytest.mark.parametrize('count', [50, 101])
def test_attributes_of_a_smaller_semantic_graph_follow_it(count):
    # Edge attributes were picked by PyG's rule, by size: the weights of 50
    # semantic edges were dropped silently, those of 101 (= N) split as node rows.
    data = _graph()
    gen = torch.Generator().manual_seed(2)
    data.semantic_edge_index = torch.randint(0, 101, (2, count), generator=gen)
    data.semantic_edge_weight = torch.rand(count, generator=gen)
    _assert_semantic_weights_follow(data)
    data.semantic_edge_weight = data.semantic_edge_weight[:-1]
    with pytest.raises(ValueError, match=r"'data.semantic_edge_weight' must have one row"):
        partition(data, 3)


@pytest.mark.parametrize('layout', [torch.sparse_coo, torch.sparse_csr])
def test_sparse_node_features_are_split_by_rows(layout):
    # Advanced indexing refused sparse tensors (Flickr's x is sparse CSR).
    data = _graph()
    dense = data.x
    data.x = dense.to_sparse(layout=layout)
    for shard, reference in zip(partition(data, 3), partition(_graph(), 3)):
        assert shard.x.layout == layout
        assert torch.equal(shard.x.to_dense(), reference.x)


def test_node_attributes_named_after_edges_stay_node_attributes():
    # Taking 'edge' in a name for an edge attribute refused a per-node
    # 'edge_count' and dropped an 'in_edge_degree'.
    data = _graph()
    data.edge_count = torch.rand(101)
    data.in_edge_degree = torch.rand(101)
    shards = partition(data, 3)
    for key in ('edge_count', 'in_edge_degree'):
        assert torch.equal(torch.cat([s[key] for s in shards]), data[key])


@pytest.mark.parametrize('method', ['contiguous', 'metis'])
def test_graph_level_attributes_are_kept_in_every_shard(method):
    # They were dropped silently (only edge attributes without an edge set warn).
    if method == 'metis':
        pytest.importorskip('pymetis')
    data = _graph()
    data.num_classes, data.name = 3, 'csbm'
    data.scale = torch.tensor(2.0)
    data.class_weight = torch.tensor([0.2, 0.3, 0.5])  # [C]: neither nodes nor edges
    for shard in partition(data, 3, method):
        assert shard.num_classes == 3 and shard.name == 'csbm'
        assert torch.equal(shard.scale, data.scale)
        assert torch.equal(shard.class_weight, data.class_weight)
        assert shard.num_nodes == shard.partition.num_local


@pytest.mark.parametrize('method', ['contiguous', 'metis'])
def test_node_indices_and_whole_graph_objects_are_dropped_with_a_warning(method):
    # Copied unchanged, a train_idx kept the whole graph's numbering (wrong in
    # every METIS shard) and a [F, N] tensor put N columns in every shard.
    if method == 'metis':
        pytest.importorskip('pymetis')
    data = _graph()
    data.train_idx = torch.arange(5)
    data.x_t = data.x.T.contiguous()
    data.names = [f'node {i}' for i in range(101)]
    with pytest.warns(UserWarning, match=r"partition\(\) drops \[") as caught:
        shards = partition(data, 2, method)
    message = str(caught[0].message)
    assert all(f"'{key}'" in message for key in ('train_idx', 'x_t', 'names'))
    for shard in shards:
        assert 'train_idx' not in shard and 'x_t' not in shard and 'names' not in shard


def test_saved_shards_keep_the_graph_level_values(tmp_path):
    # partition() keeps Python scalars and strings in every shard; save_partition
    # wrote the tensors only, so a loaded shard lost them without a word.
    data = _graph()
    data.num_classes, data.name, data.scale = 3, 'csbm', 0.5
    save_partition(partition(data, 2), tmp_path)
    for rank in range(2):
        loaded = load_partition(tmp_path, rank, 2)
        assert (loaded.num_classes, loaded.name, loaded.scale) == (3, 'csbm', 0.5)


def test_shards_of_an_older_graph_are_refused(tmp_path):
    # A root that held the shards of one graph in 2 parts, then got those of an
    # updated graph (the same size) in 3 parts, or part 0 only in 2 parts: the
    # stale files of the first graph loaded as if they were the second's.
    old, new = _graph(), _graph()
    new.edge_index = new.edge_index[:, 1:]
    new.edge_weight = new.edge_weight[1:]
    save_partition(partition(old, 2), tmp_path)
    save_partition(partition(new, 3), tmp_path)
    load_partition(tmp_path, 0, 3)
    with pytest.raises(ValueError, match='another graph than the one save_partition'):
        load_partition(tmp_path, 0, 2)
    save_partition(partition(new, 2)[:1], tmp_path)  # one machine rewrote its shard only
    load_partition(tmp_path, 0, 2)
    with pytest.raises(ValueError, match='stale file of an older save'):
        load_partition(tmp_path, 1, 2)
