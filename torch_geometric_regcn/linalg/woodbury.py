r"""Low-rank factors of :math:`(\mathbf{I} - \mathbf{S})^{-1}` and their
application through the Woodbury identity."""
import math
import warnings
import weakref
from typing import Any, Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import (
    Group,
    all_gather_ints,
    differentiable_all_reduce,
)
from torch_geometric_regcn.utils.compat import is_compiling


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


def woodbury_core(w: Tensor, v: Tensor, from_eigenpairs: bool = False,
                  group: Group = None) -> WoodburyCore:
    r"""Factorises :math:`\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W}` in
    :math:`O(N r^2 + r^3)` time. It depends on the factors only, so a caller
    that applies the same factors many times (every epoch of a transductive
    model) computes it once, e.g. through :class:`WoodburyCache`, and passes it
    to :func:`woodbury_apply`.

    With :obj:`from_eigenpairs=True` the factors must be those of
    :func:`factors_from_eigenpairs` for one whole graph, as
    :class:`~torch_geometric_regcn.LowRankInverse` computes them: then
    :math:`\mathbf{V}^{\top}\mathbf{W} = -\mathbf{\Lambda}` is diagonal,
    whereas rows of such factors (a subgraph's, as a loader or
    :meth:`~torch_geometric.data.Data.subgraph` slices them) give
    off-diagonal entries, and an error is raised (see
    :func:`eigenpair_tolerance`). Factors that require gradients (being
    learned) and calls under :func:`torch.compile` are not checked.

    With a :mod:`torch.distributed` :obj:`group`, :obj:`w` and :obj:`v` are
    this rank's rows of factors split by rows over the group, and
    :math:`\mathbf{V}^{\top}\mathbf{W}` is all-reduced (:math:`r^2`
    numbers): every rank gets the same core. It is computed in the factors'
    dtype, :func:`torch.autocast` or not (its gains need that precision)."""
    with torch.autocast(w.device.type, enabled=False):
        vtw = differentiable_all_reduce(v.T @ w, group)
    lu, pivots, _ = torch.linalg.lu_factor_ex(
        torch.eye(w.size(1), dtype=w.dtype, device=w.device) + vtw)
    if not is_compiling() and lu.numel() > 0:
        check = from_eigenpairs and not (w.requires_grad or v.requires_grad)
        _check_core(lu, vtw, check, _computed_dtype(w, v) if check else w.dtype)
    return WoodburyCore(lu, pivots)


def eigenpair_tolerance(dtype: torch.dtype) -> float:
    r"""The largest off-diagonal entry of :math:`\mathbf{V}^{\top}\mathbf{W}`,
    relative to the geometric mean of the two diagonal entries in its row and
    column, that :func:`woodbury_core` accepts from factors of eigenpairs:
    :math:`10\sqrt{\epsilon}` (:math:`3.5 \cdot 10^{-3}` in float32,
    :math:`1.5 \cdot 10^{-7}` in float64). :func:`woodbury_core` applies the
    float32 bound to float64 factors that are exact casts of float32 ones
    (:obj:`data.double()` after a float32 :class:`LowRankInverse`).

    For factors of eigenpairs :math:`(\lambda_i, \mathbf{u}_i)` the ratio is
    the cosine between eigenvectors, :math:`|\mathbf{u}_i^{\top}\mathbf{u}_j|
    / (\|\mathbf{u}_i\| \|\mathbf{u}_j\|)`, whatever the eigenvalues: zero
    up to the orthogonality of the eigensolver's basis and the rounding of
    an :math:`N`-term inner product, about :math:`\epsilon\sqrt{N}`, far
    below this bound for graphs of up to :math:`10^{8}` nodes (also after a
    cast from float64 to float32, which rounds each entry once). Rows of such
    vectors (a subgraph's) are no longer orthogonal, by far more than this
    unless nearly every row is kept."""
    return 10 * math.sqrt(torch.finfo(dtype).eps)


