r"""Laplacian eigenvector positional encodings that neither fail nor flip sign:
a drop-in for PyG's :class:`~torch_geometric.transforms.AddLaplacianEigenvectorPE`."""
import warnings
from typing import Any, List, NamedTuple, Optional, Tuple

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import coalesce, remove_self_loops

from torch_geometric_regcn.linalg.eigenpairs import EigenPairs
from torch_geometric_regcn.linalg.lanczos import block_lanczos
from torch_geometric_regcn.utils.validation import check_edge_index, check_int, check_real

__all__ = ['LaplacianEigenPE']

#: The keyword arguments of :func:`scipy.sparse.linalg.eigs` and
#: :func:`~scipy.sparse.linalg.eigsh` that PyG's transform passes on; accepted
#: for compatibility and ignored (with a warning), as no ARPACK runs here.
ARPACK_KEYWORDS = ('M', 'sigma', 'which', 'v0', 'ncv', 'maxiter', 'return_eigenvectors', 'Minv',
                   'OPinv', 'OPpart', 'mode')

#: Entries whose magnitude reaches this fraction of an eigenvector's largest
#: one count as tied for the sign convention.
SIGN_TIE = 1.0 - 1e-3

#: How many entries a batch of dense eigenproblems may hold (float64).
DENSE_BATCH_ENTRIES = 2**22

#: The block size and filter degree of the Lanczos solves: for k = 16 on
#: PubMed about twice as fast as block_lanczos's defaults (16 and 8), as fast
#: on the 169k-node synthetic graph of benchmarks/eigensolver.py.
LANCZOS_BLOCK, LANCZOS_DEGREE = 8, 16


class _Graph(NamedTuple):
    r"""The symmetric normalised adjacency of a graph, split into its
    connected components."""
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


