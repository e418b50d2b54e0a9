r"""DDP training of ``TSGCN(group=...)`` on real gloo process groups as a
hostile user runs it (``docs/distributed.md``): uneven row blocks, a rank
with no rows or no labels, other seeds per rank, a checkpoint at epoch k
restarted (on as many ranks, or more), a rank that raises, dies or freezes
in the middle of training, and ranks that disagree on a shape, a dtype or
their rows. The references are a single-process run of the same model from
the same weights, and an uninterrupted DDP run; a fault must reach every
other rank as an error within the process group's timeout, never as a hang,
a dead process or a silent result.

Each case starts its processes (a second or more on two cores): all are slow."""
import datetime
import io
import os
import queue
import re
import socket
import time
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from tests.distributed.launch import inherit_environment, process_context
from torch_geometric_regcn import TSGCN, LowRankInverse
from torch_geometric_regcn.datasets import contextual_sbm
from torch_geometric_regcn.distributed import global_mean

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                       reason='torch.distributed with gloo is not available in this build'),
]

N, F_IN, C, RANK, HIDDEN = 120, 6, 3, 16, 8
EPOCHS, LR = 6, 0.05
PG_TIMEOUT = 5.0  # seconds: a hang fails the case instead of blocking the suite
# The rendezvous waits longer: spawned ranks may start seconds apart on a loaded machine.
# The cases then run on a group of all ranks with the short timeout.
RENDEZVOUS_TIMEOUT = 120.0
_GROUP = {}
# DDP against one process, float64: the same sums in another order (the all-reduce),
# ~1e-15 relative per step, through six Adam steps; the docs promise 1e-5 and
# measured 5e-12. A wrong gradient (a rank's rows missing, a doubled term) is O(1e-2).
CLOSE = dict(rtol=1e-8, atol=1e-8)
NAMED = ('ValueError', 'TypeError', 'DistributedError')


# -- a launcher that also reports dead and hung ranks ----------------------------------


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _group():
    """The group of all ranks whose collectives time out after PG_TIMEOUT."""
    return _GROUP['short']


def _worker(rank, world_size, port, fn, args, results, environ):
    inherit_environment(environ)
    os.environ.pop('OMP_NUM_THREADS', None)
    torch.set_num_threads(1)
    try:
        dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=RENDEZVOUS_TIMEOUT))
        _GROUP['short'] = dist.new_group(timeout=datetime.timedelta(seconds=PG_TIMEOUT))
        buffer = io.BytesIO()
        torch.save(fn(rank, world_size, *args), buffer)
        results.put((rank, ('ok', buffer.getvalue())))
    except BaseException as error:  # noqa: BLE001 - reported to the test
        results.put((rank, ('error', type(error).__name__,
                            f'{error}\n{traceback.format_exc()}')))
    finally:
        _GROUP.clear()  # the group's threads end in destroy_process_group() only
        if dist.is_initialized():  # when nothing holds it (docs/distributed.md)
            dist.destroy_process_group()


def launch(fn, world_size, *args, timeout=60.0):
    """Runs ``fn(rank, world_size, *args)`` on gloo ranks; per rank ('ok', value),
    ('error', type name, message), ('died', exit code) or ('hung', None)."""
    ctx = process_context()
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world_size, port, fn, args, results,
                                               dict(os.environ)), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    collected, deadline = {}, time.monotonic() + timeout
    while len(collected) < world_size and time.monotonic() < deadline:
        try:
            rank, report = results.get(timeout=0.2)
            collected[rank] = report
        except queue.Empty:
            if all(not p.is_alive() for p in procs):
                time.sleep(0.5)
                while not results.empty():
                    rank, report = results.get()
                    collected[rank] = report
                break
    out = []
    for r, p in enumerate(procs):
        p.join(timeout=5)
        if r in collected:
            report = collected[r]
            out.append(('ok', torch.load(io.BytesIO(report[1]), weights_only=False))
                       if report[0] == 'ok' else report)
        elif p.is_alive():
            out.append(('hung', None))
        else:
            out.append(('died', p.exitcode))
        if p.is_alive():
            p.kill()
    return out


