"""The factor cache of LowRankInverse: nothing silent, nothing lost (issues 19, 27).

A damaged, foreign or outdated cache file is never trusted: it is reported
by name and recomputed. Unconverged factors warn again when reloaded. An
unusable ``cache_dir`` fails before any work, and a save that fails at the
end keeps the computed factors. Concurrent runs never read a torn file. A
file is trusted only under the name (key) it was written for, which its
checksum covers, and temporary files of writers that died before their
rename are removed by the next run, never those of a live writer.
The unit tests of the cache module's functions are in
tests/transforms/test_factor_cache.py.
"""
import os
import time
import warnings

import pytest
import torch
from torch_geometric.data import Data

import torch_geometric_regcn.transforms.low_rank_inverse as module
from tests.distributed.launch import process_context
from torch_geometric_regcn import LowRankInverse
from torch_geometric_regcn.transforms import factor_cache

N, RANK = 300, 6


def graph(seed: int = 0) -> Data:
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, N, (2, 3 * N), generator=gen)
    semantic = torch.randint(0, N, (2, 2 * N), generator=gen)
    x = torch.randn(N, 8, dtype=torch.float64, generator=gen)
    return Data(x=x, edge_index=edge_index, semantic_edge_index=semantic, num_nodes=N)


def transform(cache_dir, **kwargs) -> LowRankInverse:
    return LowRankInverse(1.0, 0.4, rank=RANK, progress=False, cache_dir=str(cache_dir),
                          **kwargs)


def cache_file(tmp_path):
    (path,) = tmp_path.glob('lowrank-*.pt')
    return path


def forbid_solving(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError('the cache should have been used')

    monkeypatch.setattr(module, 'extreme_eigenpairs', fail)


def cache_warnings(record):
    return [str(w.message) for w in record
            if 'cache' in str(w.message) or 'residual' in str(w.message)]


@pytest.fixture
def cached(tmp_path):
    """The reference factors (computed without a cache) and the path of a
    cache entry holding them."""
    reference = LowRankInverse(1.0, 0.4, rank=RANK, progress=False)(graph())
    transform(tmp_path)(graph())
    return reference, str(cache_file(tmp_path))


def recomputes(tmp_path, reference, match):
    """Runs the transform on the damaged entry: it must warn (naming the file
    and the problem) and return, and save, factors equal to the reference."""
    path = str(cache_file(tmp_path))
    with pytest.warns(UserWarning, match=match) as record:
        out = transform(tmp_path)(graph())
    assert any(path in str(w.message) for w in record), 'the warning must name the file'
    assert torch.equal(out.lowrank_w, reference.lowrank_w)
    assert torch.equal(out.lowrank_v, reference.lowrank_v)
    # The entry was overwritten with valid factors: the next run loads them silently.
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        again = transform(tmp_path)(graph())
    assert cache_warnings(record) == []
    assert torch.equal(again.lowrank_w, reference.lowrank_w)


# 1. A cache file is validated before it is used. ---------------------------

@pytest.mark.parametrize('damage, match', [
    (lambda w, v: {'lowrank_w': w[:10], 'lowrank_v': v[:10]}, r'shape \[10, 6\].*\[300, 6\]'),
    (lambda w, v: {'lowrank_w': w[:, :3], 'lowrank_v': v}, r'shape \[300, 3\].*\[300, 6\]'),
    (lambda w, v: {'lowrank_w': w.float(), 'lowrank_v': v.float()}, 'dtype torch.float32'),
    (lambda w, v: {'lowrank_w': w.index_fill(0, torch.tensor([4]), float('nan')),
                   'lowrank_v': v}, 'NaN or infinite'),
    (lambda w, v: {'lowrank_w': w, 'lowrank_v': v.index_fill(1, torch.tensor([0]),
                                                              float('inf'))},
     'NaN or infinite'),
    (lambda w, v: {'lowrank_w': w}, "missing 'lowrank_v'"),
    (lambda w, v: {'lowrank_w': w, 'lowrank_v': v, 'other': v}, "unexpected 'other'"),
])
def test_invalid_factors_are_recomputed(tmp_path, cached, damage, match):
    reference, path = cached
    factor_cache.save(path, damage(reference.lowrank_w, reference.lowrank_v))
    recomputes(tmp_path, reference, match)


def test_old_format_without_checksum_is_recomputed(tmp_path, cached):
    reference, path = cached
    # What the cache wrote before it kept a checksum: the bare tensors.
    torch.save({'lowrank_w': reference.lowrank_w, 'lowrank_v': reference.lowrank_v}, path)
    recomputes(tmp_path, reference, 'no checksum')


def test_a_flipped_byte_is_detected_by_the_checksum(tmp_path, cached):
    reference, path = cached
    content = bytearray(open(path, 'rb').read())
    start = content.find(reference.lowrank_w.numpy().tobytes()[:64])
    assert start >= 0, 'the factors are stored uncompressed'
    content[start + 1000] ^= 0x10  # one bit of one float64 of lowrank_w
    open(path, 'wb').write(bytes(content))
    recomputes(tmp_path, reference, 'checksum mismatch')


@pytest.mark.parametrize('payload', [
    [1, 2, 3],
    {'format': 'something else'},
    {'lowrank_w': 'not a tensor', 'lowrank_v': None},
])
def test_foreign_content_is_recomputed(tmp_path, cached, payload):
    reference, path = cached
    torch.save(payload, path)
    recomputes(tmp_path, reference, 'Ignoring the cache file')


def test_an_unreadable_file_is_recomputed(tmp_path, cached):
    reference, path = cached
    with open(path, 'wb') as f:
        f.write(b'not a torch file')
    recomputes(tmp_path, reference, 'unreadable cache file')


def test_loading_uses_weights_only(tmp_path, cached, monkeypatch):
    calls = []
    load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get('weights_only'))
        return load(*args, **kwargs)

    monkeypatch.setattr(torch, 'load', spy)
    transform(tmp_path)(graph())
    assert calls == [True]


