r"""Fingerprints that tell a cache whether a tensor still holds what it was
computed from, including writes that bypass PyTorch's version counter
(through :obj:`.data` or a NumPy array sharing the memory)."""
from typing import Any, Dict, NamedTuple, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.utils.compat import compiler_disable

# Weights of the sums, one vector per length and device, drawn once.
_WEIGHTS: Dict[Tuple[int, torch.device], Tensor] = {}
# Numbers converted to float64 at a time (8 MiB), and the numbers one thread
# sums (below torch's grain size of 32768, so that the order of every sum is
# fixed whatever the number of threads).
_CHUNK = 1 << 20
_BLOCK = 1 << 10
_GOLDEN = (5 ** 0.5 - 1) / 2


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
    if tensor.layout in (torch.sparse_csr, torch.sparse_bsr):
        return tensor.crow_indices(), tensor.col_indices(), tensor.values()
    if tensor.layout in (torch.sparse_csc, torch.sparse_bsc):
        return tensor.ccol_indices(), tensor.row_indices(), tensor.values()
    return (tensor,)


def _words(chunk: Tensor) -> Tensor:
    r"""Exact integer sums of the bit patterns that store :obj:`chunk`'s
    numbers, each a contiguous reduction in int64: of the 8-, 16- or 32-bit
    patterns as they are, and of the low and high 32-bit halves of 64-bit
    ones. A change of any one number changes a sum its change touches; each
    part is below :math:`2^{32}` in magnitude, so a sum of up to
    :math:`2^{31}` of them is exact in any order."""
    size = chunk.element_size()
    if size == 8:
        bits = chunk.view(torch.int64)
        return torch.stack([(bits & 0xFFFFFFFF).sum(), (bits >> 32).sum()])
    word = {4: torch.int32, 2: torch.int16, 1: torch.uint8}[size]  # bool and int8 too
    return chunk.view(word).sum(dtype=torch.int64).reshape(1)


def _content(part: Tensor) -> Tuple[Any, ...]:
    r"""Two weighted sums of :obj:`part`'s numbers, each summed in an order
    that does not depend on the number of threads: blocks of :obj:`_BLOCK`
    numbers (below torch's grain size, so one thread sums a block), weighted
    by position in the block, then the block sums, weighted by the block's
    index, in float64 (a float32 tensor's blocks in float32, without a copy;
    other dtypes converted to float64); and the exact integer sums of the
    words that store them (:func:`_words`), which see a change of any entry
    however small next to the others."""
    flat = part.detach().reshape(-1)
    dtype = flat.dtype if flat.dtype in (torch.float32, torch.float64) else torch.float64
    total = torch.zeros(2, dtype=torch.float64, device=part.device)
    words = torch.zeros(2 if flat.element_size() == 8 else 1, dtype=torch.int64,
                        device=part.device)
    with torch.autocast(part.device.type, enabled=False):
        inner = _weights(_BLOCK, part.device).to(dtype)
        for s in range(0, flat.numel(), _CHUNK):
            words += _words(flat[s:s + _CHUNK])
            chunk = flat[s:s + _CHUNK].to(dtype)
            tail = -chunk.numel() % _BLOCK
            if tail:
                chunk = torch.cat([chunk, chunk.new_zeros(tail)])
            blocks = chunk.view(-1, _BLOCK)  # [b, _BLOCK]
            weighted = (blocks * inner).sum(dim=1).double()  # [b], one thread per block
            first = s // _BLOCK  # a block's weight from its index: 0.5 + frac(index / phi)
            outer = torch.arange(first, first + blocks.size(0), dtype=torch.float64,
                                 device=part.device).mul_(_GOLDEN).frac_().add_(0.5)
            total += torch.stack([(weighted * outer).sum(), weighted.sum()])
    return (*total.tolist(), *words.tolist())


@compiler_disable(reason="fingerprints run eagerly: a compiled reduction sums in another order, "
                         "so an eager and a compiled call would print one tensor differently")
def fingerprint(tensor: Any) -> Any:
    r"""A :class:`Fingerprint` of :obj:`tensor` (a dense or sparse tensor),
    equal for two calls when the tensor kept its shape, dtype, device and
    numbers. Its content is two random weighted sums of the numbers (in
    float64, or in float32 for float32 tensors) and the exact integer sums
    of the words that store them, in every dtype: a change of one entry,
    however small next to the others, changes those sums, and a move of
    numbers between positions changes the weighted sums unless they are
    below the rounding of their block of 1024 numbers. Non-tensors are
    returned as they are.

    Every sum is taken in an order fixed by the tensor's size, or exactly,
    so the fingerprint does not depend on the number of threads. Cost: two
    passes over the stored numbers in chunks of :math:`2^{20}`
    (:math:`O(\text{numel})` time, 16 MiB of extra memory at most; float32
    and float64 tensors are not copied) and one
    synchronisation with the device; a layer calls it once per input per
    call, next to propagations that cost a multiple of that. Two fingerprints
    of a tensor that holds NaN are never equal (NaN is unequal to itself),
    so such a tensor is never taken for the cached one. It runs eagerly
    under :func:`torch.compile` (a graph break): a compiled reduction would
    sum in another order, and a layer called both ways would take its own
    graph for another."""
    if not isinstance(tensor, Tensor):
        return tensor
    content = tuple(x for part in _parts(tensor) for x in _content(part))
    return Fingerprint(tensor.layout, tuple(tensor.shape), tensor.dtype, tensor.device, content)


def row_checksums(rows: Tensor, magnitudes: bool = False,
                  dtype: torch.dtype = torch.float64) -> Tensor:
    r"""The weighted sum of each row of the dense 2-D tensor :obj:`rows`
    :obj:`[B, F]`, with random weights in :math:`[0.5, 1.5)` drawn once per
    :math:`F`, computed in :obj:`dtype`: a :obj:`[B]` tensor on the device of
    :obj:`rows` (NaN where a row holds NaN); with :obj:`magnitudes`, a
    :obj:`[B, 2]` one whose second column holds the same sums of the absolute
    values. Unlike :func:`fingerprint`, it tells which rows changed, and a
    caller can compute it chunk by chunk; the sum of a row may depend on the
    number of threads (a matrix-vector product), so callers compare within
    the bound below or treat a difference as a change to recompute.

    The same rows on the same device in chunks of the same shape give equal
    sums. A sum computed elsewhere (a batch's rows of a whole graph, on
    another device, or in another :obj:`dtype`) differs from the exact one by
    at most :math:`(F + 2) \epsilon` times the sum of magnitudes
    (:math:`\epsilon` of the :obj:`dtype` it was computed in: :math:`F`
    roundings of the sum, one of the weights and one of the rows when they
    are cast). Cost: :math:`O(B F)` time, no synchronisation, and a copy of
    :obj:`rows` unless they are in :obj:`dtype` already (another with
    :obj:`magnitudes`); in the rows' own dtype the sums are one
    matrix-vector product."""
    with torch.autocast(rows.device.type, enabled=False):
        values = rows.detach().to(dtype)
        weights = _weights(rows.size(1), rows.device).to(dtype)
        if not magnitudes:
            return values @ weights
        return torch.stack([values @ weights, values.abs() @ weights], dim=1)
