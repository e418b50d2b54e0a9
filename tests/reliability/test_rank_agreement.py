r"""Ranks that disagree (issue 27, class 2): every public entry point with a
process ``group`` makes the ranks agree, before its first collective, on
every argument and shape its collectives depend on, and on the outcome of
each rank's own checks. A disagreement is a :class:`ValueError` on every
rank that names the argument and each rank's value, never a hang, gloo's
abort or a silently wrong result; ranks that agree still compute what one
process computes.

Each batch of cases spawns two gloo ranks once; every case runs on a fresh
process group whose ``timeout`` is :data:`CASE_TIMEOUT`, so a regression
(ranks left in different collectives) fails that case within seconds
instead of hanging the suite. Should a batch die (gloo aborts the process
on mismatched sizes), its cases are rerun one by one, so each case is
judged on its own."""
import datetime
import math
import tempfile
import time
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch_geometric.data import Data

from tests.distributed.launch import requires_gloo, run_ranks
from torch_geometric_regcn import TSGCN, LowRankInverse, SemanticGraph
from torch_geometric_regcn.datasets import contextual_sbm
from torch_geometric_regcn.distributed import RowPartition, global_mean
from torch_geometric_regcn.linalg import (
    ShardedMatrix,
    block_lanczos,
    factors_from_eigenpairs,
    normalized_adjacency,
    woodbury_apply,
    woodbury_core,
)
from torch_geometric_regcn.linalg.eigensolver import extreme_eigenpairs
from torch_geometric_regcn.regularizers import GraphOperators, tsgcn_adjacency
from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator

pytestmark = requires_gloo

N, F_IN, C, R, HIDDEN = 120, 6, 3, 8, 8
EVEN, SKEWED = (0, 60, N), (0, 50, N)  # two row blocks of the same graph
CASE_TIMEOUT = 5.0  # each case's process group: a rank left waiting fails within it
TOL = 1e-10  # of the eigensolver in the agreement case (float64)


def _graph():
    data = contextual_sbm(num_nodes=N, num_classes=C, num_features=F_IN, seed=0)
    data.x = data.x.double()
    data = SemanticGraph(k=4, progress=False)(data)
    gen = torch.Generator().manual_seed(0)
    data.edge_weight = torch.rand(data.edge_index.size(1), generator=gen, dtype=torch.float64)
    data.train_mask = torch.rand(N, generator=gen) < 0.5
    whole = LowRankInverse(1.0, 0.0, R, progress=False)(data.clone())
    data.w, data.v = whole.lowrank_w, whole.lowrank_v
    return data


@pytest.fixture(scope='module')
def graph():
    return _graph()


def _shard(g, rank, bounds=EVEN, keys=('x', 'edge_index')):
    r"""This rank's rows of :obj:`g` under :obj:`bounds`, with the inputs
    :obj:`keys` (edges with their first index among its rows)."""
    start, end = bounds[rank], bounds[rank + 1]
    shard = Data(partition=RowPartition(bounds, rank))
    if 'x' in keys:
        shard.x = g.x[start:end]
    for name in ('edge_index', 'semantic_edge_index'):
        if name in keys:
            mine = (g[name][0] >= start) & (g[name][0] < end)
            shard[name] = g[name][:, mine]
            if name == 'edge_index' and 'edge_weight' in keys:
                shard.edge_weight = g.edge_weight[mine]
    shard.num_nodes = end - start
    return shard


def _rows(g, rank, *tensors, bounds=EVEN):
    return [t[bounds[rank]:bounds[rank + 1]] for t in tensors]


# -- the disagreements: rank 1 passes something else than rank 0 ---------------------


def _lowrank(process, group, g, bounds=EVEN, keys=('x', 'edge_index'), **arguments):
    arguments = {'alpha': 1.0, 'beta': 0.0, 'rank': R, 'progress': False, **arguments}
    return LowRankInverse(**arguments, group=group)(_shard(g, process, bounds, keys)).lowrank_w


def _lowrank_argument(name, mine, theirs):
    def case(rank, group, g):
        return _lowrank(rank, group, g, **{name: mine if rank == 0 else theirs})
    return case


