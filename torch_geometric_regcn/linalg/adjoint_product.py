r"""Products with a constant sparse operator whose transpose is at hand (or
which is symmetric), whose backward pass multiplies by that transpose."""
from typing import Callable, Optional

import torch
from torch import Tensor

#: :obj:`product(matrix, x)`, the forward pass's way of forming
#: :math:`\mathbf{A}\mathbf{X}` (a layer's message passing)
Product = Callable[[Tensor, Tensor], Tensor]


class _AdjointProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, matrix: Tensor, adjoint: Tensor, x: Tensor,  # type: ignore[override]
                product: Optional[Product]) -> Tensor:
        ctx.matrix, ctx.adjoint = matrix, adjoint  # constant: kept as they are
        return matrix @ x if product is None else product(matrix, x)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        return None, None, adjoint_matmul(ctx.adjoint, ctx.matrix, grad), None


def adjoint_matmul(matrix: Tensor, adjoint: Tensor, x: Tensor,
                   product: Optional[Product] = None) -> Tensor:
    r"""The product :math:`\mathbf{A}\mathbf{X}` of a constant matrix
    :obj:`matrix` (sparse CSR or COO, or dense) with :obj:`x` :obj:`[N, F]`,
    given its transpose :obj:`adjoint` :math:`\mathbf{A}^{\top}`: the gradient
    with respect to :math:`\mathbf{X}` is one product with it. torch's own
    backward of a sparse CSR product forms :math:`\mathbf{A}^{\top}` on every
    call (a sort of its entries), which costs more than the product itself on
    small feature blocks. :obj:`product(matrix, x)`, if given, forms the
    forward product (a layer's message passing, whose hooks then see it) and
    must equal :obj:`matrix @ x` with nothing in it that wants a gradient; the
    backward product is :obj:`adjoint @ grad`. Where the matrix's values want
    a gradient (edge weights being learned or explained), or no gradient is
    recorded, this is :obj:`product` (or torch's product) as it is. Cost: that
    of the product, forward and backward alike."""
    if matrix.requires_grad or not (x.requires_grad and torch.is_grad_enabled()):
        return matrix @ x if product is None else product(matrix, x)
    return _AdjointProduct.apply(matrix, adjoint, x, product)


def symmetric_matmul(matrix: Tensor, x: Tensor, product: Optional[Product] = None) -> Tensor:
    r""":func:`adjoint_matmul` of a symmetric matrix, its own transpose:
    :math:`\mathbf{A}^{\top}\mathbf{G} = \mathbf{A}\mathbf{G}`, one more
    product with the same matrix. The symmetry is the caller's to guarantee;
    it is not checked."""
    return adjoint_matmul(matrix, matrix, x, product)