def _relative_off_diagonal(vtw: Tensor) -> Tensor:
    r"""The largest :math:`|c_{ij}| / \sqrt{|c_{ii}| |c_{jj}|}`, :math:`i \neq j`
    (zero where :math:`c_{ij} = 0`, infinite where only the diagonal vanishes)."""
    diagonal = vtw.diagonal()
    off = (vtw - torch.diag_embed(diagonal)).abs()
    root = diagonal.abs().sqrt()
    ratio = off / (root[:, None] * root[None, :])
    return torch.where(off > 0, ratio, torch.zeros_like(ratio)).max()


#: The relative accuracy of the gains below which :func:`woodbury_core` warns.
GAIN_ACCURACY = 1e-3


def _computed_dtype(w: Tensor, v: Tensor) -> torch.dtype:
    # float64 factors that float32 holds exactly were computed in float32.
    if w.dtype == torch.float64 and all(torch.equal(t, t.float().double()) for t in (w, v)):
        return torch.float32
    return w.dtype


def _check_core(lu: Tensor, vtw: Tensor, from_eigenpairs: bool,
                computed: torch.dtype) -> None:
    # The smallest pivot of U against the rounding level of the core's entries
    # bounds the relative accuracy of the largest gain: for tsGCN's factors the
    # core is I - Λ, whose smallest pivot 1 - λ_max >= 1 / (1 + α + β) is where
    # rounding cancels. At the rounding level the core is numerically singular.
    rounding = torch.finfo(lu.dtype).eps * (1 + vtw.abs().max())
    stats = [torch.isfinite(lu).all(), lu.diagonal().abs().min(), rounding]
    if from_eigenpairs:
        stats.append(_relative_off_diagonal(vtw))
    finite, pivot, rounding, *off = torch.stack(
        [t.detach().to(vtw.dtype) for t in stats]).tolist()
    if not finite:
        raise ValueError("the factors 'w' and 'v' contain NaN or infinite values; "
                         'recompute them (e.g. with LowRankInverse)')
    tolerance = eigenpair_tolerance(computed)
    if off and not off[0] <= tolerance:
        raise ValueError(
            f"the factors 'w' and 'v' (data.lowrank_w and data.lowrank_v) are not those of "
            f"one whole graph: V^T W, diagonal for the factors of LowRankInverse, has "
            f"off-diagonal entries up to {off[0]:.2g} times the diagonal ones (tolerance "
            f"{tolerance:.2g}), as when a loader or subgraph() slices the rows of a larger "
            f"graph's factors. Only transductive use on the full graph is supported: pass "
            f"the whole graph's 'x' and factors and index the output (e.g. 'out[mask]'), or "
            f"compute factors for the graph you pass with LowRankInverse")
    error = rounding / pivot if pivot > 0 else math.inf
    if not error < 1:
        raise ValueError(
            f"I + V^T W is numerically singular in {lu.dtype} (smallest pivot {pivot:.2g}, "
            f"rounding level {rounding:.2g}), so (I + W V^T) has no inverse; recompute the "
            f"factors (LowRankInverse) in float64 or with a smaller alpha + beta, or lower "
            f"the rank")
    warn_if_imprecise(error, pivot, lu.dtype, stacklevel=5)


def gain_precision(eigenvalues: Tensor) -> Tuple[float, float]:
    r"""For the factors of :func:`factors_from_eigenpairs`, whose core is
    :math:`\mathbf{I} - \mathbf{\Lambda}`: the relative rounding error of the
    largest gain :math:`1 / (1 - \lambda)`, about :math:`\epsilon (1 +
    \max|\lambda|) / \min(1 - \lambda)` in the dtype of :obj:`eigenvalues`,
    and that smallest pivot :math:`\min(1 - \lambda)`."""
    pivot, largest = torch.stack([(1 - eigenvalues).min(),
                                  eigenvalues.abs().max()]).tolist()
    rounding = torch.finfo(eigenvalues.dtype).eps * (1 + largest)
    return (rounding / pivot if pivot > 0 else math.inf), pivot