def values(results):
    """The ranks' values; fails with every rank's report when one did not finish."""
    assert all(r[0] == 'ok' for r in results), results
    return [r[1] for r in results]


# -- the graph, the model, training -----------------------------------------------------


@pytest.fixture(scope='module')
def graph():
    data = contextual_sbm(num_nodes=N, num_classes=C, num_features=F_IN, seed=2)
    data.x = data.x.double()
    data = LowRankInverse(1.0, 0.2, rank=RANK, tol=1e-8, progress=False)(data)
    return {'x': data.x, 'w': data.lowrank_w, 'v': data.lowrank_v, 'y': data.y,
            'mask': torch.arange(N) % 3 == 0}


def _model(seed, group=None, hidden=HIDDEN, dtype=torch.float64):
    torch.manual_seed(seed)
    return TSGCN(F_IN, hidden, C, group=group).to(dtype)


def _epochs(model, optimizer, g, rows, group, epochs):
    x, w, v, y, mask = (g[k][rows] for k in ('x', 'w', 'v', 'y', 'mask'))
    losses = []
    for _ in range(epochs):
        optimizer.zero_grad()
        out = model(x, w, v)
        loss = global_mean(F.cross_entropy(out[mask], y[mask], reduction='sum'),
                           int(mask.sum()), group)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def _state(model):
    # tensors, and the layers' extra states (TSGCNConv's scale: a dict)
    return {k: t.detach().clone() if isinstance(t, torch.Tensor) else t
            for k, t in model.state_dict().items()}


def single_process(g, epochs=EPOCHS, seed=0):
    model = _model(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    losses = _epochs(model, optimizer, g, slice(0, N), None, epochs)
    return losses, _state(model)


def _ddp(rank, world_size, g, bounds, seeds, epochs):
    group = _group()
    model = DistributedDataParallel(_model(seeds[rank], group), process_group=group)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    losses = _epochs(model, optimizer, g, slice(bounds[rank], bounds[rank + 1]), group, epochs)
    return losses, _state(model.module)


def assert_same_training(results, reference):
    ref_losses, ref_state = reference
    for losses, state in results:
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), **CLOSE)
        for k, t in ref_state.items():
            torch.testing.assert_close(state[k], t, **CLOSE, msg=k)
    assert ref_losses[-1] < ref_losses[0]  # it trained


# -- equal to one process -------------------------------------------------------------------


def test_uneven_row_blocks_train_as_one_process(graph):
    # 90 rows on rank 0, 30 on rank 1 (a user's own partition): the loss of every
    # epoch and the final weights are those of one process.
    results = values(launch(_ddp, 2, graph, (0, 90, N), (0, 0), EPOCHS))
    assert_same_training(results, single_process(graph))


def test_rank_with_zero_rows(graph):
    # Every row on rank 0, none on rank 1 (more ranks than a small graph fills): the
    # empty rank takes part with zero sums and the run is one process's -- or every
    # rank raises a clear error naming the problem, none hangs.
    results = launch(_ddp, 2, graph, (0, N, N), (0, 0), EPOCHS)
    if all(r[0] == 'ok' for r in results):
        assert_same_training(values(results), single_process(graph))
    else:
        assert all(r[0] == 'error' and r[1] in NAMED for r in results), results


def test_rank_without_labelled_nodes(graph):
    # "Ranks without labelled nodes take part with a zero sum": rank 1 holds rows
    # but no training node.
    g = dict(graph, mask=graph['mask'] & (torch.arange(N) < 60))
    results = values(launch(_ddp, 2, g, (0, 60, N), (0, 0), EPOCHS))
    assert_same_training(results, single_process(g))


def test_other_seeds_per_rank(graph):
    # Each rank seeds its own model differently: DDP broadcasts rank 0's initial
    # weights, so the run is one process's from rank 0's seed.
    results = values(launch(_ddp, 2, graph, (0, 60, N), (0, 123), EPOCHS))
    assert_same_training(results, single_process(graph, seed=0))


