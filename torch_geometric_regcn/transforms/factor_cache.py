r"""An on-disk cache of precomputed tensors, keyed by a hash of their inputs."""
import hashlib
import os
import os.path as osp
import tempfile
import warnings
from typing import Any, Dict, Optional

import torch
from torch import Tensor

from torch_geometric_regcn.version import __version__  # solver changes come with releases

#: Bumped whenever a solver change alters the cached results.
CACHE_FORMAT = 'regcn-lowrank-1'


def fingerprint(**items: Any) -> str:
    r"""A hex digest of named tensors (dtype, shape and bytes; sparse ones by
    their coalesced indices and values) and plain values (by :func:`repr`).
    :obj:`None` items count too, so a missing tensor differs from any given."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f'{CACHE_FORMAT}|{__version__}'.encode())
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
    return digest.hexdigest()


def load(path: str) -> Optional[Dict[str, Tensor]]:
    r"""The tensors saved at :obj:`path`, or :obj:`None` when there are none
    or the file cannot be read (it is then recomputed and overwritten)."""
    if not osp.isfile(path):
        return None
    try:
        return torch.load(path, map_location='cpu', weights_only=True)
    except Exception as error:  # noqa: BLE001 - a damaged cache entry is a miss
        warnings.warn(f"Ignoring the unreadable cache file '{path}' ({error}); recomputing",
                      UserWarning, stacklevel=2)
        return None


def save(path: str, tensors: Dict[str, Tensor]) -> None:
    r"""Saves :obj:`tensors` atomically (write to a temporary file, then rename),
    so a crash or a concurrent run never leaves a half-written file."""
    os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=osp.dirname(osp.abspath(path)), suffix='.tmp')
    os.close(handle)
    try:
        torch.save({name: t.detach().cpu() for name, t in tensors.items()}, tmp)
        os.replace(tmp, path)
    finally:
        if osp.exists(tmp):
            os.remove(tmp)