def test_saving_is_atomic(tmp_path, monkeypatch):
    # A crash while writing leaves neither a partial entry nor a temporary file.
    def crash(obj, f, *args, **kwargs):
        with open(f, 'wb') as handle:
            handle.write(b'partial')
        raise OSError('disk full')

    monkeypatch.setattr(torch, 'save', crash)
    with pytest.warns(UserWarning, match='could not save the factors'):
        transform(tmp_path)(graph())
    assert list(tmp_path.iterdir()) == []


# 2. Unconverged factors warn again when loaded. ----------------------------

def test_unconverged_factors_warn_again_when_reloaded(tmp_path, monkeypatch):
    unconverged = transform(tmp_path, tol=1e-10, max_iter=1)
    with pytest.warns(UserWarning, match='relative residual'):
        first = unconverged(graph())
    forbid_solving(monkeypatch)
    with pytest.warns(UserWarning, match=r"loaded from the cache file .*lowrank-.*\.pt.*"
                                         r"residual \d\.\d\de-\d+ > tol=1e-10.*'max_iter'"):
        again = unconverged(graph())
    assert torch.equal(again.lowrank_w, first.lowrank_w)


def test_converged_factors_reload_silently(tmp_path, monkeypatch):
    transform(tmp_path)(graph())
    forbid_solving(monkeypatch)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        transform(tmp_path)(graph())
    assert cache_warnings(record) == []


# 3. An unusable cache_dir fails early; a failed save loses nothing. ---------

def test_cache_dir_that_is_a_file_is_rejected(tmp_path):
    path = tmp_path / 'factors'
    path.write_text('')
    with pytest.raises(ValueError, match="'cache_dir'.*is a file"):
        LowRankInverse(1.0, 0.4, rank=RANK, cache_dir=str(path))


def test_cache_dir_that_cannot_be_created_is_rejected(tmp_path):
    (tmp_path / 'file').write_text('')
    with pytest.raises(ValueError, match="'cache_dir'.*cannot be created"):
        LowRankInverse(1.0, 0.4, rank=RANK, cache_dir=str(tmp_path / 'file' / 'cache'))


def test_cache_dir_that_is_not_writable_is_rejected(tmp_path, monkeypatch):
    access = os.access
    monkeypatch.setattr(os, 'access', lambda path, mode, *args, **kwargs:
                        False if str(path) == str(tmp_path) else access(path, mode))
    with pytest.raises(ValueError, match="'cache_dir'.*is not writable"):
        LowRankInverse(1.0, 0.4, rank=RANK, cache_dir=str(tmp_path))


def test_cache_dir_is_created(tmp_path):
    LowRankInverse(1.0, 0.4, rank=RANK, cache_dir=str(tmp_path / 'a' / 'b'))
    assert (tmp_path / 'a' / 'b').is_dir()


