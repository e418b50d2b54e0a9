r"""The on-disk cache of :class:`~torch_geometric_regcn.LowRankInverse`'s
factors: files of tensors keyed by a hash of their inputs.

A cache file holds the tensors, a few plain values (:obj:`meta`), the name
it was written under (its key) and a checksum over all three. :func:`load`
trusts none of it: a file that cannot be read, lacks the checksum (an older
format), fails it, was written under another name (a file copied or renamed
from another input's entry), or holds other names, shapes, dtypes or
non-finite values than expected is reported by a warning that names the file
and the problem, and counts as a miss, so the caller recomputes and
overwrites it. :func:`save` writes atomically, through a temporary file
named after the writer's host and process; :func:`load` and :func:`save`
remove those of writers that died before their rename
(:func:`remove_stale_temporaries`). :func:`load_factors` and
:func:`save_factors` are the transform's reads and writes; :func:`shard_key`
keys a rank's file on row shards. The policy (what a key covers, when files
are recomputed, which temporary files are removed) is in ``docs/tsgcn.md``,
and for shards in ``docs/distributed.md``.
"""
import hashlib
import math
import os
import os.path as osp
import re
import socket
import tempfile
import time
import warnings
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, all_gather_ints
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.utils.validation import as_root
from torch_geometric_regcn.version import __version__  # solver changes come with releases

#: Bumped whenever a solver change alters the cached results.
CACHE_FORMAT = 'regcn-lowrank-4'

#: The layout of a cache file (the tensors, :obj:`meta`, its key and a checksum).
FILE_FORMAT = 'regcn-cache-3'

#: Seconds after its last write when any temporary file of :func:`save` counts
#: as abandoned (a writer on another host, or one whose process number was
#: reused): a live writer's file grows while it writes and is renamed within
#: microseconds of its last write.
STALE_AFTER = 3600.0

#: Seconds after its last write when a temporary file of :func:`save` whose
#: writer, named in it, ran on this host and no longer exists counts as
#: abandoned. Not at once: containers may share a host name but not their
#: process numbers, so a writer alive in another one looks dead from here; a
#: live writer renames its file within microseconds of its last write.
DEAD_WRITER_AFTER = 60.0


def _update(digest: Any, items: Mapping[str, Any]) -> None:
    for name in sorted(items):
        value = items[name]
        digest.update(f'|{name}='.encode())
        if isinstance(value, Tensor):
            tensors = [value.detach()]
            if value.layout == torch.sparse_coo:
                value = value.detach().coalesce()
                tensors = [value.indices(), value.values()]
            elif value.layout != torch.strided:
                value = value.detach().to_sparse_coo().coalesce()
                tensors = [value.indices(), value.values()]
            for tensor in tensors:
                tensor = tensor.contiguous().cpu()
                digest.update(f'{tensor.dtype}{tuple(tensor.shape)}'.encode())
                digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
        else:
            digest.update(repr(value).encode())


