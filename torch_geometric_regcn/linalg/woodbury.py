r"""Low-rank factors of :math:`(\mathbf{I} - \mathbf{S})^{-1}` and their
application through the Woodbury identity."""
import math
import warnings
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import (
    Group,
    agree,
    agree_arguments,
    differentiable_all_reduce,
)
from torch_geometric_regcn.linalg.blocks import local_gram
from torch_geometric_regcn.linalg.graph_batch import (
    WITH_GROUP,
    blocks_gram,
    check_batch,
    gather_blocks,
    graph_blocks,
    graph_count,
    graph_gram,
    scatter_blocks,
    slots_of,
)
from torch_geometric_regcn.utils.compat import is_compiling
from torch_geometric_regcn.utils.fingerprint import fingerprint
from torch_geometric_regcn.utils.validation import (
    check_factors,
    check_node_features,
    check_tensor,
    computed_dtype,
)
from torch_geometric_regcn.utils.warn_once import outside_stacklevel


def factors_from_eigenpairs(eigenvalues: Tensor, eigenvectors: Tensor) -> Tuple[Tensor, Tensor]:
    r"""Turns eigenpairs :math:`(\mathbf{\Lambda}, \mathbf{U})` of a symmetric
    :math:`\mathbf{S}` into factors with :math:`\mathbf{W}\mathbf{V}^{\top} =
    -\mathbf{U} \mathbf{\Lambda} \mathbf{U}^{\top}`, the rank-:math:`r`
    eigen-truncation of :math:`-\mathbf{S}` on the pairs given (its truncated
    SVD for the pairs of largest magnitude, :obj:`which="LM"`) in the form
    of the tsGCN authors' code:
    :math:`\mathbf{W} = \mathbf{U} |\mathbf{\Lambda}|^{1/2}`,
    :math:`\mathbf{V} = -\mathbf{U}\,\mathrm{sign}(\mathbf{\Lambda})
    |\mathbf{\Lambda}|^{1/2}`. Then :math:`\mathbf{I} - \mathbf{W}(\mathbf{I}_r +
    \mathbf{V}^{\top}\mathbf{W})^{-1}\mathbf{V}^{\top} = (\mathbf{I} +
    \mathbf{W}\mathbf{V}^{\top})^{-1} \approx (\mathbf{I} - \mathbf{S})^{-1}`.

    :obj:`eigenvalues` :obj:`[r]` and :obj:`eigenvectors` :obj:`[N, r]` are
    checked first (:obj:`O(r)`, one synchronisation): floating-point tensors
    of matching shapes, finite eigenvalues, and none equal to one, where
    :math:`\mathbf{I} - \mathbf{S}` is singular and the gain :math:`1 / (1 -
    \lambda)` infinite (the error of :func:`check_core_condition` for a zero
    pivot)."""
    _check_eigenpairs(eigenvalues, eigenvectors)
    root = eigenvalues.abs().sqrt()
    return eigenvectors * root, -eigenvectors * (eigenvalues.sign() * root)


def _check_eigenpairs(eigenvalues: Tensor, eigenvectors: Tensor) -> None:
    check_tensor('eigenvalues', eigenvalues, 'a tensor [rank]')
    check_tensor('eigenvectors', eigenvectors, 'a tensor [num_nodes, rank]')
    if eigenvalues.dim() != 1 or eigenvectors.dim() != 2 \
            or eigenvectors.size(1) != eigenvalues.numel():
        raise ValueError(f"'eigenvalues' and 'eigenvectors' must have shapes [rank] and "
                         f"[num_nodes, rank], one eigenvector per column (got "
                         f"{list(eigenvalues.shape)} and {list(eigenvectors.shape)})")
    if not eigenvalues.is_floating_point() or not eigenvectors.is_floating_point():
        raise TypeError(f"'eigenvalues' and 'eigenvectors' must be floating point (got "
                        f"{eigenvalues.dtype} and {eigenvectors.dtype})")
    if not bool(eigenvalues.isfinite().all()):
        raise ValueError("'eigenvalues' contains NaN or infinite values: the eigensolver "
                         "diverged or its operator was not finite; recompute the eigenpairs "
                         "(e.g. with LowRankInverse, which checks its operator)")
    if bool((eigenvalues == 1).any()):  # the core I - diag(eigenvalues) has a zero pivot
        largest = float(eigenvalues.abs().max())
        rounding = ROUNDING_UNITS * torch.finfo(eigenvalues.dtype).eps * (1 + largest)
        check_core_condition(CoreCondition(0.0, rounding, eigenvalues.dtype))