def test_a_cache_dir_removed_before_saving_keeps_the_factors(tmp_path):
    reference = LowRankInverse(1.0, 0.4, rank=RANK, progress=False)(graph())
    cache_dir = tmp_path / 'cache'
    late = transform(cache_dir)
    cache_dir.rmdir()
    cache_dir.write_text('')  # the folder became a file between __init__ and the save
    with pytest.warns(UserWarning, match=r'could not save the factors to the cache '
                                         r'\(.*\); returning them uncached'):
        out = late(graph())
    assert torch.equal(out.lowrank_w, reference.lowrank_w)
    assert torch.equal(out.lowrank_v, reference.lowrank_v)


def test_a_failing_save_keeps_the_factors(tmp_path, monkeypatch):
    reference = LowRankInverse(1.0, 0.4, rank=RANK, progress=False)(graph())

    def fail(*args, **kwargs):
        raise OSError(28, 'No space left on device')

    monkeypatch.setattr(factor_cache, 'save', fail)
    with pytest.warns(UserWarning, match='No space left on device.*returning them uncached'):
        out = transform(tmp_path)(graph())
    assert torch.equal(out.lowrank_w, reference.lowrank_w)


# 4. Concurrent runs never read a torn file. ---------------------------------

ROUNDS, LOADS = 3, 4


def _concurrent_worker(cache_dir, barrier, queue):
    torch.set_num_threads(1)
    from torch_geometric_regcn.datasets import contextual_sbm
    data = contextual_sbm(num_nodes=300, num_features=16)
    results = []
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        for seed in range(ROUNDS):  # each round a new key, computed by all at once
            barrier.wait()
            run = LowRankInverse(1.0, 0.3, rank=8, seed=seed, progress=False,
                                 cache_dir=cache_dir)
            for _ in range(LOADS):  # the first computes (or loads), then load at once
                out = run(data.clone())
                # As NumPy arrays, which pickle by value (torch would share tensors
                # through file descriptors, which a finished process no longer serves).
                results.append((seed, out.lowrank_w.numpy(), out.lowrank_v.numpy()))
    messages = [str(w.message) for w in record if 'Sparse' not in str(w.message)]
    queue.put((results, messages))