def cache_key(**items: Any) -> str:
    r"""A hex digest of named tensors (dtype, shape and bytes; sparse ones by
    their coalesced indices and values) and plain values (by :func:`repr`).
    :obj:`None` items count too, so a missing tensor differs from any given."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f'{CACHE_FORMAT}|{__version__}'.encode())
    _update(digest, items)
    return digest.hexdigest()


def checksum(tensors: Mapping[str, Tensor], meta: Mapping[str, Any],
             key: Optional[str] = None) -> str:
    r"""The blake2b digest of a cache file's payload: the names, dtypes,
    shapes and bytes of :obj:`tensors`, the names and :func:`repr` of the
    :obj:`meta` values, and the entry's :obj:`key` (the file name it was
    written under, see :func:`entry_key`)."""
    digest = hashlib.blake2b(digest_size=32)
    digest.update(FILE_FORMAT.encode())
    _update(digest, {f'tensor:{name}': t for name, t in tensors.items()})
    _update(digest, {f'meta:{name}': value for name, value in meta.items()})
    _update(digest, {'key': key})
    return digest.hexdigest()


def entry_key(path: str) -> str:
    r"""The key of the cache entry at :obj:`path`: its file name (for the
    factors, :obj:`lowrank-<hash of the inputs>.pt`), which :func:`save`
    stores under the checksum and :func:`load` compares."""
    return osp.basename(path)


class Entry(NamedTuple):
    r"""The content of a valid cache file."""
    tensors: Dict[str, Tensor]  #: by name, on the CPU
    meta: Dict[str, Any]  #: plain values saved with them


def _problems(payload: Any, key: str, shapes: Optional[Mapping[str, Sequence[int]]],
              dtype: Optional[torch.dtype], meta: Sequence[str]) -> List[str]:
    r"""What is wrong with a payload loaded as the entry :obj:`key` (nothing:
    an empty list)."""
    if not isinstance(payload, dict):
        return [f'it holds a {type(payload).__name__}, not a cache entry']
    if 'checksum' not in payload:
        return ['it has no checksum (an older format, or not a cache file)']
    if payload.get('format') != FILE_FORMAT:
        return [f"its format is {payload.get('format')!r}, not {FILE_FORMAT!r}"]
    tensors, values = payload.get('tensors'), payload.get('meta')
    if (not isinstance(tensors, dict) or not isinstance(values, dict)
            or not all(isinstance(t, Tensor) for t in tensors.values())):
        return ['its tensors or values are malformed']
    if payload['checksum'] != checksum(tensors, values, payload.get('key')):
        return ['checksum mismatch (the file is damaged)']
    if payload.get('key') != key:
        return [f"it was written as {payload.get('key')!r}, the entry of other inputs (another "
                f"graph, other arguments or another rank's shard), and copied or renamed to "
                f"{key!r}"]
    problems = []
    if shapes is not None:
        problems += [f"missing '{name}'" for name in shapes if name not in tensors]
        problems += [f"unexpected '{name}'" for name in tensors if name not in shapes]
        for name, shape in shapes.items():
            if name in tensors and tuple(tensors[name].shape) != tuple(shape):
                problems.append(f"'{name}' has shape {list(tensors[name].shape)}, "
                                f"expected {list(shape)}")
    for name, tensor in tensors.items():
        if dtype is not None and tensor.dtype != dtype:
            problems.append(f"'{name}' has dtype {tensor.dtype}, expected {dtype}")
        elif tensor.is_floating_point() and not bool(tensor.isfinite().all()):
            problems.append(f"'{name}' contains NaN or infinite values")
    for name in meta:
        value = values.get(name)
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or math.isnan(value)):
            problems.append(f"the value '{name}' is missing or not a number (got {value!r})")
    return problems


def load(path: str, shapes: Optional[Mapping[str, Sequence[int]]] = None,
         dtype: Optional[torch.dtype] = None, meta: Sequence[str] = ()) -> Optional[Entry]:
    r"""The content of the cache file at :obj:`path`, or :obj:`None` when there
    is none or it is not valid. A file is valid when it can be read (with
    :obj:`weights_only=True`), is in the current format, passes its
    checksum, was written under this file name (:func:`entry_key`) and,
    where given, holds exactly the tensors named in :obj:`shapes` with these
    shapes, of :obj:`dtype`, finite, and the numbers named in :obj:`meta`. An
    invalid file is reported by a warning that names it and what is wrong;
    the caller recomputes it and overwrites it. Temporary files of dead
    writers in its folder are removed first (:func:`remove_stale_temporaries`).

    Args:
        path (str): The cache file.
        shapes (Mapping[str, Sequence[int]], optional): The expected tensors
            and their shapes. (default: :obj:`None`, any)
        dtype (torch.dtype, optional): The expected dtype of every tensor.
            (default: :obj:`None`, any)
        meta (Sequence[str], optional): The names of the numbers expected
            among the saved values. (default: :obj:`()`)
    """
    remove_stale_temporaries(osp.dirname(osp.abspath(path)))
    try:
        payload = torch.load(path, map_location='cpu', weights_only=True)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None  # none (yet, or removed since): a miss; a failing save will tell
    except Exception as error:  # noqa: BLE001 - a damaged cache entry is a miss
        warnings.warn(f"Ignoring the unreadable cache file '{path}' ({error}); recomputing "
                      f"and overwriting it", UserWarning, stacklevel=2)
        return None
    problems = _problems(payload, entry_key(path), shapes, dtype, meta)
    if problems:
        warnings.warn(f"Ignoring the cache file '{path}': {'; '.join(problems)}; recomputing "
                      f"and overwriting it", UserWarning, stacklevel=2)
        return None
    return Entry(payload['tensors'], payload['meta'])


def save(path: str, tensors: Dict[str, Tensor], meta: Optional[Dict[str, Any]] = None) -> None:
    r"""Saves :obj:`tensors` and the plain values :obj:`meta` (numbers,
    strings) with the entry's key (:func:`entry_key`) and their
    :func:`checksum`, atomically (write to a temporary file, then rename), so
    a crash or a concurrent run never leaves a half-written file. The
    temporary file, :obj:`<name>~<host>~<pid>~<random>.tmp` beside
    :obj:`path`, names its writer, so a later :func:`save` or :func:`load`
    can remove it if the writer dies before the rename
    (:func:`remove_stale_temporaries`, run here first). Raises
    :class:`OSError` when the file cannot be written."""
    tensors = {name: t.detach().cpu().contiguous() for name, t in tensors.items()}
    meta = dict(meta or {})
    key = entry_key(path)
    payload = {'format': FILE_FORMAT, 'key': key, 'tensors': tensors, 'meta': meta,
               'checksum': checksum(tensors, meta, key)}
    folder = osp.dirname(osp.abspath(path))
    os.makedirs(folder, exist_ok=True)
    remove_stale_temporaries(folder)
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=f'{key}~{_host()}~{os.getpid()}~',
                                   suffix='.tmp')
    os.close(handle)
    try:
        try:
            torch.save(payload, tmp)
        except RuntimeError as error:  # torch's writer reports a full disk so
            raise OSError(f"could not write '{tmp}' ({error})") from error
        os.replace(tmp, path)
    finally:
        if osp.exists(tmp):
            os.remove(tmp)


# A temporary file of save(): the entry's name, the writer's host and process.
_TEMPORARY = re.compile(r'(?P<key>[^~]+)~(?P<host>[A-Za-z0-9-]+)~(?P<pid>[0-9]+)~[^~]*\.tmp')
# One of the format before (regcn-cache-2), which named no writer: by age only.
_OLD_TEMPORARY = re.compile(r'lowrank-[0-9a-f-]+(part[0-9]+of[0-9]+)?\.pt\.[a-z0-9_]+\.tmp')


def _host() -> str:
    r"""This machine's name as it appears in temporary file names."""
    return re.sub(r'[^A-Za-z0-9-]', '-', socket.gethostname()) or 'host'


