r"""distributed.row_partition in one process: RowPartition's even bounds, its
properties and owner() against a loop over the bounds (also with empty
parts), and the errors of check_partition and check_shard_edges, which name
the argument and the fix. What ranks do with them is tested on gloo groups in
tests/distributed/test_faults.py and test_pipeline.py."""
import pytest
import torch

from torch_geometric_regcn.distributed import RowPartition
from torch_geometric_regcn.distributed.row_partition import (
    check_node_id,
    check_node_id_sums,
    check_partition,
    check_shard_edges,
    id_hash_sum,
    permutation_hash_sums,
)


def owner_by_loop(bounds, index):
    r"""The rank whose block :math:`[b_p, b_{p+1})` holds each node."""
    return [next(p for p in range(len(bounds) - 1) if bounds[p] <= i < bounds[p + 1])
            for i in index]


def test_row_partition_owner():
    part = RowPartition.even(10, 3)
    assert part.bounds == (0, 4, 7, 10)
    assert part.owner(torch.arange(10)).tolist() == [0] * 4 + [1] * 3 + [2] * 3
    assert part.of_rank(2).num_local == 3 and part.of_rank(2).start == 7


@pytest.mark.parametrize('num_nodes, num_parts', [(10, 3), (12, 4), (7, 1), (3, 5), (0, 2),
                                                  (101, 7)])
def test_even_blocks_differ_by_at_most_one_row_the_larger_first(num_nodes, num_parts):
    part = RowPartition.even(num_nodes, num_parts)
    sizes = [b - a for a, b in zip(part.bounds, part.bounds[1:])]
    assert part.bounds[0] == 0 and part.num_nodes == num_nodes == sum(sizes)
    assert part.num_parts == num_parts == len(sizes) and part.rank == 0
    small, extra = divmod(num_nodes, num_parts)
    assert sizes == [small + 1] * extra + [small] * (num_parts - extra)


def test_properties_of_each_rank():
    bounds = (0, 3, 3, 8, 10)  # rank 1 owns no node
    for rank in range(4):
        part = RowPartition(bounds, 0).of_rank(rank)
        assert part == RowPartition(bounds, rank) and part.bounds == bounds
        assert (part.start, part.end) == (bounds[rank], bounds[rank + 1])
        assert part.num_local == bounds[rank + 1] - bounds[rank]
        assert part.num_nodes == 10 and part.num_parts == 4
    assert RowPartition.even(10, 3, rank=2) == RowPartition((0, 4, 7, 10), 2)


@pytest.mark.parametrize('bounds', [(0, 4, 7, 10), (0, 3, 3, 8, 10), (0, 0, 10), (0, 10),
                                    (0, 10, 10)])
@pytest.mark.parametrize('dtype', [torch.int64, torch.int32])
def test_owner_matches_the_bounds(bounds, dtype):
    index = torch.randperm(10, generator=torch.Generator().manual_seed(0)).to(dtype)
    owner = RowPartition(bounds, 0).owner(index)
    assert owner.tolist() == owner_by_loop(bounds, index.tolist())
    assert owner.shape == index.shape


@pytest.mark.parametrize('given', [None, (0, 10), 'part-0-of-1.pt'])
def test_check_partition_names_a_missing_partition(given):
    with pytest.raises(ValueError, match=r"'data\.partition' is missing: a distributed "
                                         r"transform needs .*partition\(\).*load_partition"):
        check_partition(given, None)
    with pytest.raises(ValueError, match="'partition' is missing"):
        check_partition(given, None, name='partition')


def test_check_partition_names_a_shard_of_another_group():
    # One process (group=None) is rank 0 of 1.
    message = (r"'partition' is part 1 of 2, but this process is rank 0 of 1 in 'group'; "
               r"load the shard of rank 0 of a partition into 1 parts")
    with pytest.raises(ValueError, match=message):
        check_partition(RowPartition.even(10, 2, rank=1), None, name='partition')
    with pytest.raises(ValueError, match="'data.partition' is part 0 of 3"):
        check_partition(RowPartition.even(10, 3), None)
    part = RowPartition.even(10, 1)
    assert check_partition(part, None) == part


def test_check_partition_gives_back_the_bounds_a_cloned_shard_turned_into_a_list():
    from torch_geometric.data import Data

    from torch_geometric_regcn import LowRankInverse

    data = Data(x=torch.randn(6, 3, generator=torch.Generator().manual_seed(0)),
                edge_index=torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]]))
    data.partition = RowPartition((0, 6), 0)
    for copy in (data.clone(), data.to('cpu'), data):
        part = check_partition(copy.partition, None)
        assert type(part.bounds) is tuple and part == RowPartition((0, 6), 0)
    # PyG's clone gave the bounds back as a list, and the clone another cache key.
    transform = LowRankInverse(1.0, 0.0, rank=2)
    keys = {transform._cache_key(copy, check_partition(copy.partition, None))
            for copy in (data, data.clone())}
    assert len(keys) == 1