@pytest.mark.slow
def test_concurrent_processes_never_read_a_torn_file(tmp_path):
    from torch_geometric_regcn.datasets import contextual_sbm
    data = contextual_sbm(num_nodes=300, num_features=16)
    # The reference runs on the workers' one thread: the same kernels on the same
    # inputs, hence the same bits. (With AVX2 BLAS kernels, 1 and 2 threads round
    # differently and an eigenvector may come out with the other sign.) A torn or
    # mixed read differs at O(1).
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        reference = {seed: LowRankInverse(1.0, 0.3, rank=8, seed=seed,
                                          progress=False)(data.clone())
                     for seed in range(ROUNDS)}
    finally:
        torch.set_num_threads(previous)
    context = process_context()
    barrier, queue = context.Barrier(3), context.Queue()
    workers = [context.Process(target=_concurrent_worker,
                               args=(str(tmp_path), barrier, queue)) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        outcomes = [queue.get(timeout=120) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
    assert all(worker.exitcode == 0 for worker in workers)
    for results, messages in outcomes:
        assert messages == []
        assert len(results) == ROUNDS * LOADS
        for seed, w, v in results:
            assert torch.equal(torch.from_numpy(w), reference[seed].lowrank_w)
            assert torch.equal(torch.from_numpy(v), reference[seed].lowrank_v)
    assert len(list(tmp_path.glob('lowrank-*.pt'))) == ROUNDS
    assert list(tmp_path.glob('*.tmp')) == []


# 5. A file is trusted only under the name it was written for (issue 27). ---

def other_graph() -> Data:
    """Another graph with the same number of nodes (and so factors of the same
    shape, dtype and rank): only the key tells its file from this graph's."""
    return graph(seed=1)


@pytest.mark.parametrize('how', ['copied', 'renamed'])
def test_a_file_of_another_graph_under_this_graphs_key_is_refused(tmp_path, cached, how):
    reference, path = cached
    foreign_dir = tmp_path / 'other'
    planted = transform(foreign_dir)(other_graph())
    (foreign,) = foreign_dir.glob('lowrank-*.pt')
    # The planted factors would be far off: the test can fail.
    assert (planted.lowrank_w - reference.lowrank_w).norm() > 0.1 * reference.lowrank_w.norm()
    if how == 'copied':
        with open(foreign, 'rb') as src, open(path, 'wb') as dst:
            dst.write(src.read())
    else:
        os.replace(foreign, path)
    recomputes(tmp_path, reference, rf"it was written as '{foreign.name}', the entry of other "
                                    rf"inputs .* copied or renamed to 'lowrank-")


def test_the_key_is_covered_by_the_checksum(tmp_path, cached):
    # A file whose stored key is edited to this entry's name fails its checksum.
    reference, path = cached
    transform(tmp_path / 'other')(other_graph())
    (foreign,) = (tmp_path / 'other').glob('lowrank-*.pt')
    payload = torch.load(foreign, weights_only=True)
    payload['key'] = os.path.basename(path)
    torch.save(payload, path)
    recomputes(tmp_path, reference, 'checksum mismatch')


def test_a_file_of_the_format_before_keys_is_recomputed(tmp_path, cached):
    # regcn-cache-2 files had a checksum but no key: not trusted.
    reference, path = cached
    payload = torch.load(path, weights_only=True)
    payload['format'] = 'regcn-cache-2'
    del payload['key']
    torch.save(payload, path)
    recomputes(tmp_path, reference, "its format is 'regcn-cache-2', not 'regcn-cache-3'")


def test_the_planted_file_gives_the_dense_reference_after_recomputation(tmp_path):
    # At full rank the factors give (I - S)⁻¹ exactly: a planted file of the
    # other graph must not move the result off the dense float64 inverse.
    from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator
    small = 40

    def data(seed):
        gen = torch.Generator().manual_seed(seed)
        return Data(x=torch.randn(small, 4, dtype=torch.float64, generator=gen),
                    edge_index=torch.randint(0, small, (2, 3 * small), generator=gen),
                    semantic_edge_index=torch.randint(0, small, (2, 2 * small), generator=gen),
                    num_nodes=small)

    def run(cache_dir, seed):
        return LowRankInverse(1.0, 0.4, rank=small, tol=1e-12, progress=False,
                              cache_dir=str(cache_dir))(data(seed))

    run(tmp_path / 'this', 0)
    run(tmp_path / 'other', 1)
    (mine,) = (tmp_path / 'this').glob('*.pt')
    (foreign,) = (tmp_path / 'other').glob('*.pt')
    os.replace(foreign, mine)
    with pytest.warns(UserWarning, match='it was written as'):
        out = run(tmp_path / 'this', 0)
    s = tsgcn_operator(data(0), 1.0, 0.4).to_dense()
    eye = torch.eye(small, dtype=torch.float64)
    expected = torch.linalg.inv(eye - s)
    w, v = out.lowrank_w, out.lowrank_v
    got = eye - w @ torch.linalg.solve(torch.eye(small, dtype=torch.float64) + v.T @ w, v.T)
    # Eigenpairs to tol 1e-12, gains up to 1 + α + β = 2.4: 1e-9 relative is
    # loose; the other graph's factors are O(1) off.
    assert float((got - expected).norm() / expected.norm()) < 1e-9


# 6. Temporary files of dead writers are removed, never a live writer's. -----

def _killed_between_write_and_rename(path):
    """Saves an entry and dies (SIGKILL) after the temporary write, before the
    rename: what a crash or an OOM kill at that moment leaves."""
    import signal

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    os.replace = die
    factor_cache.save(path, {'w': torch.ones(3, 2)}, {'tol': 1e-4})


def _temporaries(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith('.tmp'))


def _dead_writer(tmp_path):
    """The name of the temporary file that a killed writer left behind."""
    context = process_context()
    writer = context.Process(target=_killed_between_write_and_rename,
                             args=(str(tmp_path / 'lowrank-other.pt'),))
    writer.start()
    writer.join(timeout=120)
    assert writer.exitcode == -9  # killed (and reaped: its process is gone)
    (name,) = _temporaries(tmp_path)
    assert f'~{writer.pid}~' in name
    return name


def _age(path, seconds):
    """Sets the last write of :obj:`path` :obj:`seconds` in the past."""
    past = time.time() - seconds
    os.utime(path, (past, past))


needs_posix = pytest.mark.skipif(os.name != 'posix', reason='SIGKILL and process numbers')


@needs_posix
@pytest.mark.parametrize('next_use', ['read', 'write'])
def test_a_dead_writers_temporary_file_is_removed_by_the_next_use(tmp_path, next_use):
    reference = LowRankInverse(1.0, 0.4, rank=RANK, progress=False)(graph())
    if next_use == 'read':
        transform(tmp_path)(graph())  # the entry exists: the next run only reads
    name = _dead_writer(tmp_path)
    # Just written, its writer's pid gone: it may be a live writer in another
    # container of this host name (another pid namespace), so it is kept ...
    assert factor_cache.remove_stale_temporaries(str(tmp_path)) == []
    assert _temporaries(tmp_path) == [name]
    # ... until untouched for DEAD_WRITER_AFTER (aged here, not awaited).
    _age(tmp_path / name, factor_cache.DEAD_WRITER_AFTER + 5)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        out = transform(tmp_path)(graph())
    assert cache_warnings(record) == []
    assert _temporaries(tmp_path) == []
    assert torch.equal(out.lowrank_w, reference.lowrank_w)
    assert torch.equal(out.lowrank_v, reference.lowrank_v)


def _temporary_name(entry, host, pid):
    return f'{entry}~{host}~{pid}~abcd1234.tmp'


@needs_posix
def test_a_live_writers_temporary_file_is_kept_until_it_dies(tmp_path):
    import subprocess
    import sys
    writer = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
    try:
        name = _temporary_name('lowrank-other.pt', factor_cache._host(), writer.pid)
        (tmp_path / name).write_bytes(b'half written')
        # Older than DEAD_WRITER_AFTER: only its live process keeps it (a frozen
        # writer; younger ones are kept by their age alone).
        _age(tmp_path / name, factor_cache.DEAD_WRITER_AFTER + 5)
        transform(tmp_path)(graph())  # a write
        transform(tmp_path)(graph())  # a read
        assert _temporaries(tmp_path) == [name]
    finally:
        writer.kill()
        writer.wait()
    transform(tmp_path)(graph())  # the writer is gone: its file goes too
    assert _temporaries(tmp_path) == []


def _slow_writer(path, written, proceed, queue):
    """Saves an entry, pausing after the temporary write until told to go on."""
    save = torch.save

    def slow(obj, f, *args, **kwargs):
        save(obj, f, *args, **kwargs)
        written.set()
        proceed.wait(120)

    torch.save = slow
    try:
        factor_cache.save(path, {'w': torch.arange(6.0).view(3, 2)}, {'tol': 1e-4})
        queue.put('saved')
    except Exception as error:  # noqa: BLE001 - reported to the test
        queue.put(repr(error))


@needs_posix
def test_a_concurrent_writer_paused_before_its_rename_is_not_disturbed(tmp_path):
    context = process_context()
    written, proceed, queue = context.Event(), context.Event(), context.Queue()
    path = str(tmp_path / 'lowrank-slow.pt')
    writer = context.Process(target=_slow_writer, args=(path, written, proceed, queue))
    writer.start()
    try:
        assert written.wait(120)
        transform(tmp_path)(graph())  # reads and writes the folder meanwhile
        transform(tmp_path)(graph())
        assert len(_temporaries(tmp_path)) == 1
        proceed.set()
        assert queue.get(timeout=120) == 'saved'
    finally:
        proceed.set()
        writer.join(timeout=60)
    assert _temporaries(tmp_path) == []
    entry = factor_cache.load(path)
    assert torch.equal(entry.tensors['w'], torch.arange(6.0).view(3, 2))


def test_temporary_files_are_removed_by_age_where_no_writer_can_be_asked(tmp_path):
    # A writer on another host (a shared folder), and a file of the format
    # before, which named no writer: removed once untouched for STALE_AFTER.
    old = _temporary_name('lowrank-a.pt', 'other-host', 1234)
    recent = _temporary_name('lowrank-b.pt', 'other-host', 1234)
    legacy_old, legacy_recent = 'lowrank-0a1b.pt.k2j4h5g6.tmp', 'lowrank-0c1d.pt.a1s2d3f4.tmp'
    foreign = ['notes.tmp', 'lowrank-a.pt.tmp', 'data~x~1~y.tmp.bak']  # not save()'s files
    for name in [old, recent, legacy_old, legacy_recent, *foreign]:
        (tmp_path / name).write_bytes(b'')
    past = time.time() - factor_cache.STALE_AFTER - 60
    for name in [old, legacy_old, *foreign]:
        os.utime(tmp_path / name, (past, past))
    transform(tmp_path)(graph())
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith('lowrank-')
                  or not p.name.endswith('.pt'))
    assert left == sorted([recent, legacy_recent, *foreign])
