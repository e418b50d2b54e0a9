r"""The Chebyshev filter shared by the eigensolvers."""
import math
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor


def chebyshev_filter(operator: Tensor, lower: float, upper: float, degree: int,
                     top: float, workspace: Optional[Sequence[Tensor]] = None
                     ) -> Callable[[Tensor], Tensor]:
    r"""The map :math:`x \mapsto T_d(\ell(\mathbf{S}))\,x / T_d(\ell(\text{top}))`
    with :math:`\ell` the affine map of :math:`[\text{lower}, \text{upper}]`
    onto :math:`[-1, 1]`: it damps that interval and grows fastest outside it
    (Zhou and Saad, 2007). The three-term recurrence is scaled at every step by
    :math:`\sigma_j = T_j(\ell(\text{top}))`, so with :obj:`top` at or beyond
    the spectrum's edge intermediate vectors stay of order one and cannot
    overflow, and the map stays linear (as a Krylov method needs). Each step
    is two fused kernels on the sparse (or dense) :obj:`operator` (or, for a
    :class:`~torch_geometric_regcn.linalg.ShardedMatrix`, on this rank's rows
    after its halo exchange).

    The map works in three contiguous blocks of the input's size: the three
    tensors of :obj:`workspace` (any shape, each with at least as many
    elements as the input) where given, so that a long iteration allocates
    nothing (the returned block is then one of them, overwritten by the next
    call), else three new ones per call. :obj:`lower=-1`, :obj:`upper=1`,
    :obj:`degree=1`, :obj:`top=1` is the plain product
    :math:`\mathbf{S}x`. The scale is :math:`T_d(\ell(\text{top}))` for
    :obj:`top` at or above :obj:`upper`, where every caller puts it; for
    another :obj:`top` it is :math:`\cosh(d\,\mathrm{arcosh}(\max(1,
    |\ell(\text{top})|)))`, positive, so the map is :math:`T_d(\ell(\mathbf{S}))`
    up to a positive factor."""
    center, half = (upper + lower) / 2, (upper - lower) / 2
    reach = math.acosh(max(1.0, abs(top - center) / half))
    sigma = [math.cosh(j * reach) for j in range(degree + 1)]

    def blocks(x: Tensor) -> list[Tensor]:
        if workspace is not None:
            return [block.view(-1)[:x.numel()].view(x.shape) for block in workspace]
        return [torch.empty(x.shape, dtype=x.dtype, device=x.device) for _ in range(3)]

    def addmm(x: Tensor, y: Tensor, beta: float, alpha: float, out: Tensor) -> Tensor:
        if isinstance(operator, Tensor):
            return torch.addmm(x, operator, y, beta=beta, alpha=alpha, out=out)
        return operator.addmm(x, y, beta=beta, alpha=alpha, out=out)  # a ShardedMatrix

    def apply(x: Tensor) -> Tensor:
        # y_{j+1} = 2 s_j / s_{j+1} (S - c) / h y_j - s_{j-1} / s_{j+1} y_{j-1}, y_j = T_j x / s_j
        first, free, spare = blocks(x)
        prev = first.copy_(x)  # a contiguous copy: a strided operand would be copied per product
        cur = addmm(prev, prev, beta=-center / (half * sigma[1]), alpha=1 / (half * sigma[1]),
                    out=free)
        for j in range(1, degree):
            scale = 2 * sigma[j] / (half * sigma[j + 1])
            nxt = addmm(prev, cur, beta=-sigma[j - 1] / sigma[j + 1], alpha=scale, out=spare)
            spare = prev
            prev, cur = cur, nxt.add_(cur, alpha=-center * scale)
        return cur

    return apply