def test_check_shard_edges_accepts_the_edges_of_its_rows():
    part = RowPartition((0, 4, 7, 10), 1)
    edge_index = torch.tensor([[4, 5, 6, 6], [0, 9, 4, 6]])
    check_shard_edges(edge_index, part)
    check_shard_edges(edge_index, part, torch.rand(4))
    check_shard_edges(torch.zeros(2, 0, dtype=torch.long), part)  # no edges


@pytest.mark.parametrize('row', [3, 7])
def test_check_shard_edges_names_edges_of_other_rows(row):
    part = RowPartition((0, 4, 7, 10), 1)
    edge_index = torch.tensor([[4, row], [5, 5]])
    with pytest.raises(ValueError, match=r"'data\.edge_index' of rank 1 has edges whose first "
                                         r"index is not one of its nodes \[4, 6\]; a shard "
                                         r"holds the edges of its own rows \(see partition\(\)\)"):
        check_shard_edges(edge_index, part, name='data.edge_index')


def test_check_shard_edges_checks_global_indices_and_weights():
    part = RowPartition((0, 4, 7, 10), 1)
    with pytest.raises(ValueError, match=r"'semantic_edge_index' refers to nodes outside "
                                         r"\[0, 9\]"):
        check_shard_edges(torch.tensor([[4], [10]]), part, name='semantic_edge_index')
    with pytest.raises(ValueError, match=r"'edge_weight' must have shape \[1\] to match "
                                         r"'edge_index'"):
        check_shard_edges(torch.tensor([[4], [5]]), part, torch.ones(2))
    with pytest.raises(ValueError, match="'edge_weight' must be non-negative"):
        check_shard_edges(torch.tensor([[4], [5]]), part, -torch.ones(1))
    with pytest.raises(TypeError, match=r"'edge_index' must hold integer.*'edge_index\.long"):
        check_shard_edges(torch.tensor([[4.0], [5.0]]), part)


@pytest.mark.parametrize('bounds', [(10, 150, 300), (0, 200, 150), (0, 1.5, 3), (5,)])
def test_check_partition_refuses_bounds_that_are_not_row_blocks(bounds):
    # Bounds from 10 silently dropped the rows of nodes 0-9; decreasing ones
    # failed later with an unnamed error, another rank left waiting.
    with pytest.raises(ValueError, match=r"'partition' must have integer bounds that start "
                                         r"at 0 and never decrease"):
        check_partition(RowPartition(bounds, 0), None, 'partition')


def test_node_id_is_checked_on_each_rank_and_as_a_permutation_over_the_ranks():
    # Each rank: a 1-D int64 index per row, distinct, in [0, N). Over the ranks: the
    # hashed sums of a permutation of [0, N), which repeats with equal plain sums and
    # sums of squares (1, 5, 6 for 2, 3, 7: 12 and 62 either way) do not have.
    check_node_id(torch.tensor([3, 0, 2]), 3, 5)
    for node_id, error, match in [
            (torch.tensor([3, 0, 2], dtype=torch.int32), TypeError, '1-D int64'),
            (torch.tensor([3, 0]), ValueError, r'one index per row of this shard \(3'),
            (torch.tensor([3, 0, 5]), ValueError, r'distinct indices in \[0, 4\]'),
            (torch.tensor([3, 0, 3]), ValueError, 'distinct indices')]:
        with pytest.raises(error, match=match):
            check_node_id(node_id, 3, 5)
    parts = [torch.tensor([i for i in range(40) if i not in (2, 3, 7)]),
             torch.tensor([1, 5, 6])]
    shared = [[id_hash_sum(p, salt) for salt in (1, 2)] for p in parts]
    with pytest.raises(ValueError, match=r"'node_id' must hold each index in \[0, 39\] once"):
        check_node_id_sums(shared, parts[0], 40, group=object())
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(0))
    shared = [[id_hash_sum(p, salt) for salt in (1, 2)] for p in (perm[:25], perm[25:])]
    check_node_id_sums(shared, perm, 40, group=object())  # a permutation passes
    assert permutation_hash_sums(40, torch.device('cpu')) == [
        sum(r[i] for r in shared) % (1 << 64) for i in (0, 1)]


def test_graph_operators_refuse_a_node_id_that_is_not_the_shards():
    # Before: GraphOperators agreed only on whether node_id was given; the eigensolver
    # then drew its start by garbage indices (a short one left rows uninitialised).
    from torch_geometric_regcn.regularizers import GraphOperators
    edge_index = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    part = RowPartition.even(3, 1)
    with pytest.raises(ValueError, match='one index per row of this shard'):
        GraphOperators(3, edge_index, partition=part, node_id=torch.tensor([0, 1]))
    GraphOperators(3, edge_index, partition=part, node_id=torch.tensor([2, 0, 1]))
