r"""The safe reading of a dataset's processed files: only what
:obj:`torch.load(weights_only=True)` accepts is ever opened."""
import json
import os
import os.path as osp
import re
import warnings
import zipfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, Union

import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.data.data import BaseData
from torch_geometric.io import fs

from torch_geometric_regcn.utils.validation import as_root, check_callable


def safe_torch_load(path: str, mmap: bool = False, map_location: Any = None) -> Any:
    r"""Loads :obj:`path` with :obj:`torch.load(weights_only=True)` and no
    fallback: an object of a class that is not allowlisted, or any code the
    file would run, raises an error instead of being unpickled."""
    mmap = mmap and zipfile.is_zipfile(path)  # mmap needs torch.save's zip format
    return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)


def load_error(e: Exception) -> str:
    r"""The gist of why :func:`safe_torch_load` failed, without PyTorch's
    advice to retry with :obj:`weights_only=False`."""
    text = str(e)
    # The reason follows the marker, on its line or (torch >= 2.13) the next one.
    match = re.search(r'WeightsUnpickler error: *\n?\s*([^\n]*)', text)
    if match is not None and match.group(1).strip():
        return match.group(1).split('. Please use')[0].rstrip('. ')
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__


#: The files PyG's Dataset opens in processed/ besides the processed data itself.
PYG_RECORDS = ('pre_transform.pt', 'pre_filter.pt')


def unsafe_files(folder: str, names: Sequence[str]) -> List[Tuple[str, str]]:
    r"""Returns :obj:`(path, reason)` for every file :obj:`names` in
    :obj:`folder` that :obj:`torch.load(weights_only=True)` refuses or cannot
    read. The tensors are memory-mapped, not read."""
    found = []
    for name in names:
        path = osp.join(folder, name)
        if osp.isfile(path):
            try:
                safe_torch_load(path, mmap=True, map_location='cpu')
            except Exception as e:  # refused or unreadable: either way, process again
                found.append((path, load_error(e)))
    return found


#: The record, kept in processed/, of the raw files the processed ones were
#: made from.
RAW_RECORD = 'raw_files.json'


def raw_files(raw_dir: str) -> Dict[str, List[int]]:
    r"""Every file under :obj:`raw_dir`, by its path relative to it, with
    its size and modification time in nanoseconds: what tells a replaced or
    edited raw file (:math:`O(\text{files})` :func:`os.stat` calls)."""
    found = {}
    for folder, _, files in os.walk(raw_dir):
        for name in files:
            path = osp.join(folder, name)
            info = os.stat(path)
            found[osp.relpath(path, raw_dir)] = [info.st_size, info.st_mtime_ns]
    return dict(sorted(found.items()))


def record_raw_files(folder: str, raw_dir: str,
                     before: Optional[Dict[str, List[int]]] = None) -> None:
    r"""Writes :data:`RAW_RECORD` into the processed :obj:`folder`: the raw
    files (:func:`raw_files`) that its processed files were just made from
    or checked against. Given :obj:`before`, the raw files when the load
    began, the record is written only if none of them changed or vanished
    meanwhile (a file replaced while the loader read it may not be what it
    read), and removed otherwise, so that the next load processes them
    again; files that appeared meanwhile are the loader's download, which
    it read. Nothing when the folder is missing or read-only."""
    if not (osp.isdir(folder) and os.access(folder, os.W_OK)):
        return
    path = osp.join(folder, RAW_RECORD)
    now = raw_files(raw_dir)
    if before is not None and any(now.get(name) != stat for name, stat in before.items()):
        if osp.isfile(path):
            os.remove(path)
        return
    partial = f'{path}.{os.getpid()}.tmp'
    with open(partial, 'w') as f:
        json.dump(now, f)
    os.replace(partial, path)  # atomic: a concurrent reader sees one record or the other


def _raw_changed(folder: str, processed_names: Sequence[str], raw_dir: str,
                 now: Dict[str, List[int]]) -> Optional[str]:
    r"""Why the processed files in :obj:`folder` may not hold what the raw
    files in :obj:`raw_dir` hold now (:obj:`now`, their :func:`raw_files`),
    or :obj:`None`: no processed file yet (the loader makes them), or a
    record that matches."""
    if not any(osp.isfile(osp.join(folder, name)) for name in processed_names):
        return None
    try:
        with open(osp.join(folder, RAW_RECORD)) as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        recorded = None
    if recorded == now:
        return None
    if not os.access(folder, os.W_OK):
        warnings.warn(f"'{folder}' holds processed files that cannot be checked against the "
                      f"raw files in '{raw_dir}' (no matching record of them, "
                      f"{RAW_RECORD}) and cannot be processed again there (read-only): "
                      f"they are used as they are", UserWarning, stacklevel=4)
        return None
    if recorded is None:
        return 'no record of the raw files they were made from'
    changed = sorted(set(recorded) ^ set(now)
                     | {name for name in set(recorded) & set(now) if recorded[name] != now[name]})
    return f"the raw files changed since: {', '.join(changed[:5])}"


