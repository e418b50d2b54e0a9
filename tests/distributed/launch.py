"""Runs a function on P ranks of a real process group (gloo on 127.0.0.1, a
free port), each in its own process (:func:`process_context`), and returns
what each rank returned."""
import datetime
import io
import os
import queue
import socket
import sys
import time
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

requires_gloo = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason='torch.distributed with the gloo backend is not available in this torch build')


#: What every rank imports anyway (the bulk of a rank's start), imported once
#: by the fork server. Not this package: the server resolves imports from its
#: own path, which may not be the checkout under test.
PRELOAD = ['torch', 'torch_geometric']


def process_context():
    """The multiprocessing context of the ranks: on Linux ``'forkserver'`` with
    :obj:`PRELOAD`, so that a rank starts as a fork of a single-threaded
    server that has imported torch and PyG and never ran a kernel (a fresh
    interpreter spends seconds on those imports); elsewhere ``'spawn'``.
    The server's environment is the one of the test that started it, so a
    rank takes the launching process's ``os.environ`` from its arguments
    (:func:`inherit_environment`)."""
    if sys.platform != 'linux':
        return mp.get_context('spawn')
    context = mp.get_context('forkserver')
    context.set_forkserver_preload(PRELOAD)
    return context


def inherit_environment(environ):
    """Makes ``os.environ`` the launching process's :obj:`environ` (as a
    spawned process would have it)."""
    os.environ.clear()
    os.environ.update(environ)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _worker(rank, world_size, port, backend, pg_timeout, fn, args, results, environ):
    inherit_environment(environ)
    os.environ.pop('OMP_NUM_THREADS', None)
    torch.set_num_threads(1)  # two cores shared by up to three ranks
    try:
        dist.init_process_group(backend, init_method=f'tcp://127.0.0.1:{port}', rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=pg_timeout))
        out = fn(rank, world_size, *args)
        buffer = io.BytesIO()  # tensors by value: a queue would share memory that dies with us
        torch.save(out, buffer)
        results.put((rank, 'ok', buffer.getvalue()))
    except BaseException as error:  # reported to the parent, which fails the test
        results.put((rank, 'error', f'{type(error).__name__}: {error}\n'
                                    f'{traceback.format_exc()}'))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_ranks(fn, world_size, *args, timeout=240.0, pg_timeout=60.0, backend='gloo',
              expect_errors=False):
    """Runs ``fn(rank, world_size, *args)`` on ``world_size`` ranks and returns
    the list of results in rank order. A rank that raises fails the call with
    its traceback (or, with ``expect_errors``, its message is returned in
    place of a result); a run past ``timeout`` seconds kills every rank."""
    ctx = process_context()
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(r, world_size, port, backend, pg_timeout, fn,
                                               args, results, dict(os.environ)), daemon=True)
             for r in range(world_size)]
    for p in procs:
        p.start()
    collected, deadline = {}, time.monotonic() + timeout
    try:
        while len(collected) < world_size:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(world_size)) - set(collected))
                raise AssertionError(f'ranks {missing} of {world_size} did not finish within '
                                     f'{timeout:.0f} s; collected: {collected}')
            try:
                rank, status, out = results.get(timeout=min(left, 1.0))
            except queue.Empty:
                dead = [r for r, p in enumerate(procs)
                        if not p.is_alive() and r not in collected and p.exitcode != 0]
                if dead:
                    time.sleep(1.0)  # let the queue deliver a last report
                    if results.empty():
                        raise AssertionError(f'ranks {dead} died (exit codes '
                                             f'{[procs[r].exitcode for r in dead]})') from None
                continue
            collected[rank] = (status, out)
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    if not expect_errors:
        errors = {r: out for r, (status, out) in collected.items() if status == 'error'}
        if errors:
            raise AssertionError('\n'.join(f'rank {r} raised:\n{out}'
                                           for r, out in sorted(errors.items())))
    return [torch.load(io.BytesIO(out), weights_only=False) if status == 'ok' else out
            for status, out in (collected[r] for r in range(world_size))]