def _process_is_alive(pid: int) -> bool:
    r"""Whether process :obj:`pid` of this machine exists (a zombie, killed
    but not yet reaped, still does); :obj:`True` where that cannot be told."""
    if pid == os.getpid():
        return True
    if os.name == 'nt':  # os.kill(pid, 0) would signal it: trust the age only
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # none, or a number no process has
        return False
    except OSError:  # e.g. PermissionError: another user's live process
        return True
    return True


def remove_stale_temporaries(folder: str) -> List[str]:
    r"""Removes the temporary files that :func:`save` left in :obj:`folder`
    when its process died between the write and the rename, and returns
    their names. A file is removed when nothing has written to it for
    :obj:`DEAD_WRITER_AFTER` seconds and its writer, named in it, ran on this
    host and no longer exists, or when nothing has written to it for
    :obj:`STALE_AFTER` seconds (a writer on another host sharing the folder,
    a process number reused since). A live writer's file is never removed
    on its host: its process exists and it is renamed right after its last
    write; one in another container of the same host name is renamed long
    before :obj:`DEAD_WRITER_AFTER`. Files that are not :func:`save`'s are left alone. Cost: one
    listing of :obj:`folder`, one :func:`os.stat` per temporary file."""
    removed: List[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:  # no folder (yet), or not readable: nothing to clean
        return removed
    host, now = _host(), time.time()
    for entry in entries:
        match = _TEMPORARY.fullmatch(entry.name)
        if match is None and _OLD_TEMPORARY.fullmatch(entry.name) is None:
            continue
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
            stale = age >= STALE_AFTER
            if not stale and age >= DEAD_WRITER_AFTER and match is not None \
                    and match['host'] == host:
                stale = not _process_is_alive(int(match['pid']))
            if stale:
                os.remove(entry.path)
                removed.append(entry.name)
        except OSError:  # renamed or removed meanwhile, or not ours to remove
            continue
    return removed


def check_cache_dir(cache_dir: Union[str, 'os.PathLike[str]']) -> str:
    r"""Checks that :obj:`cache_dir` is a writable folder, creating it if
    needed, and returns it as a string."""
    cache_dir = as_root(cache_dir, 'cache_dir')
    path = osp.expanduser(cache_dir)
    if osp.exists(path) and not osp.isdir(path):
        raise ValueError(f"'cache_dir' must be a folder, but '{path}' is a file; pass "
                         f"another path, or cache_dir=None not to cache the factors")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise ValueError(f"'cache_dir' '{path}' cannot be created ({error}); pass a "
                         f"writable folder, or cache_dir=None not to cache the factors"
                         ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"'cache_dir' '{path}' is not writable; pass a writable folder "
                         f"(or fix its permissions), or cache_dir=None not to cache the "
                         f"factors")
    return cache_dir


def shard_key(key: str, partition: Optional[RowPartition], group: Group) -> str:
    r"""The key of this rank's file: :obj:`key` itself in one process; on
    shards a hash of every rank's :obj:`key` (one all-gather), followed by
    :obj:`-part<rank>of<parts>`."""
    if partition is None:
        return key
    digests = all_gather_ints(list(bytes.fromhex(key)), group)
    common = cache_key(ranks=[bytes(digest).hex() for digest in digests])
    return f'{common}-part{partition.rank}of{partition.num_parts}'


def factors_path(cache_dir: str, key: str) -> str:
    r"""The file of the factors keyed :obj:`key` in :obj:`cache_dir`."""
    return osp.join(osp.expanduser(cache_dir), f'lowrank-{key}.pt')


def load_factors(path: str, shape: Tuple[int, int], dtype: torch.dtype,
                 device: torch.device) -> Optional[Tuple[Tensor, Tensor]]:
    r"""The factors :obj:`(w, v)` of shape :obj:`shape` saved at :obj:`path`,
    on :obj:`device`, or :obj:`None` when there is no valid file (see
    :func:`load`). Factors saved without reaching their :obj:`tol` warn, with
    their residual, each time they are loaded."""
    cached = load(path, {'lowrank_w': shape, 'lowrank_v': shape}, dtype,
                  meta=('residual', 'tol'))
    if cached is None:
        return None
    residual, tol = cached.meta['residual'], cached.meta['tol']
    if residual > tol:
        warnings.warn(
            f"LowRankInverse factors loaded from the cache file '{path}' did not "
            f"converge: relative residual {residual:.2e} > tol={tol:g}; raise "
            f"'max_iter' (or 'tol') to compute them anew", UserWarning, stacklevel=4)
    return cached.tensors['lowrank_w'].to(device), cached.tensors['lowrank_v'].to(device)


def save_factors(path: str, w: Tensor, v: Tensor, residual: float, tol: float) -> None:
    r"""Saves the factors with the :obj:`residual` they reached and their
    :obj:`tol`; a failed save warns, with the reason, and is otherwise
    ignored (the caller keeps its factors)."""
    try:
        save(path, {'lowrank_w': w, 'lowrank_v': v}, {'residual': float(residual), 'tol': tol})
    except OSError as error:
        warnings.warn(
            f"LowRankInverse could not save the factors to the cache ({error}); "
            f"returning them uncached; check that 'cache_dir' ('{osp.dirname(path)}') "
            f"is a writable folder with free space", UserWarning, stacklevel=4)
