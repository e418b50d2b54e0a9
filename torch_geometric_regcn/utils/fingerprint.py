r"""Fingerprints that tell a cache whether a tensor still holds what it was
computed from, including writes that bypass PyTorch's version counter
(through :obj:`.data` or a NumPy array sharing the memory)."""
from typing import Any, Dict, NamedTuple, Tuple

import torch
from torch import Tensor

# Weights of the content sums, one vector per length and device, drawn once.
_WEIGHTS: Dict[Tuple[int, torch.device], Tensor] = {}
# Numbers converted to float64 at a time (8 MiB).
_CHUNK = 1 << 20


class Fingerprint(NamedTuple):
    r"""What :func:`fingerprint` records of a tensor: its identity
    (:obj:`layout`, :obj:`shape`, :obj:`dtype`, :obj:`device`) and
    :obj:`content`, two weighted sums of all its stored numbers."""
    layout: torch.layout
    shape: Tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    content: Tuple[float, ...]


def _weights(n: int, device: torch.device) -> Tensor:
    key = (n, device)
    if key not in _WEIGHTS:
        generator = torch.Generator().manual_seed(n)
        _WEIGHTS[key] = (torch.rand(n, generator=generator, dtype=torch.float64)
                         + 0.5).to(device)
    return _WEIGHTS[key]


def _parts(tensor: Tensor) -> Tuple[Tensor, ...]:
    if tensor.layout == torch.sparse_coo:
        return tensor._indices(), tensor._values()
    if tensor.layout == torch.sparse_csr:
        return tensor.crow_indices(), tensor.col_indices(), tensor.values()
    return (tensor,)


def _content(part: Tensor) -> Tuple[float, float]:
    if part.numel() == 0:
        return 0.0, 0.0
    flat = part.detach().reshape(part.size(0) if part.dim() else 1, -1)  # rows x columns
    rows, cols = flat.shape
    step = max(1, _CHUNK // cols)  # rows converted to float64 at a time
    with torch.autocast(part.device.type, enabled=False):
        weights = _weights(cols, part.device)
        mixed = torch.cat([flat[s:s + step].to(torch.float64) @ weights
                           for s in range(0, rows, step)])  # [rows]
        sums = torch.stack([mixed @ _weights(rows, part.device), mixed.sum()])
    return tuple(sums.tolist())


def fingerprint(tensor: Any) -> Any:
    r"""A :class:`Fingerprint` of :obj:`tensor` (a dense or sparse tensor),
    equal for two calls exactly when the tensor kept its shape, dtype, device
    and numbers, up to the chance that an edit leaves two random weighted
    sums of float64 numbers unchanged. Non-tensors are returned as they are.

    Cost: one pass over the stored numbers, converted to float64 in chunks
    of :math:`2^{20}` (:math:`O(\text{numel})` time, 8 MiB plus
    :math:`O(\text{rows} + \text{columns})` extra memory) and one
    synchronisation with the device; a layer calls it once per input per
    call, next to propagations that cost a multiple of that. Two fingerprints
    of a tensor that holds NaN are never equal (NaN is unequal to itself),
    so such a tensor is never taken for the cached one."""
    if not isinstance(tensor, Tensor):
        return tensor
    content = tuple(x for part in _parts(tensor) for x in _content(part))
    return Fingerprint(tensor.layout, tuple(tensor.shape), tensor.dtype, tensor.device, content)


def row_checksums(rows: Tensor, magnitudes: bool = False) -> Tensor:
    r"""The weighted float64 sum of each row of the dense 2-D tensor
    :obj:`rows` :obj:`[B, F]`, with the weights :func:`fingerprint` uses for
    :math:`F` columns: a :obj:`[B]` float64 tensor on the device of
    :obj:`rows` (NaN where a row holds NaN); with :obj:`magnitudes`, a
    :obj:`[B, 2]` one whose second column holds the same sums of the absolute
    values. Unlike :func:`fingerprint`, it tells which rows changed, and a
    caller can compute it chunk by chunk.

    The same rows on the same device in chunks of the same shape give equal
    sums; rows gathered elsewhere (a batch's rows of a whole graph, on another
    device) agree to the rounding of two sums of :math:`F` products,
    :math:`|\Delta| \le 2 (F + 1) \epsilon` times the sum of magnitudes
    (:math:`\epsilon` of float64). Cost: :math:`O(B F)` time and one float64
    copy of :obj:`rows` (two with :obj:`magnitudes`), no synchronisation."""
    values = rows.detach().to(torch.float64)  # autocast leaves float64 products alone
    weights = _weights(rows.size(1), rows.device)
    if not magnitudes:
        return values @ weights
    return torch.stack([values @ weights, values.abs() @ weights], dim=1)