def _tsgcn(rank, group, g, width=R, hidden=HIDDEN, dtype=torch.float64, learned=False,
           rows=0, scale=1.0):
    x, w, v = _rows(g, rank, g.x, g.w, g.v)
    torch.manual_seed(0)
    model = TSGCN(F_IN, hidden, C, scale=scale, group=group).to(dtype)
    w, v = w[:w.size(0) - rows, :width], v[:v.size(0) - rows, :width]
    if learned:
        w, v = w.clone().requires_grad_(), v.clone().requires_grad_()
    return model(x.to(dtype), w.to(dtype), v.to(dtype))


def _on_rank_1(rank, value, other):
    return other if rank == 1 else value


def _operator(rank, group, g, bounds=EVEN):
    return tsgcn_operator(_shard(g, rank, bounds), 1.0, 0.0, group=group)


def _overflow_on_rank_1(rank, group, g):
    # Finite float32 weights whose sum at a node is infinite: on edges between
    # rank 1's rows only (an edge to rank 0's rows would overflow there too).
    shard = _shard(g, rank, keys=('edge_index', 'edge_weight'))
    weight = shard.edge_weight.float()
    if rank == 1:
        weight = weight.masked_fill(shard.edge_index[1] >= EVEN[1], 3e38)
    return normalized_adjacency(shard.edge_index, N, weight, partition=RowPartition(EVEN, rank),
                                group=group)


def _nan_on_rank_1(rank, group, g):
    operator = _operator(rank, group, g)
    if rank == 1:
        operator.local.values()[0] = float('nan')
    return block_lanczos(operator, R)


def _sharded_matrix(rank, group, g):
    bounds = _on_rank_1(rank, EVEN, SKEWED)
    start, end = bounds[rank], bounds[rank + 1]
    edges = torch.stack([torch.arange(start, end)] * 2)
    return ShardedMatrix(edges, torch.ones(end - start, dtype=torch.float64),
                         RowPartition(bounds, rank), group).dense_rows()


def _graph_operators(rank, group, g, **arguments):
    shard = _shard(g, rank, keys=('x', 'edge_index', 'semantic_edge_index'))
    return GraphOperators(N, shard.edge_index, None, semantic_edge_index=shard.semantic_edge_index,
                          partition=shard.partition, group=group, **arguments)


def _cache_on_rank_1(rank, group, g):
    with tempfile.TemporaryDirectory() as root:
        return _lowrank(rank, group, g, cache_dir=_on_rank_1(rank, None, root))


def _global_mean(rank, group, g, dtype=torch.float64, shape=(), grad=False):
    return global_mean(torch.ones(shape, dtype=dtype, requires_grad=grad), 3, group)


def _weight_beyond_float32_on_rank_1(rank, group, g):
    # A float64 weight that a float32 computation cannot hold: it was refused
    # on its rank alone, before the agreement, and the other waited.
    shard = _shard(g, rank, keys=('x', 'edge_index', 'edge_weight'))
    shard.x = shard.x.float()
    if rank == 1:
        shard.edge_weight = shard.edge_weight.clone().index_fill_(0, torch.tensor([0]), 1e300)
    return LowRankInverse(1.0, 0.0, R, progress=False, group=group)(shard).lowrank_w


def _woodbury(rank, group, g, **arguments):
    x, w, v = _rows(g, rank, g.x, g.w, g.v)
    return woodbury_apply(x, w, v, woodbury_core(w, v, group=group), group, **arguments)


