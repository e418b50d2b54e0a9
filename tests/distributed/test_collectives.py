"""The collectives of utils.distributed on real gloo process groups of 2 and 3
ranks, against what a single process computes from every rank's input."""
import copy
import pickle
import time

import pytest
import torch
import torch.distributed as dist

from tests.distributed.launch import requires_gloo, run_ranks
from torch_geometric_regcn.distributed.collectives import (
    agree,
    all_gather,
    all_reduce,
    all_to_all,
    all_to_all_into,
    broadcast,
    differentiable_all_reduce,
)
from torch_geometric_regcn.distributed.traffic import traffic, traffic_stage

pytestmark = requires_gloo


def _rank_input(rank, rows):
    gen = torch.Generator().manual_seed(rank)
    return torch.randn(rows, 3, dtype=torch.float64, generator=gen)


def _collectives(rank, world_size):
    group = dist.group.WORLD
    out = {}
    x = _rank_input(rank, rank + 1)  # ranks hold different numbers of rows
    with traffic_stage('test'):
        out['reduce'] = all_reduce(x[:1], group)
        out['gather'] = all_gather(x, group)
        chunks = [torch.full((q + rank, 2), float(10 * rank + q)) for q in range(world_size)]
        out['a2a'] = all_to_all(chunks, group)
        before = traffic('test')
        recv = torch.full((sum(rank + q for q in range(world_size)), 2), float('nan'))
        out['a2a_into'] = all_to_all_into(recv, torch.cat(chunks),
                                          [rank + q for q in range(world_size)],
                                          [c.size(0) for c in chunks], group)
        out['a2a_into_is_out'] = out['a2a_into'] is recv
        out['a2a_into_bytes'] = traffic('test') - before
        out['bcast'] = broadcast(x[:1] + rank, group, src=world_size - 1)
    out['bytes'] = traffic('test')
    # gradient through an all-reduce: L = sum_p <c_p, sum_q t_q>, dL/dt_q = sum_p c_p
    t = x[:1].clone().requires_grad_()
    c = torch.full_like(t, float(rank + 1))
    (differentiable_all_reduce(t, group) * c).sum().backward()
    out['grad'] = t.grad
    try:
        agree(ValueError('bad shard') if rank == 1 else None, group, 'the test')
    except ValueError as error:
        out['agree'] = str(error)
    return out


@pytest.mark.slow
@pytest.mark.parametrize('world_size', [2, 3])
def test_collectives_match_a_single_process(world_size):
    results = run_ranks(_collectives, world_size)
    inputs = [_rank_input(r, r + 1) for r in range(world_size)]
    total = sum(x[:1] for x in inputs)
    for rank, out in enumerate(results):
        # the order of the sum is gloo's: equal to rounding, and the same bits on every rank
        torch.testing.assert_close(out['reduce'], total, rtol=1e-15, atol=1e-15)
        assert torch.equal(out['reduce'], results[0]['reduce'])
        assert all(torch.equal(a, b) for a, b in zip(out['gather'], inputs))
        for q, part in enumerate(out['a2a']):  # what rank q sent here
            assert torch.equal(part, torch.full((rank + q, 2), float(10 * q + rank)))
        # The same exchange on the caller's buffers: the same rows, in place, and the
        # bytes sent to the other ranks (q + rank rows of 2 float32 to rank q).
        assert out['a2a_into_is_out'] and torch.equal(out['a2a_into'], torch.cat(out['a2a']))
        assert out['a2a_into_bytes'] == sum((q + rank) * 2 * 4 for q in range(world_size)
                                            if q != rank)
        assert torch.equal(out['bcast'], inputs[-1][:1] + (world_size - 1))
        expected_grad = sum(range(1, world_size + 1))
        assert torch.equal(out['grad'], torch.full((1, 3), float(expected_grad),
                                                   dtype=torch.float64))
        assert out['bytes'] > 0
        if rank == 1:
            assert out['agree'] == 'bad shard'
        else:
            assert 'rank(s) [1]' in out['agree']


def test_single_process_collectives_are_the_identity():
    x = torch.randn(4, 2)
    assert all_reduce(x, None) is x
    assert all_gather(x, None)[0] is x
    assert all_to_all([x], None)[0] is x
    assert torch.equal(all_to_all_into(torch.empty_like(x), x, [4], [4], None), x)
    assert broadcast(x, None) is x
    with pytest.raises(ValueError, match='mine'):
        agree(ValueError('mine'), None, 'x')


def _dies(rank, world_size):
    if rank == 1:
        raise RuntimeError('rank 1 fails on purpose')
    start = time.monotonic()
    try:
        all_reduce(torch.ones(3), dist.group.WORLD)
    except Exception as error:  # noqa: BLE001 - its type and message are the result
        return type(error).__name__, str(error), time.monotonic() - start
    return None


@pytest.mark.slow
def test_a_failing_rank_does_not_hang_the_others():
    results = run_ranks(_dies, 2, pg_timeout=20.0, timeout=120.0, expect_errors=True)
    assert 'rank 1 fails on purpose' in results[1]
    name, message, seconds = results[0]
    assert name == 'DistributedError'
    assert 'rank 0 of 2: all_reduce failed' in message
    assert seconds < 60


def _transform_copies(rank, world_size):
    from torch_geometric_regcn import LowRankInverse, SemanticGraph
    group = dist.group.WORLD
    out = {}
    for transform in (LowRankInverse(1.0, 0.2, 8, group=group), SemanticGraph(4, group=group)):
        name = type(transform).__name__
        out[name] = copy.deepcopy(transform).group is group
        try:
            pickle.dumps(transform)
            out[name + ' pickle'] = 'pickled'
        except TypeError as error:
            out[name + ' pickle'] = str(error)
    return out


@pytest.mark.slow
@requires_gloo
def test_transforms_on_a_process_group_are_copied_and_refuse_pickling_as_layers_are():
    # They failed in deepcopy and pickle with torch's bare "cannot pickle
    # 'ProcessGroup' object"; now as TSGCNConv (SharesGroup).
    (result,) = run_ranks(_transform_copies, 1, timeout=120.0)
    for name in ('LowRankInverse', 'SemanticGraph'):
        assert result[name]  # the copy shares the group
        assert 'cannot be pickled' in result[name + ' pickle']
        assert "'group'" in result[name + ' pickle']
