r"""Small helpers for :obj:`torch.sparse` matrices (COO and CSR).

The public ones check their arguments (:func:`check_matrix`,
:func:`check_int`, :func:`check_dtype`: :math:`O(1)`, no tensor data read)
and name the argument and the fix; the row helpers :func:`dense_rows` and
:func:`gather_rows` are internal and trust their callers."""
import math
import warnings

import torch
from torch import Tensor

from torch_geometric_regcn.utils.validation import check_dtype, check_int, check_matrix

#: The sparse layouts the helpers read.
SPARSE_LAYOUTS = (torch.sparse_coo, torch.sparse_csr)


def to_csr(matrix: Tensor) -> Tensor:
    r"""The sparse (COO or CSR) :obj:`matrix` as coalesced CSR, without torch's
    one-time warning that its CSR support is in beta."""
    check_matrix('matrix', matrix)
    if matrix.layout not in SPARSE_LAYOUTS:
        raise TypeError(f"'matrix' must be a sparse COO or CSR matrix (got layout "
                        f"{matrix.layout}); convert a dense one with 'matrix.to_sparse_csr()'")
    if matrix.layout == torch.sparse_csr:
        return matrix
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='Sparse CSR tensor support is in beta')
        return matrix.coalesce().to_sparse_csr()


def csr_matrix(crow: Tensor, col: Tensor, values: Tensor, shape) -> Tensor:
    r"""A sparse CSR matrix of :obj:`shape` from its arrays, taken as they
    are (trusted: sorted, distinct columns per row, one index dtype; no
    :math:`O(\mathrm{nnz})` check), without torch's one-time warning that
    its CSR support is in beta. Gradients flow to :obj:`values`."""
    with warnings.catch_warnings():
        warnings.filterwarnings('ignore', message='Sparse CSR tensor support is in beta')
        return torch.sparse_csr_tensor(crow, col, values, tuple(shape), check_invariants=False)


def divided_by_largest(weight: Tensor) -> Tensor:
    r"""The edge weights :obj:`weight` in float64 (exact for every weight
    dtype), divided by their largest where that is positive and finite:
    for operators that depend on the weights' ratios only (a normalised
    Laplacian, Dir-GNN's adjacency), whose degrees and their products then
    neither underflow nor overflow whatever the weights' magnitude. NaN,
    infinite or negative weights pass through for the caller's checks.
    Differentiable; :math:`O(E)`, no synchronisation."""
    weight = weight.to(torch.float64)
    top = weight.detach().amax() if weight.numel() else weight.new_zeros(())
    return weight / torch.where(top.isfinite() & (top > 0), top, 1)


def index_dtype(num_nodes: int, nnz: int) -> torch.dtype:
    r"""The index dtype of a CSR matrix with :obj:`num_nodes` columns (or
    rows) and :obj:`nnz` entries: :obj:`torch.int32` where both fit, whose
    sparse products are markedly faster, else :obj:`torch.int64`."""
    return torch.int32 if max(num_nodes, nnz) < 2**31 - 1 else torch.int64


def compact_csr(matrix: Tensor) -> Tensor:
    r"""The matrix as CSR with 32-bit indices where they fit, whose sparse
    products are markedly faster than with 64-bit ones (COO becomes CSR;
    dense matrices are returned as they are)."""
    check_matrix('matrix', matrix)
    if matrix.layout == torch.sparse_coo:
        matrix = to_csr(matrix)
    if (matrix.layout == torch.sparse_csr and matrix.crow_indices().dtype == torch.int64
            and index_dtype(max(matrix.shape), matrix._nnz()) == torch.int32):
        matrix = torch.sparse_csr_tensor(matrix.crow_indices().int(),
                                         matrix.col_indices().int(), matrix.values(),
                                         matrix.shape, check_invariants=False)
    return matrix


def sparse_identity(num_nodes: int, dtype: torch.dtype = torch.float32,
                    device: torch.device = None) -> Tensor:
    r"""The :math:`N \times N` identity as a coalesced sparse COO matrix,
    :math:`N \geq 0`."""
    num_nodes = check_int('num_nodes', num_nodes, minimum=0)
    dtype = check_dtype('dtype', dtype, floating=False)
    eye = torch.arange(num_nodes, device=device)
    return torch.sparse_coo_tensor(torch.stack([eye, eye]),
                                   torch.ones(num_nodes, dtype=dtype, device=device),
                                   (num_nodes, num_nodes), is_coalesced=True,
                                   check_invariants=False)


def diagonal(matrix: Tensor) -> Tensor:
    r"""The diagonal of a square dense, COO or CSR matrix."""
    check_matrix('matrix', matrix, square=True)
    if matrix.layout == torch.strided:
        return matrix.diagonal()
    out = torch.zeros(matrix.size(0), dtype=matrix.dtype, device=matrix.device)
    if matrix.layout == torch.sparse_csr:  # read in place: no conversion, no sort
        row = torch.repeat_interleave(
            torch.arange(matrix.size(0), device=matrix.device,
                         dtype=matrix.crow_indices().dtype), matrix.crow_indices().diff(),
            output_size=matrix.col_indices().numel())
        col, values = matrix.col_indices(), matrix.values()
    else:
        matrix = matrix.to_sparse_coo().coalesce()
        (row, col), values = matrix.indices(), matrix.values()
    on_diagonal = row == col
    return out.index_add_(0, row[on_diagonal], values[on_diagonal])


