r"""The product of a symmetric sparse operator with node features, whose
backward pass multiplies by the same matrix."""
from typing import Callable, Optional

import torch
from torch import Tensor

#: :obj:`product(matrix, x)`, the forward pass's way of forming
#: :math:`\mathbf{A}\mathbf{X}` (a layer's message passing)
Product = Callable[[Tensor, Tensor], Tensor]


class _SymmetricProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, matrix: Tensor, x: Tensor,  # type: ignore[override]
                product: Optional[Product]) -> Tensor:
        ctx.matrix = matrix  # not an input that wants a gradient: kept as it is
        return matrix @ x if product is None else product(matrix, x)

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        return None, symmetric_matmul(ctx.matrix, grad), None


def symmetric_matmul(matrix: Tensor, x: Tensor, product: Optional[Product] = None) -> Tensor:
    r"""The product :math:`\mathbf{A}\mathbf{X}` of a symmetric matrix
    :obj:`matrix` (sparse CSR or COO, or dense) with :obj:`x` :obj:`[N, F]`,
    whose gradient with respect to :math:`\mathbf{X}` is
    :math:`\mathbf{A}^{\top}\mathbf{G} = \mathbf{A}\mathbf{G}`, one more
    product with the same matrix. torch's own backward of a sparse CSR
    product forms :math:`\mathbf{A}^{\top}` on every call (a sort of its
    entries), which costs more than the product itself on small feature
    blocks. The symmetry is the caller's to guarantee; it is not checked.
    :obj:`product(matrix, x)`, if given, forms the forward product (a
    layer's message passing, whose hooks then see it) and must equal
    :obj:`matrix @ x` with nothing in it that wants a gradient; the backward
    product is :obj:`matrix @ grad`. Where the matrix's values want a
    gradient (edge weights being learned or explained), or no gradient is
    recorded, this is :obj:`product` (or torch's product) as it is. Cost:
    that of the product, forward and backward alike."""
    if matrix.requires_grad or not (x.requires_grad and torch.is_grad_enabled()):
        return matrix @ x if product is None else product(matrix, x)
    return _SymmetricProduct.apply(matrix, x, product)
