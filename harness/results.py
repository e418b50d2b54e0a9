r"""Where a benchmark keeps its per-run results: one JSON-lines file, one
object per run, appended and flushed as each run finishes, so an interrupted
benchmark resumes by skipping the runs already stored."""
import json
import os
import os.path as osp
import warnings
from contextlib import contextmanager
from typing import IO, Any, Callable, Dict, Iterator, List, Optional

try:  # POSIX: processes that share a store take turns to write it
    import fcntl
except ImportError:  # pragma: no cover (Windows: one writer at a time, by convention)
    fcntl = None

Record = Dict[str, Any]


class ResultStore:
    r"""The runs stored in the JSON-lines file :obj:`path`, each identified by
    ``key(record)``.

    Opening the store reads the file (a missing file is an empty store). A
    last line without its newline is a run whose writing was interrupted: it
    is cut off (unless another process appended since), with a warning, so
    the run is done again. A line that is not JSON or has no key, and two
    lines with the same key, are errors naming the line (a run is stored
    once). Several processes may share a store: on POSIX systems each
    write (and the cut) holds an exclusive lock on the file, and a run that
    another process stored since this one read the file is not written
    again (its stored record is kept).

    Example::

        store = ResultStore('results.jsonl', key=lambda r: f"{r['name']}__{r['seed']}")
        if 'a__0' not in store:
            store.add({'name': 'a', 'seed': 0, 'value': 1.5})
        values = [r['value'] for r in store]
    """

    def __init__(self, path: str, key: Callable[[Record], str]):
        self.path, self.key = path, key
        self._records: Dict[str, Record] = {}
        if not osp.exists(path):
            return
        with open(path, 'rb') as f:
            data = f.read()
        end = data.rfind(b'\n') + 1
        if end < len(data):  # an interrupted write: drop the partial line
            warnings.warn(f'{path}: its last line was cut short (a run stopped while '
                          f'writing it); it is dropped and that run is done again',
                          stacklevel=2)
            with open(path, 'r+b') as f, _locked(f):
                # Only if nothing was appended since it was read (another process).
                if f.seek(0, os.SEEK_END) == len(data):
                    f.truncate(end)
        for number, line in enumerate(data[:end].decode('utf-8').splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                k = key(record)
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f'{path}, line {number}: not a run of this store '
                                 f'({type(error).__name__}: {error})') from error
            if k in self._records:
                raise ValueError(f'{path}, line {number}: run {k!r} is stored twice')
            self._records[k] = record

    def __contains__(self, key: str) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Record]:
        r"""The records in the order of the file."""
        return iter(list(self._records.values()))

    def get(self, key: str) -> Optional[Record]:
        r"""The record stored under :obj:`key`, or :obj:`None`."""
        return self._records.get(key)

    def records(self) -> List[Record]:
        r"""The records in the order of the file."""
        return list(self._records.values())

    def add(self, record: Record) -> None:
        r"""Appends :obj:`record` as one line and flushes it to the file.
        Raises :class:`ValueError` if a run of the same key is stored."""
        k = self.key(record)
        if k in self._records:
            raise ValueError(f'run {k!r} is already stored in {self.path}')
        line = json.dumps(record) + '\n'
        os.makedirs(osp.dirname(osp.abspath(self.path)), exist_ok=True)
        with open(self.path, 'a+') as f, _locked(f):
            f.seek(0)
            text = f.read()
            for stored in text.splitlines():  # what other processes added since
                try:
                    other = json.loads(stored)
                    if self.key(other) == k:
                        warnings.warn(f'{self.path}: run {k!r} was stored by another '
                                      f'process meanwhile; its record is kept', stacklevel=2)
                        self._records[k] = other
                        return
                except (ValueError, KeyError, TypeError):
                    continue  # a cut line (below), or not this store's: checked on opening
            if text and not text.endswith('\n'):  # a writer died mid-line: cut it off
                warnings.warn(f'{self.path}: its last line was cut short (a run stopped while '
                              f'writing it); it is dropped', stacklevel=2)
                f.truncate(len(text[:text.rfind('\n') + 1].encode('utf-8')))
            f.seek(0, os.SEEK_END)
            f.write(line)
            f.flush()
        self._records[k] = record


@contextmanager
def _locked(f: IO) -> Iterator[None]:
    r"""An exclusive lock on the open file :obj:`f` (none without
    :mod:`fcntl`)."""
    if fcntl is None:
        yield
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
