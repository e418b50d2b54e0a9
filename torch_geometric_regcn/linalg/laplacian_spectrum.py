r"""The smallest eigenpairs of a graph's symmetric normalised Laplacian,
solved one connected component at a time."""
import math
import warnings
from typing import List, NamedTuple, Optional, Tuple

import numpy as np
import torch
from torch import Tensor
from torch_geometric.utils import coalesce

from torch_geometric_regcn.linalg.chebyshev import chebyshev_filter
from torch_geometric_regcn.linalg.components import graph_components
from torch_geometric_regcn.linalg.eigenpairs import EigenPairs
from torch_geometric_regcn.linalg.lanczos import block_lanczos
from torch_geometric_regcn.utils.sparse import compact_csr
from torch_geometric_regcn.utils.validation import (
    check_edge_index,
    check_finite,
    check_int,
    check_real,
    check_real_dtype,
    check_seed,
    check_tensor,
    computed_dtype,
)

#: Entries whose magnitude reaches this fraction of an eigenvector's largest
#: one count as tied for the sign convention.
SIGN_TIE = 1.0 - 1e-3

#: Eigenvalues closer than this count as equal, and are then ordered by their
#: component's lowest node. A dense solve is backward stable: each computed
#: eigenvalue is an exact one of L + E with ||E|| <= p(n) eps ||L|| (Weyl),
#: where ||L|| <= 2 and p(n) <= n for the components of at most 256 nodes solved
#: densely by default: 256 * eps * 2, about 1.1e-13 (the error seen is a few eps).
#: The kernel's 0 and the isolated nodes' 1 are exact; a Lanczos component adds
#: its truncation error, about the squared residual over the spectral gap.
TIE_TOLERANCE = 256 * 2 * torch.finfo(torch.float64).eps

#: How many entries a batch of dense eigenproblems may hold (float64).
DENSE_BATCH_ENTRIES = 2**22

#: The block size and filter degree of the Lanczos solves: per step the same
#: 128 sparse products of one column as block_lanczos's defaults (16 and 8),
#: spent on a steeper filter over a narrower block, which suits the few pairs
#: (k + 1) an encoding asks for; docs/positional_encoding.md gives the choice,
#: benchmarks/results/eigen_pe.md the timings.
LANCZOS_BLOCK, LANCZOS_DEGREE = 8, 16

#: Components of at most this many nodes are solved by batched dense eigh.
DENSE_THRESHOLD = 256

#: Components of :data:`FLOAT32_NODES` to :data:`FLOAT32_MAX_NODES` nodes
#: are solved by block Lanczos in float32 first, then refined in float64
#: (:func:`_float32_refined`), when :obj:`tol` is at least
#: :data:`FLOAT32_TOL`: a float32 sparse product moves half the bytes of a
#: float64 one. The trivial eigenvector (eigenvalue 1 of :math:`\hat{\mathbf{A}}`) is
#: deflated: where the wanted eigenvalues lie far below 1 relative to their
#: gaps the filter would lift it far above the wanted ones, whose float32 rounding
#: then stalls the solve. A float32 solve that stalls all the same is
#: abandoned at its first cycle that does not lower the residual, and the
#: float64 solve follows; the bound is the largest size measured
#: (benchmarks/results/eigen_pe.md).
FLOAT32_NODES, FLOAT32_MAX_NODES = 4096, 262144

#: The tightest :obj:`tol` for which the float32 solve is tried: the float64
#: refinement of float32 vectors is not meant to reach much below it.
FLOAT32_TOL = 1e-6

#: The residual the float32 solve aims at (above its rounding floor, 1e-6 to
#: 1.5e-5 on the graphs measured; the float64 sweeps take it below 1e-6), and
#: its most restart cycles.
FLOAT32_LANCZOS_TOL, FLOAT32_MAX_ITER = 1e-5, 8

#: The float64 refinement after the float32 solve: at most this many filter
#: sweeps, each to lower the largest residual by at least 1 / REFINE_GAIN.
REFINE_SWEEPS, REFINE_GAIN = 2, 0.25

#: Components of at most this many nodes are solved densely when Lanczos
#: does not converge.
DENSE_FALLBACK = 4096

#: :func:`connected_dense_eigenpairs` takes a graph as connected when its
#: computed :math:`\lambda_1` exceeds this. A disconnected graph has
#: :math:`\lambda_1 = 0`, computed within :data:`TIE_TOLERANCE` (about
#: 1.1e-13) by a dense solve of at most 256 nodes, 4 orders of magnitude below;
#: a connected unweighted one has :math:`\lambda_1 \geq 1 / (D \,
#: \mathrm{vol}) \geq 1 / (255 \cdot 255 \cdot 256) \approx 6 \cdot 10^{-8}`
#: (Chung, diameter :math:`D`, volume :math:`\sum_i d_i`), above it. A
#: weighted graph whose :math:`\lambda_1` falls below (a bridge of tiny weight)
#: goes the component-wise way, with the same result.
CONNECTED_GAP = 1e-9