def warn_if_imprecise(error: float, pivot: float, dtype: torch.dtype,
                      stacklevel: int = 2) -> None:
    r"""Warns when rounding leaves the largest gain of the factors less
    accurate than :obj:`GAIN_ACCURACY` (see :func:`gain_precision`)."""
    if error > GAIN_ACCURACY:
        warnings.warn(
            f"The Woodbury core I + V^T W has a pivot as small as {pivot:.2g} (1 - lambda "
            f"for tsGCN's largest eigenvalue lambda), so in {dtype} the largest gain "
            f"1 / (1 - lambda) is accurate to about {error:.1%} only; compute the factors in "
            f"float64 (LowRankInverse on data.x.double()) or use a smaller alpha + beta",
            UserWarning, stacklevel=stacklevel + 1)


#: Rows of the factors that :class:`WoodburyCache` compares on every call.
SAMPLED_ROWS = 16


class WoodburyCache:
    r"""Keeps the :func:`woodbury_core` of the last factors it was asked for
    and returns it while the same factors come back: the same tensor objects,
    on the same device and in the same dtype, not modified in place (their
    version counter) and with the same values in :obj:`SAMPLED_ROWS` evenly
    spaced rows. The sampled rows catch writes that bypass the version counter
    (through :obj:`.data` or a NumPy array sharing the memory) when they touch
    one of these rows, as any rewrite of the whole tensor does; an edit of a
    few other rows that bypasses PyTorch is not seen, so pass new tensors
    (e.g. :obj:`w.clone()`) after such an edit. Factors that require
    gradients, inference tensors and calls under :func:`torch.compile` or
    :func:`torch.inference_mode` are factorised anew on every call. The cache
    holds weak references only, and copies and pickles of its owner start
    empty. With a process :obj:`group`, the ranks agree on every call (one
    all-gather of a flag): if the factors changed on any rank, all of them
    factorise again, as the core is all-reduced."""
    def __init__(self) -> None:
        self._key: Optional[Tuple[Any, ...]] = None
        self._refs: Optional[Tuple[weakref.ref, weakref.ref]] = None
        self._core: Optional[WoodburyCore] = None
        self._sample: Optional[Tensor] = None

    @staticmethod
    def _sampled(w: Tensor, v: Tensor) -> Tensor:
        rows = torch.linspace(0, max(w.size(0) - 1, 0), min(SAMPLED_ROWS, w.size(0)),
                              device=w.device).long()
        return torch.cat([w[rows], v[rows]], dim=1)

    def __call__(self, w: Tensor, v: Tensor, from_eigenpairs: bool = False,
                 group: Group = None) -> WoodburyCore:
        if (w.requires_grad or v.requires_grad or is_compiling()
                or torch.is_inference_mode_enabled() or w.is_inference() or v.is_inference()):
            return woodbury_core(w, v, from_eigenpairs, group)
        key = (from_eigenpairs, *((t._version, t.data_ptr(), t.dtype, t.device, t.shape)
                                  for t in (w, v)))
        refs = self._refs
        fresh = not (self._core is None or refs is None or refs[0]() is not w
                     or refs[1]() is not v or self._key != key
                     or not torch.equal(self._sample, self._sampled(w, v)))
        if group is not None:  # every rank recomputes (an all-reduce) if any rank must
            fresh = all(flag for (flag,) in all_gather_ints([fresh], group))
        if not fresh:
            self._core = woodbury_core(w, v, from_eigenpairs, group)
            self._key, self._refs = key, (weakref.ref(w), weakref.ref(v))
            self._sample = self._sampled(w, v)
        return self._core

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, '_key': None, '_refs': None, '_core': None, '_sample': None}


