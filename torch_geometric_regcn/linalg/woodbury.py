r"""Low-rank factors of :math:`(\mathbf{I} - \mathbf{S})^{-1}` and their
application through the Woodbury identity."""
from typing import Tuple

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


def woodbury_apply(x: Tensor, w: Tensor, v: Tensor) -> Tensor:
    r"""Computes :math:`(\mathbf{I} + \mathbf{W}\mathbf{V}^{\top})^{-1} \mathbf{X}
    = \mathbf{X} - \mathbf{W} (\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W})^{-1}
    \mathbf{V}^{\top}\mathbf{X}` in :math:`O(N r f + N r^2)` time and
    :math:`O(N r)` memory: only :math:`r \times r` and :math:`r \times f`
    intermediates are formed."""
    core = torch.eye(w.size(1), dtype=w.dtype, device=w.device) + v.T @ w
    return x - w @ torch.linalg.solve(core, v.T @ x)
