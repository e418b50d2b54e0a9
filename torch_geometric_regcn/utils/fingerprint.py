r"""Fingerprints that tell a cache whether a tensor still holds what it was
computed from, including writes that bypass PyTorch's version counter
(through :obj:`.data` or a NumPy array sharing the memory)."""
from typing import Any, Dict, NamedTuple, Tuple

import torch
from torch import Tensor

# Weights of the content sums, one vector per length and device, drawn once.
_WEIGHTS: Dict[Tuple[int, torch.device], Tensor] = {}


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
    with torch.autocast(part.device.type, enabled=False):
        values = flat.to(torch.float64)
        mixed = values @ _weights(cols, part.device)  # [rows]
        sums = torch.stack([mixed @ _weights(rows, part.device), mixed.sum()])
    return tuple(sums.tolist())


def fingerprint(tensor: Any) -> Any:
    r"""A :class:`Fingerprint` of :obj:`tensor` (a dense or sparse tensor),
    equal for two calls exactly when the tensor kept its shape, dtype, device
    and numbers, up to the chance that an edit leaves two random weighted
    sums of float64 numbers unchanged. Non-tensors are returned as they are.

    Cost: one pass over the stored numbers in float64 (:math:`O(\text{numel})`
    time, :math:`O(\text{rows} + \text{columns})` extra memory) and one
    synchronisation with the device; a layer calls it once per input per
    call, next to propagations that cost a multiple of that. A NaN in the
    tensor makes the fingerprint unequal to every other, itself included, so
    such a tensor is never taken for the cached one."""
    if not isinstance(tensor, Tensor):
        return tensor
    content = tuple(x for part in _parts(tensor) for x in _content(part))
    return Fingerprint(tensor.layout, tuple(tensor.shape), tensor.dtype, tensor.device, content)
