r"""Low-rank factors of :math:`(\mathbf{I} - \mathbf{S})^{-1}` and their
application through the Woodbury identity."""
from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor


def factors_from_eigenpairs(eigenvalues: Tensor, eigenvectors: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Turns eigenpairs :math:`(\mathbf{\Lambda}, \mathbf{U})` of a symmetric
    :math:`\mathbf{S}` into factors with :math:`\mathbf{W}\mathbf{V}^{\top} =
    -\mathbf{U} \mathbf{\Lambda} \mathbf{U}^{\top}`, the rank-:math:`r`
    truncated SVD of :math:`-\mathbf{S}` in the form of the tsGCN authors' code:
    :math:`\mathbf{W} = \mathbf{U} |\mathbf{\Lambda}|^{1/2}`,
    :math:`\mathbf{V} = -\mathbf{U}\,\mathrm{sign}(\mathbf{\Lambda})
    |\mathbf{\Lambda}|^{1/2}`. Then :math:`\mathbf{I} - \mathbf{W}(\mathbf{I}_r +
    \mathbf{V}^{\top}\mathbf{W})^{-1}\mathbf{V}^{\top} = (\mathbf{I} +
    \mathbf{W}\mathbf{V}^{\top})^{-1} \approx (\mathbf{I} - \mathbf{S})^{-1}`."""
    root = eigenvalues.abs().sqrt()
    return eigenvectors * root, -eigenvectors * (eigenvalues.sign() * root)


class WoodburyCore(NamedTuple):
    r"""The LU factorisation of the :math:`r \times r` core
    :math:`\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W}` (see
    :func:`torch.linalg.lu_factor`)."""
    lu: Tensor
    pivots: Tensor


def woodbury_core(w: Tensor, v: Tensor) -> WoodburyCore:
    r"""Factorises :math:`\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W}` in
    :math:`O(N r^2 + r^3)` time. It depends on the factors only, so a caller
    that applies the same factors many times (every epoch of a transductive
    model) computes it once and passes it to :func:`woodbury_apply`."""
    vtw = v.T @ w
    lu, pivots, _ = torch.linalg.lu_factor_ex(
        torch.eye(w.size(1), dtype=w.dtype, device=w.device) + vtw)
    if not torch.compiler.is_compiling():
        _check_invertible(lu, vtw)
    return WoodburyCore(lu, pivots)


def _check_invertible(lu: Tensor, vtw: Tensor) -> None:
    if lu.numel() == 0:
        return
    if not bool(torch.isfinite(lu).all()):
        raise ValueError("the factors 'w' and 'v' contain NaN or infinite values; "
                         'recompute them (e.g. with LowRankInverse)')
    # U's diagonal; a pivot this small against the entries of I + V^T W means a
    # condition number beyond 1 / (r * eps): the solve would return noise.
    eps = torch.finfo(lu.dtype).eps * lu.size(0)
    if bool(lu.diagonal().abs().min() <= eps * (1 + vtw.abs().max())):
        raise ValueError('I + V^T W is singular, so (I + W V^T) has no inverse; recompute '
                         'the factors (e.g. with LowRankInverse) or lower the rank')


def woodbury_apply(x: Tensor, w: Tensor, v: Tensor,
                   core: Optional[WoodburyCore] = None) -> Tensor:
    r"""Computes :math:`(\mathbf{I} + \mathbf{W}\mathbf{V}^{\top})^{-1} \mathbf{X}
    = \mathbf{X} - \mathbf{W} (\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W})^{-1}
    \mathbf{V}^{\top}\mathbf{X}` in :math:`O(N r f)` time given :obj:`core`
    (from :func:`woodbury_core`; computed here, in another :math:`O(N r^2)`,
    when :obj:`None`) and :math:`O(N r)` memory: only :math:`r \times r` and
    :math:`r \times f` intermediates are formed."""
    if core is None:
        core = woodbury_core(w, v)
    return x - w @ torch.linalg.lu_solve(core.lu, core.pivots, v.T @ x)
