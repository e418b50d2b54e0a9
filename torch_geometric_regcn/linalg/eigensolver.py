r"""One entry point to the eigensolvers of :class:`LowRankInverse`."""
from typing import Callable, Optional

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import agree_arguments
from torch_geometric_regcn.linalg.componentwise import componentwise_eigenpairs
from torch_geometric_regcn.linalg.eigenpairs import EigenPairs
from torch_geometric_regcn.linalg.lanczos import ResidualsCallback, block_lanczos
from torch_geometric_regcn.linalg.sharded_matrix import ShardedMatrix
from torch_geometric_regcn.linalg.subspace_iteration import subspace_iteration
from torch_geometric_regcn.utils.deprecation import moved
from torch_geometric_regcn.utils.validation import check_choice

#: :obj:`"lanczos"`: Chebyshev-filtered thick-restart block Lanczos (fast);
#: :obj:`"chebyshev"`: Chebyshev-filtered subspace iteration;
#: :obj:`"power"`: the tsGCN paper's plain subspace (power) iteration.
EIGENSOLVER_METHODS = ('lanczos', 'chebyshev', 'power')


def extreme_eigenpairs(operator: Tensor, k: int, which: str = 'LA', tol: float = 1e-4,
                       max_iter: int = 100, method: str = 'lanczos',
                       generator: Optional[torch.Generator] = None,
                       callback: Optional[Callable[[int, float], None]] = None,
                       step_callback: Optional[Callable[[int, int, int], None]] = None,
                       residuals_callback: Optional[ResidualsCallback] = None
                       ) -> EigenPairs:
    r"""The :obj:`k` eigenpairs of the symmetric :obj:`operator` selected by
    :obj:`which`, by :func:`block_lanczos` (:obj:`method="lanczos"`) or
    :func:`subspace_iteration` (:obj:`"chebyshev"`, :obj:`"power"`).
    :obj:`tol` and :obj:`max_iter` keep each solver's meaning (see there);
    :obj:`callback(iteration, residual)` is called after every iteration
    (:func:`block_lanczos` also calls :obj:`callback(0, math.inf)` after
    locating the spectrum); :obj:`step_callback` and
    :obj:`residuals_callback` (the residual of each pair) go to
    :func:`block_lanczos` (see there) and are not called by the other
    methods.

    An operator whose graph of non-zero entries is disconnected is solved one
    connected component at a time (:func:`~torch_geometric_regcn.linalg.
    componentwise.componentwise_eigenpairs`: small components densely, each
    large one by the chosen method, the callbacks reporting the largest's
    solve): a block method misses copies of an eigenvalue that more components
    share than its block holds. A row-sharded :obj:`operator` (a
    :class:`ShardedMatrix`) is solved as one, and needs :obj:`"lanczos"`, the
    same on every rank."""
    if isinstance(operator, ShardedMatrix):  # agreed: a rank must not raise alone
        error = None
        try:
            check_choice('method', method, EIGENSOLVER_METHODS)
            if method != 'lanczos':
                raise ValueError(f"a row-sharded 'operator' (ShardedMatrix) needs "
                                 f"method='lanczos', the row-sharded eigensolver (got "
                                 f"{method!r})")
        except ValueError as failure:
            error = failure
        agree_arguments(operator.group, 'extreme_eigenpairs', {"'method'": method}, error)
        return block_lanczos(operator, k, which, tol, max_iter, generator=generator,
                             callback=callback, step_callback=step_callback,
                             residuals_callback=residuals_callback)
    check_choice('method', method, EIGENSOLVER_METHODS)

    def solve(component: Tensor, count: int, main: bool) -> EigenPairs:
        # The largest component reports progress; the generator runs on through the others.
        if method == 'lanczos':
            return block_lanczos(component, count, which, tol, max_iter, generator=generator,
                                 callback=callback if main else None,
                                 step_callback=step_callback if main else None,
                                 residuals_callback=residuals_callback if main else None)
        return subspace_iteration(component, count, which, tol, max_iter, method,
                                  generator=generator, callback=callback if main else None)

    return componentwise_eigenpairs(operator, k, which, tol, max_iter, solve)


__getattr__ = moved(__name__, {'METHODS': f'{__name__}:EIGENSOLVER_METHODS'})
