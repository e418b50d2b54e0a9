r"""Extreme eigenpairs of a sparse symmetric operator solved one connected
component at a time: the spectrum of a block-diagonal matrix is the union of
its blocks' spectra, and a Krylov method started from :math:`b` vectors finds
at most :math:`b` copies of an eigenvalue that many components share."""
import warnings
from typing import Callable, List, NamedTuple, Optional

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components
from torch import Tensor

from torch_geometric_regcn.linalg.components import graph_components
from torch_geometric_regcn.linalg.eigenpairs import EigenPairs, check_problem
from torch_geometric_regcn.linalg.laplacian_spectrum import DENSE_BATCH_ENTRIES
from torch_geometric_regcn.utils.sparse import compact_csr

#: Components of at most this many nodes are solved by batched dense
#: :func:`torch.linalg.eigh` in float64, the others by the iterative solver
#: unless :data:`DENSE_PER_PAIR` says otherwise.
DENSE_NODES = 256

#: A component of up to :data:`DENSE_NODES_MAX` nodes is solved densely too
#: when it has at most this many nodes per pair wanted: a Krylov solve for
#: :math:`k` pairs keeps a basis of a few :math:`k` vectors, and for a good
#: share of a component's spectrum costs more than one dense solve
#: (:math:`O(n_C^3)`).
DENSE_PER_PAIR = 5

#: The largest component solved densely (one float64 matrix of 32 MiB).
DENSE_NODES_MAX = 2048

#: Eigenvalues closer than this many units of the operator dtype's rounding,
#: relative to the largest magnitude among them, count as equal and are then
#: ordered by their component's lowest node. One normalised adjacency gives
#: every component the same top eigenvalue, each computed from its own
#: rounded entries: a few units apart in float32, where a dense solve of a
#: component of :math:`n_C` nodes adds at most about :math:`n_C\epsilon_{64}`
#: (backward stability; a few units seen).
TIE_UNITS = 64

#: :obj:`solve(operator, k, main)`: the :obj:`k` eigenpairs of one
#: component's operator; :obj:`main` marks the largest component, the one
#: that may report progress.
Solve = Callable[[Tensor, int, bool], EigenPairs]


class _Split(NamedTuple):
    r"""An operator's stored non-zero entries split by connected component."""
    row: Tensor  #: entries' rows (int64)
    col: Tensor  #: entries' columns
    value: Tensor  #: entries' values, in the operator's dtype
    label: Tensor  #: component of each node, numbered by the component's lowest node
    size: Tensor  #: nodes of each component
    start: Tensor  #: offset of each component in :obj:`order`
    order: Tensor  #: the nodes sorted by (component, index)
    local: Tensor  #: position of each node within its component
    entries: Tensor  #: the entries sorted by component
    entry_start: Tensor  #: offset of each component's entries in :obj:`entries`
    entry_count: Tensor  #: entries of each component

    def entries_of(self, comps: Tensor) -> Tensor:
        r"""The entries of the components :obj:`comps`, component after
        component: :math:`O(\text{their entries})`, not :math:`O(\mathrm{nnz})`."""
        counts = self.entry_count[comps]
        offsets = torch.repeat_interleave(self.entry_start[comps] - (counts.cumsum(0) - counts),
                                          counts)
        return self.entries[offsets + torch.arange(offsets.numel(), device=offsets.device)]


class _Candidates(NamedTuple):
    r"""Eigenvalues of every component, each with its component and its
    position in the component's solve."""
    values: Tensor  #: float64
    component: Tensor
    column: Tensor


def _split(operator: Tensor) -> Optional[_Split]:
    r"""The components of :obj:`operator`'s graph of non-zero entries, or
    :obj:`None` when it is connected. :math:`O(\mathrm{nnz} + N)`, on the
    CPU (scipy)."""
    n = operator.size(0)
    csr = compact_csr(operator if operator.layout != torch.strided
                      else operator.to_sparse_csr())
    crow, col, value = csr.crow_indices(), csr.col_indices(), csr.values()
    stored = value != 0
    if not bool(stored.all()):  # stored zeros join nothing
        row = torch.repeat_interleave(torch.arange(n, device=crow.device), crow.diff())
        crow = torch.zeros(n + 1, dtype=torch.long, device=crow.device)
        crow[1:] = torch.bincount(row[stored], minlength=n).cumsum(0)
        col, value = col[stored], value[stored]
    pattern = sp.csr_matrix((np.ones(col.numel(), dtype=np.int8), col.cpu().numpy(),
                             crow.cpu().numpy()), shape=(n, n))
    # A quick test first (strongly connected components are found faster than
    # connected ones): one strong component is a connected graph whatever the
    # pattern, and most operators are connected.
    if connected_components(pattern, directed=True, connection='strong')[0] == 1:
        return None
    row = torch.repeat_interleave(torch.arange(n, device=crow.device), crow.diff())
    col = col.long()
    parts = graph_components(row, col, n)
    count = parts.size.numel()
    if count == 1:
        return None
    label, size, start, order, local = parts
    entry_label = label[row]
    entry_count = torch.bincount(entry_label, minlength=count)
    return _Split(row, col, value, label, size, start, order, local,
                  entry_label.argsort(stable=True), entry_count.cumsum(0) - entry_count,
                  entry_count)


