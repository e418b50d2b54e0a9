r"""Extreme eigenpairs of a sparse symmetric operator solved one connected
component at a time: the spectrum of a block-diagonal matrix is the union of
its blocks' spectra, and a Krylov method started from :math:`b` vectors finds
at most :math:`b` copies of an eigenvalue that many components share."""
import warnings
from typing import Callable, List, NamedTuple, Optional, Tuple

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components
from torch import Tensor

from torch_geometric_regcn.linalg.eigenpairs import EigenPairs, check_problem
from torch_geometric_regcn.linalg.laplacian_spectrum import DENSE_BATCH_ENTRIES, tie_groups
from torch_geometric_regcn.utils.sparse import compact_csr

#: Components of at most this many nodes are solved by batched dense
#: :func:`torch.linalg.eigh` in float64, the others by the iterative solver.
DENSE_NODES = 256

#: Eigenvalues closer than this many units of the operator dtype's rounding,
#: relative to the largest magnitude among them, count as equal and are then
#: ordered by their component's lowest node. One normalised adjacency gives
#: every component the same top eigenvalue, each computed from its own
#: rounded entries: a few units apart in float32, where a dense solve of a
#: component of at most :data:`DENSE_NODES` nodes adds at most about
#: :math:`256\epsilon_{64}`.
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
    # Strongly connected components are found faster, and on a symmetric
    # pattern they are the connected ones; one strong component is a
    # connected graph whatever the pattern.
    count, found = connected_components(pattern, directed=True, connection='strong')
    if count == 1:
        return None
    row = torch.repeat_interleave(torch.arange(n, device=crow.device), crow.diff())
    col = col.long()
    host_row, host_col = row.cpu().numpy(), col.cpu().numpy()
    if not (found[host_row] == found[host_col]).all():  # an entry without its mirror
        count, found = connected_components(pattern, directed=False)
        if count == 1:
            return None
    device = row.device
    found = torch.from_numpy(found.astype(np.int64)).to(device)
    lowest = torch.full((count,), n, dtype=torch.long, device=device)
    lowest.scatter_reduce_(0, found, torch.arange(n, device=device), reduce='amin')
    rank = torch.empty_like(lowest)
    rank[lowest.argsort()] = torch.arange(count, device=device)
    label = rank[found]
    order = label.argsort(stable=True)
    size = torch.bincount(label, minlength=count)
    start = size.cumsum(0) - size
    local = torch.empty_like(order)
    local[order] = torch.arange(n, device=device) - start[label[order]]
    return _Split(row, col, value, label, size, start, order, local)


