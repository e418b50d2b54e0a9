"""partition(method='metis') through pymetis: every node in one part, parts
within METIS's balance, an edge cut far below contiguous blocks on a graph
whose communities are shuffled (counted here from the edges), the same parts
on every call, the graph METIS reads symmetric without self loops, the error
that names the extra; and on 2 gloo ranks a product and the eigenpairs of the
operator on METIS shards equal to one process's (also with the halo exchanged
in column chunks)."""
import sys

import pytest
import torch
import torch.distributed as dist

from tests.distributed.launch import requires_gloo, run_ranks
from torch_geometric_regcn.distributed import partition
from torch_geometric_regcn.distributed.partition import metis_graph

pymetis = pytest.importorskip('pymetis')  # the 'metis' extra

NODES, COMMUNITIES = 600, 6


def _shuffled_communities(num_nodes=NODES, communities=COMMUNITIES, degree=8, inside=0.95,
                          seed=0):
    """A planted partition: each node draws `degree` neighbours, a share `inside` in its own
    community; node order then permuted, so contiguous blocks mix every community."""
    gen = torch.Generator().manual_seed(seed)
    community = torch.arange(num_nodes) % communities
    members = [torch.nonzero(community == c).flatten() for c in range(communities)]
    src = torch.arange(num_nodes).repeat_interleave(degree)
    same = torch.rand(src.numel(), generator=gen) < inside
    pick = torch.randint(0, num_nodes // communities, (src.numel(),), generator=gen)
    own = torch.stack(members)[community[src], pick]
    dst = torch.where(same, own, torch.randint(0, num_nodes, (src.numel(),), generator=gen))
    perm = torch.randperm(num_nodes, generator=gen)  # node i becomes perm[i]
    edge_index = perm[torch.stack([src, dst])]
    from torch_geometric.data import Data
    return Data(edge_index=edge_index, num_nodes=num_nodes, x=torch.randn(num_nodes, 3,
                                                                           generator=gen))


def _part_of_each_node(shards, num_nodes):
    part = torch.full((num_nodes,), -1)
    for p, shard in enumerate(shards):
        assert bool((part[shard.node_id] == -1).all())  # no node in two parts
        part[shard.node_id] = p
    return part


def _cut(edge_index, part):
    """Undirected edges (self loops and repeats dropped) whose ends lie in different parts."""
    a, b = edge_index.min(0).values, edge_index.max(0).values
    pairs = {(i, j) for i, j in zip(a.tolist(), b.tolist()) if i != j}
    return sum(part[i] != part[j] for i, j in pairs)


@pytest.mark.parametrize('num_parts', [2, 3, 4])
def test_metis_parts_hold_every_node_once_balanced_and_cut_few_edges(num_parts):
    data = _shuffled_communities()
    shards = partition(data, num_parts, method='metis')
    part = _part_of_each_node(shards, NODES)
    assert bool((part >= 0).all())  # every node in exactly one part
    sizes = torch.bincount(part, minlength=num_parts)
    # METIS's k-way default allows parts up to 1.03 N / P (ufactor 30)
    assert int(sizes.max()) <= 1.03 * NODES / num_parts + 1, sizes
    bounds = shards[0].partition.bounds
    assert list(bounds) == [0, *sizes.cumsum(0).tolist()]
    # each shard's rows are its part's nodes, renumbered into one block
    for p, shard in enumerate(shards):
        assert shard.partition.rank == p and shard.num_nodes == int(sizes[p])
        assert torch.equal(shard.x, data.x[shard.node_id])
    metis = _cut(data.edge_index, part.tolist())
    contiguous = _cut(data.edge_index, (torch.arange(NODES) * num_parts // NODES).tolist())
    # About 5 % of the edges leave their community, and METIS keeps communities whole:
    # contiguous blocks of the shuffled order cut (1 - 1/P) of all edges, ~50-75 % here.
    assert metis < 0.25 * contiguous, (metis, contiguous)


def test_metis_gives_the_same_parts_on_every_call():
    data = _shuffled_communities(seed=1)
    first = [s.node_id for s in partition(data, 3, method='metis')]
    second = [s.node_id for s in partition(data.clone(), 3, method='metis')]
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_metis_reads_the_symmetric_graph_without_self_loops_or_repeats():
    edge_index = torch.tensor([[0, 0, 1, 2, 2, 3, 3, 0], [1, 1, 2, 2, 0, 3, 1, 0]])
    rowptr, col = metis_graph(edge_index, 5)
    dense = torch.zeros(5, 5, dtype=torch.long)
    rows = torch.arange(5).repeat_interleave(rowptr.diff())
    dense[rows, col] += 1
    expected = torch.zeros(5, 5, dtype=torch.long)
    for i, j in edge_index.T.tolist():
        if i != j:
            expected[i, j] = expected[j, i] = 1
    assert torch.equal(dense, expected)  # each pair once, both ways; node 4 isolated


def test_metis_partitions_the_semantic_graph_too():
    data = _shuffled_communities(seed=2)
    semantic = data.edge_index
    data.edge_index = torch.randint(0, NODES, (2, 50), generator=torch.Generator().manual_seed(0))
    data.semantic_edge_index = semantic  # the communities are in the semantic graph only
    part = _part_of_each_node(partition(data, 2, method='metis'), NODES)
    contiguous = torch.arange(NODES) * 2 // NODES
    assert _cut(semantic, part.tolist()) < 0.25 * _cut(semantic, contiguous.tolist())


def test_metis_names_the_extra_when_no_backend_is_installed(monkeypatch):
    import torch_geometric.typing
    monkeypatch.setattr(torch_geometric.typing, 'WITH_METIS', False)
    monkeypatch.setitem(sys.modules, 'pymetis', None)  # import pymetis raises ImportError
    with pytest.raises(ImportError, match=r'pip install torch_geometric_regcn\[metis\]'):
        partition(_shuffled_communities(), 2, method='metis')


def _operator_on_metis_shards(rank, world_size):
    from torch_geometric_regcn.linalg import extreme_eigenpairs
    from torch_geometric_regcn.regularizers import GraphOperators, tsgcn_adjacency
    group = dist.group.WORLD
    data = _shuffled_communities()
    shard = partition(data, world_size, method='metis')[rank]
    graph = GraphOperators(NODES, shard.edge_index, None, torch.float64,
                           partition=shard.partition, group=group)
    operator = tsgcn_adjacency(graph, 1.0, 0.0)
    chunked = tsgcn_adjacency(GraphOperators(NODES, shard.edge_index, None, torch.float64,
                                             partition=shard.partition, group=group), 1.0, 0.0)
    chunked.halo_budget = 3 * chunked.max_halo * 8  # 3 float64 columns per exchange
    block = torch.randn(NODES, 7, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(3))[shard.node_id]
    values, vectors, *_ = extreme_eigenpairs(
        operator, 6, which='LA', tol=1e-9, generator=torch.Generator().manual_seed(0))
    product = operator @ block
    unkept = operator._buffer is None  # outside reusing_buffer nothing is kept
    into = {name: torch.full_like(block, float('nan')) for name in ('whole', 'chunked')}
    tracked = block.clone().requires_grad_()
    with operator.reusing_buffer(), chunked.reusing_buffer():
        again = operator @ block
        kept = operator._buffer  # the halo exchange's buffer, 7 columns wide
        returned = {'whole': operator.addmm(block, block, beta=0.5, alpha=-2.0,
                                            out=into['whole']),
                    'chunked': chunked.addmm(block, block, beta=0.5, alpha=-2.0,
                                             out=into['chunked'])}
        buffer_kept = operator._buffer is kept
        buffer_size = (kept.numel(), operator.plan.buffer_size(block))
        # Under autograd the extended block may be saved for the backward: never the buffer.
        own = operator._extended(tracked).data_ptr() != kept.data_ptr()
        with_grad = operator @ tracked
        with torch.inference_mode():  # a wider buffer, made here, is replaced outside it
            operator @ torch.cat([block, block], dim=1)
        after_inference = operator @ block[:, :2].contiguous()
    # addmm(out=) while a gradient is recorded: a new, differentiable result instead.
    graded = operator.addmm(block, tracked, beta=0.5, alpha=-2.0, out=torch.empty_like(block))
    with_grad.sum().backward()
    return {'node_id': shard.node_id, 'product': product, 'again': again,
            'after_inference': after_inference, 'graded': graded.requires_grad,
            'chunked': chunked @ block, 'columns': chunked.chunk_columns(block),
            'addmm': chunked.addmm(block, block, beta=0.5, alpha=-2.0),
            'into': into, 'returned_into': all(returned[k] is into[k] for k in into),
            'buffer_kept': buffer_kept and unkept and operator._buffer is None, 'own': own,
            'buffer_size': buffer_size,
            'extended': (operator.plan.extended(block), operator.plan.extended(
                block, torch.full((operator.plan.buffer_size(block),), float('nan'),
                                  dtype=block.dtype))),
            'exchange': operator.plan.exchange(block),
            'with_grad': with_grad.detach(), 'grad': tracked.grad,
            'local': operator.local.to_dense(),
            'halo': operator.plan.halo.numel(), 'values': values, 'vectors': vectors}


@pytest.mark.slow
@requires_gloo
def test_operator_on_metis_shards_matches_one_process():
    from torch_geometric_regcn.linalg import extreme_eigenpairs
    from torch_geometric_regcn.regularizers import GraphOperators, tsgcn_adjacency
    results = run_ranks(_operator_on_metis_shards, 2, timeout=180.0)
    data = _shuffled_communities()
    reference = tsgcn_adjacency(GraphOperators(NODES, data.edge_index, None, torch.float64),
                                1.0, 0.0)
    block = torch.randn(NODES, 7, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(3))
    expected = reference @ block
    for r in results:
        rows = r['node_id']
        # The same sums in another order: entries of S <= 1, rows of ~20 terms, so the
        # products differ by a few eps (2e-16); 1e-14 leaves room, a wrong row errs by O(0.1).
        assert float((r['product'] - expected[rows]).abs().max()) < 1e-14
        assert r['columns'] == 3  # the budget splits the 7 columns into 3 + 3 + 1
        assert float((r['chunked'] - r['product']).abs().max()) < 1e-14
        assert float((r['addmm'] - (0.5 * block[rows] - 2.0 * expected[rows])).abs().max()) \
            < 1e-13
        # addmm(out=): the result written into the caller's block, whole or chunked.
        assert r['returned_into']
        for into in r['into'].values():
            assert float((into - (0.5 * block[rows] - 2.0 * expected[rows])).abs().max()) \
                < 1e-13
        # Inside reusing_buffer the halo exchange's buffer outlives the products (the
        # next ones of as many columns reuse it) and goes at the end; the same rows and
        # the same product (bit for bit) with or without it.
        assert r['buffer_kept'] and r['buffer_size'][0] == r['buffer_size'][1]
        assert r['own'] and torch.equal(r['again'], r['product']) and r['graded']
        assert float((r['after_inference'] - expected[rows][:, :2]).abs().max()) < 1e-14
        plain, buffered = r['extended']
        assert torch.equal(plain, buffered) and plain.size(0) == len(rows) + r['halo']
        assert torch.equal(r['exchange'], plain[len(rows):])
        # Under autograd (a fresh result that backward may keep): the same product, and
        # the gradient of its sum reaches own rows only (the halo is fetched detached):
        # the column sums of the local block's own columns.
        assert torch.equal(r['with_grad'], r['product'])
        # Each entry sums at most d entries of S (d the most in a column), both ways
        # rounded to within d eps of the sum of their magnitudes.
        own_columns = r['local'][:, :len(rows)]
        d = int((own_columns != 0).sum(0).max())
        bound = 2 * d * torch.finfo(torch.float64).eps * own_columns.abs().sum(0)
        assert bool(((r['grad'] - own_columns.sum(0)[:, None]).abs() <= bound[:, None]).all())
        assert r['halo'] < 0.5 * len(rows)  # contiguous blocks: nearly every remote node
    values, vectors, *_ = extreme_eigenpairs(reference, 6, which='LA', tol=1e-9,
                                         generator=torch.Generator().manual_seed(0))
    assert torch.allclose(results[0]['values'], values, atol=1e-8, rtol=0)  # 10 x tol
    sharded = torch.empty_like(vectors)
    for r in results:
        sharded[r['node_id']] = r['vectors']
    # the same invariant subspace: sin of the largest principal angle
    residual = sharded - vectors @ (vectors.T @ sharded)
    assert float(torch.linalg.matrix_norm(residual, ord=2)) < 1e-4


def _edge_set(edge_index):
    return set(map(tuple, edge_index.T.tolist()))


def _semantic_graph_on_metis_shards(rank, world_size):
    from tests.knn.test_exact import ties
    from torch_geometric_regcn import LowRankInverse, SemanticGraph
    from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator
    group = dist.group.WORLD
    data = _shuffled_communities()
    data.x = ties(NODES, 6)  # similarities tie exactly: the numbering decides them
    shard = partition(data, world_size, method='metis')[rank]
    semantic = SemanticGraph(5, method='exact', progress=False, group=group)(shard.clone())
    ivf = SemanticGraph(5, method='ivf', progress=False, group=group)(shard.clone())
    # The operator builds its own kNN graph from x (GraphOperators on the shard).
    operator = tsgcn_operator(shard, 1.0, 1.0, k=5, group=group)
    block = torch.randn(NODES, 3, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(3))[shard.node_id]
    factors = LowRankInverse(1.0, 1.0, rank=6, k=5, progress=False, group=group)(shard.clone())
    return {'node_id': shard.node_id, 'semantic': semantic.semantic_edge_index,
            'ivf': ivf.semantic_edge_index, 'product': operator @ block,
            'w': factors.lowrank_w}


@pytest.mark.slow
@requires_gloo
def test_semantic_graph_on_metis_shards_is_that_of_one_process_on_the_original_numbering():
    # METIS renumbers the nodes; the kNN searches break their ties by each shard's
    # node_id (IVF also draws its random rows by it), so the graph (and tsGCN's
    # operator built from it) is the single process's on the original numbering, not
    # on the shards'. Before, ties went to the lower new index: the graph of one
    # process on the METIS numbering.
    from torch_geometric.data import Data

    from tests.knn.test_exact import ties
    from torch_geometric_regcn import LowRankInverse, SemanticGraph
    from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator
    results = run_ranks(_semantic_graph_on_metis_shards, 2, timeout=180.0)
    data = _shuffled_communities()
    data.x = ties(NODES, 6)
    original = torch.cat([r['node_id'] for r in results])  # new index -> original
    edges = torch.cat([r['semantic'] for r in results], dim=1)
    expected = SemanticGraph(5, method='exact', progress=False)(Data(x=data.x))
    assert _edge_set(original[edges]) == _edge_set(expected.semantic_edge_index)
    renumbered = SemanticGraph(5, method='exact', progress=False)(Data(x=data.x[original]))
    assert _edge_set(original[renumbered.semantic_edge_index]) != _edge_set(
        expected.semantic_edge_index)  # the ties the node_id decides
    # IVF draws its k-means sample and tuning queries by node_id too.
    ivf = torch.cat([r['ivf'] for r in results], dim=1)
    expected = SemanticGraph(5, method='ivf', progress=False)(Data(x=data.x))
    assert _edge_set(original[ivf]) == _edge_set(expected.semantic_edge_index)
    reference = tsgcn_operator(Data(x=data.x, edge_index=data.edge_index), 1.0, 1.0, k=5)
    block = torch.randn(NODES, 3, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(3))
    expected_product = reference @ block
    for r in results:
        # The same sums in another order: entries of S <= 1, rows of ~30 terms (2e-16
        # each); a row of another graph errs by O(0.1).
        assert float((r['product'] - expected_product[r['node_id']]).abs().max()) < 1e-14
    # The factors: the Lanczos start drawn by original index (ShardedMatrix.node_id), so
    # the shards run one process's iteration on the original numbering, sums in another
    # order (measured ~1e-13 on contiguous shards); a start drawn by the shards'
    # numbering agrees to the tolerance only (~1e-7 at tol 1e-4): 1e-10 fails it.
    w = LowRankInverse(1.0, 1.0, rank=6, k=5, progress=False)(Data(
        x=data.x, edge_index=data.edge_index)).lowrank_w
    sharded = torch.empty_like(w)
    for r in results:
        sharded[r['node_id']] = r['w']
    assert float((sharded - w).abs().max()) < 1e-10


def _factors_without_x_on_metis_shards(rank, world_size):
    from torch_geometric_regcn import LowRankInverse
    data = _shuffled_communities()  # (its random draws in float32, as the reference's)
    del data.x
    torch.set_default_dtype(torch.float64)  # no x: the factors in the default dtype
    shard = partition(data, world_size, method='metis')[rank]
    out = LowRankInverse(1.0, 0.0, rank=6, progress=False, group=dist.group.WORLD)(shard)
    return {'node_id': shard.node_id, 'w': out.lowrank_w}


@pytest.mark.slow
@requires_gloo
def test_factors_of_a_graph_without_x_on_metis_shards_are_one_process_s():
    # Without data.x the Lanczos start is still drawn by the shard's node_id: one
    # process's factors on the original numbering, sums in another order (float64);
    # drawn by the shards' numbering they are 0.13 off.
    from torch_geometric_regcn import LowRankInverse
    results = run_ranks(_factors_without_x_on_metis_shards, 2, timeout=180.0)
    data = _shuffled_communities()
    del data.x
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        w = LowRankInverse(1.0, 0.0, rank=6, progress=False)(data).lowrank_w
    finally:
        torch.set_default_dtype(default)
    sharded = torch.empty_like(w)
    for r in results:
        sharded[r['node_id']] = r['w']
    assert float((sharded - w).abs().max()) < 1e-10