# -- checkpoint and restart ---------------------------------------------------------------


def _first_half(rank, world_size, g, bounds, path, k):
    """An uninterrupted run of EPOCHS epochs, and a run checkpointed at epoch k."""
    group, rows = _group(), slice(bounds[rank], bounds[rank + 1])
    model = DistributedDataParallel(_model(0, group), process_group=group)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    _epochs(model, optimizer, g, rows, group, EPOCHS)
    uninterrupted = _state(model.module)

    model = DistributedDataParallel(_model(0, group), process_group=group)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    _epochs(model, optimizer, g, rows, group, k)
    if rank == 0:
        torch.save({'model': model.module.state_dict(), 'optimizer': optimizer.state_dict()},
                   path)
    dist.barrier(group)
    return uninterrupted


def _second_half(rank, world_size, g, bounds, path, k):
    """A new job: other initial weights, the checkpoint loaded, the remaining epochs."""
    group, rows = _group(), slice(bounds[rank], bounds[rank + 1])
    module = _model(1000 + rank, group)
    checkpoint = torch.load(path, weights_only=True)
    module.load_state_dict(checkpoint['model'])
    model = DistributedDataParallel(module, process_group=group)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    optimizer.load_state_dict(checkpoint['optimizer'])
    _epochs(model, optimizer, g, rows, group, EPOCHS - k)
    return _state(model.module)


CHECKPOINT_EPOCH = 3


@pytest.fixture(scope='module')
def first_half(graph, tmp_path_factory):
    """(checkpoint path, uninterrupted final weights) of a 2-rank DDP job."""
    path = str(tmp_path_factory.mktemp('ddp') / 'checkpoint.pt')
    first = values(launch(_first_half, 2, graph, (0, 60, N), path, CHECKPOINT_EPOCH))
    for key, t in first[0].items():
        torch.testing.assert_close(first[1][key], t, rtol=0, atol=0, msg=key)  # replicas
    return path, first[0]


@pytest.mark.parametrize('restart_world_size', [2, 3])
def test_checkpoint_restart_equals_an_uninterrupted_run(graph, first_half, restart_world_size):
    # DDP on 2 ranks, checkpointed at epoch 3 (model and optimizer, from rank 0) and
    # restarted as a new job on 2 ranks (or 3: the replicated weights do not depend on
    # the partition): the final weights are those of the uninterrupted run, which
    # are those of one process.
    path, uninterrupted = first_half
    bounds = (0, 60, N) if restart_world_size == 2 else (0, 40, 80, N)
    second = values(launch(_second_half, restart_world_size, graph, bounds, path,
                           CHECKPOINT_EPOCH))
    for state in second:
        for key, t in uninterrupted.items():
            torch.testing.assert_close(state[key], t, **CLOSE, msg=key)
    _, reference = single_process(graph)
    for key, t in reference.items():
        torch.testing.assert_close(uninterrupted[key], t, **CLOSE, msg=key)


# -- a rank that fails during training ----------------------------------------------------


def _fault(rank, world_size, g, mode):
    group, bounds = _group(), (0, 60, N)
    rows = slice(bounds[rank], bounds[rank + 1])
    x, w, v, y, mask = (g[k][rows] for k in ('x', 'w', 'v', 'y', 'mask'))
    model = DistributedDataParallel(_model(0, group), process_group=group)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    start = time.monotonic()
    try:
        for epoch in range(4):
            start = time.monotonic()
            failing = rank == 1 and epoch == 2
            if failing and mode == 'raises before forward':
                raise RuntimeError('rank 1 fails on purpose')
            if failing and mode == 'dies':
                os._exit(7)
            if failing and mode == 'freezes':
                time.sleep(2 * PG_TIMEOUT)
            optimizer.zero_grad()
            loss = global_mean(F.cross_entropy(model(x, w, v)[mask], y[mask], reduction='sum'),
                               int(mask.sum()), group)
            if failing and mode == 'raises before backward':
                raise RuntimeError('rank 1 fails on purpose')
            loss.backward()
            optimizer.step()
    except Exception as error:  # noqa: BLE001 - rank 0's error is the result
        if rank == 0:
            return type(error).__name__, str(error), time.monotonic() - start
        raise
    return 'finished'


