r"""A sparse symmetric matrix split by rows over the ranks of a process group."""
from contextlib import contextmanager, nullcontext
from typing import Callable, ContextManager, Iterator, Optional

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import (
    Group,
    agree_arguments,
    all_gather,
    all_gather_ints,
)
from torch_geometric_regcn.distributed.halo import HaloPlan
from torch_geometric_regcn.distributed.row_partition import (
    RowPartition,
    check_partition,
    check_shard_edges,
)
from torch_geometric_regcn.utils.sparse import compact_csr, csr_matrix
from torch_geometric_regcn.utils.validation import check_finite, check_int, check_tensor

#: The bytes the halo rows of one sparse product may take by default,
#: :math:`h \times b` numbers for :math:`h` halo rows and a block of
#: :math:`b` columns: a wider block is multiplied in chunks of columns
#: (see :class:`ShardedMatrix`). 64 MiB: a million float32 halo rows of 16
#: columns.
HALO_BUDGET = 64 * 2**20


class ShardedMatrix:
    r"""This rank's rows of a symmetric sparse :math:`N \times N` matrix whose
    rows are split over a process group by a
    :class:`~torch_geometric_regcn.distributed.RowPartition`.
    :obj:`matrix @ x` takes this rank's rows of a block :math:`\mathbf{X}` and
    returns its rows of :math:`\mathbf{S}\mathbf{X}`: the halo rows are
    fetched by one :func:`all_to_all` (:math:`O(h b)` bytes for :math:`h`
    halo nodes and :math:`b` columns), then one local sparse product runs.
    When the halo rows of the block would take more than :obj:`halo_budget`
    bytes on the rank with the largest halo, the block's columns are
    multiplied in chunks of :math:`c = \lfloor \text{budget} / (h_{\max}
    \cdot \text{itemsize}) \rfloor` columns (at least one), one all-to-all
    each: the same bytes in more messages, and an exchange buffer of
    :math:`(n + h + s) c` numbers (:math:`s` rows sent) in place of
    :math:`(n + h + s) b`. Inside :meth:`reusing_buffer` (the eigensolvers'
    iterations) the matrix keeps that buffer between products, which then
    allocate only their :math:`n`-row results (none where the caller passes
    :obj:`out` to :meth:`addmm` and the block is exchanged whole). The halo
    rows are fetched detached: a gradient reaches this rank's rows of the
    block only through its own products. A chunk's product equals the
    matching columns of the whole block's to rounding (the sparse kernel may
    sum in another order for another width).
    The eigensolvers accept it as their :obj:`operator` and then work on row
    shards of their vectors (see :func:`~torch_geometric_regcn.linalg.block_lanczos`).
    Before the first exchange the ranks agree that each one's
    :obj:`partition` is its part of the same row blocks, that its entries
    lie in its rows and below :math:`N` and are finite, and that the entries
    have one dtype and device type
    (:func:`~torch_geometric_regcn.distributed.collectives.agree_arguments`).
    The blocks multiplied are not agreed, for speed: their width and dtype
    must be the same on every rank (the eigensolvers agree theirs).

    Args:
        edge_index (torch.Tensor): The entries' global indices, shape
            :obj:`[2, nnz]`, the first (row) index among this rank's nodes.
        values (torch.Tensor): The entries, shape :obj:`[nnz]`.
        partition (RowPartition): The row blocks, seen from this rank.
        group (ProcessGroup, optional): The process group; :obj:`None` for a
            single process holding every row.
        halo_budget (int, optional): The most bytes of halo rows one
            exchange fetches, the same on every rank (agreed).
            (default: :obj:`None`, :data:`HALO_BUDGET`)
    """
    #: The original index of each of this rank's rows (a METIS shard's
    #: :obj:`node_id`), set by the :class:`~torch_geometric_regcn.regularizers.
    #: GraphOperators` that built the matrix: the eigensolvers draw their
    #: random rows by it (:class:`~torch_geometric_regcn.linalg.random_rows.
    #: RandomRows`), so that shards that renumber the nodes start where one
    #: process on the original numbering does. :obj:`None`: by global row.
    node_id: Optional[Tensor] = None

    def __init__(self, edge_index: Tensor, values: Tensor, partition: RowPartition,
                 group: Group, halo_budget: Optional[int] = None) -> None:
        def check() -> None:  # indices in range and rows this rank's, finite values
            check_shard_edges(edge_index, partition, name='edge_index')
            check_tensor('values', values)
            if values.shape != edge_index.shape[1:]:
                raise ValueError(f"'values' must hold one entry per column of 'edge_index', "
                                 f"shape [{edge_index.size(1)}] (got {list(values.shape)})")
            check_finite('values', values)
        self._plan(partition, group, values, halo_budget, lambda: edge_index[1], check)
        edge_index = edge_index.long()  # int32 on some ranks and int64 on others pair up
        rows = edge_index[0] - partition.start
        cols = self.plan.compact(edge_index[1])
        width = partition.num_local + self.plan.halo.numel()
        self.local = compact_csr(torch.sparse_coo_tensor(
            torch.stack([rows, cols]), values, (partition.num_local, width),
            check_invariants=False).coalesce())

    def _plan(self, partition: RowPartition, group: Group, values: Tensor,
              halo_budget: Optional[int], columns: Callable[[], Tensor],
              check: Optional[Callable[[], None]] = None) -> None:
        r"""The checks (agreed on every rank; :obj:`check` among them), the
        budget and the halo plan of a matrix whose local rows read the global
        :obj:`columns()` (read after the checks)."""
        self.partition, self.group = partition, group
        budget = HALO_BUDGET if halo_budget is None else halo_budget
        if group is None:
            partition = self.partition = check_partition(partition, group, 'partition')
            budget = check_int('halo_budget', budget)
            if check is not None:
                check()
        else:
            error, same = None, {}
            try:
                partition = self.partition = check_partition(partition, group, 'partition')
                budget = check_int('halo_budget', budget)
                if check is not None:
                    check()
                same = {"the row blocks of 'partition'": partition.bounds,
                        "the dtype and device of 'values'": (values.dtype, values.device.type),
                        "'halo_budget'": budget}
            except (TypeError, ValueError) as failure:
                error = failure
            agree_arguments(group, 'ShardedMatrix', same, error)
        #: The most bytes of halo rows one exchange fetches.
        self.halo_budget: int = budget
        self._buffer: Optional[Tensor] = None  # the halo exchange's, see reusing_buffer
        self._reusing = 0  # the depth of reusing_buffer blocks
        self.plan = HaloPlan.build(columns(), partition, group)
        #: The largest halo of any rank: the chunks' width must be the same on
        #: every rank, whose all-to-alls pair up.
        self.max_halo = 0 if group is None else max(
            h for (h,) in all_gather_ints([self.plan.halo.numel()], group))

    @classmethod
    def from_rows(cls, rows: Tensor, partition: RowPartition, group: Group,
                  halo_budget: Optional[int] = None) -> 'ShardedMatrix':
        r"""The matrix from this rank's rows as sparse CSR :obj:`[n, N]` with
        global column indices, sorted and distinct in each row (as
        :func:`~torch_geometric_regcn.linalg.graph_operator.combine` gives
        them): the matrix that their :obj:`(edge_index, values)` give, built
        by chunks of rows in the arrays of :obj:`rows` (which it takes over:
        their columns become local ones, re-sorted within the rows that read
        the halo) instead of through a sorted COO copy; :math:`O(\text{chunk})`
        work arrays beside them."""
        from torch_geometric_regcn.linalg.graph_operator import CHUNK_ENTRIES, remote_columns
        crow, col, value = rows.crow_indices(), rows.col_indices(), rows.values()
        n = partition.num_local
        steps = list(range(0, n, max(1, n * CHUNK_ENTRIES // max(col.numel(), 1)))) + [n]
        self = cls.__new__(cls)
        self._plan(partition, group, value, halo_budget, lambda: remote_columns(col, partition))
        width = n + self.plan.halo.numel()
        if value.requires_grad:  # the values out of place, for the gradient
            value = value.clone()
        for first, last in zip(steps[:-1], steps[1:]):
            lo, hi = int(crow[first]), int(crow[last])
            glob = col[lo:hi].long()
            local = self.plan.compact(glob)
            if bool((glob < partition.start).any()):  # halo columns now follow own ones
                row = torch.repeat_interleave(torch.arange(last - first, device=col.device),
                                              crow[first:last + 1].diff())
                order = (row * width + local).argsort()
                local, value[lo:hi] = local[order], value[lo:hi][order]
            col[lo:hi] = local
        self.local = csr_matrix(crow, col, value, (n, width))
        return self

    @property
    def shape(self) -> torch.Size:
        n = self.partition.num_nodes
        return torch.Size((n, n))

    def size(self, dim: Optional[int] = None):
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return 2

    @property
    def dtype(self) -> torch.dtype:
        return self.local.dtype

    @property
    def device(self) -> torch.device:
        return self.local.device

    @property
    def layout(self) -> torch.layout:
        return self.local.layout

    @property
    def is_cuda(self) -> bool:
        return self.local.is_cuda

    def values(self) -> Tensor:
        r"""This rank's entries."""
        return self.local.values()

    def chunk_columns(self, x: Tensor) -> int:
        r"""The columns of :obj:`x` multiplied per halo exchange: all of them
        unless their halo rows would exceed :attr:`halo_budget` bytes."""
        width = x.size(1) if x.dim() == 2 else 1
        if self.max_halo == 0:
            return width
        return max(1, min(width, self.halo_budget // (self.max_halo * x.element_size())))

    @contextmanager
    def reusing_buffer(self) -> Iterator['ShardedMatrix']:
        r"""Within the block, the products made outside autograd receive their
        halo rows in one buffer that the matrix keeps from product to product
        (as large as the widest block's exchange, :math:`(n + h + s) c`
        numbers), instead of two new tensors each: an iteration's products
        then leave no fragments of :math:`n + h` rows on the heap. The buffer
        goes when the outermost block ends. The eigensolvers use it."""
        depth = self._reusing
        self._reusing = depth + 1
        try:
            yield self
        finally:
            self._reusing = depth
            if depth == 0:
                self._buffer = None

    def _extended(self, y: Tensor) -> Tensor:
        r""":obj:`y` extended by its halo rows, in the kept buffer inside
        :meth:`reusing_buffer` (where no gradient is recorded)."""
        if not self._reusing or (torch.is_grad_enabled()
                                 and (y.requires_grad or self.local.requires_grad)):
            return self.plan.extended(y)  # the result may be saved for the backward
        size, buffer = self.plan.buffer_size(y), self._buffer
        if buffer is None or buffer.numel() < size or buffer.dtype != y.dtype \
                or buffer.device != y.device \
                or (buffer.is_inference() and not torch.is_inference_mode_enabled()):
            self._buffer = buffer = None  # the old one goes before the new one comes
            self._buffer = buffer = y.new_empty(size)
        return self.plan.extended(y, buffer)

    def _chunked(self, y: Tensor, product: Callable[[slice, Tensor, Optional[Tensor]], Tensor],
                 out: Optional[Tensor] = None) -> Tensor:
        r""":obj:`product(columns, extended, out)` of the chunks of :obj:`y`'s
        columns, each extended by its halo rows, written to the matching
        columns of :obj:`out` (a new block if :obj:`None`). Without a halo on
        any rank the block is multiplied as it is."""
        if self.max_halo == 0:
            return product(slice(None), y, out)
        step = self.chunk_columns(y)
        if y.dim() < 2 or step >= y.size(1):
            return product(slice(None), self._extended(y), out)
        for start in range(0, y.size(1), step):
            columns = slice(start, start + step)
            part = product(columns, self._extended(y[:, columns]), None)
            if out is None:
                out = part.new_empty(part.size(0), y.size(1))
            out[:, columns] = part
        return out

    def __matmul__(self, x: Tensor) -> Tensor:
        return self._chunked(x, lambda _, ext, out: self.local @ ext)

    def addmm(self, x: Tensor, y: Tensor, beta: float, alpha: float,
              out: Optional[Tensor] = None) -> Tensor:
        r""":math:`\beta x + \alpha\,\mathbf{S} y` on this rank's rows, returned;
        written to :obj:`out` if given (not overlapping :obj:`x` or :obj:`y`)
        unless a gradient is recorded (:obj:`out=` has none)."""
        if out is not None and torch.is_grad_enabled() and (
                x.requires_grad or y.requires_grad or self.local.requires_grad):
            out = None
        return self._chunked(y, lambda columns, ext, into: torch.addmm(
            x[:, columns], self.local, ext, beta=beta, alpha=alpha, out=into), out)

    def dense_rows(self) -> Tensor:
        r"""This rank's rows as a dense :math:`n \times N` block (small
        problems only)."""
        part = self.partition
        coo = self.local.to_sparse_coo().coalesce()
        rows, cols = coo.indices()
        glob = torch.cat([torch.arange(part.start, part.end, device=cols.device),
                          self.plan.halo.to(cols.device)])
        out = torch.zeros(part.num_local, part.num_nodes, dtype=self.dtype, device=self.device)
        out[rows, glob[cols]] = coo.values()
        return out

    def __repr__(self) -> str:
        part = self.partition
        return (f'{self.__class__.__name__}(rows={part.start}:{part.end} of '
                f'{part.num_nodes}, nnz={self.local._nnz()}, halo={self.plan.halo.numel()})')


def reusing_buffer(operator) -> ContextManager:
    r""":meth:`ShardedMatrix.reusing_buffer` of a row-sharded operator; for
    any other, a block that does nothing."""
    return operator.reusing_buffer() if isinstance(operator, ShardedMatrix) else nullcontext()


def gather_dense(matrix: ShardedMatrix) -> Tensor:
    r"""The whole matrix, densely, on every rank: for problems so small that
    the eigensolvers solve them densely."""
    return torch.cat(all_gather(matrix.dense_rows(), matrix.group))