class _Batch(NamedTuple):
    r"""Components solved together by one dense batched solve."""
    comps: Tensor  #: the components, :obj:`[B]`
    nodes: Tensor  #: their nodes :obj:`[B, P]`, the node count marking padding
    pad: int  #: :math:`P`, the largest of their sizes


def _dense_batches(split: _Split, comps: Tensor) -> List[_Batch]:
    r"""The components :obj:`comps` grouped by size up to the next power of
    two, at most :data:`DENSE_BATCH_ENTRIES` matrix entries per batch."""
    if comps.numel() == 0:
        return []
    n, device = split.label.numel(), comps.device
    bucket = torch.ceil(torch.log2(split.size[comps].double())).long()
    batches = []
    for b in torch.unique(bucket).tolist():
        members = comps[bucket == b]
        pad = int(split.size[members].max())
        per_batch = max(1, DENSE_BATCH_ENTRIES // (pad * pad))
        for lo in range(0, members.numel(), per_batch):
            batch = members[lo:lo + per_batch]
            pos = torch.arange(pad, device=device)
            real = pos[None] < split.size[batch][:, None]
            nodes = split.order[(split.start[batch][:, None] + pos[None]).clamp(max=n - 1)]
            batches.append(_Batch(batch, torch.where(real, nodes, n), pad))
    return batches


def _dense_matrices(split: _Split, comps: Tensor, pad: int, pad_value: float) -> Tensor:
    r"""The float64 matrices :obj:`[B, P, P]` of the components :obj:`comps`
    (each of at most :obj:`pad` nodes), padded with :obj:`pad_value` on the
    diagonal (below the spectrum), so that a component's eigenvalues are the
    last :obj:`size` of its matrix's, in ascending order. Built for a batch
    when needed, not kept: :math:`O(B P^2)` memory."""
    device = comps.device
    real = torch.arange(pad, device=device)[None] < split.size[comps][:, None]
    diagonal = torch.full(real.shape, pad_value, dtype=torch.float64, device=device)
    matrices = torch.diag_embed(diagonal.masked_fill_(real, 0.0))
    slot = torch.full((split.size.numel(),), -1, dtype=torch.long, device=device)
    slot[comps] = torch.arange(comps.numel(), device=device)
    entries = split.entries_of(comps)
    row, col = split.row[entries], split.col[entries]
    matrices.index_put_((slot[split.label[row]], split.local[row], split.local[col]),
                        split.value[entries].double(), accumulate=True)
    return matrices


def _component_operator(split: _Split, comp: int, layout: torch.layout) -> Tensor:
    r"""The submatrix of component :obj:`comp` on its nodes in ascending
    order, sparse CSR (dense for a dense :obj:`layout`)."""
    size = int(split.size[comp])
    entries = split.entries_of(torch.tensor([comp], device=split.label.device))
    indices = torch.stack([split.local[split.row[entries]], split.local[split.col[entries]]])
    matrix = torch.sparse_coo_tensor(indices, split.value[entries], (size, size),
                                     check_invariants=False).coalesce()
    # A dense input stays dense (its component is at most its own size).
    return matrix.to_dense() if layout == torch.strided else compact_csr(matrix)


def componentwise_eigenpairs(operator: Tensor, k: int, which: str, tol: float, max_iter: int,
                             solve: Solve) -> EigenPairs:
    r"""The :obj:`k` eigenpairs of the symmetric :obj:`operator`
    :math:`\mathbf{S}` selected by :obj:`which`, solved one connected
    component of its graph of non-zero entries at a time.

    :math:`\mathbf{S}` is block diagonal over those components, so its
    eigenpairs are those of the blocks, each vector zero off its component.
    A connected :math:`\mathbf{S}` goes to :obj:`solve` unchanged. Otherwise
    every component of at most :data:`DENSE_NODES` nodes, or of at most
    :data:`DENSE_NODES_MAX` and at most :data:`DENSE_PER_PAIR` :math:`\cdot k`
    nodes, is solved exactly by batched dense :func:`torch.linalg.eigh` in
    float64 (all its pairs are candidates) and every other one by :obj:`solve` for
    :math:`\min(k, n_C)` pairs (the largest last, the one that reports
    progress); the :obj:`k` candidates first under :obj:`which` are returned
    in that order, values closer than :data:`TIE_UNITS` units of rounding of
    the larger of their components' scales counting as equal and then
    ordered by their component's lowest node, then by their order within
    it. A block method started from :math:`b` vectors finds about :math:`b`
    copies of an eigenvalue; one normalised adjacency gives each of its
    components the same top eigenvalue (tsGCN-t, :math:`\beta = 0`:
    CiteSeer has 438 components), so only this split finds them all.

    :obj:`residual` is the largest relative residual
    :math:`\|\mathbf{S}\mathbf{x} - \theta\mathbf{x}\| / \|\mathbf{S}_C\|_\infty`
    of the returned pairs, :math:`\|\mathbf{S}_C\|_\infty` the largest
    absolute row sum of the pair's component (measured in the operator's
    dtype: one product per component with chosen pairs); :obj:`iterations` sums the iterative
    solves'; their warnings are repeated only for components with chosen
    pairs. Cost: :math:`O(\mathrm{nnz} + N)` for the components (scipy, on
    the CPU; on a connected graph of a million nodes about three sparse
    products with 16 columns), :math:`O(P^3)` per dense component, :math:`P`
    its size rounded up to a power of two (twice where a pair is chosen:
    values first, vectors for the chosen), one iterative solve per larger
    component, and :math:`O(N)` Python steps to order the candidates."""
    n = check_problem(operator, k, which, max_iter, 1, tol)
    split = _split(operator)
    if split is None:
        return solve(operator, k, True)
    dtype, device = operator.dtype, split.label.device
    eps = torch.finfo(dtype).eps
    dense = (split.size <= DENSE_NODES) | ((split.size <= DENSE_NODES_MAX)
                                           & (split.size <= DENSE_PER_PAIR * k))
    large = sorted((~dense).nonzero().view(-1).tolist(), key=lambda c: int(split.size[c]))
    bound = torch.zeros(n, dtype=torch.float64, device=device)
    bound.index_add_(0, split.row, split.value.double().abs())
    pad_value = -2.0 * float(bound.max()) - 1.0  # below the spectrum, in float64
    # Each component's largest absolute row sum, a bound of its spectral norm that
    # the residuals are relative to (subspace iteration's measure).
    norm = torch.zeros(split.size.numel(), dtype=torch.float64, device=device)
    norm.scatter_reduce_(0, split.label, bound, reduce='amax')
    norm = norm.clamp_min(torch.finfo(torch.float64).tiny)
    batches = _dense_batches(split, dense.nonzero().view(-1))
    found: List[_Candidates] = []
    for batch in batches:
        values = torch.linalg.eigvalsh(_dense_matrices(split, batch.comps, batch.pad, pad_value))
        pad = batch.pad
        column = torch.arange(pad, device=device)[None].expand(batch.comps.numel(), pad)
        real = column >= (pad - split.size[batch.comps])[:, None]
        found.append(_Candidates(values[real], batch.comps[:, None].expand_as(column)[real],
                                 column[real]))
    solved, caught, iterations = {}, {}, 0
    for comp in large:  # ascending size: the largest, which reports progress, last
        with warnings.catch_warnings(record=True) as caught[comp]:
            warnings.simplefilter('always')
            pairs = solve(_component_operator(split, comp, operator.layout),
                          min(k, int(split.size[comp])), comp == large[-1])
        solved[comp], iterations = pairs, iterations + pairs.iterations
        count = pairs.eigenvalues.numel()
        found.append(_Candidates(pairs.eigenvalues.double(),
                                 torch.full((count,), comp, device=device),
                                 torch.arange(count, device=device)))
    values = torch.cat([c.values for c in found])
    component = torch.cat([c.component for c in found])
    column = torch.cat([c.column for c in found])
    key = values if which == 'LA' else values.abs()
    scale = torch.zeros(split.size.numel(), dtype=torch.float64, device=device)
    scale.scatter_reduce_(0, component, values.abs(), reduce='amax')
    scale = scale.clamp_min(torch.finfo(torch.float64).tiny)
    # Descending key; ties to the lower component, then the column: the dense
    # solves' ascending columns are reversed so that both run in their solve's order.
    position = torch.where(dense[component], -column, column)
    chosen = _select(key, TIE_UNITS * eps * scale[component], component, position, k)
    out = torch.zeros(n + 1, k, dtype=dtype, device=device)
    residual = 0.0
    for comp, pairs in solved.items():
        take = (component[chosen] == comp).nonzero().view(-1)
        if take.numel() == 0 and pairs.converged:
            continue
        # Of a solve whose pairs are returned, or that did not converge: its
        # Ritz values understate the eigenvalues and may have lost the
        # selection to other components' (a 2000-node path's eigenvalue 1
        # dropped, the result said converged).
        for warning in caught[comp]:
            warnings.warn(warning.message, warning.category, stacklevel=3)
        if take.numel() == 0:
            continue
        nodes = split.order[int(split.start[comp]):int(split.start[comp] + split.size[comp])]
        vectors = pairs.eigenvectors[:, column[chosen[take]]]
        theta = values[chosen[take]].to(dtype)
        image = _component_operator(split, comp, operator.layout) @ vectors
        error = float((image - vectors * theta).norm(dim=0).max()) / float(norm[comp])
        residual = max(residual, error)
        out[nodes[:, None], take[None]] = vectors
    dense_residual = 0.0
    slot = torch.full((split.size.numel(),), -1, dtype=torch.long, device=device)
    for batch in batches:
        slot[batch.comps] = torch.arange(batch.comps.numel(), device=device)
        take = (slot[component[chosen]] >= 0).nonzero().view(-1)
        rows = slot[component[chosen[take]]]
        slot[batch.comps] = -1
        if take.numel() == 0:
            continue
        used, where = torch.unique(rows, return_inverse=True)
        matrices = _dense_matrices(split, batch.comps[used], batch.pad, pad_value)
        _, vectors = torch.linalg.eigh(matrices)
        vectors = vectors.to(dtype)
        picked = vectors[where, :, column[chosen[take]]]  # [t, P]
        image = torch.bmm(matrices.to(dtype), vectors)[where, :, column[chosen[take]]]
        theta = values[chosen[take]].to(dtype)
        real = batch.nodes[used][where] < n
        error = ((image - theta[:, None] * picked) * real).norm(dim=1)
        comp_norm = norm[batch.comps[used]][where].to(error.dtype)
        dense_residual = max(dense_residual, float((error / comp_norm).max()))
        out[batch.nodes[used][where], take[:, None].expand_as(picked)] = picked
    if dense_residual > tol:
        warnings.warn(
            f"The connected components solved densely (float64 eigh) reached relative "
            f"residual {dense_residual:.2e} > tol={tol:.0e}: the rounding of "
            f"{dtype} limits it; raise 'tol' or solve in float64", UserWarning, stacklevel=3)
    residual = max(residual, dense_residual)
    converged = residual <= tol and all(pairs.converged for pairs in solved.values())
    return EigenPairs(values[chosen].to(dtype), out[:n], residual, iterations, converged)


def _select(key: Tensor, tolerance: Tensor, component: Tensor, position: Tensor,
            k: int) -> Tensor:
    r"""The indices of the :obj:`k` candidates first by descending
    :obj:`key`, a value joining the group of the first value above it while
    within the larger of their two :obj:`tolerance`; within a group by
    :obj:`component`, then :obj:`position`. Cost: one sort and one pass in
    Python over the candidates."""
    by_key = key.argsort(descending=True, stable=True)
    ordered, tolerances = key[by_key].tolist(), tolerance[by_key].tolist()
    group, numbers = 0, []
    first = 0
    for index, value in enumerate(ordered):
        if ordered[first] - value > max(tolerances[first], tolerances[index]):
            group, first = group + 1, index
        numbers.append(group)
    groups = torch.empty_like(by_key)
    groups[by_key] = torch.tensor(numbers, dtype=torch.long, device=key.device)
    place = np.lexsort((position.cpu().numpy(), component.cpu().numpy(),
                        groups.cpu().numpy()))
    return torch.from_numpy(place[:k]).to(key.device)