@pytest.mark.parametrize('mode', ['raises before forward', 'raises before backward', 'dies',
                                  'freezes'])
def test_a_failing_rank_stops_the_others_with_a_named_error(graph, mode):
    # Rank 1 raises (before its forward pass, or between forward and backward), dies
    # or freezes at epoch 2: rank 0's next collective -- the layers' all-reduce or
    # DDP's -- fails with a DistributedError naming the rank, the world size and the
    # operation, at once when the peer's connection closes and at the latest after
    # the process group's timeout; never a raw gloo error, never a hang.
    results = launch(_fault, 2, graph, mode, timeout=60.0)
    assert results[0][0] == 'ok', results
    name, message, seconds = results[0][1]
    assert name == 'DistributedError', (name, message)
    assert 'rank 0 of 2' in message
    assert seconds < PG_TIMEOUT + 5
    if mode.startswith('raises'):
        assert results[1][0] == 'error' and 'fails on purpose' in results[1][2]
    elif mode == 'dies':
        assert results[1] == ('died', 7)


# -- ranks that disagree ------------------------------------------------------------------


def _disagree(rank, world_size, g, kind):
    group = _group()
    rows = slice(0, 60) if rank == 0 else slice(60, N)
    x, w, v = g['x'][rows], g['w'][rows], g['v'][rows]
    hidden, dtype = HIDDEN, torch.float64
    if rank == 1 and kind == 'hidden channels':
        hidden = HIDDEN - 2
    if rank == 1 and kind == 'dtype':
        dtype = torch.float32
        x, w, v = x.float(), w.float(), v.float()
    if rank == 1 and kind == 'rows of w':
        w = w[:-1]
    model = _model(0, group, hidden=hidden, dtype=dtype)
    start = time.monotonic()
    try:
        with torch.no_grad():
            out = model(x, w, v)
    except Exception as error:  # noqa: BLE001 - every rank's error is the result
        return type(error).__name__, str(error), time.monotonic() - start
    return 'finished', tuple(out.shape), 0.0


@pytest.mark.parametrize('kind', ['hidden channels', 'dtype', 'rows of w'])
def test_ranks_that_disagree_get_a_named_error(graph, kind):
    # Without DDP (evaluation, or a user's own loop), rank 1 builds its model with
    # other hidden channels, runs in float32 while rank 0 runs in float64, or passes
    # one row of w fewer than of x. No rank may finish with a result, die (gloo's
    # abort on mismatched sizes) or hang: each raises a ValueError/TypeError naming
    # the argument, or a DistributedError naming the failing rank.
    results = launch(_disagree, 2, graph, kind, timeout=60.0)
    assert all(r[0] == 'ok' for r in results), results
    for name, message, seconds in (r[1] for r in results):
        assert name in NAMED, (name, message)
        assert seconds < PG_TIMEOUT + 5
    # at least one rank names what disagrees (rank 1's input, or both ranks' view)
    argument = {'hidden channels': r'channels', 'dtype': r'dtype', 'rows of w': r'\bw\b'}[kind]
    assert any(name in ('ValueError', 'TypeError') and re.search(argument, message)
               for name, message, _ in (r[1] for r in results)), results


def _no_labels(rank, world_size):
    try:
        global_mean(torch.zeros((), dtype=torch.float64), 0, _group())
    except Exception as error:  # noqa: BLE001
        return type(error).__name__, str(error)
    return 'finished', ''


def test_no_labelled_node_on_any_rank_is_named():
    # global_mean with a zero count on every rank: the single-process error
    # ("every 'local_count' is zero") on every rank, not a NaN loss.
    for name, message in values(launch(_no_labels, 2)):
        assert name == 'ValueError' and 'local_count' in message