def connected_dense_eigenpairs(edge_index: Tensor, edge_weight: Optional[Tensor],
                               num_nodes: int, k: int, tol: float = 1e-6
                               ) -> Optional[EigenPairs]:
    r"""The eigenpairs of :func:`laplacian_eigenpairs` for a small connected
    graph, from its edges as given (checked, e.g. by
    :func:`~torch_geometric_regcn.utils.validation.check_edge_index`, with
    non-negative float64 weights, or :obj:`None` for ones): the normalised
    adjacency is built densely as
    :func:`~torch_geometric_regcn.linalg.normalized_adjacency` builds it
    (self loops dropped, duplicates summed, the maximum with the transpose)
    and :math:`\mathbf{L}` solved by one float64 :func:`torch.linalg.eigh`;
    the result is that of the component-wise solve, which for one component
    is the same eigh of the same matrix. Returns :obj:`None` when the graph
    has an isolated node or its :math:`\lambda_1` is at most
    :data:`CONNECTED_GAP` (disconnected, or nearly), where the kernel and the
    ties need the component-wise rule of :func:`laplacian_eigenpairs`.

    Cost: :math:`O(N^3)` for the eigh and :math:`O(N^2 + E)` memory; meant for
    :math:`N \leq` :data:`DENSE_THRESHOLD`, where it saves the per-call work
    of the sparse path (components, sorts), which dominates there.
    """
    device = edge_index.device
    row, col = edge_index.long()  # narrower integer types index as masks or not at all
    if edge_weight is None:
        edge_weight = torch.ones(row.numel(), dtype=torch.float64, device=device)
    adjacency = torch.zeros(num_nodes, num_nodes, dtype=torch.float64, device=device)
    adjacency.index_put_((row, col), edge_weight, accumulate=True)  # duplicates summed
    adjacency.diagonal().zero_()  # self loops dropped
    adjacency = torch.maximum(adjacency, adjacency.T)
    # A sequential row sum in column order, as a scatter_add over sorted edges sums.
    degree = adjacency.cumsum(1)[:, -1]
    if not bool(torch.isfinite(degree).all()):
        raise ValueError("'edge_weight' overflows torch.float64: a node's sum of weights is "
                         "infinite there; rescale the weights")
    if not bool((degree > 0).all()):
        return None
    root = degree.sqrt()
    laplacian = torch.eye(num_nodes, dtype=torch.float64, device=device).sub_(
        adjacency.div_(root[:, None] * root[None, :]))  # zeros stay +0.0, as in the sparse path
    values, vectors = torch.linalg.eigh(laplacian)
    if not float(values[1]) > CONNECTED_GAP:
        return None
    vectors = canonical_eigenbasis(values, vectors, used=k + 1, pivot_tie=pivot_tie(tol))
    vectors = without_kernel(vectors[:, 1:k + 1], root / root.norm())
    return EigenPairs(values[1:k + 1], fix_signs(vectors), 0.0, 0, True)


def laplacian_eigenpairs(edge_index: Tensor, edge_weight: Tensor, degree: Tensor, k: int, *,
                         seed: int = 0, tol: float = 1e-6, max_iter: int = 100,
                         dense_threshold: int = DENSE_THRESHOLD,
                         dense_fallback: int = DENSE_FALLBACK,
                         stacklevel: int = 2) -> EigenPairs:
    r"""The eigenpairs :math:`(\lambda_1, \mathbf{u}_1), \dots, (\lambda_k,
    \mathbf{u}_k)` after the first of the symmetric normalised Laplacian

    .. math::
        \mathbf{L} = \mathbf{I} - \hat{\mathbf{A}}, \qquad
        \hat{\mathbf{A}} = \mathbf{D}^{-1/2}\mathbf{A}\mathbf{D}^{-1/2},
        \qquad 0 = \lambda_0 \leq \lambda_1 \leq \dots,

    of the graph whose :math:`\hat{\mathbf{A}}` is given, as
    :func:`~torch_geometric_regcn.linalg.normalized_adjacency` returns it with
    :obj:`self_loops=False` and :obj:`return_degree=True`.

    :math:`\mathbf{L}` is block diagonal over the connected components (found
    on the CPU), so each is solved on its own, for as many pairs as can still
    be among the :math:`k + 1` smallest: components of at most
    :obj:`dense_threshold` nodes together by batched dense
    :func:`torch.linalg.eigh`, each larger one by
    :func:`~torch_geometric_regcn.linalg.block_lanczos` on its
    :math:`\hat{\mathbf{A}}_C` (largest algebraic eigenvalues, where the
    trivial one is simple; from :data:`FLOAT32_NODES` to
    :data:`FLOAT32_MAX_NODES` nodes first in float32, then refined and
    checked in float64, and in float64 when that misses :obj:`tol`). A
    component :math:`C` with edges adds the eigenvalue 0 with the
    eigenvector :math:`\mathbf{D}^{1/2}\mathbf{1}_C /
    \|\mathbf{D}^{1/2}\mathbf{1}_C\|`, an isolated node :math:`i` the
    eigenvalue 1 with :math:`\mathbf{e}_i`. Eigenvalues that exceed the
    smallest of their group by at most :data:`TIE_TOLERANCE`
    (:math:`512\epsilon`, the float64 rounding of a dense solve of a spectrum
    within :math:`[0, 2]`; see :func:`tie_groups`) count as equal and are
    ordered by the lowest node of their component, then as their
    component's solve returned them, in the canonical basis of
    :func:`canonical_eigenbasis` (within a dense solve's rounding, or the
    square of a converged Lanczos solve's residual); distinct eigenvalues follow their
    values. Each eigenvector is multiplied by
    :math:`\pm 1` so that its first entry whose magnitude reaches
    :data:`SIGN_TIE` of the largest is positive. A Lanczos solve that does
    not reach :obj:`tol` is repeated with twice the restarts, then solved
    densely up to :obj:`dense_fallback` nodes; beyond that it warns with the
    residual reached and the best pairs found are returned.
    ``docs/positional_encoding.md`` gives the details.

    Args:
        edge_index (torch.Tensor): The entries of :math:`\hat{\mathbf{A}}`,
            symmetric and without self loops, shape :obj:`[2, E]`.
        edge_weight (torch.Tensor): Their positive values, shape :obj:`[E]`
            (solved in float64, whatever their dtype).
        degree (torch.Tensor): The degrees :math:`d_i` of the nodes (zero for
            an isolated one), shape :obj:`[N]`: those :obj:`edge_weight` was
            normalised by (:obj:`normalized_adjacency(...,
            return_degree=True)`), which give the kernel vectors
            :math:`\mathbf{D}^{1/2}\mathbf{1}`; other degrees (e.g. unweighted
            counts of a weighted graph) would give wrong vectors, and raise
            an error (:func:`check_degree`, one :math:`O(E)` product). A NaN,
            an infinity or a
            negative value here or in :obj:`edge_weight`, and an index of
            :obj:`edge_index` outside :math:`[0, N)`, raise an error naming
            it before any work.
        k (int): The number of pairs, :math:`1 \leq k < N`.
        seed (int, optional): The seed of the Lanczos starting blocks.
            (default: :obj:`0`)
        tol (float, optional): The relative residual of a Lanczos pair.
            (default: :obj:`1e-6`)
        max_iter (int, optional): The restart cycles of one Lanczos solve.
            (default: :obj:`100`)
        dense_threshold (int, optional): The size up to which a component is
            solved densely. (default: :obj:`256`)
        dense_fallback (int, optional): The size up to which a component
            that Lanczos does not solve is solved densely.
            (default: :obj:`4096`)
        stacklevel (int, optional): Where the non-convergence warning points,
            counted as :func:`warnings.warn` counts from this function: 2 is
            the line that calls it, 3 that line's caller, and so on; a
            wrapper passes one more per frame it adds. (default: :obj:`2`)

    Returns:
        :class:`~torch_geometric_regcn.linalg.EigenPairs`: the eigenvalues
        :obj:`[k]` in ascending order (to :data:`TIE_TOLERANCE`, within a
        group of equal ones) and the eigenvectors :obj:`[N, k]`, in
        float64 on the device of :obj:`edge_index`; :obj:`residual` is the
        largest relative residual of a Lanczos solve (:obj:`0` when all were
        dense) and :obj:`iterations` their restart cycles in total.

    Cost: the components' solves, :math:`O(n_C^3)` for a dense one and a few
    hundred sparse products of :math:`O(k)` columns for a Lanczos one.
    """
    check_tensor('degree', degree, 'a tensor [num_nodes]')
    if degree.dim() != 1:
        raise ValueError(f"'degree' must have shape [num_nodes] (got {list(degree.shape)})")
    check_real_dtype('degree', degree)
    check_edge_index(edge_index, degree.numel(), edge_weight)
    check_finite('degree', degree)
    if bool((degree < 0).any()):
        raise ValueError("'degree' must be non-negative (the degrees of the weighted graph)")
    eps = input_rounding(edge_weight, degree)
    edge_weight, degree = edge_weight.double(), degree.double()  # no-ops for float64
    num_nodes = degree.numel()
    check_symmetric_entries(edge_index, edge_weight, num_nodes)
    check_degree(edge_index, edge_weight, degree, eps)
    k = check_int('k', k)
    if k >= num_nodes:
        raise ValueError(f"'k' must be smaller than the number of nodes {num_nodes} (got {k})")
    tol = check_real('tol', tol, 0.0, 1.0, low_open=True)
    max_iter = check_int('max_iter', max_iter)
    stacklevel = check_int('stacklevel', stacklevel)
    seed = check_seed(seed)
    dense_threshold = check_int('dense_threshold', dense_threshold, minimum=0)
    dense_fallback = check_int('dense_fallback', dense_fallback, minimum=0)
    graph = _components(edge_index, edge_weight, degree.sqrt(), num_nodes)
    # The warning is issued two frames below this one (_Solver.solve, then
    # _Solver._lanczos_component).
    return _Solver(k, seed, tol, max_iter, dense_threshold, dense_fallback,
                   stacklevel + 2).solve(graph)