def _dense_batches(split: _Split, comps: Tensor) -> List[Tuple[Tensor, Tensor, Tensor]]:
    r"""The components :obj:`comps` (each of at most :data:`DENSE_NODES`
    nodes) as batches of dense float64 matrices, grouped by size up to the
    next power of two: a list of :obj:`(batch, nodes, matrices)`, the
    components :obj:`[B]`, their nodes :obj:`[B, P]` (the node count marks
    padding) and their matrices :obj:`[B, P, P]`, padded below the spectrum
    (every diagonal entry of the padding is minus one more than the largest
    absolute row sum), so that a component's eigenvalues are the last
    :obj:`size` of its matrix's, in ascending order."""
    if comps.numel() == 0:
        return []
    n, device = split.label.numel(), comps.device
    sizes = split.size[comps]
    bound = torch.zeros(n, dtype=torch.float64, device=device)
    bound.index_add_(0, split.row, split.value.double().abs())
    pad_value = -1.0 - float(bound.max()) if n else -1.0
    bucket = torch.ceil(torch.log2(sizes.double())).long()
    slot = torch.full((split.size.numel(),), -1, dtype=torch.long, device=device)
    entry_comp = split.label[split.row]
    batches = []
    for b in torch.unique(bucket).tolist():
        members = comps[bucket == b]
        pad = int(split.size[members].max())
        per_batch = max(1, DENSE_BATCH_ENTRIES // (pad * pad))
        for lo in range(0, members.numel(), per_batch):
            batch = members[lo:lo + per_batch]
            slot[batch] = torch.arange(batch.numel(), device=device)
            pos = torch.arange(pad, device=device)
            real = pos[None] < split.size[batch][:, None]
            nodes = split.order[(split.start[batch][:, None] + pos[None]).clamp(max=n - 1)]
            nodes = torch.where(real, nodes, n)
            matrices = torch.diag_embed(torch.where(real, 0.0, pad_value).double())
            mask = slot[entry_comp] >= 0
            row, col = split.row[mask], split.col[mask]
            matrices.index_put_((slot[split.label[row]], split.local[row], split.local[col]),
                                split.value[mask].double(), accumulate=True)
            batches.append((batch, nodes, matrices))
            slot[batch] = -1
    return batches


def _component_operator(split: _Split, comp: int, layout: torch.layout) -> Tensor:
    r"""The submatrix of component :obj:`comp` on its nodes in ascending
    order, sparse CSR (dense for a dense :obj:`layout`)."""
    size = int(split.size[comp])
    mask = split.label[split.row] == comp
    indices = torch.stack([split.local[split.row[mask]], split.local[split.col[mask]]])
    matrix = torch.sparse_coo_tensor(indices, split.value[mask], (size, size),
                                     check_invariants=False).coalesce()
    return matrix.to_dense() if layout == torch.strided else compact_csr(matrix)


def componentwise_eigenpairs(operator: Tensor, k: int, which: str, tol: float, max_iter: int,
                             solve: Solve) -> EigenPairs:
    r"""The :obj:`k` eigenpairs of the symmetric :obj:`operator`
    :math:`\mathbf{S}` selected by :obj:`which`, solved one connected
    component of its graph of non-zero entries at a time.

    :math:`\mathbf{S}` is block diagonal over those components, so its
    eigenpairs are those of the blocks, each vector zero off its component.
    A connected :math:`\mathbf{S}` goes to :obj:`solve` unchanged. Otherwise
    every component of at most :data:`DENSE_NODES` nodes is solved exactly
    by batched dense :func:`torch.linalg.eigh` in float64 (all its pairs are
    candidates) and every larger one by :obj:`solve` for
    :math:`\min(k, n_C)` pairs; the :obj:`k` candidates first under
    :obj:`which` are returned in that order, values closer than
    :data:`TIE_UNITS` units of rounding counting as equal and then ordered by
    their component's lowest node, then by their order within it. A block
    method started from :math:`b` vectors finds at most :math:`b` copies of
    an eigenvalue; one normalised adjacency gives each of its components the
    same top eigenvalue (tsGCN-t, :math:`\beta = 0`: CiteSeer has 438
    components), so only this split finds them all.

    :obj:`residual` is the largest of the iterative solves' residuals (each
    relative to its component's spectral norm, at most the whole one's) and
    of the dense pairs' residuals in the operator's dtype relative to the
    largest eigenvalue magnitude found; :obj:`iterations` sums the iterative
    solves'. Cost: :math:`O(\mathrm{nnz} + N)` for the components (scipy,
    on the CPU), :math:`O(n_C^3)` per dense component (computed twice where
    a pair is chosen: values first, vectors for the chosen), and the
    iterative solves."""
    n = check_problem(operator, k, which, max_iter, 1, tol)
    split = _split(operator)
    if split is None:
        return solve(operator, k, True)
    dtype, device = operator.dtype, split.label.device
    dense = split.size <= DENSE_NODES
    large = (~dense).nonzero().view(-1).tolist()
    main = max(large, key=lambda comp: int(split.size[comp])) if large else None
    batches = _dense_batches(split, dense.nonzero().view(-1))
    found: List[_Candidates] = []
    for batch, _, matrices in batches:
        values = torch.linalg.eigvalsh(matrices)
        sizes = split.size[batch]
        pad = matrices.size(-1)
        column = torch.arange(pad, device=device)[None].expand(batch.numel(), pad)
        real = column >= (pad - sizes)[:, None]
        found.append(_Candidates(values[real], batch[:, None].expand_as(column)[real],
                                 column[real]))
    solved, residual, iterations, converged = {}, 0.0, 0, True
    for comp in large:
        pairs = solve(_component_operator(split, comp, operator.layout),
                      min(k, int(split.size[comp])), comp == main)
        solved[comp] = pairs
        residual, iterations = max(residual, pairs.residual), iterations + pairs.iterations
        converged = converged and pairs.converged
        count = pairs.eigenvalues.numel()
        found.append(_Candidates(pairs.eigenvalues.double(),
                                 torch.full((count,), comp, device=device),
                                 torch.arange(count, device=device)))
    values = torch.cat([c.values for c in found])
    component = torch.cat([c.component for c in found])
    column = torch.cat([c.column for c in found])
    key = values if which == 'LA' else values.abs()
    scale = max(float(values.abs().max()), torch.finfo(torch.float64).tiny)
    units = TIE_UNITS * torch.finfo(dtype).eps * scale
    # Descending key; ties to the lower component, then the column: the dense
    # solves' ascending columns are reversed so that both run in their solve's order.
    position = torch.where(split.size[component] <= DENSE_NODES, -column, column)
    by_place = torch.from_numpy(np.lexsort((position.cpu().numpy(),
                                            component.cpu().numpy()))).to(device)
    groups = tie_groups(-key / units, tolerance=1.0)
    chosen = by_place[groups[by_place].argsort(stable=True)][:k]
    out = torch.zeros(n + 1, k, dtype=dtype, device=device)
    for comp, pairs in solved.items():
        take = (component[chosen] == comp).nonzero().view(-1)
        nodes = split.order[int(split.start[comp]):int(split.start[comp] + split.size[comp])]
        out[nodes[:, None], take[None]] = pairs.eigenvectors[:, column[chosen[take]]]
    dense_residual = 0.0
    for batch, nodes, matrices in batches:
        slot = torch.full((split.size.numel(),), -1, dtype=torch.long, device=device)
        slot[batch] = torch.arange(batch.numel(), device=device)
        take = (slot[component[chosen]] >= 0).nonzero().view(-1)
        if take.numel() == 0:
            continue
        rows = slot[component[chosen[take]]]
        used = torch.unique(rows)
        _, vectors = torch.linalg.eigh(matrices[used])
        where = torch.searchsorted(used, rows)
        picked = vectors[where, :, column[chosen[take]]].to(dtype)  # [t, P]
        theta = values[chosen[take]].to(dtype)
        image = (matrices[used].to(dtype)[where] @ picked[:, :, None])[:, :, 0]
        real = nodes[used][where] < n
        error = ((image - theta[:, None] * picked) * real).norm(dim=1).max()
        dense_residual = max(dense_residual, float(error) / scale)
        out[nodes[used][where], take[:, None].expand_as(picked)] = picked
    if dense_residual > tol:
        converged = False
        warnings.warn(
            f"The connected components of at most {DENSE_NODES} nodes were solved densely "
            f"to relative residual {dense_residual:.2e} > tol={tol:.0e}: the rounding of "
            f"{dtype} limits it; raise 'tol' or solve in float64", UserWarning, stacklevel=3)
    residual = max(residual, dense_residual)
    return EigenPairs(values[chosen].to(dtype), out[:n], residual, iterations, converged)
