"""The cosine kNN search on row shards (gloo, 2 and 3 ranks): every rank's
rows of SemanticGraph(group=...) concatenated are the single-process graph,
for the exact search (dense and sparse features, ties) and IVF (default and
custom options); bad input on one rank raises on all ranks; the ring moves
each block once."""
import warnings

import pytest
import torch
import torch.distributed as dist
from torch_geometric.data import Data

from tests.conftest import clustered
from tests.distributed.launch import requires_gloo, run_ranks
from tests.knn.test_exact import ties
from torch_geometric_regcn import SemanticGraph
from torch_geometric_regcn.distributed import partition
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.distributed.traffic import traffic, traffic_stage
from torch_geometric_regcn.knn import (
    exact_knn_cosine,
    ivf_knn_cosine,
    knn_graph_cosine,
    sharded_knn_cosine,
    sharded_knn_graph_cosine,
)

pytestmark = requires_gloo

#: The custom options of the IVF case (the tuned probes, a small sample).
IVF_OPTIONS = dict(cells=25, target_recall=0.8, sample=300, iterations=4)


def _gaussian(n, d, seed):
    return torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _sparse(n, d, seed):
    x = _gaussian(n, d, seed)
    x[x.abs() < 1.2] = 0.0
    return x


def _uneven(num_nodes, world_size):
    """Blocks far from even: a block smaller than k, and with three ranks an
    empty one."""
    if world_size == 2:
        return (0, 3, num_nodes)
    return (0, num_nodes // 3, num_nodes // 3, num_nodes)


def _cases(world_size):
    """name: (features, k, method, bounds or None for partition()'s, layout)."""
    return {
        'exact': (_gaussian(1001, 16, 0), 6, 'auto', None, torch.strided),
        'exact ties': (ties(600, 1), 5, 'exact', _uneven(600, world_size), torch.strided),
        'sparse': (_sparse(500, 24, 2), 5, 'exact', None,
                   torch.sparse_csr if world_size == 2 else torch.sparse_coo),
        'ivf': (clustered(n=2000, seed=4).double(), 5, 'ivf', None, torch.strided),
        'ivf ties': (ties(700, 3), 4, 'ivf', _uneven(700, world_size), torch.strided),
    }


def _shard(x, world_size, rank, bounds=None):
    if bounds is None:
        return partition(Data(x=x), world_size)[rank]
    part = RowPartition(bounds, rank)
    return Data(x=x[part.start:part.end], partition=part)


def _as_layout(x, layout):
    if layout == torch.sparse_csr:
        return x.to_sparse_csr()
    return x.to_sparse() if layout == torch.sparse_coo else x


def _message(fn):
    try:
        fn()
    except (TypeError, ValueError) as error:
        return str(error)
    return None


def _on_ranks(rank, world_size):
    group = dist.group.WORLD
    out = {}
    for name, (x, k, method, bounds, layout) in _cases(world_size).items():
        shard = _shard(x, world_size, rank, bounds)
        shard.x = _as_layout(shard.x, layout)
        graph = SemanticGraph(k, method=method, progress=False, group=group)
        out[name] = graph(shard).semantic_edge_index

    x = _cases(world_size)['ivf ties'][0]
    shard = _shard(x, world_size, rank, _uneven(700, world_size))
    out['ivf options'] = ivf_knn_cosine(shard.x, 4, **IVF_OPTIONS, progress=False,
                                        generator=torch.Generator().manual_seed(9),
                                        partition=shard.partition, group=group)
    out['ivf probes'] = ivf_knn_cosine(shard.x, 4, cells=10, probes=3, progress=False,
                                       generator=torch.Generator().manual_seed(9),
                                       partition=shard.partition, group=group)

    x, k = _gaussian(1001, 16, 0), 6
    shard = _shard(x, world_size, rank)
    with traffic_stage('ring'):
        out['neighbours'] = exact_knn_cosine(shard.x, k, progress=False,
                                             partition=shard.partition, group=group)
    out['ring bytes'] = traffic('ring')
    with warnings.catch_warnings():  # the 0.2 names give the same rows
        warnings.simplefilter('ignore', DeprecationWarning)
        out['old neighbours'] = sharded_knn_cosine(shard.x, k, shard.partition, group)
        out['old graph'] = sharded_knn_graph_cosine(shard.x, k, shard.partition, group)
    out['graph'] = knn_graph_cosine(shard.x, k, progress=False, partition=shard.partition,
                                    group=group)

    graph = SemanticGraph(k, progress=False, group=group)
    bad = shard.clone()
    if rank == 1:
        bad.x[2, 3] = float('nan')
    out['nan'] = _message(lambda: graph(bad))
    other = _shard(x, world_size, 0 if rank == 1 else rank)  # rank 1 loads rank 0's shard
    out['wrong rank'] = _message(lambda: graph(other))
    out['wrong count'] = _message(lambda: graph(_shard(x, world_size + 1, rank)))
    out['k differs'] = _message(lambda: knn_graph_cosine(
        shard.x, k + (rank == 1), partition=shard.partition, group=group))
    out['seed differs'] = _message(lambda: SemanticGraph(
        k, method='ivf', seed=rank, progress=False, group=group)(shard.clone()))
    out['cells differ'] = _message(lambda: ivf_knn_cosine(
        shard.x, k, cells=10 + rank, generator=torch.Generator().manual_seed(0),
        partition=shard.partition, group=group))
    out['no partition'] = _message(lambda: exact_knn_cosine(shard.x, k, group=group))
    return out


@pytest.mark.slow
@pytest.mark.parametrize('world_size', [2, 3])
def test_sharded_search_is_the_single_process_search(world_size):
    results = run_ranks(_on_ranks, world_size)

    for name, (x, k, method, bounds, layout) in _cases(world_size).items():
        expected = SemanticGraph(k, method=method, progress=False)(
            Data(x=_as_layout(x, layout))).semantic_edge_index
        bounds = bounds or partition(Data(x=x), world_size)[0].partition.bounds
        for rank, out in enumerate(results):
            rows = out[name][0]
            assert bool(((rows >= bounds[rank]) & (rows < bounds[rank + 1])).all()), name
        got = torch.cat([out[name] for out in results], dim=1)
        assert set(map(tuple, got.T.tolist())) == set(map(tuple, expected.T.tolist())), name
        assert torch.equal(got, expected), name

    x = _cases(world_size)['ivf ties'][0]
    for name, options in [('ivf options', IVF_OPTIONS), ('ivf probes', dict(cells=10,
                                                                             probes=3))]:
        expected = ivf_knn_cosine(x, 4, **options, progress=False,
                                  generator=torch.Generator().manual_seed(9))
        assert torch.equal(torch.cat([out[name] for out in results]), expected), name

    x = _gaussian(1001, 16, 0)
    neighbours = torch.cat([out['neighbours'] for out in results])
    assert torch.equal(neighbours, exact_knn_cosine(x, 6, progress=False))
    assert torch.equal(torch.cat([out['old neighbours'] for out in results]), neighbours)
    graph = torch.cat([out['graph'] for out in results], dim=1)
    assert torch.equal(graph, knn_graph_cosine(x, 6, progress=False))
    assert torch.equal(torch.cat([out['old graph'] for out in results], dim=1), graph)

    # Rank r sends every block but rank r + 1's once: (N - n_{r+1}) * F * 8
    # bytes, plus the few integers of the checks and of the block sizes.
    bounds = partition(Data(x=x), world_size)[0].partition.bounds
    for rank, out in enumerate(results):
        after = (rank + 1) % world_size
        ring = (1001 - (bounds[after + 1] - bounds[after])) * 16 * 8
        assert ring <= out['ring bytes'] <= ring + 1024

    for rank, out in enumerate(results):
        if rank == 1:
            assert "'data.x' contains NaN" in out['nan']
            assert "is part 0 of" in out['wrong rank'] and 'rank 1' in out['wrong rank']
        else:
            assert 'SemanticGraph failed its checks on rank(s) [1]' in out['nan']
            assert 'SemanticGraph failed its checks on rank(s) [1]' in out['wrong rank']
        assert f'is part {rank} of {world_size + 1}' in out['wrong count']
        assert "'k' must be the same on every rank" in out['k differs']
        assert "the state of 'generator' must be the same" in out['seed differs']
        assert "'cells' must be the same on every rank" in out['cells differ']
        assert "'partition' is missing" in out['no partition']


def test_rejects_a_group_without_a_process_group():
    with pytest.raises(ValueError, match='initialised process group'):
        SemanticGraph(3, group=object())


def _node_id_repeated_across_ranks(rank, world_size):
    x = ties(60, 2)
    part = RowPartition.even(60, world_size).of_rank(rank)
    local = torch.arange(part.num_local)  # distinct on each rank, not over the ranks
    return exact_knn_cosine(x[part.start:part.end], 3, progress=False, partition=part,
                            group=dist.group.WORLD, node_id=local)


@pytest.mark.slow
@pytest.mark.parametrize('world_size', [2, 3])
def test_node_id_repeated_across_ranks_is_refused_on_every_rank(world_size):
    # Before: each rank checked its own node_id only, and shard-local indices broke
    # the ties between different nodes arbitrarily (most rows' neighbours changed).
    errors = run_ranks(_node_id_repeated_across_ranks, world_size, expect_errors=True,
                       timeout=120.0)
    assert all(isinstance(e, str) and "'node_id' must hold each index in [0, 59] once"
               in e for e in errors), errors


def _node_id_with_equal_sums(rank, world_size):
    # Rank 1 repeats 1, 5, 6 and rank 0 misses 2, 3, 7: the plain sums and the sums of
    # squares of the indices are those of a permutation (12 and 62 either way).
    ids = [torch.tensor([i for i in range(40) if i not in (2, 3, 7)]), torch.tensor([1, 5, 6])]
    part = RowPartition((0, 37, 40), rank)
    return ivf_knn_cosine(ties(40, 1)[part.start:part.end], 3, cells=4, progress=False,
                          partition=part, group=dist.group.WORLD, node_id=ids[rank],
                          generator=torch.Generator().manual_seed(0))


@pytest.mark.slow
def test_node_id_that_repeats_some_and_misses_others_is_refused():
    # Before (sums and sums of squares compared): accepted, and IVF's lookup of the
    # drawn rows added both holders' indices (an IndexError on rank 1).
    errors = run_ranks(_node_id_with_equal_sums, 2, expect_errors=True, timeout=120.0)
    assert all(isinstance(e, str) and "'node_id' must hold each index in [0, 39] once"
               in e for e in errors), errors