#: The overlap of a dense eigensolve's vector with its component's exact kernel
#: vector above which :func:`without_kernel` projects it out (float64 eigh keeps
#: it near :math:`n\epsilon < 10^{-12}` for :math:`n \leq 4096`).
KERNEL_OVERLAP = 1e-12


def check_symmetric_entries(edge_index: Tensor, edge_weight: Tensor, num_nodes: int) -> None:
    r"""Raises :class:`ValueError` where the entries :obj:`edge_index` with
    values :obj:`edge_weight` (float64) hold a self loop or are not
    symmetric (duplicates summed, every :math:`(i, j, w)` matched by a
    :math:`(j, i, w')` with :math:`|w - w'|` at most :math:`10^{-12}` of the
    largest value): a dense solve reads one triangle and would silently
    solve another matrix. Cost: two sorts of the :math:`E` entries."""
    row, col = edge_index.long()
    if bool((row == col).any()):
        raise ValueError("'edge_index' holds self loops; laplacian_eigenpairs reads A_hat "
                         "without them: build it with normalized_adjacency(..., "
                         "self_loops=False, return_degree=True)")
    forward = coalesce(torch.stack([row, col]), edge_weight, num_nodes)  # duplicates summed
    reverse = coalesce(torch.stack([col, row]), edge_weight, num_nodes)
    scale = float(forward[1].abs().max()) if edge_weight.numel() else 0.0
    if not (torch.equal(forward[0], reverse[0])
            and bool(((forward[1] - reverse[1]).abs() <= 1e-12 * scale).all())):
        raise ValueError("'edge_index' and 'edge_weight' are not symmetric (an entry (i, j) "
                         "without an equal (j, i)); laplacian_eigenpairs reads the undirected "
                         "A_hat: build it with normalized_adjacency(..., self_loops=False, "
                         "return_degree=True), which symmetrises it")


def input_rounding(edge_weight: Tensor, degree: Tensor) -> float:
    r"""The rounding :math:`\epsilon` of the inputs of :func:`check_degree`:
    that of the coarsest dtype they were computed in
    (:func:`~torch_geometric_regcn.utils.validation.computed_dtype`: float64
    values that float32 holds exactly read as computed in float32, as
    :func:`~torch_geometric_regcn.linalg.woodbury_core` reads its factors);
    integer-valued degrees, exact in any dtype, tell nothing.
    :math:`O(N + E)`."""
    computed = [torch.float64]
    if edge_weight.is_floating_point():
        computed.append(computed_dtype(edge_weight))
    if degree.is_floating_point() and not torch.equal(degree, degree.round()):
        computed.append(computed_dtype(degree))
    return max(torch.finfo(dtype).eps for dtype in computed)


