r"""Inner products and QR of tall blocks whose rows may be split over the
ranks of a process group (:obj:`group=None`: one process holds every row)."""
import math
from typing import NamedTuple, Optional

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import (
    Group,
    all_gather,
    all_reduce,
    any_rank,
    broadcast,
    rank_of,
    size_of,
)
from torch_geometric_regcn.linalg.eigenpairs import ieee_float32_matmul, tf32_forced
from torch_geometric_regcn.utils.compat import is_compiling
from torch_geometric_regcn.utils.validation import check_matrix

#: Rows per partial product of :func:`local_gram` for float32 (and narrower) blocks on
#: the CPU, whose partial products are then summed in float64.
GRAM_CHUNK = 4096
#: The most float32 numbers :func:`local_gram` holds in partial products at once; wide
#: blocks take chunks of more rows.
GRAM_PARTIALS = 2**22


def local_gram(a: Tensor, b: Tensor) -> Tensor:
    r""":math:`\mathbf{A}^{\top}\mathbf{B}` of two blocks of the same
    :math:`n` rows, in their dtype. On the CPU, float32 (and narrower)
    blocks of more than :data:`GRAM_CHUNK` rows are multiplied in chunks of
    rows by one batched product and the chunks' products summed in
    float64: torch's float32 product of narrow blocks sums over the rows
    with an error that grows with :math:`n` (about :math:`10^4\epsilon` at
    :math:`n = 2 \cdot 10^6`), which the Rayleigh quotients of the
    eigensolvers and the core of the Woodbury identity would inherit;
    chunked, it stays that of a chunk. A chunk holds :data:`GRAM_CHUNK` rows,
    more where the :math:`k \times m` partial products would exceed
    :data:`GRAM_PARTIALS` numbers. Cost: the same float32 products, plus a
    float64 sum of the chunks' :math:`k \times m` products; one batched
    product in the autograd graph (no loop), so the backward pass stays
    linear in :math:`n`. Under :func:`torch.compile`, the plain product."""
    n, k, m = a.size(0), a.size(-1), b.size(-1)
    if n <= GRAM_CHUNK or a.device.type != 'cpu' or a.dtype == torch.float64 \
            or not a.is_floating_point() or is_compiling():
        return a.T @ b
    rows = max(GRAM_CHUNK, -(-n * k * m // GRAM_PARTIALS))
    whole = n // rows * rows
    head_a, tail_a = a.split([whole, n - whole])
    head_b, tail_b = b.split([whole, n - whole])
    parts = head_a.reshape(-1, rows, k).transpose(1, 2) @ head_b.reshape(-1, rows, m)
    total = parts.double().sum(0) + (tail_a.T @ tail_b).double()
    return total.to(torch.promote_types(a.dtype, b.dtype))


def rayleigh_gram(a: Tensor, b: Tensor, group: Group) -> Tensor:
    r""":func:`gram` for Rayleigh quotients :math:`\mathbf{V}^{\top}
    \mathbf{S}\mathbf{V}`: on the CPU, float32 (and narrower) blocks are
    multiplied in float64, :data:`GRAM_CHUNK` rows at a time, and the sum
    rounded once to their dtype. A graph's eigenvectors hold many equal
    entries (the constant top eigenvector of a regular graph), whose float32
    products round alike, so a float32 sum over a chunk drifts one way: on a
    3-regular graph of 3,000 nodes the top Rayleigh quotient came out 255
    rounding units low, a residual the eigensolvers could not get below
    (3e-5). Cost: the products at float64 speed (about twice float32's on
    the CPU), :data:`GRAM_CHUNK` :math:`\times (k + m)` float64 numbers at a
    time; other dtypes and devices as :func:`gram`."""
    if a.device.type != 'cpu' or a.dtype == torch.float64 or not a.is_floating_point() \
            or is_compiling():
        return gram(a, b, group)
    total = a.new_zeros(a.size(1), b.size(1), dtype=torch.float64)
    for start in range(0, a.size(0), GRAM_CHUNK):
        _add_gram64(total, a[start:start + GRAM_CHUNK], b[start:start + GRAM_CHUNK])
    return all_reduce(total, group).to(torch.promote_types(a.dtype, b.dtype))


def gram(a: Tensor, b: Tensor, group: Group) -> Tensor:
    r"""The inner products of the columns of two row-sharded blocks,

    .. math::
        \mathbf{A}^{\top}\mathbf{B} = \sum_{p} \mathbf{A}_p^{\top}\mathbf{B}_p,

    over the ranks :math:`p` of :obj:`group`: the local product
    (:func:`local_gram`), all-reduced. Time :math:`O(n k m)` for :math:`n`
    local rows; :math:`k m` numbers all-reduced.

    Args:
        a (torch.Tensor): This rank's rows of :math:`\mathbf{A}`.
        b (torch.Tensor): This rank's rows of :math:`\mathbf{B}`, the same
            rows.
        group (torch.distributed.ProcessGroup, optional): The ranks that hold the rows;
            :obj:`None` for one process, which holds them all.

    Shapes:
        - **a:** :obj:`[n, k]`; **b:** :obj:`[n, m]`
        - **output:** :obj:`[k, m]`, the same on every rank.
    """
    return all_reduce(local_gram(a, b), group)


def column_norms(a: Tensor, group: Group) -> Tensor:
    r"""The Euclidean norm of each column of a row-sharded block,
    :math:`\|\mathbf{a}_j\|_2 = (\sum_p \|\mathbf{a}_{p,j}\|_2^2)^{1/2}`
    over the ranks :math:`p` of :obj:`group`: the local sums of squares,
    all-reduced. Time :math:`O(n b)`; :math:`b` numbers all-reduced.

    Args:
        a (torch.Tensor): This rank's rows of the block.
        group (torch.distributed.ProcessGroup, optional): The ranks that hold the rows;
            :obj:`None` for one process, which holds them all.

    Shapes:
        - **a:** :obj:`[n, b]`
        - **output:** :obj:`[b]`, the same on every rank.
    """
    return all_reduce(a.square().sum(dim=0), group).sqrt()


class QR(NamedTuple):
    r"""A reduced QR factorisation :math:`\mathbf{B} = \mathbf{Q}\mathbf{R}`
    of a row-sharded block (:func:`tall_qr`)."""
    Q: Tensor  #: this rank's rows of the orthonormal factor, :obj:`[n, b]`
    R: Tensor  #: the upper triangular factor, :obj:`[b, b]`, the same on every rank


def tall_qr(block: Tensor, group: Group) -> QR:
    r"""The reduced QR factorisation of a tall row-sharded block

    .. math::
        \mathbf{B} = \mathbf{Q}\mathbf{R}, \qquad
        \mathbf{Q}^{\top}\mathbf{Q} = \mathbf{I}_b,

    by CholeskyQR2 (Fukaya et al., 2014) when the block is well conditioned:
    :math:`\mathbf{R}_1` is the Cholesky factor of the all-reduced Gram matrix
    :math:`\mathbf{B}^{\top}\mathbf{B}` (summed in float64),
    :math:`\mathbf{Q}_1 = \mathbf{B}\mathbf{R}_1^{-1}`, and the same once
    more on :math:`\mathbf{Q}_1` restores orthogonality to the rounding of
    the block's dtype, :math:`\mathbf{R} = \mathbf{R}_2\mathbf{R}_1` with a
    positive diagonal: two Gram products and two triangular products of
    :math:`n` rows, no factorisation of them (float32 products in full
    precision, TF32 refused). A block whose condition number, read off the
    Gram matrix's eigenvalues, exceeds :func:`cholesky_qr_limit`
    (rank-deficient and zero blocks included), a wide, complex, non-finite
    or empty one, one that requires a gradient (with autograd on: this
    route writes in place), or a float32 CUDA block whose products the
    environment forces to TF32, gets a Householder QR instead, by TSQR
    (Demmel et al., 2012) across ranks: each rank factorises its rows, the
    :math:`b \times b` factors are all-gathered and factorised once more,
    as stable as a Householder QR of the whole block (with
    :obj:`group=None`, :func:`torch.linalg.qr`). Every rank takes the same
    route: each decides from the same all-reduced numbers, and all take
    Householder's where one rank's LAPACK decides for it (one all-reduce of
    an integer per pass, :func:`~torch_geometric_regcn.distributed.
    collectives.any_rank`). Time
    :math:`O(n b^2 + P b^3)` for :math:`n` local rows and :math:`P` ranks;
    :math:`2 b^2` numbers all-reduced (TSQR: :math:`P b^2` all-gathered,
    and the QR of the stacked factors, :math:`(P + 1) b^2` numbers, broadcast
    from rank 0, so that a dependent column's direction, which is LAPACK's
    rounding, is one on every rank).

    Args:
        block (torch.Tensor): This rank's rows of :math:`\mathbf{B}`.
        group (torch.distributed.ProcessGroup, optional): The ranks that hold the rows;
            :obj:`None` for one process, which holds them all.

    Returns:
        QR: This rank's rows of :math:`\mathbf{Q}`, :obj:`[n, b]`, and
        :math:`\mathbf{R}`, :obj:`[b, b]`, the same on every rank.

    Shapes:
        - **block:** :obj:`[n, b]`, :math:`b \leq N`, dense, in float32,
          float64 or a complex dtype (checked on each rank before any
          collective, :obj:`O(1)`, but not agreed: its width and dtype must
          be the same on every rank, as the eigensolvers, which agree their
          arguments, ensure; a rank that fails raises alone)
    """
    check_matrix('block', block)
    if block.layout != torch.strided or not (block.is_floating_point() or block.is_complex()) \
            or block.dtype in (torch.float16, torch.bfloat16):
        raise TypeError(f"'block' must be a dense float32, float64 or complex matrix (got "
                        f"{block.dtype}, {block.layout}); convert it with '.to_dense()' and "
                        f"'.float()' or '.double()'")
    factors = _cholesky_qr2(block, group)
    if factors is not None:
        return factors
    if group is None:
        return QR(*torch.linalg.qr(block))
    b = block.size(1)
    q_local, r_local = torch.linalg.qr(block)  # at most n_local x b and b x b
    q = block.new_zeros(block.size(0), b)
    q[:, :q_local.size(1)] = q_local
    r = block.new_zeros(b, b)
    r[:r_local.size(0)] = r_local
    # The stacked factors' QR on rank 0, broadcast: of a dependent column the
    # direction is LAPACK's rounding, so ranks that rounded otherwise would hold
    # rows of different columns (and each rank's R would decide alone).
    stacked = torch.cat(all_gather(r, group))
    rank, size = rank_of(group), size_of(group)
    packed = block.new_zeros(size * b + b, b)
    if rank == 0:
        packed[:size * b], packed[size * b:] = torch.linalg.qr(stacked)
    packed = broadcast(packed, group)
    q_top, r_top = packed[:size * b], packed[size * b:]
    return QR(q @ q_top[rank * b:(rank + 1) * b], r_top)


#: Rows per chunk of the float64 Gram matrices and the products of
#: :func:`tall_qr`'s CholeskyQR2 on a CPU: small enough to stay in cache
#: between the two.
ROW_CHUNK = 16384
#: The same on a GPU: large enough to fill it, small enough that the float64
#: copy of a chunk stays a small transient.
GPU_ROW_CHUNK = 1 << 20


def cholesky_qr_limit(dtype: torch.dtype) -> float:
    r"""The largest condition number :math:`\kappa` of a block that
    :func:`tall_qr` factorises by CholeskyQR2 in :obj:`dtype`. The first
    pass's :math:`\mathbf{Q}_1` loses orthogonality by the rounding of the
    Gram matrix, :math:`\epsilon_{64}\kappa^2`, and of the product with
    :math:`\mathbf{R}_1^{-1}`, :math:`\epsilon\,\kappa`; both stay below
    :math:`10^{-2}`, so that :math:`\mathbf{Q}_1` is well conditioned and the
    second pass orthonormal to :math:`O(\epsilon)`: :math:`\kappa \leq
    \min(10^{-2} / \epsilon, 10^{-1} / \epsilon_{64}^{1/2})`, about
    :math:`8 \cdot 10^4` in float32 and :math:`7 \cdot 10^6` in float64.
    The published bound (Yamamoto et al., 2015) carries a further factor
    :math:`\sqrt{n b}` of worst-case rounding accumulation, which blocked
    float64 sums do not reach at the sizes of the eigensolvers' blocks."""
    eps64 = torch.finfo(torch.float64).eps
    return min(1e-2 / torch.finfo(dtype).eps, 1e-1 / math.sqrt(eps64))


def _add_gram64(out: Tensor, rows: Tensor, other: Optional[Tensor] = None) -> None:
    r"""Adds :math:`\mathbf{B}^{\top}\mathbf{B}` of :obj:`rows` (with
    :obj:`other`, :math:`\mathbf{B}^{\top}\mathbf{C}` of the same rows of
    it) to the float64 :obj:`out`, the products in float64."""
    rows = rows.double()
    out.addmm_(rows.T, rows if other is None else other.double())


@ieee_float32_matmul()
def _cholesky_qr2(block: Tensor, group: Group) -> Optional[QR]:
    r"""CholeskyQR2 of a tall real block (see :func:`tall_qr`), or
    :obj:`None` where it does not apply: a complex or wide block, or a
    condition number above :func:`cholesky_qr_limit` (non-finite, zero and
    rank-deficient blocks among them). Both passes write the one
    :math:`n \times b` result a chunk of :obj:`ROW_CHUNK` rows at a time
    (:obj:`GPU_ROW_CHUNK` on a GPU), the second pass's Gram matrix summed
    from each chunk as it is written; the triangular inverses are
    :math:`b \times b`."""
    n, b = block.shape
    if block.dtype not in (torch.float32, torch.float64) or b == 0 or tf32_forced(block) \
            or (block.requires_grad and torch.is_grad_enabled()):
        return None  # the same on every rank: dtypes, widths and the environment agree
    if group is None and n < b:
        return None  # wide; a shard may hold fewer rows than columns (its Gram decides)
    step = ROW_CHUNK if block.device.type == 'cpu' else GPU_ROW_CHUNK
    chunks = range(0, n, step)
    first = torch.zeros(b, b, dtype=torch.float64, device=block.device)
    for start in chunks:
        _add_gram64(first, block[start:start + step])
    first = all_reduce(first, group)
    if not bool(first.isfinite().all()):
        return None
    spectrum = torch.linalg.eigvalsh(first)
    lowest, highest = float(spectrum[0]), float(spectrum[-1])
    # Ill conditioned, rank deficient or zero: Householder.
    householder = not (lowest > 0 and highest <= cholesky_qr_limit(block.dtype) ** 2 * lowest)
    q = torch.empty(n, b, dtype=block.dtype, device=block.device)
    source, gram_matrix, r = block, first, None
    for second in (False, True):  # Q1 = B R1^-1, then Q = Q1 R2^-1 in place
        factor, info = torch.linalg.cholesky_ex(gram_matrix, upper=True)
        # A failed factorisation is not reached below the limit (a safeguard). Both
        # verdicts come from local LAPACK calls on the same all-reduced numbers: the
        # Householder route for all where one rank takes it, as its collectives differ.
        householder, = any_rank([householder or int(info) != 0], group)
        if householder:
            return None
        identity = torch.eye(b, dtype=factor.dtype, device=factor.device)
        inverse = torch.linalg.solve_triangular(factor, identity, upper=True).to(block.dtype)
        gram_matrix = torch.zeros_like(first)  # the second pass's, from the rows in cache
        for start in chunks:
            rows = q[start:start + step]
            rows.copy_(source[start:start + step] @ inverse)
            if not second:
                _add_gram64(gram_matrix, rows)
        if not second:
            gram_matrix = all_reduce(gram_matrix, group)
        r = factor if r is None else factor @ r
        source = q
    return QR(q, r.to(block.dtype))
