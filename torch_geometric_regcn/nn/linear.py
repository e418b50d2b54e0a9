r"""A linear map whose backward pass is fast for sparse CSR node features."""
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn.dense.linear import Linear as PyGLinear


class Linear(PyGLinear):
    r"""PyG's :class:`~torch_geometric.nn.dense.linear.Linear`
    (:math:`\mathbf{x}^{\prime} = \mathbf{x}\mathbf{W}^{\top} + \mathbf{b}`,
    the same arguments, initialisers and lazy :obj:`in_channels=-1`), with a
    faster backward pass when :obj:`x` is a sparse CSR matrix, e.g. bag-of-words
    node features.

    The weight gradient is :math:`\mathbf{X}^{\top} \mathbf{G}`. Torch forms
    :math:`\mathbf{X}^{\top}` anew in every backward pass; here its sparsity
    pattern is built once and kept while :obj:`x`'s index tensors stay the same
    (which they do under :func:`~torch_geometric_regcn.nn.dropout.dropout`, which
    only rescales the stored values), so each backward pass only gathers the
    values: the transpose's pattern is sorted once instead of in every
    backward pass. "The same" means the same storage and version counter,
    the check that costs nothing per call: an edit of the index tensors that
    bypasses the counter (through :obj:`.data` or a NumPy view) is not
    seen, and would take the old pattern's weight gradient; build a new
    tensor instead (a fingerprint of the indices would cost an
    :math:`O(\mathrm{nnz})` pass per call).

    Args:
        in_channels (int): Size of each input sample, or :obj:`-1` to infer it.
        out_channels (int): Size of each output sample.
        **kwargs (optional): Arguments of PyG's
            :class:`~torch_geometric.nn.dense.linear.Linear`.

    Shapes:
        - **input:** :math:`(*, F_{in})`, dense; or :math:`(N, F_{in})`, sparse
        - **output:** :math:`(*, F_{out})`
    """
    def __init__(self, in_channels: int, out_channels: int, **kwargs) -> None:
        super().__init__(in_channels, out_channels, **kwargs)
        self._matmul = SparseInputMatmul()

    def check_input(self, x: Tensor) -> None:
        r"""Raises :class:`ValueError` where :obj:`x` has another number of
        channels than the layer was built for."""
        if self.in_channels > 0 and x.dim() > 0 and x.size(-1) != self.in_channels:
            raise ValueError(f"The input has {x.size(-1)} channels but the layer was built for "
                             f"in_channels={self.in_channels}; pass in_channels=-1 to infer "
                             f"it from the first input")

    def forward(self, x: Tensor) -> Tensor:
        self.check_input(x)
        if not SparseInputMatmul.applies(x, self.weight):
            return F.linear(x, self.weight, self.bias)
        out = self._matmul(x, self.weight)
        return out if self.bias is None else out + self.bias


class SparseInputMatmul:
    r"""Computes :math:`\mathbf{X}\mathbf{W}^{\top}` like
    :func:`torch.nn.functional.linear`; for a sparse CSR :math:`\mathbf{X}`
    that needs no gradient, the backward pass reuses the sparsity pattern of
    :math:`\mathbf{X}^{\top}`, built on the first call and kept while
    :obj:`x`'s index tensors stay the same. The engine of :class:`Linear`, for
    layers that project the same features with several weights (concatenate
    them: one sparse product instead of several)."""
    def __init__(self) -> None:
        self._pattern: Optional[_TransposedPattern] = None

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, '_pattern': None}  # a cache: copies and pickles rebuild it

    @staticmethod
    def applies(x: Tensor, weight: Tensor) -> bool:
        r"""Whether :obj:`x`, :obj:`weight` take the sparse path (otherwise it
        is :func:`torch.nn.functional.linear`)."""
        return (x.layout == torch.sparse_csr and x.dim() == 2 and not x.requires_grad
                and torch.is_grad_enabled() and weight.requires_grad)

    def __call__(self, x: Tensor, weight: Tensor) -> Tensor:
        if not self.applies(x, weight):
            return F.linear(x, weight)
        return _SparseInputMatmul.apply(x, self._transposed(x), weight)

    def _transposed(self, x: Tensor) -> Tensor:
        r"""The CSR matrix :math:`\mathbf{X}^{\top}`, its pattern reused while
        :obj:`x` keeps the same (unmodified) index tensors."""
        crow, col = x.crow_indices(), x.col_indices()
        key = (crow.data_ptr(), col.data_ptr(), crow._version, col._version, *x.shape)
        if self._pattern is None or self._pattern.key != key:
            rows = torch.repeat_interleave(torch.arange(x.size(0), device=x.device),
                                           crow.diff())
            perm = torch.argsort(col.long() * x.size(0) + rows)  # column-major order
            counts = torch.bincount(col.long(), minlength=x.size(1))
            t_crow = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(crow.dtype)
            self._pattern = _TransposedPattern(key, t_crow, rows[perm].to(col.dtype), perm,
                                               (crow, col))
        pattern = self._pattern
        return torch.sparse_csr_tensor(pattern.crow, pattern.col, x.values()[pattern.perm],
                                       (x.size(1), x.size(0)), check_invariants=False)


class _TransposedPattern(NamedTuple):
    key: Tuple[int, ...]  # x's index pointers and versions, and its shape
    crow: Tensor  # the pattern of x^T, in CSR
    col: Tensor
    perm: Tensor  # x^T's values are x.values()[perm]
    source: Tuple[Tensor, Tensor]  # x's index tensors, held so the pointers stay theirs


class _SparseInputMatmul(torch.autograd.Function):
    r""":math:`\mathbf{X}\mathbf{W}^{\top}` for a constant sparse CSR
    :math:`\mathbf{X}`, with the weight gradient from a given
    :math:`\mathbf{X}^{\top}`."""
    @staticmethod
    def forward(ctx, x: Tensor, x_t: Tensor, weight: Tensor) -> Tensor:
        ctx.x_t = x_t
        return x @ weight.t()

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tuple[None, None, Tensor]:
        return None, None, (ctx.x_t @ grad).t()
