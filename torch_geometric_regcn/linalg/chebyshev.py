r"""The Chebyshev filter shared by the eigensolvers."""
import math
from typing import Callable

import torch
from torch import Tensor


def chebyshev_filter(operator: Tensor, lower: float, upper: float, degree: int,
                     top: float) -> Callable[[Tensor], Tensor]:
    r"""The map :math:`x \mapsto T_d(\ell(\mathbf{S}))\,x / T_d(\ell(\text{top}))`
    with :math:`\ell` the affine map of :math:`[\text{lower}, \text{upper}]`
    onto :math:`[-1, 1]`: it damps that interval and grows fastest outside it
    (Zhou and Saad, 2007). The three-term recurrence is scaled at every step by
    :math:`\sigma_j = T_j(\ell(\text{top}))`, so with :obj:`top` at or beyond
    the spectrum's edge intermediate vectors stay of order one and cannot
    overflow, and the map stays linear (as a Krylov method needs). Each step
    is two fused kernels on the sparse (or dense) :obj:`operator` (or, for a
    :class:`~torch_geometric_regcn.linalg.ShardedMatrix`, on this rank's rows
    after its halo exchange)."""
    center, half = (upper + lower) / 2, (upper - lower) / 2
    reach = math.acosh(max(1.0, abs(top - center) / half))
    sigma = [math.cosh(j * reach) for j in range(degree + 1)]

    def addmm(x: Tensor, y: Tensor, beta: float, alpha: float) -> Tensor:
        if isinstance(operator, Tensor):
            return torch.addmm(x, operator, y, beta=beta, alpha=alpha)
        return operator.addmm(x, y, beta=beta, alpha=alpha)  # a ShardedMatrix

    def apply(x: Tensor) -> Tensor:
        # y_{j+1} = 2 s_j / s_{j+1} (S - c) / h y_j - s_{j-1} / s_{j+1} y_{j-1}, y_j = T_j x / s_j
        prev = x
        cur = addmm(x, x, beta=-center / (half * sigma[1]), alpha=1 / (half * sigma[1]))
        for j in range(1, degree):
            scale = 2 * sigma[j] / (half * sigma[j + 1])
            nxt = addmm(prev, cur, beta=-sigma[j - 1] / sigma[j + 1], alpha=scale)
            prev, cur = cur, nxt.add_(cur, alpha=-center * scale)
        return cur

    return apply
