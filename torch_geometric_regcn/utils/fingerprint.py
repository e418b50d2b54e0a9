r"""Fingerprints that tell a cache whether a tensor still holds what it was
computed from, including writes that bypass PyTorch's version counter
(through :obj:`.data` or a NumPy array sharing the memory)."""
from typing import Any, Dict, NamedTuple, Tuple, Union

import torch
from torch import Tensor

from torch_geometric_regcn.utils.compat import compiler_disable

# Weights of the sums, one vector per length and device, drawn once.
_WEIGHTS: Dict[Tuple[int, torch.device], Tensor] = {}
# The odd random multipliers of the exact sums, one per position of a chunk.
_MULTIPLIERS: Dict[torch.device, Tensor] = {}
# Numbers converted to float64 at a time (8 MiB), and the numbers one thread
# sums (below torch's grain size of 32768, so that the order of every sum is
# fixed whatever the number of threads).
_CHUNK = 1 << 20
_BLOCK = 1 << 10
_GOLDEN = (5 ** 0.5 - 1) / 2


class Fingerprint(NamedTuple):
    r"""What :func:`fingerprint` records of a tensor: its identity
    (:obj:`layout`, :obj:`shape`, :obj:`dtype`, :obj:`device`) and
    :obj:`content`, sums of all its stored numbers: exact integer ones of the
    words that store them and, for floating dtypes, two weighted float ones."""
    layout: torch.layout
    shape: Tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    content: Tuple[Union[int, float], ...]


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


def _multipliers(device: torch.device) -> Tensor:
    r"""Odd random 64-bit integers, one per 32-bit word of a chunk, drawn
    once per device."""
    if device not in _MULTIPLIERS:
        generator = torch.Generator().manual_seed(_CHUNK)
        drawn = torch.randint(-2 ** 63, 2 ** 63 - 1, (2 * _CHUNK,), generator=generator,
                              dtype=torch.int64)
        _MULTIPLIERS[device] = (drawn | 1).to(device)
    return _MULTIPLIERS[device]


def _chunk_multiplier(index: int) -> int:
    r"""The odd 64-bit integer that multiplies the weighted sum of chunk
    :obj:`index` (Fibonacci hashing), as a signed int64."""
    value = ((index + 1) * 0x9E3779B97F4A7C15 | 1) % 2 ** 64
    return value - 2 ** 64 if value >= 2 ** 63 else value


#: Words converted to int64 at a time for their weighted sum on CPU (in cache).
_WIDE = 1 << 16