def vet_processed(folder: str, processed_names: Sequence[str], force_reload: bool,
                  raw_dir: Optional[str] = None,
                  raw: Optional[Dict[str, List[int]]] = None) -> bool:
    r"""Returns the :obj:`force_reload` to pass to a dataset whose processed
    files :obj:`processed_names` lie in :obj:`folder`: :obj:`True` (with a
    warning per file) when one of them, or PyG's :obj:`pre_transform.pt` or
    :obj:`pre_filter.pt` there, does not load with
    :obj:`torch.load(weights_only=True)`. The dataset is then processed again
    from its raw files, which overwrites the file before PyG, which unpickles
    some of these files with :obj:`weights_only=False`, opens it.

    Given :obj:`raw_dir`, also :obj:`True` when the raw files there differ
    (in name, size or modification time) from the record of those the
    processed files were made from (:func:`record_raw_files`, which the
    caller writes after loading; :obj:`raw`: their :func:`raw_files` if the
    caller took them already), with a warning where a record existed, or
    when there is no record: a replaced raw file is read again, never
    answered with the old processed data."""
    if force_reload:
        return True
    bad = unsafe_files(folder, [*processed_names, *PYG_RECORDS])
    for path, reason in bad:
        warnings.warn(
            f"'{path}' does not load with torch.load(weights_only=True) ({reason}), so it is "
            f"not opened: the dataset is processed again from its raw files. A file that was "
            f"planted in the dataset folder could otherwise run code; if your pre_transform "
            f"stores objects of your own classes, allowlist them with "
            f"torch.serialization.add_safe_globals([...]) so this is not repeated",
            UserWarning, stacklevel=3)
    if bad or raw_dir is None:
        return bool(bad)
    reason = _raw_changed(folder, processed_names, raw_dir,
                          raw_files(raw_dir) if raw is None else raw)
    if reason is not None and reason.startswith('the raw files changed'):
        warnings.warn(f"The processed files in '{folder}' are not those of the raw files in "
                      f"'{raw_dir}' ({reason}): the dataset is processed again",
                      UserWarning, stacklevel=3)
    return reason is not None


class SafeInMemoryDataset(InMemoryDataset):
    r"""An :class:`~torch_geometric.data.InMemoryDataset` in
    :obj:`{root}/{name}/raw` and :obj:`{root}/{name}/processed` whose
    processed files are only ever read with :obj:`torch.load(weights_only=True)`
    (the base of the package's own datasets): before PyG opens any of them,
    :func:`vet_processed` checks them, and :meth:`load` never retries
    without :obj:`weights_only`. A subclass sets :obj:`name` before calling
    :meth:`__init__` and may check its raw files first (:meth:`check_raw`)."""
    name: str

    def __init__(self, root: Union[str, os.PathLike], transform: Optional[Callable] = None,
                 pre_transform: Optional[Callable] = None,
                 force_reload: bool = False) -> None:
        root = osp.expanduser(fs.normpath(as_root(root)))  # as PyG does
        check_callable('transform', transform)
        check_callable('pre_transform', pre_transform)
        self.check_raw(root)
        names = self.processed_file_names
        names = [names] if isinstance(names, str) else list(names)
        raw_dir = osp.join(root, self.name, 'raw')
        before = raw_files(raw_dir)  # compared with the record, and after the load
        force_reload = vet_processed(osp.join(root, self.name, 'processed'), names,
                                     bool(force_reload), raw_dir, before)
        super().__init__(root, transform, pre_transform, force_reload=force_reload)
        self.load(self.processed_paths[0])
        record_raw_files(self.processed_dir, self.raw_dir, before)

    def check_raw(self, root: str) -> None:
        r"""Raises before any folder is made when the raw files under
        :obj:`root` are unusable; by default nothing is checked (PyG then
        calls :meth:`download`)."""

    @property
    def raw_dir(self) -> str:
        return osp.join(self.root, self.name, 'raw')

    @property
    def processed_dir(self) -> str:
        return osp.join(self.root, self.name, 'processed')
    def load(self, path: str, data_cls: Type[BaseData] = Data) -> None:
        r"""Loads the processed dataset from :obj:`path` with
        :obj:`torch.load(weights_only=True)` and, unlike
        :meth:`InMemoryDataset.load`, never retries with
        :obj:`weights_only=False`."""
        try:
            out = safe_torch_load(path)
        except Exception as e:
            raise RuntimeError(
                f"'{path}' does not load with torch.load(weights_only=True) "
                f"({load_error(e)}). It is not loaded otherwise, as it could run code. If your "
                f"pre_transform stores objects of your own classes, allowlist them with "
                f"torch.serialization.add_safe_globals([...]); otherwise delete the file or "
                f"pass force_reload=True to process the dataset again") from None
        if isinstance(out, tuple) and len(out) == 3:
            data, slices, data_cls = out
        elif isinstance(out, tuple) and len(out) == 2:
            data, slices = out
        else:
            data = slices = None
        if not (isinstance(data, (dict, BaseData)) and isinstance(slices, (dict, type(None)))
                and isinstance(data_cls, type) and issubclass(data_cls, BaseData)):
            raise RuntimeError(f"'{path}' is not a processed dataset (got "
                               f"{type(out).__name__}); delete it or pass force_reload=True "
                               f"to process the dataset again")
        self.slices = slices
        self.data = data_cls.from_dict(data) if isinstance(data, dict) else data