class LaplacianEigenPE(BaseTransform):
    r"""Adds the Laplacian eigenvector positional encoding of the
    `"Benchmarking Graph Neural Networks" <https://arxiv.org/abs/2003.00982>`_
    paper, as PyG's :class:`~torch_geometric.transforms.AddLaplacianEigenvectorPE`
    does, with the same arguments and output, but computed so that it cannot
    fail: by block Lanczos on each connected component instead of ARPACK on the
    whole graph, and with a fixed sign per eigenvector.

    The Laplacian is PyG's symmetric normalised one
    (:func:`~torch_geometric.utils.get_laplacian` with :obj:`normalization="sym"`),

    .. math::
        \mathbf{L} = \mathbf{I} - \mathbf{D}^{-1/2}\mathbf{A}\mathbf{D}^{-1/2},
        \qquad d_i = \sum_j a_{ij},

    with self loops dropped, duplicate edges summed, and
    :math:`(\mathbf{D}^{-1/2})_{ii} = 0` for a node without edges, so that an
    isolated node has :math:`\mathbf{L}_{ii} = 1`. A directed graph is made
    symmetric first, :math:`a_{ij} \leftarrow \max(a_{ij}, a_{ji})` (an
    undirected graph is left exactly as it is). With eigenvalues
    :math:`0 = \lambda_0 \leq \lambda_1 \leq \dots` and orthonormal
    eigenvectors :math:`\mathbf{u}_0, \mathbf{u}_1, \dots`, the encoding is
    :math:`[\mathbf{u}_1, \dots, \mathbf{u}_k] \in \mathbb{R}^{N \times k}`:
    the first eigenvector is skipped, as in PyG.

    **Sign.** Each eigenvector is multiplied by :math:`\pm 1` so that its
    first entry (lowest node index) whose magnitude reaches 99.9% of the
    largest magnitude is positive. PyG draws the signs at random on every call.

    **Disconnected graphs and isolated nodes.** Each connected component
    :math:`C` with at least one edge adds an eigenvalue :math:`0`, whose
    eigenvector is taken as :math:`\mathbf{D}^{1/2}\mathbf{1}_C /
    \|\mathbf{D}^{1/2}\mathbf{1}_C\|` (the component's indicator, weighted by
    the square root of the degrees). With :math:`c` such components the
    spectrum starts with :math:`c` zeros; they are ordered by the lowest node
    index of their component, the first is skipped, and the encoding starts
    with the indicator vectors of components :math:`2, \dots, c` (at most
    :obj:`k` of them), followed by the eigenvectors of the smallest non-zero
    eigenvalues of the whole graph, each of which lives on one component. An
    isolated node :math:`i` has eigenvalue :math:`1` with eigenvector
    :math:`\mathbf{e}_i`. Equal eigenvalues are ordered by the lowest node
    index of their component; within one component, the basis of a repeated
    eigenvalue is the solver's (reproducible for a given :obj:`seed`).

    **Method.** The components are found first (on the CPU). Those of at most
    :obj:`DENSE_THRESHOLD` nodes are solved together by batched dense
    :func:`torch.linalg.eigh`; each larger one by
    :func:`~torch_geometric_regcn.linalg.block_lanczos` on its normalised
    adjacency :math:`\mathbf{I} - \mathbf{L}_C` (largest algebraic eigenvalues,
    i.e. the smallest of :math:`\mathbf{L}_C`), where the trivial eigenvalue is
    simple. A component's solve asks only for as many pairs as can still be
    among the :math:`k + 1` smallest. Everything is computed in float64 on the
    device of :obj:`data.edge_index` and cast at the end. A solve that does not
    reach :obj:`tol` is repeated with more restarts, then, up to
    :obj:`DENSE_FALLBACK` nodes, solved densely; beyond that it warns with the
    residual reached and returns the best pairs found.

    Args:
        k (int): The number of non-trivial eigenvectors, :math:`1 \leq k < N`.
        attr_name (str, optional): The attribute of the data object to store
            the encoding in. If set to :obj:`None`, it is concatenated to
            :obj:`data.x` (cast to its dtype), or becomes :obj:`data.x` when
            there is none. (default: :obj:`"laplacian_eigenvector_pe"`)
        is_undirected (bool, optional): Accepted for compatibility with PyG.
            The Laplacian is always made symmetric, which leaves an undirected
            graph unchanged, so both values give the same result; PyG's
            :obj:`False` would solve the non-symmetric Laplacian of a directed
            graph with :func:`scipy.sparse.linalg.eigs`. (default: :obj:`False`)
        seed (int, optional): The seed of the Lanczos starting blocks; the same
            seed gives the same encoding. (default: :obj:`0`)
        tol (float, optional): The relative residual
            :math:`\|\mathbf{L}\mathbf{u} - \lambda\mathbf{u}\|` each Lanczos
            pair must reach. (default: :obj:`1e-6`)
        max_iter (int, optional): The restart cycles of one Lanczos solve
            (twice as many on the retry). (default: :obj:`100`)
        dtype (torch.dtype, optional): The dtype of the encoding.
            (default: :obj:`None`, that of :obj:`data.edge_weight`, else the
            default dtype, as PyG)
        **kwargs (optional): The ARPACK arguments that PyG's transform passes
            to :func:`scipy.sparse.linalg.eigsh` (:obj:`ncv`, :obj:`maxiter`,
            :obj:`v0`, ...) are ignored with a warning; any other keyword
            raises a :class:`TypeError`.

    Example:
        .. code-block:: python

            from torch_geometric_regcn import LaplacianEigenPE
            from torch_geometric_regcn.datasets import contextual_sbm

            data = LaplacianEigenPE(k=8)(contextual_sbm(num_nodes=500))
            data.laplacian_eigenvector_pe  # [500, 8], the same on every call
    """
    #: Components of at most this many nodes are solved by dense eigh.
    DENSE_THRESHOLD: int = 256
    #: Components of at most this many nodes are solved densely when Lanczos
    #: does not converge.
    DENSE_FALLBACK: int = 4096

    def __init__(self, k: int, attr_name: Optional[str] = 'laplacian_eigenvector_pe',
                 is_undirected: bool = False, *, seed: int = 0, tol: float = 1e-6,
                 max_iter: int = 100, dtype: Optional[torch.dtype] = None,
                 **kwargs: Any) -> None:
        self.k = check_int('k', k)
        if attr_name is not None and not isinstance(attr_name, str):
            raise TypeError(f"'attr_name' must be a str, or None to concatenate the encoding "
                            f"to 'data.x' (got {type(attr_name).__name__} {attr_name!r})")
        self.attr_name = attr_name
        self.is_undirected = bool(is_undirected)
        self.seed = check_int('seed', seed, minimum=0)
        self.tol = check_real('tol', tol, 0.0, 1.0, low_open=True)
        self.max_iter = check_int('max_iter', max_iter)
        if dtype is not None and (not isinstance(dtype, torch.dtype)
                                  or not dtype.is_floating_point):
            raise TypeError(f"'dtype' must be a floating-point torch.dtype such as "
                            f"torch.float32, or None (got {dtype!r})")
        self.dtype = dtype
        unknown = sorted(set(kwargs) - set(ARPACK_KEYWORDS) - {'tol'})
        if unknown:
            raise TypeError(f"LaplacianEigenPE got unexpected keyword argument(s) {unknown}; "
                            f"besides k, attr_name and is_undirected it takes seed, tol, "
                            f"max_iter and dtype")
        if kwargs:
            warnings.warn(f"LaplacianEigenPE ignores the ARPACK argument(s) {sorted(kwargs)}: "
                          f"it solves with block Lanczos; set 'tol' and 'max_iter' instead",
                          UserWarning, stacklevel=2)
        self.kwargs = kwargs

    def forward(self, data: Data) -> Data:
        pairs = self.eigenpairs(data)
        dtype = self.dtype
        if dtype is None:
            weight = data.edge_weight if 'edge_weight' in data else None
            dtype = weight.dtype if weight is not None and weight.is_floating_point() \
                else torch.get_default_dtype()
        pe = pairs.eigenvectors.to(dtype)
        if self.attr_name is not None:
            data[self.attr_name] = pe
        elif data.x is not None:
            x = data.x.view(-1, 1) if data.x.dim() == 1 else data.x
            data.x = torch.cat([x, pe.to(x.device, x.dtype)], dim=-1)
        else:
            data.x = pe
        return data

    def eigenpairs(self, data: Data) -> EigenPairs:
        r"""The :obj:`k` eigenpairs of the encoding: the eigenvalues
        :math:`\lambda_1 \leq \dots \leq \lambda_k` of :math:`\mathbf{L}` and
        the eigenvectors :obj:`[N, k]` with the sign convention applied, in
        float64 on the device of :obj:`data.edge_index`; :obj:`residual` is
        the largest relative residual of a Lanczos solve (:obj:`0` when all
        were dense) and :obj:`iterations` their restart cycles in total."""
        num_nodes = data.num_nodes
        if num_nodes is None:
            raise ValueError("LaplacianEigenPE needs the number of nodes: set 'data.num_nodes' "
                             "or 'data.x'")
        if self.k >= num_nodes:
            raise ValueError(f"'k' must be smaller than the number of nodes, as the first of "
                             f"the {num_nodes} eigenvectors is skipped (got k={self.k} for "
                             f"{num_nodes} nodes); lower 'k' or leave out graphs with at most "
                             f"k nodes")
        edge_index = data.edge_index
        weight = data.edge_weight if 'edge_weight' in data else None
        if edge_index is None:
            device = data.x.device if data.x is not None else torch.device('cpu')
            edge_index = torch.empty(2, 0, dtype=torch.long, device=device)
        graph = _split(edge_index, num_nodes, weight)
        return self._solve(graph)

    def _solve(self, graph: _Graph) -> EigenPairs:
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
            dense = size[nontrivial] <= self.DENSE_THRESHOLD
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
        # Ties go to the lower component (numbered by lowest node), then column.
        by_key = keys.argsort(stable=True)
        chosen = by_key[values[by_key].argsort(stable=True)][1:k + 1]
        vectors = self._assemble(graph, chosen, known_comps, candidates)
        return EigenPairs(values[chosen], _fix_signs(vectors), residual, iterations, converged)

    def _dense_components(self, graph: _Graph, comps: Tensor, count: Tensor, needed: int,
                          stride: int, candidates: _Candidates) -> None:
        r"""Batched dense eigh of the Laplacians of the components :obj:`comps`
        (each of at most :obj:`DENSE_THRESHOLD` nodes), grouped by size up to
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
                values, vectors = values[:, 1:width + 1], vectors[:, :, 1:width + 1]
                valid = torch.arange(width, device=device)[None] < m[:, None]
                candidates.add(values, batch, nodes, vectors, valid, stride)
                slot[batch] = -1

    def _lanczos_component(self, graph: _Graph, comp: int, m: int,
                           generator: torch.Generator) -> EigenPairs:
        r"""The :obj:`m` smallest non-zero eigenpairs of the Laplacian of
        component :obj:`comp`, from the :obj:`m + 1` largest of its normalised
        adjacency; the trivial pair is dropped and its exact vector projected
        out of the others."""
        size = int(graph.size[comp])
        start = int(graph.start[comp])
        nodes = graph.order[start:start + size]
        mask = graph.label[graph.row] == comp
        row, col = graph.local[graph.row[mask]], graph.local[graph.col[mask]]
        adjacency = torch.sparse_coo_tensor(torch.stack([row, col]), graph.weight[mask],
                                            (size, size), check_invariants=False).coalesce()
        trivial = graph.sqrt_degree[nodes]
        trivial = trivial / trivial.norm()
        attempts = [self.max_iter, 2 * self.max_iter]
        pairs = None
        for max_iter in attempts:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')  # the residual is judged below
                pairs = block_lanczos(adjacency, m + 1, 'LA', self.tol, max_iter,
                                      degree=LANCZOS_DEGREE,
                                      block_size=min(m + 1, LANCZOS_BLOCK),
                                      generator=generator)
            if pairs.converged:
                break
        iterations = pairs.iterations
        if not pairs.converged and size <= self.DENSE_FALLBACK:
            values, vectors = torch.linalg.eigh(torch.eye(size, dtype=torch.float64,
                                                          device=trivial.device)
                                                - adjacency.to_dense())
            return EigenPairs(values[1:m + 1], vectors[:, 1:m + 1], 0.0, iterations, True)
        if not pairs.converged:
            warnings.warn(f"LaplacianEigenPE: block Lanczos stopped on a component of {size} "
                          f"nodes with relative residual {pairs.residual:.2e} > "
                          f"tol={self.tol:.0e}; the best pairs found are returned. Raise "
                          f"'max_iter' or 'tol'", UserWarning, stacklevel=4)
        vectors = pairs.eigenvectors[:, 1:]
        vectors = vectors - trivial[:, None] * (trivial @ vectors)[None]
        vectors = vectors / vectors.norm(dim=0, keepdim=True)
        return EigenPairs(1.0 - pairs.eigenvalues[1:], vectors, pairs.residual, iterations,
                          pairs.converged)

    def _assemble(self, graph: _Graph, chosen: Tensor, known_comps: Tensor,
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

    def __repr__(self) -> str:
        name = f', attr_name={self.attr_name!r}' \
            if self.attr_name != 'laplacian_eigenvector_pe' else ''
        return f'{self.__class__.__name__}(k={self.k}{name})'


def _split(edge_index: Tensor, num_nodes: int, edge_weight: Optional[Tensor]) -> _Graph:
    r"""PyG's symmetric normalised adjacency of the graph, made symmetric, and
    its connected components."""
    check_edge_index(edge_index, num_nodes, edge_weight)
    device = edge_index.device
    weight = torch.ones(edge_index.size(1), dtype=torch.float64, device=device) \
        if edge_weight is None else edge_weight.to(device, torch.float64)
    edge_index, weight = remove_self_loops(edge_index, weight)
    edge_index, weight = coalesce(edge_index, weight, num_nodes, reduce='sum')
    keep = weight > 0
    edge_index, weight = edge_index[:, keep], weight[keep]
    both = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    edge_index, weight = coalesce(both, torch.cat([weight, weight]), num_nodes, reduce='max')
    row, col = edge_index
    degree = torch.zeros(num_nodes, dtype=torch.float64, device=device).index_add_(0, row,
                                                                                     weight)
    sqrt_degree = degree.sqrt()
    weight = weight / (sqrt_degree[row] * sqrt_degree[col])

    cpu = edge_index.cpu().numpy()
    adjacency = sp.csr_matrix((np.ones(cpu.shape[1], dtype=np.int8), (cpu[0], cpu[1])),
                              shape=(num_nodes, num_nodes))
    _, found = connected_components(adjacency, directed=False)
    found = torch.from_numpy(found.astype(np.int64)).to(device)
    # Number the components by their lowest node.
    lowest = torch.full((int(found.max()) + 1,), num_nodes, dtype=torch.long, device=device)
    lowest.scatter_reduce_(0, found, torch.arange(num_nodes, device=device), reduce='amin')
    rank = torch.empty_like(lowest)
    rank[lowest.argsort()] = torch.arange(lowest.numel(), device=device)
    label = rank[found]
    order = label.argsort(stable=True)
    size = torch.bincount(label, minlength=lowest.numel())
    start = size.cumsum(0) - size
    local = torch.empty_like(order)
    local[order] = torch.arange(num_nodes, device=device) - start[label[order]]
    return _Graph(num_nodes, row, col, weight, sqrt_degree, label, size, start, order, local)


def _fix_signs(vectors: Tensor) -> Tensor:
    r"""Flips each column so that its first entry whose magnitude reaches
    :obj:`SIGN_TIE` of the largest is positive."""
    if vectors.numel() == 0:
        return vectors
    magnitude = vectors.abs()
    top = magnitude.max(dim=0).values
    first = (magnitude >= SIGN_TIE * top).to(torch.uint8).argmax(dim=0)
    sign = vectors.gather(0, first[None]).sign().view(-1)
    sign = torch.where(sign == 0, 1.0, sign).to(vectors.dtype)
    return vectors * sign