def woodbury_apply(x: Tensor, w: Tensor, v: Optional[Tensor],
                   core: Optional[WoodburyCore] = None, group: Group = None, *,
                   summary: Optional[Tensor] = None) -> Tensor:
    r"""Computes

    .. math::
        (\mathbf{I} + \mathbf{W}\mathbf{V}^{\top})^{-1} \mathbf{X}
        = \mathbf{X} - \mathbf{W} (\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W})^{-1}
        \mathbf{V}^{\top}\mathbf{X}

    in :math:`O(N r f)` time given :obj:`core` (from :func:`woodbury_core`;
    computed here, in another :math:`O(N r^2)`, when :obj:`None`) and
    :math:`O(N r)` memory: only :math:`r \times r` and :math:`r \times f`
    intermediates are formed. The product runs in the dtype of the factors
    (:obj:`x` is cast to it, the result back to the dtype of :obj:`x`, so
    half-precision features work with float32 factors), and
    :func:`torch.autocast` is disabled inside, as the large gains of an
    ill-conditioned core need the factors' precision.

    A caller that knows the summary :math:`\mathbf{V}^{\top}\mathbf{X}`
    of all :math:`N` rows passes it as :obj:`summary` (with :obj:`core`):
    then :obj:`v` is not read, and :obj:`x` and :obj:`w` may be any rows
    :math:`\mathcal{B}` of the graph, whose rows of the result,
    :math:`\mathbf{X}_{\mathcal{B}} - \mathbf{W}_{\mathcal{B}}
    (\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W})^{-1}
    \mathbf{V}^{\top}\mathbf{X}`, cost :math:`O(|\mathcal{B}| r f + r^2 f)`
    (as :class:`~torch_geometric_regcn.MiniBatchTSGCN` computes a batch).

    With a :mod:`torch.distributed` :obj:`group`, :obj:`x`, :obj:`w` and
    :obj:`v` are this rank's rows and so is the result: the :math:`r \times
    f` product :math:`\mathbf{V}^{\top}\mathbf{X}` is all-reduced (and its
    gradient in the backward pass), the only communication; no halo is
    needed. A given :obj:`summary` is taken as the whole graph's, never
    all-reduced.

    Args:
        x (torch.Tensor): The right-hand side :math:`\mathbf{X}`,
            :obj:`[N, f]` (or rows :math:`\mathcal{B}` of it, with
            :obj:`summary`).
        w (torch.Tensor): The factor :math:`\mathbf{W}`, :obj:`[N, r]` (or
            the same rows as :obj:`x`).
        v (torch.Tensor, optional): The factor :math:`\mathbf{V}`,
            :obj:`[N, r]`; :obj:`None` with :obj:`summary`.
        core (WoodburyCore, optional): :func:`woodbury_core` of the factors.
        group (ProcessGroup, optional): The process group over which the rows
            are split. (default: :obj:`None`, one process)
        summary (torch.Tensor, optional): :math:`\mathbf{V}^{\top}\mathbf{X}`
            of all rows, :obj:`[r, f]`. (default: :obj:`None`, computed from
            :obj:`x` and :obj:`v`)
    """
    if summary is None and v is None:
        raise ValueError("woodbury_apply needs the factor 'v', or the summary V^T X of all "
                         "rows as 'summary=' (with 'core=')")
    if core is None:
        if summary is not None:
            raise ValueError("'summary' needs 'core' (woodbury_core of the whole graph's "
                             "factors): the rows 'w' given with a summary may be a batch's")
        core = woodbury_core(w, v, group=group)
    with torch.autocast(x.device.type, enabled=False):
        y = x.to(w.dtype)
        if summary is None:
            summary = differentiable_all_reduce(v.T @ y, group)
        return (y - w @ torch.linalg.lu_solve(core.lu, core.pivots, summary.to(w.dtype))
                ).to(x.dtype)
