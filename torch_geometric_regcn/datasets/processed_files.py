r"""The safe reading of a dataset's processed files: only what
:obj:`torch.load(weights_only=True)` accepts is ever opened."""
import os
import os.path as osp
import re
import warnings
import zipfile
from typing import Any, Callable, List, Optional, Sequence, Tuple, Type, Union

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


def vet_processed(folder: str, processed_names: Sequence[str], force_reload: bool) -> bool:
    r"""Returns the :obj:`force_reload` to pass to a dataset whose processed
    files :obj:`processed_names` lie in :obj:`folder`: :obj:`True` (with a
    warning per file) when one of them, or PyG's :obj:`pre_transform.pt` or
    :obj:`pre_filter.pt` there, does not load with
    :obj:`torch.load(weights_only=True)`. The dataset is then processed again
    from its raw files, which overwrites the file before PyG, which unpickles
    some of these files with :obj:`weights_only=False`, opens it."""
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
    return bool(bad)


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
        force_reload = vet_processed(osp.join(root, self.name, 'processed'), names,
                                     bool(force_reload))
        super().__init__(root, transform, pre_transform, force_reload=force_reload)
        self.load(self.processed_paths[0])

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
