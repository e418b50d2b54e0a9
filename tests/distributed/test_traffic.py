r"""The per-stage byte counts of :mod:`torch_geometric_regcn.distributed.traffic`."""
import importlib

import torch

from tests.distributed.launch import requires_gloo, run_ranks
from torch_geometric_regcn.distributed.collectives import all_gather, all_reduce, broadcast

# The module itself: the package's name 'traffic' is the function of the same name.
T = importlib.import_module('torch_geometric_regcn.distributed.traffic')


def test_a_single_process_sends_nothing_and_the_stage_names_the_count(monkeypatch):
    monkeypatch.setattr(T, 'TRAFFIC', type(T.TRAFFIC)(int))  # a clean count for this test
    x = torch.ones(4, 3, dtype=torch.float64)
    with T.traffic_stage('solve'):
        all_reduce(x, None), all_gather(x, None), broadcast(x, None)
        assert T.traffic('solve') == 0 and T.traffic() == 0  # group=None: no message
        T.count('all_reduce', T.nbytes(x))  # what a collective of a real group records
        with T.traffic_stage('inner'):
            T.count('broadcast', 8)
        T.count('all_gather', 1)  # the outer stage is back
    T.count('all_to_all', 2)  # outside every stage: 'other'
    assert T.nbytes(x) == 4 * 3 * 8
    assert dict(T.TRAFFIC) == {('solve', 'all_reduce'): 96, ('inner', 'broadcast'): 8,
                               ('solve', 'all_gather'): 1, ('other', 'all_to_all'): 2}
    assert T.traffic('solve') == 97 and T.traffic('inner') == 8 and T.traffic() == 107


def test_the_stage_is_restored_when_the_block_raises(monkeypatch):
    monkeypatch.setattr(T, 'TRAFFIC', type(T.TRAFFIC)(int))
    try:
        with T.traffic_stage('failing'):
            raise KeyError('boom')
    except KeyError:
        pass
    T.count('all_reduce', 4)
    assert dict(T.TRAFFIC) == {('other', 'all_reduce'): 4}


def _one_process_group(rank, world_size):
    import torch.distributed as dist
    T.TRAFFIC.clear()
    x = torch.ones(4, 3, dtype=torch.float64)
    all_reduce(x, dist.group.WORLD), all_gather(x, dist.group.WORLD)
    broadcast(x, dist.group.WORLD)
    return T.traffic()


@requires_gloo
def test_a_group_of_one_process_sends_nothing():
    # all_reduce counted its tensor's bytes in a group of one (the distributed
    # example printed "0.8 MiB sent per rank" on one rank).
    assert run_ranks(_one_process_group, 1, timeout=60.0) == [0]