def _words(chunk: Tensor, index: int) -> Tensor:
    r"""Exact integer sums of the bit patterns that store :obj:`chunk`'s
    numbers (the :obj:`index`-th chunk of a tensor; 64-bit numbers as two
    32-bit words), in int64 modulo :math:`2^{64}`, so the same in any order:
    the sum of the words weighted by an odd random multiplier per position
    :math:`c_i` (and one odd multiplier per chunk), and for 64-bit numbers
    the plain sums of their low and of their high words. A change :math:`d`
    of one word changes the weighted sum by :math:`d c_i \neq 0` (both odd
    parts, :math:`|d| < 2^{32}`); of one 64-bit number, the plain sums. A
    swap of words :math:`a \neq b` at :math:`i, j` changes the weighted sum
    by :math:`(a - b)(c_i - c_j)`, zero modulo :math:`2^{64}` only where the
    difference of the random multipliers is a multiple of :math:`2^{64 -
    t}`, :math:`2^t < 2^{32}` the largest power of two dividing :math:`a -
    b`: a chance below :math:`2^{-31}`."""
    size = chunk.element_size()
    word = {8: torch.int32, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[size]
    words = chunk.view(word)  # bool and int8 as uint8
    multipliers = _multipliers(chunk.device)
    if chunk.device.type == 'cpu':  # converted piece by piece, in cache
        weighted = torch.zeros((), dtype=torch.int64)
        for s in range(0, words.numel(), _WIDE):
            wide = words[s:s + _WIDE].to(torch.int64)
            weighted += torch.dot(wide, multipliers[s:s + wide.numel()])
    else:  # one pass (no integer dot product there)
        weighted = (words.to(torch.int64) * multipliers[:words.numel()]).sum()
    weighted = (weighted * _chunk_multiplier(index)).reshape(1)
    if size != 8:
        return weighted
    return torch.cat([weighted, words.view(-1, 2).sum(dim=0, dtype=torch.int64)])


def _content(part: Tensor) -> Tuple[Any, ...]:
    r"""The exact integer sums of the words that store :obj:`part`'s numbers
    (:func:`_words`), weighted by position, which see a change of
    any entry however small next to the others and any move of entries
    between positions; for a floating dtype also two weighted sums of the
    numbers, NaN where a number is, each summed in an order that does not
    depend on the number of threads: blocks of :obj:`_BLOCK` numbers (below
    torch's grain size, so one thread sums a block), weighted by position in
    the block, then the block sums, weighted by the block's index, in float64
    (a float32 tensor's blocks in float32, without a copy)."""
    flat = part.detach().reshape(-1)  # strided if part is a strided 1-D view
    floating = flat.is_floating_point()
    dtype = flat.dtype if flat.dtype in (torch.float32, torch.float64) else torch.float64
    total = torch.zeros(2, dtype=torch.float64, device=part.device)
    words = torch.zeros(3 if flat.element_size() == 8 else 1, dtype=torch.int64,
                        device=part.device)
    with torch.autocast(part.device.type, enabled=False):
        inner = _weights(_BLOCK, part.device).to(dtype)
        for s in range(0, flat.numel(), _CHUNK):
            piece = flat[s:s + _CHUNK].contiguous()  # words need a contiguous chunk
            words += _words(piece, s // _CHUNK)
            if not floating:
                continue
            chunk = piece.to(dtype)
            tail = -chunk.numel() % _BLOCK
            if tail:
                chunk = torch.cat([chunk, chunk.new_zeros(tail)])
            blocks = chunk.view(-1, _BLOCK)  # [b, _BLOCK]
            weighted = (blocks * inner).sum(dim=1).double()  # [b], one thread per block
            first = s // _BLOCK  # a block's weight from its index: 0.5 + frac(index / phi)
            outer = torch.arange(first, first + blocks.size(0), dtype=torch.float64,
                                 device=part.device).mul_(_GOLDEN).frac_().add_(0.5)
            total += torch.stack([(weighted * outer).sum(), weighted.sum()])
    return (*(total.tolist() if floating else ()), *words.tolist())


@compiler_disable(reason="fingerprints run eagerly: a compiled reduction sums in another order, "
                         "so an eager and a compiled call would print one tensor differently")
def fingerprint(tensor: Any) -> Any:
    r"""A :class:`Fingerprint` of :obj:`tensor` (a dense or sparse tensor),
    equal for two calls when the tensor kept its shape, dtype, device and
    numbers. Its content is two random weighted sums of the numbers (in
    float64, or in float32 for float32 tensors; floating dtypes only) and
    exact integer sums of the words that store them, weighted by an odd
    random multiplier per position, in every dtype: a change of one entry,
    however small next to the others, changes them, and so does a move of
    numbers between positions (modulo :math:`2^{64}`: a swap of two numbers
    leaves them equal with a chance below :math:`2^{-31}`). Non-tensors are
    returned as they are.

    Every sum is taken in an order fixed by the tensor's size, or exactly,
    so the fingerprint does not depend on the number of threads. Cost: two
    passes over the stored numbers in chunks of :math:`2^{20}`
    (:math:`O(\text{numel})` time; at most 8 MiB of extra memory for a
    float64 copy of a chunk that is not float32 or float64, and a 16 MiB
    table of multipliers kept per device) and one
    synchronisation with the device; a layer calls it once per input per
    call, next to propagations that cost a multiple of that. Two fingerprints
    of a tensor that holds NaN are never equal (NaN is unequal to itself),
    so such a tensor is never taken for the cached one. It runs eagerly
    under :func:`torch.compile` (a graph break): a compiled reduction would
    sum in another order, and a layer called both ways would take its own
    graph for another."""
    if not isinstance(tensor, Tensor):
        return tensor
    # Complex numbers as their real and imaginary parts, a lazy conjugate resolved.
    parts = [torch.view_as_real(p.resolve_conj()) if p.is_complex() else p
             for p in _parts(tensor)]
    content = tuple(x for part in parts for x in _content(part))
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