def absolute_row_sums(matrix: Tensor) -> Tensor:
    r"""The sums :math:`\sum_j |m_{ij}|` of each row of the square
    :obj:`matrix` (dense, COO or CSR), differentiable in its values."""
    check_matrix('matrix', matrix, square=True)
    zeros = torch.zeros(matrix.size(0), dtype=matrix.dtype, device=matrix.device)
    if matrix.layout == torch.sparse_csr:
        counts = matrix.crow_indices().diff()
        rows = torch.repeat_interleave(torch.arange(matrix.size(0), device=counts.device),
                                       counts)
        return zeros.index_add(0, rows, matrix.values().abs())
    if matrix.layout == torch.sparse_coo:
        matrix = matrix.coalesce()
        return zeros.index_add(0, matrix.indices()[0], matrix.values().abs())
    return matrix.abs().sum(dim=1)


def spectral_bound(matrix: Tensor) -> float:
    r"""The largest absolute row sum :math:`\|\mathbf{M}\|_\infty`
    (:func:`absolute_row_sums`), an upper bound on the spectral radius of the
    square :obj:`matrix` (dense, COO or CSR). A :obj:`matrix` with NaN
    entries, which has no bound, raises a :class:`ValueError`."""
    sums = absolute_row_sums(matrix).detach()
    bound = float(sums.max()) if sums.numel() > 0 else 0.0
    if math.isnan(bound):
        raise ValueError("'matrix' contains NaN values, so it has no spectral bound; clean "
                         "them (e.g. 'torch.nan_to_num') before solving with it")
    return bound


def dense_rows(x: Tensor, start: int, end: int) -> Tensor:
    r"""Rows :obj:`start:end` of a dense, COO or CSR matrix :obj:`x`, as a
    dense block: a view of a dense :obj:`x`; for a sparse one,
    :math:`O(\log \mathrm{nnz})` to find the rows (a COO matrix that is not
    coalesced is coalesced first, :math:`O(\mathrm{nnz})`) and
    :math:`O((\text{end} - \text{start}) F + \text{nnz of the rows})` to fill
    the block. Values are copied, never rounded; a column stored twice in a
    row (a CSR matrix that breaks torch's unchecked invariants) is summed,
    as torch's products and :meth:`~torch.Tensor.to_dense` sum it."""
    if x.layout == torch.strided:
        return x[start:end]
    block = torch.zeros(end - start, x.size(1), dtype=x.dtype, device=x.device)
    if x.layout == torch.sparse_csr:
        crow = x.crow_indices()
        lo, hi = crow[start], crow[end]
        rows = torch.repeat_interleave(torch.arange(end - start, device=x.device),
                                       crow[start:end + 1].diff().long())
        block.index_put_((rows, x.col_indices()[lo:hi].long()), x.values()[lo:hi],
                         accumulate=True)
        return block
    x = x if x.is_coalesced() else x.coalesce()
    row, col = x.indices()
    lo, hi = torch.searchsorted(row, torch.tensor([start, end], device=row.device)).tolist()
    block[row[lo:hi] - start, col[lo:hi]] = x.values()[lo:hi]
    return block


def gather_rows(x: Tensor, index: Tensor) -> Tensor:
    r"""Rows :obj:`index` (in that order, repeats allowed) of a dense, COO or
    CSR matrix :obj:`x`, as a dense block on the device of :obj:`x`:
    :func:`torch.index_select` of a dense :obj:`x`; for CSR,
    :math:`O(|\text{index}| + \text{nnz of those rows})` plus the block's
    :math:`O(|\text{index}| F)`; a COO :obj:`x` is converted to CSR first
    (:math:`O(\mathrm{nnz})`, :func:`to_csr`), so pass CSR to gather often.
    Values are copied, never rounded; a column stored twice in a row is
    summed, as in :func:`dense_rows`."""
    index = index.to(x.device)
    if x.layout == torch.strided:
        return x.index_select(0, index)
    x = to_csr(x)
    crow = x.crow_indices().long()
    starts, lengths = crow[index], crow[index + 1] - crow[index]
    offsets = lengths.cumsum(0) - lengths  # where each row's entries start in the block
    rows = torch.repeat_interleave(torch.arange(index.numel(), device=x.device), lengths)
    position = starts[rows] + torch.arange(rows.numel(), device=x.device) - offsets[rows]
    block = torch.zeros(index.numel(), x.size(1), dtype=x.dtype, device=x.device)
    block.index_put_((rows, x.col_indices()[position].long()), x.values()[position],
                     accumulate=True)
    return block
