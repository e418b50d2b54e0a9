r"""transforms.factor_cache, function by function: cache_key() is stable
and sees every byte, dtype, shape and name; checksum(); save() and load()
round trip and load() refuses what fails the checksum or the expected
names, shapes, dtypes and numbers, or was written under another name;
remove_stale_temporaries(); factors_path(), shard_key(),
load_factors(), save_factors() and check_cache_dir(). The faults of the cache
as LowRankInverse meets them (damaged files, full disks, concurrent writers)
are in tests/reliability/test_factor_cache.py."""
import os
import re
import time
import warnings

import pytest
import torch

from torch_geometric_regcn.distributed import RowPartition
from torch_geometric_regcn.transforms import factor_cache

HEX40 = re.compile(r'[0-9a-f]{40}')


def tensors(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {'w': torch.randn(6, 2, dtype=torch.float64, generator=gen),
            'v': torch.randn(6, 2, dtype=torch.float64, generator=gen)}


def load_quietly(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # a valid file loads without a warning
        return factor_cache.load(*args, **kwargs)


# cache_key, checksum ---------------------------------------------------------

def test_cache_key_is_stable():
    x = torch.randn(5, 3, dtype=torch.float64)
    key = factor_cache.cache_key(x=x, alpha=1.0, rank=8, semantic=None)
    assert HEX40.fullmatch(key)
    # The same values in new tensors and in another keyword order: the same key.
    assert factor_cache.cache_key(rank=8, semantic=None, alpha=1.0, x=x.clone()) == key
    # A non-contiguous view with the same values and shape: the same key.
    assert factor_cache.cache_key(x=x.T.contiguous().T, alpha=1.0, rank=8,
                                    semantic=None) == key


def test_cache_key_sees_every_difference():
    x = torch.randn(5, 3, dtype=torch.float64)
    base = factor_cache.cache_key(x=x, alpha=1.0)
    flipped = x.clone()
    flipped.view(torch.int64)[4, 2] ^= 1  # the last bit of one entry
    changes = {
        'one bit': dict(x=flipped, alpha=1.0),
        'dtype': dict(x=x.float(), alpha=1.0),
        'shape, same bytes': dict(x=x.reshape(3, 5), alpha=1.0),
        'a value': dict(x=x, alpha=1.0 + 1e-15),
        'a value type': dict(x=x, alpha=1),
        'a name': dict(y=x, alpha=1.0),
        'a missing tensor': dict(x=None, alpha=1.0),
        'an extra item': dict(x=x, alpha=1.0, beta=None),
    }
    keys = {name: factor_cache.cache_key(**items) for name, items in changes.items()}
    assert base not in keys.values()
    assert len(set(keys.values())) == len(keys)


def test_cache_key_of_sparse_tensors_reads_their_coalesced_entries():
    index = torch.tensor([[0, 2, 0, 1], [1, 0, 1, 2]])  # (0, 1) twice
    values = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    coo = torch.sparse_coo_tensor(index, values, (3, 3))
    key = factor_cache.cache_key(a=coo)
    assert factor_cache.cache_key(a=coo.coalesce()) == key
    assert factor_cache.cache_key(a=coo.to_sparse_csr()) == key
    assert factor_cache.cache_key(a=coo.to_dense()) != key  # dense: another layout of bytes
    assert factor_cache.cache_key(a=coo * 2) != key


def test_cache_key_changes_with_the_release(monkeypatch):
    key = factor_cache.cache_key(alpha=1.0)
    monkeypatch.setattr(factor_cache, '__version__', '0.0.0-other')
    assert factor_cache.cache_key(alpha=1.0) != key
    monkeypatch.undo()
    monkeypatch.setattr(factor_cache, 'CACHE_FORMAT', 'regcn-lowrank-other')
    assert factor_cache.cache_key(alpha=1.0) != key


def test_checksum_covers_tensors_and_values():
    t = tensors()
    base = factor_cache.checksum(t, {'tol': 1e-4})
    assert re.fullmatch(r'[0-9a-f]{64}', base)
    assert factor_cache.checksum({k: v.clone() for k, v in t.items()}, {'tol': 1e-4}) == base
    changed = dict(t, w=t['w'].clone())
    changed['w'][0, 0] += 1e-12
    assert factor_cache.checksum(changed, {'tol': 1e-4}) != base
    assert factor_cache.checksum(t, {'tol': 1e-5}) != base
    assert factor_cache.checksum(t, {}) != base
    assert factor_cache.checksum({'w2': t['w'], 'v': t['v']}, {'tol': 1e-4}) != base


def test_checksum_covers_the_key():
    t = tensors()
    base = factor_cache.checksum(t, {'tol': 1e-4}, 'lowrank-a.pt')
    assert factor_cache.checksum(t, {'tol': 1e-4}, 'lowrank-a.pt') == base
    assert factor_cache.checksum(t, {'tol': 1e-4}, 'lowrank-b.pt') != base
    assert factor_cache.checksum(t, {'tol': 1e-4}) != base


def test_entry_key_is_the_file_name(tmp_path):
    assert factor_cache.entry_key(str(tmp_path / 'lowrank-abc.pt')) == 'lowrank-abc.pt'


# save, load --------------------------------------------------------------------

def test_a_file_loads_only_under_the_name_it_was_written_as(tmp_path):
    factor_cache.save(str(tmp_path / 'a.pt'), tensors())
    assert torch.load(tmp_path / 'a.pt', weights_only=True)['key'] == 'a.pt'
    os.replace(tmp_path / 'a.pt', tmp_path / 'b.pt')
    with pytest.warns(UserWarning, match=r"Ignoring the cache file '.*b\.pt': it was written "
                                         r"as 'a\.pt', the entry of other inputs .*copied or "
                                         r"renamed to 'b\.pt'; recomputing"):
        assert factor_cache.load(str(tmp_path / 'b.pt')) is None
    os.replace(tmp_path / 'b.pt', tmp_path / 'a.pt')
    assert load_quietly(str(tmp_path / 'a.pt')) is not None


def test_the_temporary_file_names_its_writer(tmp_path, monkeypatch):
    names = []
    save = torch.save

    def spy(obj, f, *args, **kwargs):
        names.append(os.path.basename(f))
        return save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, 'save', spy)
    factor_cache.save(str(tmp_path / 'lowrank-k.pt'), tensors())
    (name,) = names
    assert re.fullmatch(rf'lowrank-k\.pt~{re.escape(factor_cache._host())}~{os.getpid()}~'
                        r'[a-z0-9_]+\.tmp', name)
    assert factor_cache._TEMPORARY.fullmatch(name)


def test_remove_stale_temporaries_names_what_it_removed(tmp_path):
    assert factor_cache.remove_stale_temporaries(str(tmp_path / 'none')) == []
    host = factor_cache._host()
    own = f'e.pt~{host}~{os.getpid()}~x.tmp'  # this live process
    # Numbers no process has: above Linux's largest pid, and above any pid_t.
    gone = [f'e.pt~{host}~{2 ** 31 - 1}~x.tmp', f'e.pt~{host}~{2 ** 40}~x.tmp']
    # A dead writer's file written just now: perhaps a live writer in another
    # container of this host name, so kept until DEAD_WRITER_AFTER untouched.
    recent = f'f.pt~{host}~{2 ** 31 - 1}~x.tmp'
    for name in (own, *gone, recent):
        (tmp_path / name).write_bytes(b'')
    past = time.time() - factor_cache.DEAD_WRITER_AFTER - 5  # aged, not awaited
    for name in (own, *gone):
        os.utime(tmp_path / name, (past, past))
    assert sorted(factor_cache.remove_stale_temporaries(str(tmp_path))) == sorted(gone)
    assert sorted(os.listdir(tmp_path)) == sorted([own, recent])

def test_save_and_load_round_trip(tmp_path):
    path = str(tmp_path / 'sub' / 'entry.pt')  # the folder is created
    t = tensors()
    factor_cache.save(path, t, {'residual': 1e-9, 'tol': 1e-6, 'method': 'lanczos'})
    assert sorted(os.listdir(tmp_path / 'sub')) == ['entry.pt']  # no temporary file left
    entry = load_quietly(path, shapes={'w': (6, 2), 'v': [6, 2]}, dtype=torch.float64,
                         meta=('residual', 'tol'))
    assert isinstance(entry, factor_cache.Entry)
    assert entry.tensors.keys() == t.keys()
    assert all(torch.equal(entry.tensors[k], t[k]) for k in t)
    assert entry.meta == {'residual': 1e-9, 'tol': 1e-6, 'method': 'lanczos'}
    assert load_quietly(path) is not None  # nothing expected: any valid entry
    # Saved again with other tensors: replaced.
    factor_cache.save(path, tensors(1))
    assert torch.equal(load_quietly(path).tensors['w'], tensors(1)['w'])


def test_saving_detaches_and_makes_contiguous(tmp_path):
    w = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    factor_cache.save(str(tmp_path / 'e.pt'), {'w': w.T})
    loaded = load_quietly(str(tmp_path / 'e.pt')).tensors['w']
    assert not loaded.requires_grad and loaded.is_contiguous()
    assert torch.equal(loaded, w.detach().T)


def test_a_missing_file_is_a_silent_miss(tmp_path):
    assert load_quietly(str(tmp_path / 'none.pt')) is None
    assert load_quietly(str(tmp_path / 'no-folder' / 'none.pt')) is None


def test_a_changed_tensor_fails_the_checksum(tmp_path):
    path = str(tmp_path / 'e.pt')
    factor_cache.save(path, tensors(), {'tol': 1e-6})
    payload = torch.load(path, weights_only=True)
    payload['tensors']['w'][2, 1] += 1.0  # the stored checksum no longer matches
    torch.save(payload, path)
    with pytest.warns(UserWarning, match=rf"Ignoring the cache file '{re.escape(path)}': "
                                         r"checksum mismatch \(the file is damaged\); "
                                         r"recomputing and overwriting it"):
        assert factor_cache.load(path) is None
    payload['meta']['tol'] = 1e-3  # nor does a changed value
    torch.save(payload, path)
    with pytest.warns(UserWarning, match='checksum mismatch'):
        assert factor_cache.load(path) is None


@pytest.mark.parametrize('expected, message', [
    (dict(shapes={'w': (6, 2)}), "unexpected 'v'"),
    (dict(shapes={'w': (6, 2), 'v': (6, 2), 'u': (6, 2)}), "missing 'u'"),
    (dict(shapes={'w': (6, 3), 'v': (6, 2)}), r"'w' has shape \[6, 2\], expected \[6, 3\]"),
    (dict(dtype=torch.float32), "'w' has dtype torch.float64, expected torch.float32"),
    (dict(meta=('residual',)), r"the value 'residual' is missing or not a number \(got None\)"),
    (dict(meta=('flag',)), r"the value 'flag' is missing or not a number \(got True\)"),
    (dict(meta=('nan',)), r"the value 'nan' is missing or not a number \(got nan\)"),
    (dict(meta=('name',)), "the value 'name' is missing or not a number"),
])
def test_load_names_what_is_not_as_expected(tmp_path, expected, message):
    path = str(tmp_path / 'e.pt')
    factor_cache.save(path, tensors(), {'flag': True, 'nan': float('nan'), 'name': 'x'})
    with pytest.warns(UserWarning, match=rf"Ignoring the cache file '.*e\.pt': .*{message}"):
        assert factor_cache.load(path, **expected) is None


def test_non_finite_tensors_are_refused(tmp_path):
    path = str(tmp_path / 'e.pt')
    t = tensors()
    t['v'][1, 1] = float('inf')
    factor_cache.save(path, t)
    with pytest.warns(UserWarning, match="'v' contains NaN or infinite values"):
        assert factor_cache.load(path) is None


# factors_path, shard_key, load_factors, save_factors -----------------------------

def test_factors_path(tmp_path, monkeypatch):
    assert factor_cache.factors_path(str(tmp_path), 'abc') == str(tmp_path / 'lowrank-abc.pt')
    monkeypatch.setenv('HOME', str(tmp_path))
    assert factor_cache.factors_path('~/cache', 'k') == str(tmp_path / 'cache' / 'lowrank-k.pt')


def test_one_process_keeps_its_key():
    assert factor_cache.shard_key('00ff', None, None) == '00ff'


def test_a_shard_key_names_the_part_and_hashes_every_ranks_key():
    key = factor_cache.cache_key(alpha=1.0)
    shard = factor_cache.shard_key(key, RowPartition.even(10, 1), None)
    common, suffix = shard.split('-', 1)
    assert HEX40.fullmatch(common) and suffix == 'part0of1' and common != key
    # The same inputs give the same key; another rank's key or another
    # partition (world size, rank) gives another file.
    assert factor_cache.shard_key(key, RowPartition.even(10, 1), None) == shard
    assert factor_cache.shard_key(key, RowPartition.even(10, 2, 1), None).endswith('part1of2')
    other = factor_cache.shard_key(factor_cache.cache_key(alpha=2.0), RowPartition.even(10, 1),
                                   None)
    assert other != shard


def test_factor_files_round_trip_and_warn_when_unconverged(tmp_path):
    w = torch.randn(5, 2, dtype=torch.float64)
    v = torch.randn(5, 2, dtype=torch.float64)
    path = factor_cache.factors_path(str(tmp_path), 'abc')
    assert path == str(tmp_path / 'lowrank-abc.pt')
    factor_cache.save_factors(path, w, v, residual=1e-3, tol=1e-4)
    with pytest.warns(UserWarning, match=r'residual 1\.00e-03 > tol=0\.0001'):
        loaded = factor_cache.load_factors(path, (5, 2), torch.float64, torch.device('cpu'))
    assert torch.equal(loaded[0], w) and torch.equal(loaded[1], v)
    with pytest.warns(UserWarning, match=r'shape \[5, 2\], expected \[6, 2\]'):
        assert factor_cache.load_factors(path, (6, 2), torch.float64,
                                         torch.device('cpu')) is None
    assert factor_cache.load_factors(str(tmp_path / 'none.pt'), (5, 2), torch.float64,
                                     torch.device('cpu')) is None


def test_converged_factors_load_silently_and_a_failed_save_warns(tmp_path):
    w, v = tensors()['w'], tensors()['v']
    path = factor_cache.factors_path(str(tmp_path), 'k')
    factor_cache.save_factors(path, w, v, residual=1e-8, tol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        loaded = factor_cache.load_factors(path, (6, 2), torch.float64, torch.device('cpu'))
    assert torch.equal(loaded[0], w) and torch.equal(loaded[1], v)
    (tmp_path / 'file').write_text('')
    blocked = str(tmp_path / 'file' / 'lowrank-k.pt')  # its folder is a file
    with pytest.warns(UserWarning, match=r"could not save the factors to the cache .*"
                                         r"returning them uncached; check that 'cache_dir'"):
        factor_cache.save_factors(blocked, w, v, residual=1e-8, tol=1e-6)


# check_cache_dir ---------------------------------------------------------------

def test_check_cache_dir_creates_the_folder_and_returns_a_string(tmp_path):
    target = tmp_path / 'a' / 'b'
    assert factor_cache.check_cache_dir(target) == str(target)
    assert target.is_dir()
    assert factor_cache.check_cache_dir(str(target)) == str(target)  # again: fine


def test_check_cache_dir_errors_name_the_argument_and_the_fix(tmp_path, monkeypatch):
    (tmp_path / 'file').write_text('')
    with pytest.raises(ValueError, match=r"'cache_dir' must be a folder, but '.*file' is a "
                                         r"file; pass another path, or cache_dir=None"):
        factor_cache.check_cache_dir(tmp_path / 'file')
    with pytest.raises(ValueError, match=r"'cache_dir' '.*file/cache' cannot be created "
                                         r"\(.*\); pass a writable folder, or cache_dir=None"):
        factor_cache.check_cache_dir(tmp_path / 'file' / 'cache')
    access = os.access
    monkeypatch.setattr(os, 'access', lambda path, mode, *args, **kwargs:
                        False if str(path) == str(tmp_path) else access(path, mode))
    with pytest.raises(ValueError, match=r"'cache_dir' '.*' is not writable; pass a writable "
                                         r"folder \(or fix its permissions\), or "
                                         r"cache_dir=None"):
        factor_cache.check_cache_dir(tmp_path)


@pytest.mark.parametrize('value, error', [(3, TypeError), (b'cache', TypeError),
                                          ('', ValueError)])
def test_check_cache_dir_rejects_what_is_not_a_path(value, error):
    with pytest.raises(error, match="'cache_dir' must"):
        factor_cache.check_cache_dir(value)