def check_degree(edge_index: Tensor, edge_weight: Tensor, degree: Tensor, eps: float) -> None:
    r"""Raises :class:`ValueError` unless :obj:`degree` (float64) is the
    degree :obj:`edge_weight` was normalised by: for
    :math:`\hat{a}_{ij} = w_{ij} / \sqrt{d_i d_j}`,
    :math:`\sum_j \hat{a}_{ij} \sqrt{d_j} = \sqrt{d_i}` on every node with
    edges, to :math:`(m_i + 8)\epsilon` of the sum of the terms'
    magnitudes, :math:`m_i` the node's entries and :obj:`eps` the rounding of
    the inputs (:func:`input_rounding`: float32's for float64 casts of
    values computed in float32; a degree summed from :math:`m_i` weights
    rounds by up to :math:`m_i` units of it, each :math:`\hat{a}_{ij}` by a
    few). The residual of another degree is only second order in the
    weights' variation where they vary slowly over the graph (a long ring:
    ~1e-6, within float32's rounding), and a residual :math:`r` moves the
    kernel vector by up to :math:`r / \lambda_1`; float64 inputs are
    therefore checked at float64's rounding. Cost: one :math:`O(E)` pass."""
    row, col = edge_index.long()
    root = degree.sqrt()
    terms = edge_weight * root[col]
    total = torch.zeros_like(root).index_add_(0, row, terms)
    scale = torch.zeros_like(root).index_add_(0, row, terms.abs()) + root
    entries = torch.bincount(row, minlength=root.numel())
    off = (entries > 0) & ((total - root).abs() > (entries + 8) * eps * scale)
    if bool(off.any()):
        i = int(off.nonzero()[0])
        raise ValueError(f"'degree' is not the degree 'edge_weight' was normalised by: at "
                         f"node {i}, sum_j A_hat[i, j] sqrt(d_j) = {float(total[i]):.6g} but "
                         f"sqrt(d_i) = {float(root[i]):.6g} (they are equal for A_hat = "
                         f"D^-1/2 A D^-1/2); pass the degrees of normalized_adjacency(..., "
                         f"self_loops=False, return_degree=True)")


class _Components(NamedTuple):
    r"""The normalised adjacency of a graph, split into its connected
    components."""
    num_nodes: int
    row: Tensor  #: edges (both directions, no self loops, positive weights)
    col: Tensor
    weight: Tensor  #: :math:`a_{ij} / \sqrt{d_i d_j}`, float64
    sqrt_degree: Tensor  #: :math:`\sqrt{d_i}`, zero for isolated nodes
    label: Tensor  #: component of each node, numbered by the component's lowest node
    size: Tensor  #: nodes of each component
    start: Tensor  #: offset of each component in :obj:`order`
    order: Tensor  #: the nodes sorted by (component, index)
    local: Tensor  #: position of each node within its component


def _components(edge_index: Tensor, weight: Tensor, sqrt_degree: Tensor,
                num_nodes: int) -> _Components:
    r"""The connected components of the graph, numbered by their lowest node."""
    row, col = edge_index
    label, size, start, order, local = graph_components(row, col, num_nodes)
    return _Components(num_nodes, row, col, weight, sqrt_degree, label, size, start, order,
                       local)


class _Candidates:
    r"""Eigenpairs of the Laplacian collected component by component: each
    column lives on one component's nodes (or is a known vector)."""

    def __init__(self) -> None:
        self.values: List[Tensor] = []
        self.keys: List[Tensor] = []  # (component, column within it) as one integer
        self.blocks: List[Tuple[Tensor, Tensor]] = []  # (nodes [B, P], vectors [B, P, J])
        self.where: List[Tensor] = []  # (block, batch row, column) of each value

    def add(self, values: Tensor, components: Tensor, nodes: Tensor, vectors: Tensor,
            valid: Tensor, stride: int) -> None:
        r""":obj:`values` [B, J] with :obj:`vectors` [B, P, J] on :obj:`nodes`
        [B, P] (padding: the node count), for components :obj:`components` [B];
        only the entries where :obj:`valid` holds are candidates."""
        batch, column = valid.nonzero(as_tuple=True)
        block = torch.full_like(batch, len(self.blocks))
        self.blocks.append((nodes, vectors))
        self.values.append(values[batch, column])
        self.keys.append(components[batch] * stride + column + 1)
        self.where.append(torch.stack([block, batch, column], dim=1))