class WoodburyCore(NamedTuple):
    r"""The LU factorisation of the :math:`r \times r` core
    :math:`\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W}` (see
    :func:`torch.linalg.lu_factor`); for a batch of graphs each with its own
    factors, one per graph (:obj:`lu` :obj:`[B, r, r]`, :obj:`pivots`
    :obj:`[B, r]`)."""
    lu: Tensor
    pivots: Tensor


def factor_arguments(w: Tensor, v: Tensor, from_eigenpairs: bool) -> Dict[str, Any]:
    r"""What every rank must hold alike for the collectives of
    :func:`woodbury_core` (for :func:`agree_arguments
    <torch_geometric_regcn.distributed.collectives.agree_arguments>`): the
    width :math:`r` of the factors, their dtypes and device type, whether
    they are learned, and :obj:`from_eigenpairs` (the last two decide which
    checks run)."""
    return {"the width of 'w' and 'v' (the rank r of the factors)": (w.size(1), v.size(1)),
            "the dtypes of 'w' and 'v'": (w.dtype, v.dtype),
            "the device type of 'w'": w.device.type,
            "whether 'w' or 'v' require gradients": w.requires_grad or v.requires_grad,
            "'from_eigenpairs'": bool(from_eigenpairs)}


def woodbury_core(w: Tensor, v: Tensor, from_eigenpairs: bool = False,
                  group: Group = None, *, agreed: bool = False,
                  batch: Optional[Tensor] = None,
                  batch_size: Optional[int] = None) -> WoodburyCore:
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
    :func:`eigenpair_tolerance`), as it is for an eigenvalue of
    :math:`\mathbf{S}` beyond one (beyond its rounding), which tsGCN's
    operator never has and factors of several graphs stacked by rows (a
    :class:`~torch_geometric.data.Batch`'s) often do. Every core gets the verdict of
    :func:`check_core_condition` on its smallest pivot: an error when it is
    numerically singular, a warning when its largest gain is imprecise. The
    rounding level is that of the dtype the factors were computed in (float32
    for float64 casts of float32 factors of eigenpairs). Factors that require gradients
    (being learned) are not checked as eigenpairs, and calls under
    :func:`torch.compile` not at all.

    With a :obj:`batch` vector (:obj:`data.batch` of a PyG
    :class:`~torch_geometric.data.Batch`, see :func:`check_batch
    <torch_geometric_regcn.linalg.graph_batch.check_batch>`), the rows of
    :obj:`w` and :obj:`v` are those of :obj:`batch_size` graphs, each with its
    own factors (:class:`~torch_geometric_regcn.LowRankInverse` applied to
    each graph before batching), and the core is one per graph,
    :math:`\mathbf{I}_r + \mathbf{V}_g^{\top}\mathbf{W}_g`: the same
    :math:`O(N r^2)` products, one batched product per group of graphs of
    similar sizes (padded to at most :math:`2N` rows in all, see
    :func:`graph_blocks
    <torch_geometric_regcn.linalg.graph_batch.graph_blocks>`; a graph of
    more rows than :data:`GRAM_CHUNK
    <torch_geometric_regcn.linalg.blocks.GRAM_CHUNK>` by :func:`local_gram
    <torch_geometric_regcn.linalg.blocks.local_gram>`, as alone), and
    :math:`O(B r^3)` for the :math:`B` cores. Every graph's core gets the
    checks above; with :obj:`from_eigenpairs=True` factors of the batch as a
    whole pass where each eigenvector lies on one graph (as the
    component-wise eigensolver returns them; the result is then the same)
    and raise where an eigensolver mixed graphs.

    With a :mod:`torch.distributed` :obj:`group`, :obj:`w` and :obj:`v` are
    this rank's rows of factors split by rows over the group, and
    :math:`\mathbf{V}^{\top}\mathbf{W}` is all-reduced (:math:`r^2`
    numbers): every rank gets the same core. It is computed in the factors'
    dtype, :func:`torch.autocast` or not (its gains need that precision).
    Before, the ranks agree on :func:`factor_arguments` (one all-gather of
    a few integers), unless the caller did (:obj:`agreed=True`, as
    :class:`WoodburyCache` and :class:`~torch_geometric_regcn.TSGCNConv`
    do), and after, on the verdict of the checks of the core (each rank
    factorises the same all-reduced core itself: where one raises, all
    raise; one all-gather of a flag), for factors of eigenpairs at a
    rounding level they decide together (float32 for float64 factors only
    if every rank holding rows has float32 casts)."""
    if batch is not None and group is not None and (agreed or is_compiling()):
        raise ValueError(WITH_GROUP)
    if group is None and not is_compiling():
        check_factors(w, v, None)
        batch_size = check_batch(batch, w.size(0), batch_size, w.device)
    elif not agreed and not is_compiling():
        error, same = None, {}
        try:
            if batch is not None:  # agreed first: the other ranks are at the agreement
                raise ValueError(WITH_GROUP)
            check_factors(w, v, None)
            same = factor_arguments(w, v, from_eigenpairs)
        except (TypeError, ValueError) as failure:
            error = failure
        agree_arguments(group, 'woodbury_core', same, error)
    with torch.autocast(w.device.type, enabled=False):
        if batch is None:
            vtw = differentiable_all_reduce(local_gram(v, w), group)
        else:
            batch_size = graph_count(batch, batch_size)  # checked above unless compiling
            vtw = graph_gram(v, w, graph_blocks(batch, batch_size, w.size(0)), batch_size)
    lu, pivots, _ = torch.linalg.lu_factor_ex(
        torch.eye(w.size(1), dtype=w.dtype, device=w.device) + vtw)
    if not is_compiling() and lu.numel() > 0:
        check = from_eigenpairs and not (w.requires_grad or v.requires_grad)
        error = None
        computed = _computed_dtype(w, v, group) if check else w.dtype  # one for all ranks
        try:
            _check_core(lu, pivots, vtw, check, computed)
        except ValueError as failure:
            if group is None:
                raise
            error = failure
        if group is not None:  # each rank's LU of the same core: one verdict for all
            agree(error, group, 'woodbury_core')
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
    (zero where :math:`c_{ij} = 0`, infinite where only the diagonal vanishes),
    over all matrices of a batch :obj:`[..., r, r]`."""
    diagonal = vtw.diagonal(dim1=-2, dim2=-1)
    off = (vtw - torch.diag_embed(diagonal)).abs()
    root = diagonal.abs().sqrt()
    ratio = off / (root[..., :, None] * root[..., None, :])
    return torch.where(off > 0, ratio, torch.zeros_like(ratio)).max()


#: The relative accuracy of the largest gain below which
#: :func:`check_core_condition` warns.
GAIN_ACCURACY = 1e-3

#: The relative accuracy of the largest gain from which
#: :func:`check_core_condition` raises: the smallest pivot is not above the
#: rounding level, so the core is numerically singular.
SINGULAR_ERROR = 1.0

#: The rounding level of a core's entries in units of :math:`\epsilon (1 +
#: \max|c_{ij}|)`, :math:`\epsilon` that of the dtype the factors were
#: computed in. The rule: the smallest pivot of factors computed in a dtype
#: (eigenpairs of an iterative solver converged to its :obj:`tol`, then
#: :math:`N`-term inner products) lies within this level of the exact pivot
#: of the same graph, so a pivot not above it has no correct digit.
#: ``tests/reliability/test_tsgcn_factors.py``
#: (:obj:`test_an_imprecise_core_gets_the_same_warning_from_the_transform_and_the_layer`)
#: checks it against the dense float64 spectrum.
ROUNDING_UNITS = 16


def _computed_dtype(w: Tensor, v: Tensor, group: Group = None) -> torch.dtype:
    r"""The dtype the factors were computed in: float32 for float64 factors
    that float32 holds exactly (:obj:`O(N r)`). With a :obj:`group`, one
    verdict for all ranks (one all-gather of a few integers, every rank
    calls): float32 only if every rank holding rows says so, as one process
    holding all of them would (an empty shard holds no evidence either
    way)."""
    if w.dtype != torch.float64:
        return w.dtype
    cast = computed_dtype(w, v) == torch.float32
    if group is not None:
        votes = agree_arguments(group, 'woodbury_core', {}, share=[w.size(0) > 0, cast])
        cast = all(flag for rows, flag in votes if rows)
    return torch.float32 if cast else w.dtype


class CoreCondition(NamedTuple):
    r"""What :func:`check_core_condition` decides on: the smallest pivot of
    the LU factorisation of a Woodbury core :math:`\mathbf{I}_r +
    \mathbf{V}^{\top}\mathbf{W}` and the rounding level of its entries.
    For tsGCN's factors the core is :math:`\mathbf{I} - \mathbf{\Lambda}`
    and the pivot is :math:`1 - \lambda_{\max}`, about :math:`1 / (1 +
    \alpha + \beta)`."""
    pivot: float  #: the smallest magnitude of a pivot (of a general core: or singular value)
    rounding: float  #: :obj:`ROUNDING_UNITS` :math:`\epsilon (1 + \max|c_{ij}|)`
    dtype: torch.dtype  #: the dtype the factors were computed in (its :math:`\epsilon`)

    @property
    def error(self) -> float:
        r"""The relative accuracy of the largest gain :math:`1 / (1 -
        \lambda)`: :obj:`rounding / pivot`, infinite for a zero pivot."""
        return self.rounding / self.pivot if self.pivot > 0 else math.inf


def check_core_condition(condition: CoreCondition, stacklevel: Optional[int] = None) -> None:
    r"""The verdict on a Woodbury core's condition, the one that
    :func:`woodbury_core` gives for every layer and that
    :class:`~torch_geometric_regcn.LowRankInverse` gives for the factors it
    returns: raises :class:`ValueError` when the largest gain has no correct
    digit (:obj:`condition.error` at least :obj:`SINGULAR_ERROR`: the
    smallest pivot is not above the rounding level, whatever its sign, as
    when rounding takes the largest eigenvalue of :math:`\mathbf{S}` to one
    or beyond), and warns when it is less accurate than
    :obj:`GAIN_ACCURACY`. Both messages state the pivot, the rounding level
    and the dtype. The warning points to :obj:`stacklevel` (as in
    :func:`warnings.warn`, counted from the caller) or, by default, to the
    first line outside this package, PyG and PyTorch: the user's call of a
    layer, a model or a transform, however deep the verdict was given."""
    pivot, rounding, dtype, error = (*condition, condition.error)
    if not error < SINGULAR_ERROR:
        raise ValueError(
            f"I + V^T W is numerically singular in {dtype}: its smallest pivot {pivot:.2g} is "
            f"not above the rounding level {rounding:.2g} of its entries (for tsGCN's factors "
            f"the pivot is 1 - lambda for the largest eigenvalue lambda of S, about "
            f"1 / (1 + alpha + beta)), so the largest gain 1 / (1 - lambda) has no correct "
            f"digit and (I + W V^T) no accurate inverse; recompute the factors "
            f"(LowRankInverse) in float64 or with a smaller alpha + beta, or lower the rank")
    if error > GAIN_ACCURACY:
        warnings.warn(
            f"The Woodbury core I + V^T W has a pivot as small as {pivot:.2g} against a "
            f"rounding level of {rounding:.2g} (1 - lambda for tsGCN's largest eigenvalue "
            f"lambda), so in {dtype} the largest gain 1 / (1 - lambda) is accurate to about "
            f"{error:.1%} only; compute the factors in float64 (LowRankInverse on "
            f"data.x.double()) or use a smaller alpha + beta",
            UserWarning, stacklevel=outside_stacklevel() if stacklevel is None
            else stacklevel + 1)


def _check_core(lu: Tensor, pivots: Tensor, vtw: Tensor, from_eigenpairs: bool,
                computed: torch.dtype) -> None:
    # The smallest pivot of U against the rounding level of the core's entries
    # bounds the relative accuracy of the largest gain: for tsGCN's factors the
    # core is I - Λ, whose smallest pivot 1 - λ_max >= 1 / (1 + α + β) is where
    # rounding cancels. Its sign does not count: a pivot well above the rounding
    # level is accurate either way (an indefinite core still has an inverse),
    # and rounding moves one below it by less than that level. A batch of graphs'
    # cores (a leading dimension) is judged graph by graph, each pivot against its
    # own graph's rounding level, and gets the verdict of its worst graph.
    smallest = lu.diagonal(dim1=-2, dim2=-1).abs().amin(-1)  # of each graph
    lower_each = smallest
    if not from_eigenpairs:
        # A general core (learned or edited factors) may be nearly singular with
        # moderate pivots (a Kahan-like triangular one: cond 2^r, every pivot
        # near 1). 1 / ||core^-1||_F lies in [sigma_min / sqrt(r), sigma_min]:
        # from the same LU (O(r^3)) it screens the verdict, and only a core it
        # would warn about gets the exact smallest singular value (an SVD).
        # The near-diagonal core of eigenpairs has its pivots.
        eye = torch.eye(lu.size(-1), dtype=lu.dtype, device=lu.device).expand_as(lu)
        inverse = torch.linalg.lu_solve(lu, pivots, eye).flatten(-2).norm(dim=-1)
        lower_each = torch.minimum(smallest, torch.nan_to_num(1 / inverse, nan=0.0))
    largest_each = vtw.detach().abs().amax((-2, -1))
    units = ROUNDING_UNITS * torch.finfo(computed).eps
    rounding_each = units * (1 + largest_each)
    # A 1-element index: indexing with a 0-dim integer tensor reads it on the host
    # (.item(), a device sync), which would break the one synchronisation below.
    worst = (lower_each / rounding_each).flatten().argmin().view(1)  # the first NaN, if any
    stats = [torch.isfinite(lu).all(),
             *(t.flatten()[worst].squeeze(0) for t in (smallest, largest_each, lower_each))]
    if from_eigenpairs:
        diagonal = vtw.diagonal(dim1=-2, dim2=-1).amin(-1)  # -lambda_max of each graph
        beyond = -diagonal - 1 - rounding_each  # > 0: an eigenvalue beyond 1 + rounding
        near = -diagonal - 1 + rounding_each  # >= 0: one at 1, to rounding, or beyond
        stats += [_relative_off_diagonal(vtw),
                  diagonal.flatten()[beyond.flatten().argmax().view(1)].squeeze(0),
                  beyond.amax(), diagonal.amax(), near.amax(),
                  diagonal.flatten()[near.flatten().argmax().view(1)].squeeze(0)]
    finite, pivot, largest, lower, *off = torch.stack(
        [t.detach().to(vtw.dtype) for t in stats]).tolist()
    if not finite:
        raise ValueError("the factors 'w' and 'v' contain NaN or infinite values; "
                         'recompute them (e.g. with LowRankInverse)')
    tolerance = eigenpair_tolerance(computed)
    if off and vtw.size(-1) and off[3] > 0:
        # V^T W = -Lambda: every eigenvalue negative, which the top pairs of tsGCN's S,
        # whose largest eigenvalue is its non-negative Perron root, never are.
        raise ValueError(
            "the factors 'w' and 'v' give V^T W with a positive diagonal, i.e. eigenvalues "
            "of S that are all negative, which no tsGCN operator's top pairs have: was "
            "'w' passed for 'v'? Pass v=data.lowrank_v (the layers take (x, lowrank_w, "
            "lowrank_v) in that order)")
    rounding = units * (1 + largest)
    if off and vtw.size(-1) and off[2] > 0:
        # An eigenvalue of S beyond 1, which no tsGCN operator has (its spectrum lies
        # within +-(alpha + beta) / (1 + alpha + beta)): the factors of several graphs
        # stacked by rows without their batch vector, whose V^T W = -(sum of their
        # Lambdas) stays diagonal.
        raise ValueError(
            f"the factors 'w' and 'v' give an eigenvalue {-off[1]:.4g} > 1 of S, which no "
            f"tsGCN operator has (its eigenvalues lie within +-(alpha + beta) / (1 + alpha "
            f"+ beta)): are they the factors of several graphs stacked by rows (a Batch of "
            f"graphs that each carry their own LowRankInverse factors)? Their W V^T couples "
            f"the graphs. Pass the Batch's graph index to TSGCNConv, TSGCN, RegularizerConv "
            f"or RegularizerGNN (batch=data.batch) so that each graph's factors act on its "
            f"own nodes, or compute the factors of the batch as a whole "
            f"(LowRankInverse on the Batch; with beta > 0, after SemanticGraph on each graph "
            f"before batching)")
    if off and not off[0] <= tolerance:
        raise ValueError(
            f"the factors 'w' and 'v' (data.lowrank_w and data.lowrank_v) are not those of "
            f"one whole graph: V^T W, diagonal for the factors of LowRankInverse, has "
            f"off-diagonal entries up to {off[0]:.2g} times the diagonal ones (tolerance "
            f"{tolerance:.2g}), as when a loader or subgraph() slices the rows of a larger "
            f"graph's factors, or when they were edited (on row shards: on some ranks "
            f"only, or ranks that ran with different thread counts or hardware, whose "
            f"eigensolvers may pick different bases of a repeated eigenvalue). The layers "
            f"(TSGCNConv, TSGCN, RegularizerConv) take the full "
            f"graph: pass the whole graph's 'x' and factors and index the output (e.g. "
            f"'out[mask]'), or compute factors for the graph you pass with LowRankInverse. "
            f"To train on mini-batches of a larger graph, use MiniBatchTSGCN (refresh(x, w, "
            f"v) with the whole graph, then a batch's rows per step) with "
            f"torch_geometric_regcn.loader.SeedNodeLoader: see docs/minibatch.md. With "
            f"'batch' (a Batch of graphs), each graph's own factors are expected "
            f"(LowRankInverse applied to each graph before batching)")
    if lower < pivot and CoreCondition(lower, rounding, computed).error > GAIN_ACCURACY:
        # The screen of the worst graph warns: every graph's exact smallest singular
        # value (another graph's may now be the worst), the verdict of the worst.
        core = torch.eye(vtw.size(-1), dtype=vtw.dtype, device=vtw.device) + vtw.detach()
        exact = torch.linalg.svdvals(core.nan_to_num(0.0, 0.0, 0.0))[..., -1]
        each = torch.minimum(smallest, exact)
        worst = (each / rounding_each).flatten().argmin().view(1)
        pivot, largest = torch.cat([each.flatten()[worst],
                                    largest_each.flatten()[worst]]).tolist()
        rounding = units * (1 + largest)
    try:
        check_core_condition(CoreCondition(pivot, rounding, computed))
    except ValueError as error:
        if not (off and vtw.size(-1) and off[4] >= 0):
            raise
        # An eigenvalue of S at 1 to rounding, where one graph's lie below
        # (alpha + beta) / (1 + alpha + beta) < 1: alpha + beta that large, or
        # graphs stacked by rows whose top eigenvalues add up to 1 (two graphs
        # at alpha + beta = 1, whose S each reach 1/2), which only the caller knows.
        raise ValueError(
            f"{error}. The factors give S an eigenvalue {-off[5]:.6g}, 1 to rounding: if "
            f"they are the factors of several graphs stacked by rows (a Batch of graphs "
            f"that each carry their own factors), whose eigenvalues add up, pass the "
            f"Batch's graph index (batch=data.batch) to TSGCNConv, TSGCN, RegularizerConv "
            f"or RegularizerGNN instead") from None


class WoodburyCache:
    r"""Keeps the :func:`woodbury_core` of the last factors it was asked for
    and returns it while factors with the same content come back: equal
    :func:`~torch_geometric_regcn.utils.fingerprint.fingerprint` s of
    :obj:`w` and :obj:`v` (shape, dtype, device and every stored number), and
    the same :obj:`from_eigenpairs`, :obj:`batch` and :obj:`batch_size`. The
    fingerprint reads all the numbers on every call (:math:`O(N r)`, one
    synchronisation with the device, next to the :math:`O(N r F)`
    application), so any edit is seen, also one that
    bypasses PyTorch's version counter (through :obj:`.data` or a NumPy array
    sharing the memory), and new tensors holding the same numbers reuse the
    core; factors holding NaN are factorised (and refused) on every call.
    Factors that require gradients, inference tensors and calls under
    :func:`torch.compile` or :func:`torch.inference_mode` are factorised anew
    on every call. The cache holds no reference to the factors, only the
    :math:`r \times r` core, and copies and pickles of its owner start
    empty. With a process :obj:`group`, the ranks agree on every call, in
    one all-gather of a few integers, on :func:`factor_arguments` and on
    whether every rank holds its factors' core: if the factors changed on any
    rank, all of them factorise again, as the core is all-reduced; and the
    core (with :attr:`last`) is kept only where every rank keeps its own
    (inference tensors on one rank would otherwise leave the other ranks
    holding a core of that rank's transient factors under their unchanged
    keys). A caller that agrees on more passes :obj:`agree`, called with
    this rank's verdicts (whether its cache holds the core, whether it would
    keep a new one) and returning whether every rank's do (as
    :class:`~torch_geometric_regcn.TSGCNConv` does, within its own
    agreement)."""
    def __init__(self) -> None:
        self._key: Optional[Tuple[Any, ...]] = None
        self._core: Optional[WoodburyCore] = None
        self._last_cached = False

    @property
    def last(self) -> Optional[WoodburyCore]:
        r"""The core the last call returned, if it was kept (else
        :obj:`None`): a caller that applies the same factors again in one
        pass (:class:`~torch_geometric_regcn.TSGCN`'s later layers) takes it
        from here instead of fingerprinting them again."""
        return self._core if self._last_cached else None

    def __call__(self, w: Tensor, v: Tensor, from_eigenpairs: bool = False,
                 group: Group = None, *,
                 agree: Optional[Callable[[bool, bool], Tuple[bool, bool]]] = None,
                 batch: Optional[Tensor] = None, batch_size: Optional[int] = None
                 ) -> WoodburyCore:
        key = None  # factorised anew on every call:
        if not (w.requires_grad or v.requires_grad or is_compiling()
                or torch.is_inference_mode_enabled() or w.is_inference() or v.is_inference()
                or (batch is not None and batch.is_inference())):
            key = (from_eigenpairs, fingerprint(w), fingerprint(v),
                   None if batch is None else (fingerprint(batch), batch_size))
        fresh = key is not None and self._core is not None and self._key == key
        keeps = key is not None
        if group is not None and not is_compiling():  # all recompute if any rank must
            fresh, keeps = (agree or (lambda *mine: self._agree(w, v, from_eigenpairs, group,
                                                                *mine)))(fresh, keeps)
        self._last_cached = False  # until this call returns a kept core
        if fresh:
            self._last_cached = True
            return self._core
        core = woodbury_core(w, v, from_eigenpairs, group, agreed=True, batch=batch,
                             batch_size=batch_size)
        if keeps:  # on every rank, or on none: the core is all-reduced from every rank's factors
            self._core, self._key, self._last_cached = core, key, True
        return core

    @staticmethod
    def _agree(w: Tensor, v: Tensor, from_eigenpairs: bool, group: Group,
               fresh: bool, keeps: bool) -> Tuple[bool, bool]:
        error, same = None, {}
        try:
            check_factors(w, v, None)
            same = factor_arguments(w, v, from_eigenpairs)
        except (TypeError, ValueError) as failure:
            error = failure
        votes = agree_arguments(group, 'WoodburyCache', same, error, share=[fresh, keeps])
        return all(f for f, _ in votes), all(k for _, k in votes)

    def __getstate__(self) -> Dict[str, Any]:
        return {**self.__dict__, '_key': None, '_core': None, '_last_cached': False}


def woodbury_apply(x: Tensor, w: Tensor, v: Optional[Tensor],
                   core: Optional[WoodburyCore] = None, group: Group = None, *,
                   summary: Optional[Tensor] = None, agreed: bool = False,
                   batch: Optional[Tensor] = None,
                   batch_size: Optional[int] = None) -> Tensor:
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
    all-reduced. Before, the ranks agree that each one's arguments pass
    their checks and that they hold the same widths and dtypes
    (:func:`factor_arguments` without a :obj:`summary`, the number of
    columns of :obj:`x`, whether :obj:`core` and :obj:`summary` are given;
    one all-gather of a few integers), unless the caller did
    (:obj:`agreed=True`).

    With a :obj:`batch` vector, the rows are those of a batch of graphs,
    each with its own factors, and each graph's rows of the result are
    :math:`(\mathbf{I} + \mathbf{W}_g\mathbf{V}_g^{\top})^{-1}\mathbf{X}_g`
    (the core one per graph, see :func:`woodbury_core`): the same
    :math:`O(N r f)` time, one batched product per group of graphs of
    similar sizes, and :math:`O(N (r + f))` memory (the groups padded to at
    most :math:`2N` rows in all).

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
        agreed (bool, optional): The caller has agreed the ranks on these
            shapes and dtypes already. (default: :obj:`False`)
        batch (torch.Tensor, optional): The graph of each row,
            :obj:`[N]` (:obj:`data.batch` of a
            :class:`~torch_geometric.data.Batch`), for factors computed per
            graph; not with :obj:`group` or :obj:`summary`.
            (default: :obj:`None`, one graph)
        batch_size (int, optional): The number of graphs in :obj:`batch`.
            (default: :obj:`None`, :obj:`batch[-1] + 1`)
    """
    checked = is_compiling()  # the checks below, once: in the agreement where there is one
    if group is not None and not agreed and not checked:
        _agree_apply(x, w, v, core, group, summary, batch, batch_size)
        agreed = checked = True
    if batch is not None:
        if group is not None:
            raise ValueError(WITH_GROUP)
        if summary is not None:
            raise ValueError("'batch' (graphs each with their own factors) cannot be "
                             "combined with 'summary' (V^T X of one graph's rows)")
        if not is_compiling():
            _check_rows(x, w, v)
        batch_size = (check_batch(batch, w.size(0), batch_size, w.device)
                      if not is_compiling() else graph_count(batch, batch_size))
        if core is None:
            core = woodbury_core(w, v, batch=batch, batch_size=batch_size)
        elif not is_compiling():
            _check_batched_core(core, batch_size)
        with torch.autocast(x.device.type, enabled=False):
            y = x.to(w.dtype)
            blocks = graph_blocks(batch, batch_size, w.size(0))
            if not blocks:  # no rows
                return x.clone()
            # Each graph's W_g (I + V_g^T W_g)^-1 V_g^T X_g: the graphs in the blocks'
            # order, one solve for all, one batched product per block.
            slots, graphs = slots_of(blocks, w.size(0)), torch.cat([b.graphs for b in blocks])
            solved = torch.linalg.lu_solve(core.lu[graphs], core.pivots[graphs],
                                           blocks_gram(v, y, blocks, slots))
            parts = [wb @ sb for wb, sb in zip(gather_blocks(w, blocks, slots),
                                               solved.split([b.graphs.numel() for b in blocks]))]
            return (y - scatter_blocks(parts, slots)).to(x.dtype)
    if not checked:
        check_batch(None, 0, batch_size)  # refuses a lone batch_size
        _check_one_core(core)
        _check_rows(x, w, v, summary)
    if summary is None and v is None:  # under torch.compile, where _check_rows does not run
        raise ValueError(_NEEDS_V)
    if core is None:
        if summary is not None:
            raise ValueError(_NEEDS_CORE)
        core = woodbury_core(w, v, group=group, agreed=agreed)
    with torch.autocast(x.device.type, enabled=False):
        y = x.to(w.dtype)
        if summary is None:
            summary = differentiable_all_reduce(local_gram(v, y), group)
        return (y - w @ torch.linalg.lu_solve(core.lu, core.pivots, summary.to(w.dtype))
                ).to(x.dtype)


_NEEDS_V = ("woodbury_apply needs the factor 'v', or the summary V^T X of all rows as "
            "'summary=' (with 'core=')")
_NEEDS_CORE = ("'summary' needs 'core' (woodbury_core of the whole graph's factors): the rows "
               "'w' given with a summary may be a batch's")


def _agree_apply(x: Tensor, w: Tensor, v: Optional[Tensor], core: Optional[WoodburyCore],
                 group: Group, summary: Optional[Tensor], batch: Optional[Tensor],
                 batch_size: Optional[int]) -> None:
    r"""Every check of :func:`woodbury_apply` with a :obj:`group` on every
    rank, then one agreement on the shapes, dtypes and on which optional
    arguments are given (:func:`factor_arguments` where the factors are
    multiplied): a check that fails on one rank, or a :obj:`summary` (which
    skips the all-reduce) on some ranks only, raises on every rank instead
    of leaving the others in a collective."""
    error, same = None, {}
    try:
        if batch is not None:
            raise ValueError(WITH_GROUP)
        check_batch(None, 0, batch_size)
        _check_one_core(core)
        _check_rows(x, w, v, summary)
        if core is None and summary is not None:
            raise ValueError(_NEEDS_CORE)
        same = {**(factor_arguments(w, v, False) if summary is None else {}),
                "the number of columns of 'x'": x.size(1), "the dtype of 'x'": x.dtype,
                "whether 'core' is given": core is not None,
                "whether 'summary' is given": summary is not None}
    except (TypeError, ValueError) as failure:
        error = failure
    agree_arguments(group, 'woodbury_apply', same, error)


def _check_one_core(core: Optional[WoodburyCore]) -> None:
    r"""A core given without a batch vector is one graph's."""
    if core is not None and core.lu.dim() != 2:
        raise ValueError(f"'core' holds {core.lu.size(0)} cores, one per graph of a batch: "
                         f"pass that batch's 'batch' vector too")


def _check_batched_core(core: WoodburyCore, batch_size: int) -> None:
    r"""A core given with a batch vector is one per graph of it."""
    if core.lu.dim() != 3 or core.lu.size(0) != batch_size:
        what = ('one graph' if core.lu.dim() == 2
                else f'{core.lu.size(0)} graphs')
        raise ValueError(f"'core' is the core of {what}, but 'batch' holds {batch_size} "
                         f"graphs: pass the core computed with the same 'batch' (or none)")


def _check_rows(x: Tensor, w: Tensor, v: Optional[Tensor],
                summary: Optional[Tensor] = None) -> None:
    r"""The shapes :func:`woodbury_apply` multiplies: :obj:`x` :obj:`[n, f]`
    and the factors :obj:`[n, r]`, on this rank's :math:`n` rows, or, with
    a :obj:`summary` :obj:`[r, f]`, :obj:`x` and :obj:`w` of any rows
    (:obj:`O(1)`)."""
    check_node_features(x, finite=False)
    if summary is None:
        if v is None:
            raise ValueError(_NEEDS_V)
        check_factors(w, v, None)
    else:
        check_tensor('w', w, 'a tensor [num_rows, rank]')
        check_tensor('summary', summary, 'a tensor [rank, channels]')
        if w.dim() != 2 or not w.is_floating_point():
            raise ValueError(f"'w' must be a floating-point matrix [num_rows, rank] (got shape "
                             f"{list(w.shape)}, {w.dtype})")
    if x.dim() != 2 or x.size(0) != w.size(0):
        what = "'w' and 'v'" if summary is None else "'w'"
        raise ValueError(f"'x' must have shape [num_rows, channels] with the {w.size(0)} rows "
                         f"of {what} (got {list(x.shape)})")
    if summary is not None and list(summary.shape) != [w.size(1), x.size(1)]:
        raise ValueError(f"'summary' must have shape [rank, channels] = [{w.size(1)}, "
                         f"{x.size(1)}], V^T X of all rows (got {list(summary.shape)})")