#: Every rank raises the same ValueError, holding each of these strings.
DISAGREE = {
    # the four of the issue
    'LowRankInverse alpha': (_lowrank_argument('alpha', 1.0, 3.0),
                             ["'alpha' must be the same on every rank", '1.0 on rank 0',
                              '3.0 on rank 1']),
    'LowRankInverse rank': (_lowrank_argument('rank', R, 6),
                            ["'rank' must be the same on every rank", f'{R} on rank 0',
                             '6 on rank 1']),
    'TSGCN factor width': (lambda rank, group, g: _tsgcn(rank, group, g,
                                                         _on_rank_1(rank, R, R - 1)),
                           ["the width of 'w' and 'v' (the rank r of the factors) must be "
                            "the same on every rank", f'({R}, {R}) on rank 0',
                            f'({R - 1}, {R - 1}) on rank 1']),
    'LowRankInverse row blocks': (lambda rank, group, g: _lowrank(
        rank, group, g, bounds=_on_rank_1(rank, EVEN, SKEWED)),
        ["the row blocks of 'data.partition' must be the same on every rank",
         f'{EVEN} on rank 0', f'{SKEWED} on rank 1']),
    # the other arguments that decide LowRankInverse's collectives
    'LowRankInverse beta': (_lowrank_argument('beta', 0.0, 0.5), ["'beta'", '0.5 on rank 1']),
    'LowRankInverse tol': (_lowrank_argument('tol', 1e-4, 1e-6), ["'tol'", '1e-06 on rank 1']),
    'LowRankInverse max_iter': (_lowrank_argument('max_iter', 100, 50),
                                ["'max_iter'", '50 on rank 1']),
    'LowRankInverse which': (_lowrank_argument('which', 'LA', 'LM'),
                             ["'which'", "'LM' on rank 1"]),
    'LowRankInverse seed': (_lowrank_argument('seed', 0, 1), ["'seed'", '1 on rank 1']),
    'LowRankInverse k': (_lowrank_argument('k', 10, 5), ["'k'", '5 on rank 1']),
    'LowRankInverse cache_dir on one rank': (
        _cache_on_rank_1,
        ["whether 'cache_dir' is given must be the same", 'False on rank 0', 'True on rank 1']),
    'LowRankInverse edge_weight on one rank': (
        lambda rank, group, g: _lowrank(rank, group, g, keys=_on_rank_1(
            rank, ('x', 'edge_index', 'edge_weight'), ('x', 'edge_index'))),
        ["whether 'data.edge_weight' is given", 'True on rank 0', 'False on rank 1']),
    'LowRankInverse semantic graph on one rank': (
        lambda rank, group, g: _lowrank(rank, group, g, beta=0.2, keys=_on_rank_1(
            rank, ('x', 'edge_index', 'semantic_edge_index'), ('x', 'edge_index'))),
        ["whether 'data.semantic_edge_index' is given", 'False on rank 1']),
    'LowRankInverse dtype of x': (
        lambda rank, group, g: LowRankInverse(1.0, 0.0, R, progress=False, group=group)(
            _shard(g.clone().update({'x': _on_rank_1(rank, g.x, g.x.float())}), rank)),
        ["the dtype and device of 'data.x'", "(torch.float64, 'cpu') on rank 0",
         "(torch.float32, 'cpu') on rank 1"]),
    # the layers
    'TSGCN hidden channels': (lambda rank, group, g: _tsgcn(
        rank, group, g, hidden=_on_rank_1(rank, HIDDEN, HIDDEN - 2)),
        ["'out_channels' must be the same on every rank", f'{HIDDEN} on rank 0',
         f'{HIDDEN - 2} on rank 1']),
    'TSGCN scale': (lambda rank, group, g: _tsgcn(
        rank, group, g, scale=_on_rank_1(rank, 1.0, 2.0)),
        ["'scale' must be the same on every rank", '1.0 on rank 0', '2.0 on rank 1']),
    'TSGCN dtype': (lambda rank, group, g: _tsgcn(
        rank, group, g, dtype=_on_rank_1(rank, torch.float64, torch.float32)),
        ["the dtypes of 'w' and 'v'", 'torch.float32, torch.float32) on rank 1']),
    'TSGCN learned factors on one rank': (lambda rank, group, g: _tsgcn(
        rank, group, g, learned=rank == 1),
        ["whether 'w' or 'v' require gradients", 'True on rank 1']),
    'woodbury_apply columns of x': (lambda rank, group, g: woodbury_apply(
        torch.ones(60, _on_rank_1(rank, 3, 4), dtype=torch.float64),
        *_rows(g, rank, g.w, g.v), group=group),
        ["the number of columns of 'x'", '3 on rank 0', '4 on rank 1']),
    'woodbury_core width': (lambda rank, group, g: woodbury_core(
        *(t[:, :_on_rank_1(rank, R, R - 1)] for t in _rows(g, rank, g.w, g.v)), group=group),
        ["the width of 'w' and 'v'", f'({R - 1}, {R - 1}) on rank 1']),
    # the graph operators and the eigensolver on shards
    'normalized_adjacency self_loops': (lambda rank, group, g: normalized_adjacency(
        _shard(g, rank).edge_index, N, partition=RowPartition(EVEN, rank), group=group,
        self_loops=rank == 0), ["'self_loops'", 'True on rank 0', 'False on rank 1']),
    'GraphOperators dtype': (lambda rank, group, g: _graph_operators(
        rank, group, g, dtype=_on_rank_1(rank, torch.float64, torch.float32)),
        ["'dtype' must be the same", 'torch.float32 on rank 1']),
    'tsgcn_adjacency alpha zero on one rank': (lambda rank, group, g: tsgcn_adjacency(
        _graph_operators(rank, group, g), _on_rank_1(rank, 1.0, 0.0), 0.2),
        ["'alpha'", '0.0 on rank 1']),
    'ShardedMatrix row blocks': (_sharded_matrix,
                                 ["the row blocks of 'partition'", f'{SKEWED} on rank 1']),
    'block_lanczos k': (lambda rank, group, g: block_lanczos(
        _operator(rank, group, g), _on_rank_1(rank, R, R - 2)),
        ["'k' must be the same", f'{R - 2} on rank 1']),
    # a summary skips the all-reduce: on one rank only, the others' was paired with
    # that rank's next collective (a result 249 off, then a timeout)
    'woodbury_apply summary on one rank': (lambda rank, group, g: _woodbury(
        rank, group, g, summary=_on_rank_1(rank, None, g.v.T @ g.x)),
        ["whether 'summary' is given", 'True on rank 1']),
    'global_mean dtype': (lambda rank, group, g: _global_mean(
        rank, group, g, dtype=_on_rank_1(rank, torch.float64, torch.float32)),
        ["the dtype and device type of 'local_sum'", "(torch.float32, 'cpu') on rank 1"]),
    'global_mean shape': (lambda rank, group, g: _global_mean(
        rank, group, g, shape=_on_rank_1(rank, (), (2,))),
        ["the shape of 'local_sum'", '(2,) on rank 1']),
    # a constant zero on a rank without labels: it would skip the backward all-reduces
    'global_mean gradient': (lambda rank, group, g: _global_mean(
        rank, group, g, grad=_on_rank_1(rank, True, False)),
        ["whether 'local_sum' records a gradient", 'False on rank 1']),
}