class _Solver(NamedTuple):
    r"""The settings of :func:`laplacian_eigenpairs` and its steps."""
    k: int
    seed: int
    tol: float
    max_iter: int
    dense_threshold: int
    dense_fallback: int
    stacklevel: int  # of the warning, counted from _lanczos_component

    def solve(self, graph: _Components) -> EigenPairs:
        k, device = self.k, graph.label.device
        size = graph.size
        nontrivial = (size > 1).nonzero().view(-1)  # components with an edge
        isolated = (size == 1).nonzero().view(-1)
        c = nontrivial.numel()
        needed = max(0, k + 1 - c)  # non-zero eigenvalues that can still be chosen
        stride = graph.num_nodes + 1
        candidates = _Candidates()
        residual, iterations, converged = 0.0, 0, True
        if needed > 0:
            count = torch.clamp(size[nontrivial] - 1, max=needed)
            dense = size[nontrivial] <= self.dense_threshold
            self._dense_components(graph, nontrivial[dense], count[dense], needed, stride,
                                   candidates)
            generator = torch.Generator(device).manual_seed(self.seed)
            for comp, m in zip(nontrivial[~dense].tolist(), count[~dense].tolist()):
                pairs = self._lanczos_component(graph, comp, m, generator)
                residual = max(residual, pairs.residual)
                iterations += pairs.iterations
                converged = converged and pairs.converged
                first = int(graph.start[comp])
                nodes = graph.order[first:first + int(size[comp])]
                candidates.add(pairs.eigenvalues[None], torch.tensor([comp], device=device),
                               nodes[None], pairs.eigenvectors[None],
                               torch.ones(1, m, dtype=torch.bool, device=device), stride)
        # Kernel vectors (value 0) and isolated nodes (value 1): known exactly.
        zeros = torch.zeros(c, dtype=torch.float64, device=device)
        ones = torch.ones(min(needed, isolated.numel()), dtype=torch.float64, device=device)
        known_values = torch.cat([zeros, ones])
        known_comps = torch.cat([nontrivial, isolated[:ones.numel()]])
        values = torch.cat([known_values] + candidates.values)
        keys = torch.cat([known_comps * stride] + candidates.keys)
        # Ties, to TIE_TOLERANCE, go to the lower component (numbered by lowest
        # node), then column.
        by_key = keys.argsort(stable=True)
        chosen = by_key[tie_groups(values)[by_key].argsort(stable=True)][1:k + 1]
        vectors = _assemble(graph, chosen, known_comps, candidates)
        return EigenPairs(values[chosen], fix_signs(vectors), residual, iterations, converged)

    def _dense_components(self, graph: _Components, comps: Tensor, count: Tensor, needed: int,
                          stride: int, candidates: _Candidates) -> None:
        r"""Batched dense eigh of the Laplacians of the components :obj:`comps`
        (each of at most :obj:`dense_threshold` nodes), grouped by size up to
        the next power of two and padded with eigenvalue 3 (above the
        spectrum, which lies in :math:`[0, 2]`)."""
        if comps.numel() == 0:
            return
        n, device = graph.num_nodes, comps.device
        sizes = graph.size[comps]
        bucket = torch.ceil(torch.log2(sizes.double())).long()
        edge_comp = graph.label[graph.row]
        slot = torch.full((graph.size.numel(),), -1, dtype=torch.long, device=device)
        for b in torch.unique(bucket).tolist():
            members, member_count = comps[bucket == b], count[bucket == b]
            pad = int(graph.size[members].max())
            per_batch = max(1, DENSE_BATCH_ENTRIES // (pad * pad))
            for lo in range(0, members.numel(), per_batch):
                batch, m = members[lo:lo + per_batch], member_count[lo:lo + per_batch]
                slot[batch] = torch.arange(batch.numel(), device=device)
                # Node positions: [B, pad], the node count marking padding.
                pos = torch.arange(pad, device=device)
                real = pos[None] < graph.size[batch][:, None]
                nodes = graph.order[(graph.start[batch][:, None] + pos[None]).clamp(max=n - 1)]
                nodes = torch.where(real, nodes, n)
                lap = torch.diag_embed(torch.where(real, 1.0, 3.0).double())
                mask = slot[edge_comp] >= 0
                row, col = graph.row[mask], graph.col[mask]
                lap.index_put_((slot[graph.label[row]], graph.local[row], graph.local[col]),
                               -graph.weight[mask], accumulate=True)
                values, vectors = torch.linalg.eigh(lap)
                width = min(needed, pad - 1)
                vectors = canonical_eigenbasis(values, vectors, graph.size[batch],
                                               used=width + 1, pivot_tie=pivot_tie(self.tol))
                values, vectors = values[:, 1:width + 1], vectors[:, :, 1:width + 1]
                kernel = torch.cat([graph.sqrt_degree, graph.sqrt_degree.new_zeros(1)])[nodes]
                vectors = without_kernel(vectors, kernel / kernel.norm(dim=1, keepdim=True))
                valid = torch.arange(width, device=device)[None] < m[:, None]
                candidates.add(values, batch, nodes, vectors, valid, stride)
                slot[batch] = -1

    def _lanczos_component(self, graph: _Components, comp: int, m: int,
                           generator: torch.Generator) -> EigenPairs:
        r"""The :obj:`m` smallest non-zero eigenpairs of the Laplacian of
        component :obj:`comp`, from the largest of its normalised adjacency.
        A component of :data:`FLOAT32_NODES` to :data:`FLOAT32_MAX_NODES`
        nodes is first solved in float32 with the trivial vector deflated,
        for :obj:`m` pairs, and refined in float64 (:func:`_float32_refined`);
        when that does not reach :obj:`tol`, and on smaller components, block
        Lanczos runs in float64 for :obj:`m + 1` pairs and the trivial one is
        dropped (deflating it there costs a cycle more on the graphs
        measured). The trivial vector is projected out of the pairs kept."""
        size = int(graph.size[comp])
        start = int(graph.start[comp])
        nodes = graph.order[start:start + size]
        mask = graph.label[graph.row] == comp
        row, col = graph.local[graph.row[mask]], graph.local[graph.col[mask]]
        adjacency = torch.sparse_coo_tensor(torch.stack([row, col]), graph.weight[mask],
                                            (size, size), check_invariants=False).coalesce()
        trivial = graph.sqrt_degree[nodes]
        trivial = trivial / trivial.norm()
        pairs, iterations = None, 0
        if FLOAT32_NODES <= size <= FLOAT32_MAX_NODES and self.tol >= FLOAT32_TOL:
            pairs = _float32_refined(adjacency, m, self.tol, self.max_iter, generator, trivial)
            iterations = pairs.iterations
            if not pairs.converged:
                pairs = None
        if pairs is None:
            for max_iter in [self.max_iter, 2 * self.max_iter]:
                with warnings.catch_warnings():
                    warnings.simplefilter('ignore')  # the residual is judged below
                    pairs = block_lanczos(adjacency, m + 1, 'LA', self.tol, max_iter,
                                          degree=LANCZOS_DEGREE,
                                          block_size=min(m + 1, LANCZOS_BLOCK),
                                          generator=generator)
                iterations += pairs.iterations
                if pairs.converged:
                    break
        if not pairs.converged and size <= self.dense_fallback:
            # The documented dense fallback: a component of at most dense_fallback
            # (4,096 by default) nodes, O(size^2) memory.
            values, vectors = torch.linalg.eigh(torch.eye(size, dtype=torch.float64,
                                                          device=trivial.device)
                                                - adjacency.to_dense())
            vectors = canonical_eigenbasis(values, vectors, used=m + 1,
                                           pivot_tie=pivot_tie(self.tol))
            return EigenPairs(values[1:m + 1], without_kernel(vectors[:, 1:m + 1], trivial),
                              0.0, iterations, True)
        drop = pairs.eigenvalues.numel() - m  # the trivial pair, unless deflated (float32)
        vectors = pairs.eigenvectors[:, drop:]
        vectors = vectors - trivial[:, None] * (trivial @ vectors)[None]
        vectors = vectors / vectors.norm(dim=0, keepdim=True)
        values, residual, measure = 1.0 - pairs.eigenvalues[drop:], pairs.residual, False
        if pairs.converged:
            # Copies of an eigenvalue agree to the Ritz values' accuracy, about the
            # squared residual (distinct eigenvalues closer than the residual are
            # still resolved: a 6,000-node path's, 4e-7 apart). A rotated run's
            # residual is measured again.
            canonical = canonical_eigenbasis(
                values, vectors, tolerance=max(TIE_TOLERANCE, RUN_SLACK * residual * residual),
                pivot_tie=pivot_tie(self.tol))
            measure, vectors = canonical is not vectors, canonical
        if measure or not pairs.converged:
            # The residual of the pairs returned, after the trivial vector was
            # projected out (the operator's norm is one): the one to report.
            theta = pairs.eigenvalues[drop:]
            residual = float((adjacency @ vectors - vectors * theta).norm(dim=0).max())
        if residual > self.tol:
            warnings.warn(f"laplacian_eigenpairs: block Lanczos stopped on a connected "
                          f"component of {size} nodes with relative residual "
                          f"{residual:.2e} > tol={self.tol:.0e}; the best pairs found "
                          f"are returned. Raise 'max_iter' or 'tol'", UserWarning,
                          stacklevel=self.stacklevel)
        return EigenPairs(values, vectors, residual, iterations, residual <= self.tol)


class _Stalled(Exception):
    r"""Raised in the float32 solve's callback to abandon it."""


def _float32_refined(adjacency: Tensor, count: int, tol: float, max_iter: int,
                     generator: torch.Generator, trivial: Tensor) -> EigenPairs:
    r"""The :obj:`count` largest eigenpairs of the normalised adjacency
    :obj:`adjacency` (float64, of norm at most one) on the orthogonal
    complement of its trivial eigenvector :obj:`trivial` (unit, float64) by
    block Lanczos on its float32 copy with :obj:`trivial` deflated (else the
    filter lifts it far above the wanted pairs, whose float32 rounding then
    stalls the solve) for one pair more than wanted (a guard that sharpens
    the last wanted one, which may then need no refinement sweep), with the
    float64 solve's block size and filter degree, to
    :data:`FLOAT32_LANCZOS_TOL`, or :obj:`tol` if looser, in at most
    :data:`FLOAT32_MAX_ITER` cycles, abandoned at the first cycle that does
    not lower the residual), then refined in float64: Rayleigh--Ritz on the
    span of the float32 vectors and, while a residual
    :math:`\|\hat{\mathbf{A}}\mathbf{x} - \theta\mathbf{x}\|` exceeds
    :obj:`tol` (at most :data:`REFINE_SWEEPS` times), a float64 Chebyshev
    filter of degree :data:`LANCZOS_DEGREE` that damps :math:`[-1, c]`,
    :math:`c = \max(2\theta_{\min} - \theta_{\max}, (\theta_{\min} - 1)/2)` below the
    wanted values, then
    Rayleigh--Ritz again (each Rayleigh--Ritz on the block with
    :obj:`trivial` projected out). The filter removes the float32 rounding spread over
    the spectrum, which is what limits the residual of float32 vectors.
    :obj:`converged` tells whether
    :obj:`tol` was reached in float64; :obj:`iterations` counts the float32
    cycles."""
    best, cycles = [math.inf], [0]
    deflate = trivial.to(torch.float32)[:, None]
    deflate = deflate / deflate.norm()  # unit in float32 rounding too
    guarded = min(count + 1, adjacency.size(0) - 1)  # the complement has N - 1 dimensions

    def abandon(cycle: int, residual: float) -> None:
        cycles[0] = cycle
        if cycle > 0:  # cycle 0 locates the spectrum
            if residual >= best[0]:
                raise _Stalled
            best[0] = residual

    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')  # the float64 residual is judged below
            rough = block_lanczos(adjacency.to(torch.float32), guarded, 'LA',
                                  max(tol, FLOAT32_LANCZOS_TOL), min(max_iter, FLOAT32_MAX_ITER),
                                  degree=LANCZOS_DEGREE, block_size=min(guarded, LANCZOS_BLOCK),
                                  generator=generator, callback=abandon, deflate=deflate)
    except _Stalled:
        return EigenPairs(torch.empty(0), torch.empty(0, 0), math.inf, cycles[0], False)
    operator = compact_csr(adjacency)
    values, vectors, residual = _rayleigh_ritz(operator, rough.eigenvectors.to(torch.float64),
                                               trivial, count)
    for _ in range(REFINE_SWEEPS):
        if residual <= tol:
            break
        top, low = float(values[0]), float(values[-1])
        cut = max(2 * low - top, (low - 1) / 2)
        filtered = chebyshev_filter(operator, -1.0, cut, LANCZOS_DEGREE, top)(vectors)
        before = residual
        values, vectors, residual = _rayleigh_ritz(operator, filtered, trivial, count)
        if residual > REFINE_GAIN * before:  # not rounding noise: the float64 solve follows
            break
    return EigenPairs(values, vectors, residual, rough.iterations, residual <= tol)


def _rayleigh_ritz(operator: Tensor, block: Tensor, trivial: Tensor,
                   count: int) -> Tuple[Tensor, Tensor, float]:
    r"""The :obj:`count` leading Ritz pairs of :obj:`operator` (of norm at
    most one) on the span of :obj:`block` with the unit vector :obj:`trivial`
    projected out (twice), in descending order, and their largest residual
    norm."""
    for _ in range(2):
        block = block - trivial[:, None] * (trivial @ block)[None]
    basis = torch.linalg.qr(block).Q
    image = operator @ basis
    projected = basis.T @ image
    values, rotation = torch.linalg.eigh((projected + projected.T) / 2)
    values, rotation = values.flip(0)[:count], rotation.flip(1)[:, :count]
    vectors, image = basis @ rotation, image @ rotation
    residual = float((image - vectors * values).norm(dim=0).max())
    return values, vectors, residual


def _assemble(graph: _Components, chosen: Tensor, known_comps: Tensor,
              candidates: _Candidates) -> Tensor:
    r"""The :obj:`[N, k]` matrix of the chosen candidates."""
    n, device = graph.num_nodes, graph.label.device
    out = torch.zeros(n + 1, chosen.numel(), dtype=torch.float64, device=device)
    known = chosen < known_comps.numel()
    for column, index in zip(known.nonzero().view(-1).tolist(), chosen[known].tolist()):
        comp = int(known_comps[index])
        start, size = int(graph.start[comp]), int(graph.size[comp])
        nodes = graph.order[start:start + size]
        if nodes.numel() == 1:  # an isolated node
            out[nodes, column] = 1.0
        else:
            vector = graph.sqrt_degree[nodes]
            out[nodes, column] = vector / vector.norm()
    if candidates.where:
        where = torch.cat(candidates.where)
        columns = (~known).nonzero().view(-1)
        picked = where[chosen[~known] - known_comps.numel()]
        for column, (block, batch, index) in zip(columns.tolist(), picked.tolist()):
            nodes, vectors = candidates.blocks[block]
            out[nodes[batch], column] = vectors[batch, :, index]
    return out[:n]


def tie_groups(values: Tensor, tolerance: float = TIE_TOLERANCE) -> Tensor:
    r"""The rank of each of :obj:`values` after eigenvalues closer than
    :obj:`tolerance` are merged: sorted, a group starts at its first
    (smallest) value and takes every following value within the tolerance
    of that first one; the next value starts the next group. Every value
    gets its group's number, so equal numbers mark values that cannot be
    told apart (by default, in float64 after a dense solve of at most 256
    nodes: :data:`TIE_TOLERANCE`), and a group spans at most the tolerance (values
    spaced just below it are not chained into one wide group). Cost: one
    sort, :math:`O(n \log n)`, and one pass over the sorted values in
    Python, :math:`O(n)`."""
    if values.numel() == 0:
        return torch.zeros(0, dtype=torch.long, device=values.device)
    by_value = values.argsort(stable=True)
    ordered = values[by_value].tolist()
    numbers, group, first = [], 0, ordered[0]
    for value in ordered:
        if value - first > tolerance:  # beyond the group's first value: a new group
            group, first = group + 1, value
        numbers.append(group)
    result = torch.empty_like(by_value)
    result[by_value] = torch.tensor(numbers, dtype=torch.long, device=values.device)
    return result


def without_kernel(vectors: Tensor, kernel: Tensor) -> Tensor:
    r""":obj:`vectors` (:obj:`[..., n, j]`, orthonormal columns of a dense
    eigensolve past its first) orthogonal to the exact kernel vector
    :obj:`kernel` (:obj:`[..., n]`, unit) of their component. Where
    :math:`\lambda_1` of the component is tiny (a bridge of weight 1e-10),
    the dense solver's first kept vector mixes with its own kernel vector,
    which is not :obj:`kernel`, and the encoding, which puts :obj:`kernel`
    beside them, would hold two nearly equal columns: where some column's
    overlap with :obj:`kernel` exceeds :data:`KERNEL_OVERLAP`, the columns
    are projected and made orthonormal again (the Q of their QR
    factorisation, signed to keep each column's direction); elsewhere they
    are returned unchanged, to the bit. Cost: :math:`O(n j)` per
    component, :math:`O(n j^2)` where corrected; one synchronisation."""
    overlap = kernel.unsqueeze(-2) @ vectors
    needed = overlap.abs().amax(dim=(-2, -1)) > KERNEL_OVERLAP
    if not bool(needed.any()):
        return vectors
    q, r = torch.linalg.qr(vectors - kernel.unsqueeze(-1) * overlap)
    sign = torch.where(r.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0).to(q.dtype)
    return torch.where(needed[..., None, None], q * sign.unsqueeze(-2), vectors)


#: Rows whose squared norm in a remaining eigenspace reaches this fraction
#: below the largest count as tied when :func:`canonical_eigenbasis` picks
#: its next pivot (the lowest node among them is taken): far above the
#: rounding of the squared norms (a few eps) and the error of a Lanczos pair
#: at the default tol (1e-5 relative), so that every solver picks the same
#: pivots (1e-9 let a Lanczos solve's noise pick them on a symmetric graph).
PIVOT_TIE = 1e-3

#: A Lanczos pair with relative residual r moves the projector's diagonal by
#: far more than rounding (2e-5 relative at r = 6e-7 on a 70 x 70 torus, whose
#: diagonal entries are all equal): pivots tie to PIVOT_SLACK times the
#: requested tol (:func:`pivot_tie`, in every solve of one call, dense ones
#: included, so that the rule does not change with the residual a solve
#: happens to reach). Copies of one eigenvalue agree to about r^2 / gap, not
#: r^2 (2.6e-13 apart at r^2 = 2.4e-13 there): a run takes values within
#: RUN_SLACK * r^2.
PIVOT_SLACK, RUN_SLACK = 1e3, 1e3


def pivot_tie(tol: float) -> float:
    r"""The relative tie of :func:`canonical_eigenbasis`'s pivots for solves
    to relative residual :obj:`tol`: :data:`PIVOT_TIE`, or :data:`PIVOT_SLACK`
    times :obj:`tol` when larger."""
    return max(PIVOT_TIE, PIVOT_SLACK * tol)


def canonical_eigenbasis(values: Tensor, vectors: Tensor, count: Optional[Tensor] = None,
                         tolerance: float = TIE_TOLERANCE, used: Optional[int] = None,
                         pivot_tie: float = PIVOT_TIE) -> Tensor:
    r""":obj:`vectors` (:obj:`[..., n, w]`, orthonormal columns, eigenvectors
    of the ascending :obj:`values` :obj:`[..., w]`) with the columns of each
    run of consecutive values within :obj:`tolerance` of its first one
    replaced by a basis of their span that depends on the span alone, not on
    the basis the solver returned (which changes with the thread count, the
    BLAS library or the solver): the projector
    :math:`\mathbf{P} = \mathbf{U}\mathbf{U}^{\top}` is decomposed by
    Gram--Schmidt with diagonal pivoting, each step taking the node
    :math:`i` whose row of the remaining projector has the largest norm
    (ties, to :data:`PIVOT_TIE`, to the lowest node) and the unit vector
    :math:`\mathbf{P}\mathbf{e}_i / \|\mathbf{P}\mathbf{e}_i\|`, positive
    at :math:`i`, then removing it. Only the first :obj:`count` columns of
    each matrix (:obj:`[...]`, default all) are grouped, and only runs that
    begin among the first :obj:`used` columns (default all; those the
    caller keeps) are replaced. Columns outside such runs are returned to
    the bit. Cost: :math:`O(n g^2)` per run of
    :math:`g` values, batched over the runs of each length."""
    batch_shape, (n, w) = vectors.shape[:-2], vectors.shape[-2:]
    used = w if used is None else min(used, w)
    flat = values.reshape(-1, w)
    limits = ([w] * flat.size(0) if count is None
              else count.reshape(-1).clamp(max=w).tolist())
    runs: dict = {}  # run length -> ([matrix], [first column])
    # One transfer of the values, then plain floats: a batch of small graphs
    # mostly has no run, and per-graph tensor operations would cost more than
    # the solve.
    for row, (line, limit) in enumerate(zip(flat.tolist(), limits)):
        column = 0
        while column < min(used, limit - 1):  # a run begins among the first 'used'
            end = column  # a run spans at most the tolerance from its first value
            while end + 1 < limit and line[end + 1] - line[column] <= tolerance:
                end += 1
            if end > column:
                matrices, firsts = runs.setdefault(end - column + 1, ([], []))
                matrices.append(row)
                firsts.append(column)
            column = end + 1
    if not runs:
        return vectors
    # On the host in float64 (a view of a CPU tensor, copied once): the runs are
    # narrow, and a tensor operation's overhead would exceed their arithmetic.
    host = vectors.detach().reshape(-1, n, w).to('cpu', torch.float64).numpy().copy()
    for g, (matrices, firsts) in runs.items():
        rows = np.asarray(matrices)[:, None]
        cols = np.asarray(firsts)[:, None] + np.arange(g)[None]  # [G, g]
        host[rows, :, cols] = _pivoted_basis(host[rows, :, cols].transpose(0, 2, 1), pivot_tie
                                             ).transpose(0, 2, 1)
    return torch.from_numpy(host).to(vectors.device, vectors.dtype).reshape(*batch_shape, n, w)


def _pivoted_basis(block: np.ndarray, pivot_tie: float = PIVOT_TIE) -> np.ndarray:
    r"""The pivoted Gram--Schmidt basis of :func:`canonical_eigenbasis` for
    each orthonormal :obj:`[n, g]` matrix of :obj:`block` :obj:`[G, n, g]`
    (float64). The remaining projector is
    :math:`\mathbf{R}\mathbf{R}^{\top}`: with :math:`\mathbf{q}` the unit
    pivot row of :math:`\mathbf{R}`, the new vector is :math:`\mathbf{v} =
    \mathbf{R}\mathbf{q}` (of unit norm, since
    :math:`\mathbf{R}^{\top}\mathbf{R}` is a projector that keeps
    :math:`\mathbf{q}`), :math:`\mathbf{R}` becomes
    :math:`\mathbf{R}(\mathbf{I} - \mathbf{q}\mathbf{q}^{\top})` and each
    row's squared norm loses :math:`v_i^2`."""
    remaining = block.copy()
    out = np.empty_like(remaining)
    norms = np.square(remaining).sum(axis=-1)  # [G, n]: the remaining projector's diagonal
    every = np.arange(remaining.shape[0])
    for j in range(remaining.shape[-1]):
        tied = norms >= norms.max(axis=-1, keepdims=True) * (1 - pivot_tie)
        pivot = tied.argmax(axis=-1)  # the lowest tied node
        q = remaining[every, pivot] / np.sqrt(norms[every, pivot])[:, None]
        vector = np.matmul(remaining, q[..., None])[..., 0]
        out[..., j] = vector
        remaining -= vector[..., None] * q[:, None, :]
        norms -= np.square(vector)
    return out


def fix_signs(vectors: Tensor) -> Tensor:
    r"""Flips each column so that its first entry whose magnitude reaches
    :data:`SIGN_TIE` of the largest is positive."""
    if vectors.numel() == 0:
        return vectors
    magnitude = vectors.abs()
    top = magnitude.max(dim=0).values
    first = (magnitude >= SIGN_TIE * top).to(torch.uint8).argmax(dim=0)
    sign = vectors.gather(0, first[None]).sign().view(-1)
    sign = torch.where(sign == 0, 1.0, sign).to(vectors.dtype)
    return vectors * sign
