r"""Low-rank factors of :math:`(\mathbf{I} - \mathbf{S})^{-1}` and their
application through the Woodbury identity."""
import weakref
from typing import Any, Dict, NamedTuple, Optional, Tuple

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
    model) computes it once, e.g. through :class:`WoodburyCache`, and passes it
    to :func:`woodbury_apply`."""
    vtw = v.T @ w
    lu, pivots, _ = torch.linalg.lu_factor_ex(
        torch.eye(w.size(1), dtype=w.dtype, device=w.device) + vtw)
    if not torch.compiler.is_compiling() and lu.numel() > 0:
        _check_invertible(lu, vtw)
    return WoodburyCore(lu, pivots)


def _check_invertible(lu: Tensor, vtw: Tensor) -> None:
    # A pivot of U at the rounding level of the core's entries means a
    # numerically singular core. For tsGCN's factors the core is I - Λ, whose
    # smallest pivot is 1 / (1 + α + β): far above this for any usable α + β.
    threshold = torch.finfo(lu.dtype).eps * (1 + vtw.abs().max())
    finite, regular = torch.stack([torch.isfinite(lu).all(),
                                   lu.diagonal().abs().min() > threshold]).tolist()
    if not finite:
        raise ValueError("the factors 'w' and 'v' contain NaN or infinite values; "
                         'recompute them (e.g. with LowRankInverse)')
    if not regular:
        raise ValueError('I + V^T W is singular, so (I + W V^T) has no inverse; recompute '
                         'the factors (e.g. with LowRankInverse) or lower the rank')


class WoodburyCache:
    r"""Keeps the :func:`woodbury_core` of the last factors it was asked for
    and returns it while the same factors come back: the same tensor objects,
    unmodified (in place or through :obj:`.data`), on the same device and in
    the same dtype. Factors that require gradients, inference tensors and
    calls under :func:`torch.compile` or :func:`torch.inference_mode` are
    factorised anew on every call. The cache holds weak references only, and
    copies and pickles of its owner start empty."""
    def __init__(self) -> None:
        self._key: Optional[Tuple[Any, ...]] = None
        self._refs: Optional[Tuple[weakref.ref, weakref.ref]] = None
        self._core: Optional[WoodburyCore] = None

    def __call__(self, w: Tensor, v: Tensor) -> WoodburyCore:
        if (w.requires_grad or v.requires_grad or torch.compiler.is_compiling()
                or torch.is_inference_mode_enabled() or w.is_inference() or v.is_inference()):
            return woodbury_core(w, v)
        key = tuple((t._version, t.data_ptr(), t.dtype, t.device, t.shape) for t in (w, v))
        refs = self._refs
        if (self._core is None or refs is None or refs[0]() is not w or refs[1]() is not v
                or self._key != key):
            self._core = woodbury_core(w, v)
            self._key, self._refs = key, (weakref.ref(w), weakref.ref(v))
        return self._core

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, '_key': None, '_refs': None, '_core': None}


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