#: Rank 1's own check fails before a collective: it raises its error (holding
#: the first string), rank 0 a ValueError naming rank 1 (holding the second).
ONE_RANK_FAILS = {
    'TSGCN rows of w on one rank': (lambda rank, group, g: _tsgcn(
        rank, group, g, rows=_on_rank_1(rank, 0, 1)),
        ["'w' and 'v' have 59 rows but 'x' has 60", 'TSGCNConv failed its checks on rank(s) [1]']),
    'normalized_adjacency overflow on one rank': (
        _overflow_on_rank_1, ["'edge_weight' overflows torch.float32",
                              'normalized_adjacency failed its checks on rank(s) [1]']),
    'block_lanczos NaN on one rank': (_nan_on_rank_1,
                                      ["'operator' contains NaN",
                                       'block_lanczos failed its checks on rank(s) [1]']),
    'extreme_eigenpairs method': (lambda rank, group, g: extreme_eigenpairs(
        _operator(rank, group, g), R, method=_on_rank_1(rank, 'lanczos', 'power')),
        ["needs method='lanczos'", 'extreme_eigenpairs failed its checks on rank(s) [1]']),
    'LowRankInverse weight beyond float32 on one rank': (
        _weight_beyond_float32_on_rank_1,
        ["'edge_weight' holds finite torch.float64 weights beyond the range of the layer's "
         "torch.float32", 'normalized_adjacency failed its checks on rank(s) [1]']),
    'normalized_adjacency group without partition on one rank': (
        lambda rank, group, g: normalized_adjacency(
            _shard(g, rank).edge_index, N, group=group,
            partition=_on_rank_1(rank, RowPartition(EVEN, rank), None)),
        ["'group' needs the 'partition'", 'normalized_adjacency failed its checks on rank(s) [1]']),
    'woodbury_apply batch_size without batch on one rank': (
        lambda rank, group, g: _woodbury(rank, group, g, batch_size=_on_rank_1(rank, None, 2)),
        ["'batch_size' was given without 'batch'",
         'woodbury_apply failed its checks on rank(s) [1]']),
    'woodbury_core batch with a group on one rank': (
        lambda rank, group, g: woodbury_core(*_rows(g, rank, g.w, g.v), group=group, batch=(
            _on_rank_1(rank, None, torch.zeros(N // 2, dtype=torch.long)))),
        ["cannot be combined with 'group'", 'woodbury_core failed its checks on rank(s) [1]']),
}



def _run_cases(rank, world_size, names, g):
    cases = {**{name: case for name, (case, _) in DISAGREE.items()},
             **{name: case for name, (case, _) in ONE_RANK_FAILS.items()},
             'agreement': _agreeing}
    out = {}
    for name in names:  # each on its own group: a stuck case cannot block the next
        group = dist.new_group(backend='gloo',
                               timeout=datetime.timedelta(seconds=CASE_TIMEOUT))
        start = time.monotonic()
        try:
            value = cases[name](rank, group, g)  # a finished disagreement: its type only
            out[name] = ('finished', value if name == 'agreement' else type(value).__name__,
                         time.monotonic() - start)
        except Exception as error:  # noqa: BLE001 - every rank's error is the result
            out[name] = (type(error).__name__, str(error), time.monotonic() - start)
    return out


@pytest.fixture(scope='module')
def outcomes(graph):
    names = [*DISAGREE, *ONE_RANK_FAILS, 'agreement']
    try:
        results = run_ranks(_run_cases, 2, names, graph, timeout=120.0, pg_timeout=60.0)
        return {name: [out[name] for out in results] for name in names}
    except AssertionError:  # a rank died (gloo's abort) or hung: judge each case alone
        outcomes = {}
        for name in names:
            try:
                results = run_ranks(_run_cases, 2, [name], graph, timeout=60.0,
                                    pg_timeout=30.0)
                outcomes[name] = [out[name] for out in results]
            except AssertionError as failure:
                outcomes[name] = [('died or hung', str(failure)[:300], 0.0)] * 2
        return outcomes


@pytest.mark.slow
@pytest.mark.parametrize('name', list(DISAGREE))
def test_ranks_that_disagree_raise_one_named_error(outcomes, name):
    expected = DISAGREE[name][1]
    results = outcomes[name]
    for kind, message, seconds in results:
        assert kind == 'ValueError', (kind, message)
        for needle in expected:
            assert needle in message, (needle, message)
        assert 'every rank' in message  # the fix
        assert seconds < CASE_TIMEOUT  # raised before any collective, not after a timeout
    assert results[0][1] == results[1][1]  # the same error on every rank


@pytest.mark.slow
@pytest.mark.parametrize('name', list(ONE_RANK_FAILS))
def test_a_check_failing_on_one_rank_stops_every_rank(outcomes, name):
    own, named = ONE_RANK_FAILS[name][1]
    (kind0, message0, seconds0), (kind1, message1, seconds1) = outcomes[name]
    assert kind1 == 'ValueError' and own in message1, (kind1, message1)
    assert kind0 == 'ValueError' and named in message0, (kind0, message0)
    assert max(seconds0, seconds1) < CASE_TIMEOUT


# -- ranks that agree: what one process computes --------------------------------------


def _agreeing(rank, group, g):
    out = {}
    shard = _shard(g, rank, keys=('x', 'edge_index', 'edge_weight'))
    shard = LowRankInverse(1.0, 0.0, R, tol=TOL, progress=False, group=group)(shard)
    out['w'], out['v'] = shard.lowrank_w, shard.lowrank_v
    x, w, v, y, mask = _rows(g, rank, g.x, g.w, g.v, g.y, g.train_mask)
    torch.manual_seed(0)
    model = TSGCN(F_IN, HIDDEN, C, group=group).double()
    loss = global_mean(F.cross_entropy(model(x, w, v)[mask], y[mask], reduction='sum'),
                       int(mask.sum()), group)
    loss.backward()
    out['loss'] = loss.detach()
    out['grads'] = [p.grad for p in model.parameters()]
    out['state'] = model.state_dict()
    w = w.clone()
    w.data[:, 0] *= 0.5  # new factors of the same form, seen through the fingerprint
    with torch.no_grad():
        out['edited'] = model(x, w, v)
        # a new model with the same weights on rank 1 alone: its core is missing there
        # only, and every rank factorises the core again (it is all-reduced)
        if rank == 1:
            model = TSGCN(F_IN, HIDDEN, C, group=group).double()
            model.load_state_dict(out['state'])
        out['again'] = model(x, w, v)
    out['apply'] = woodbury_apply(x, w, v, group=group)
    # The same numbers as other Python or NumPy types agree (were 'a disagreement':
    # '1' on rank 0, '1.0' on rank 1): alpha=1 and 1.0, k 4 and np.int64(4), ...
    operator = tsgcn_operator(_shard(g, rank, keys=('x', 'edge_index')),
                              *_on_rank_1(rank, (1, 0.5, 4), (1.0, np.float64(0.5), np.int64(4))),
                              seed=_on_rank_1(rank, 0, np.int64(0)), group=group)
    out['operator'] = operator.dense_rows()
    return out


def _dense_eigenvalues(g):
    full = g.clone()
    del full.semantic_edge_index
    values = torch.linalg.eigvalsh(tsgcn_operator(full, 1.0, 0.0).to_dense())
    return values.flip(0)


@pytest.mark.slow
def test_ranks_that_agree_compute_what_one_process_computes(graph, outcomes):
    assert all(kind == 'finished' for kind, _, _ in outcomes['agreement']), \
        outcomes['agreement']
    results = [value for _, value, _ in outcomes['agreement']]
    # LowRankInverse on shards: the R largest eigenvalues of S, -diag(V^T W), against a
    # dense float64 eigendecomposition. A Ritz value with relative residual TOL lies within
    # TOL * ||S||_2 <= TOL of an eigenvalue (||S||_2 <= 1), the dense ones within ~1e-15.
    w, v = (torch.cat([r[key] for r in results]) for key in ('w', 'v'))
    values = -(v * w).sum(dim=0)
    expected = _dense_eigenvalues(graph)[:R]
    torch.testing.assert_close(values.sort(descending=True).values, expected, rtol=0,
                               atol=2 * TOL)
    # TSGCN on the rows of the single-process factors against one process: the same
    # products, V^T X summed in two parts (float64 rounding, ~1e-16 relative per sum).
    torch.manual_seed(0)
    model = TSGCN(F_IN, HIDDEN, C).double()
    out = model(graph.x, graph.w, graph.v)
    mask = graph.train_mask
    loss = F.cross_entropy(out[mask], graph.y[mask])
    loss.backward()
    close = dict(rtol=1e-12, atol=1e-14)
    for r in results:
        torch.testing.assert_close(r['loss'], loss.detach(), **close)
    for p, *grads in zip(model.parameters(), *(r['grads'] for r in results)):
        # each rank's gradient is its share; their mean is the one-process gradient
        torch.testing.assert_close(sum(grads) / len(grads), p.grad, **close)
    # the edited factors, and a core stale on one rank only: every rank used the new core
    w = graph.w.clone()
    w[:, 0] *= 0.5
    with torch.no_grad():
        edited = model(graph.x, w, graph.v)
    applied = woodbury_apply(graph.x, w, graph.v)
    for key, expected in (('edited', edited), ('again', edited), ('apply', applied)):
        torch.testing.assert_close(torch.cat([r[key] for r in results]), expected, **close)
    # S with alpha = 1, beta = 0.5 and k = 4 in one process (its semantic kNN graph built
    # from the features); the rows of the shards: the same sums in another order (~1e-16).
    full = Data(x=graph.x, edge_index=graph.edge_index)  # the shards' inputs, whole
    expected = tsgcn_operator(full, 1.0, 0.5, 4).to_dense()
    torch.testing.assert_close(torch.cat([r['operator'] for r in results]), expected,
                               rtol=0, atol=1e-14)


# -- the helper itself, in one process ------------------------------------------------


def test_without_a_group_only_the_error_is_raised_and_the_share_returned():
    from torch_geometric_regcn.distributed.collectives import agree_arguments, describe
    assert agree_arguments(None, 'f', {"'alpha'": 1.0}, share=[3, 4]) == [[3, 4]]
    with pytest.raises(ValueError, match='mine'):
        agree_arguments(None, 'f', {}, ValueError('mine'))
    # a tensor is described by its shape, dtype and device, never its numbers
    assert describe(torch.zeros(2, 3)) == 'a tensor of shape [2, 3], torch.float32, on cpu'
    assert describe(0.1) == '0.1' and describe(1e-06) == '1e-06'


def test_numbers_are_described_by_value_not_by_type():
    from torch_geometric_regcn.distributed.collectives import describe, real
    # NumPy's numbers as Python's (NumPy 2 writes 'np.int64(4)'), inside tuples too
    assert describe(np.int64(4)) == describe(4) == '4'
    assert describe(np.float64(0.5)) == describe(0.5) == '0.5'
    assert describe(np.float32(0.5)) == '0.5'
    assert describe(np.bool_(True)) == describe(True) == 'True'
    assert describe((np.int64(0), 60, np.int32(120))) == describe((0, 60, 120)) == '(0, 60, 120)'
    assert describe([np.float64(1.5)]) == describe((1.5,)) == '(1.5,)'
    # a tuple and a list of the same numbers agree (row bounds from a config file)
    assert describe([0, 60, 120]) == describe((0, 60, 120))
    assert describe([(0, 1), [2, np.int64(3)]]) == describe(((0, 1), (2, 3)))
    assert describe(2**64 - 1) == '18446744073709551615'  # seeds stay exact integers
    # an integer argument is not a float: k=4 and k=4.0 differ (the latter fails its check)
    assert describe(4) != describe(4.0)
    # a real coefficient is compared by value: alpha=1 and alpha=1.0 agree; booleans,
    # strings and tensors are left to the caller's own check
    assert describe(real(1)) == describe(real(1.0)) == describe(real(np.int64(1))) == '1.0'
    assert real(True) is True and real('1') == '1' and real(None) is None
    assert describe(real(math.nan)) == 'nan'


# -- one verdict on the core's rounding level, an empty shard included ------------------


def _eigen_factors(gap, cast):
    r"""Factors of eigenpairs of 40 nodes whose core has the smallest pivot
    :obj:`gap`; float64, or float64 casts of float32 ones (:obj:`cast`)."""
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(40, 3, dtype=torch.float64, generator=gen))
    lam = torch.tensor([1 - gap, 0.5, -0.3], dtype=torch.float64)
    w, v = factors_from_eigenpairs(lam, u)
    return (w.float().double(), v.float().double()) if cast else (w, v)


def _verdict(w, v, group=None):
    r"""What :func:`woodbury_core` says of these factors: its error, its
    warning, or nothing."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        try:
            woodbury_core(w, v, from_eigenpairs=True, group=group)
        except ValueError as error:
            return 'raises', str(error)
    messages = [str(w.message) for w in caught if 'Woodbury core' in str(w.message)]
    return ('warns', messages[0]) if messages else ('silent', '')


#: gap and cast: float64 factors that float32 would find singular (an empty
#: shard made its rank judge them in float32 and every rank raise), and float32
#: casts whose float32 verdict is a warning (float64's would be silence).
VERDICT_CASES = [(1e-9, False), (1e-4, True)]


def _verdicts_with_an_empty_shard(rank, world_size):
    out = []
    for gap, cast in VERDICT_CASES:
        w, v = _eigen_factors(gap, cast)
        rows = slice(0, 40) if rank == 0 else slice(0, 0)  # rank 1 holds no rows
        out.append(_verdict(w[rows], v[rows], dist.group.WORLD))
    return out


@pytest.mark.slow
def test_an_empty_shard_does_not_change_the_verdict_on_the_core():
    # The rounding level (float32 for float64 casts of float32 factors) is
    # decided once for all ranks, from the ranks that hold rows: an empty
    # shard, trivially a "cast", used to judge float64 factors in float32.
    results = run_ranks(_verdicts_with_an_empty_shard, 2, timeout=120.0, pg_timeout=30.0)
    for (gap, cast), rank0, rank1 in zip(VERDICT_CASES, *results):
        expected = _verdict(*_eigen_factors(gap, cast))  # one process, all rows
        assert expected[0] == ('warns' if cast else 'silent'), expected
        assert rank0 == rank1 == expected
