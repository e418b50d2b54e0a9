r"""Laplacian eigenvector positional encodings that neither fail nor flip sign:
a drop-in for PyG's :class:`~torch_geometric.transforms.AddLaplacianEigenvectorPE`."""
import warnings
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data
from torch_geometric.transforms import BaseTransform

from torch_geometric_regcn.linalg.eigenpairs import EigenPairs
from torch_geometric_regcn.linalg.graph_operator import normalized_adjacency
from torch_geometric_regcn.linalg.laplacian_spectrum import (
    DENSE_FALLBACK,
    DENSE_THRESHOLD,
    connected_dense_eigenpairs,
    laplacian_eigenpairs,
)
from torch_geometric_regcn.regularizers.graph import as_edge_index
from torch_geometric_regcn.transforms.attributes import (
    NODE_MATRIX,
    SPARSE_ADJACENCIES,
    check_attr_name,
    check_homogeneous,
    check_outputs,
    form_of,
)
from torch_geometric_regcn.utils.deprecation import moved
from torch_geometric_regcn.utils.sparse import divided_by_largest
from torch_geometric_regcn.utils.validation import (
    check_dtype,
    check_edge_index,
    check_int,
    check_materialized,
    check_real,
    check_real_dtype,
    check_seed,
)

__all__ = ['LaplacianEigenPE']

#: The keyword arguments of :func:`scipy.sparse.linalg.eigs` and
#: :func:`~scipy.sparse.linalg.eigsh` that PyG's transform passes on; accepted
#: for compatibility and ignored (with a warning), as no ARPACK runs here.
ARPACK_KEYWORDS = ('M', 'sigma', 'which', 'v0', 'ncv', 'maxiter', 'return_eigenvectors', 'Minv',
                   'OPinv', 'OPpart', 'mode')

__getattr__ = moved(__name__, {
    name: f'torch_geometric_regcn.linalg.laplacian_spectrum:{name}'
    for name in ('SIGN_TIE', 'DENSE_BATCH_ENTRIES', 'LANCZOS_BLOCK', 'LANCZOS_DEGREE')})


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
    :math:`C` with edges adds an eigenvalue :math:`0` with the eigenvector
    :math:`\mathbf{D}^{1/2}\mathbf{1}_C / \|\mathbf{D}^{1/2}\mathbf{1}_C\|`,
    each isolated node :math:`i` an eigenvalue :math:`1` with
    :math:`\mathbf{e}_i`; equal eigenvalues are ordered by the lowest node of
    their component (``docs/positional_encoding.md``). Inside one component,
    a repeated eigenvalue's basis is canonical (pivoted Gram--Schmidt on its
    projector, :func:`~torch_geometric_regcn.linalg.laplacian_spectrum.
    canonical_eigenbasis`): the same across thread counts, solvers and
    machines, to rounding, unless :obj:`k` cuts the eigenvalue's copies.

    The Laplacian comes from
    :func:`~torch_geometric_regcn.linalg.normalized_adjacency` with PyG's
    convention (:obj:`self_loops=False`, :obj:`reduce="sum"`), the
    eigenpairs from :func:`~torch_geometric_regcn.linalg.laplacian_eigenpairs`,
    one connected component at a time (batched dense :func:`torch.linalg.eigh`
    up to :obj:`DENSE_THRESHOLD` nodes, block Lanczos above, from 4,096 to
    262,144 nodes and for :obj:`tol` of at least :math:`10^{-6}` first in
    float32 (the trivial vector deflated) and refined in float64, dense
    again up to :obj:`DENSE_FALLBACK` nodes when Lanczos does not reach
    :obj:`tol`), in float64 on the device of
    :obj:`data.edge_index` (a graph of at most :obj:`DENSE_THRESHOLD` nodes
    on an accelerator on the CPU, where its few small steps do not wait for
    kernel launches, and the result moved back), cast at the end. A
    connected graph of at most :obj:`DENSE_THRESHOLD` nodes (a molecule)
    takes a shortcut with the same result: its Laplacian is built densely
    and solved by one float64 :func:`torch.linalg.eigh`
    (``docs/positional_encoding.md``).

    Args:
        k (int): The number of non-trivial eigenvectors, :math:`1 \leq k < N`.
        attr_name (str, optional): The attribute of the data object to store
            the encoding in. If set to :obj:`None`, it is concatenated to
            :obj:`data.x` (cast to its dtype, on every application, as PyG
            does; a non-floating :obj:`data.x`, which would truncate it, and
            one of another number of rows raise an error before the solve),
            or becomes :obj:`data.x` when there is none. Names that PyG's
            batching reads as indices (holding :obj:`index` or
            :obj:`batch`), PyG's standard attributes (:obj:`"x"`,
            :obj:`"pos"`, ...) and the names other transforms of this
            package write are refused. Under
            the default name an earlier encoding (a floating-point matrix) is
            replaced; under a name you choose, an existing attribute raises
            a :class:`ValueError` before any work (delete it first, or
            choose another name). (default: :obj:`"laplacian_eigenvector_pe"`)
        is_undirected (bool, optional): Accepted for compatibility with PyG.
            The Laplacian is always made symmetric, which leaves an undirected
            graph unchanged, so both values give the same result; PyG's
            :obj:`False` would solve the non-symmetric Laplacian of a directed
            graph with :func:`scipy.sparse.linalg.eigs`. (default: :obj:`False`)
        seed (int, optional): The seed of the Lanczos starting blocks, in
            :math:`[0, 2^{64})`; the same seed gives the same encoding.
            (default: :obj:`0`)
        tol (float, optional): The relative residual
            :math:`\|\mathbf{L}\mathbf{u} - \lambda\mathbf{u}\|` each Lanczos
            pair must reach. (default: :obj:`1e-6`)
        max_iter (int, optional): The restart cycles of one Lanczos solve
            (twice as many on the retry). (default: :obj:`100`)
        dtype (torch.dtype, optional): The dtype of the encoding.
            (default: :obj:`None`, that of :obj:`data.edge_weight`, else the
            default dtype, as PyG; appended to :obj:`data.x`, that of
            :obj:`data.x`)
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
    #: Components of at most this many nodes are solved by dense eigh, and a
    #: connected graph of at most this many nodes by one dense eigh.
    DENSE_THRESHOLD: int = DENSE_THRESHOLD
    #: Components of at most this many nodes are solved densely when Lanczos
    #: does not converge.
    DENSE_FALLBACK: int = DENSE_FALLBACK

    def __init__(self, k: int, attr_name: Optional[str] = 'laplacian_eigenvector_pe',
                 is_undirected: bool = False, *, seed: int = 0, tol: float = 1e-6,
                 max_iter: int = 100, dtype: Optional[torch.dtype] = None,
                 **kwargs: Any) -> None:
        self.k = check_int('k', k)
        if attr_name is not None:
            attr_name = check_attr_name(attr_name, 'attr_name', 'LaplacianEigenPE',
                                        'attr_name=None concatenates the encoding to data.x')
        self.attr_name = attr_name
        self.is_undirected = bool(is_undirected)
        self.seed = check_seed(seed, minimum=0)
        self.tol = check_real('tol', tol, 0.0, 1.0, low_open=True)
        self.max_iter = check_int('max_iter', max_iter)
        self.dtype = None if dtype is None else check_dtype('dtype', dtype)
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
        check_homogeneous(data, 'LaplacianEigenPE')
        if self.attr_name is not None:
            check_outputs(data, [self.attr_name], 'LaplacianEigenPE', NODE_MATRIX, 'attr_name')
        elif data.x is not None:  # checked before the solve that the concatenation follows
            x = data.x
            if not isinstance(x, Tensor) or x.layout != torch.strided or x.dim() not in (1, 2) \
                    or x.size(0) != data.num_nodes:
                raise ValueError(f"'data.x' must be a dense [num_nodes] or [num_nodes, F] "
                                 f"tensor for the encoding to be appended to it (got "
                                 f"{form_of(x)}, num_nodes={data.num_nodes}); pass attr_name= "
                                 f"to store the encoding apart")
            if not x.is_floating_point():
                raise TypeError(f"'data.x' is {x.dtype} (e.g. atom types): the encoding, "
                                f"appended to it in its dtype, would be truncated to integers; "
                                f"pass attr_name= to store it apart, or convert x first "
                                f"(data.x = data.x.float())")
        pairs = self.eigenpairs(data, stacklevel=4)  # forward, BaseTransform.__call__, caller
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
            # dtype=None: straight to x's dtype, not rounded through the default one first
            source = pairs.eigenvectors if self.dtype is None else pe
            data.x = torch.cat([x, source.to(x.device, x.dtype)], dim=-1)
        else:
            data.x = pe
        return data

    def eigenpairs(self, data: Data, *, stacklevel: int = 2) -> EigenPairs:
        r"""The :obj:`k` eigenpairs of the encoding: the eigenvalues
        :math:`\lambda_1 \leq \dots \leq \lambda_k` of :math:`\mathbf{L}` and
        the eigenvectors :obj:`[N, k]` with the sign convention applied, in
        float64 on the device of :obj:`data.edge_index`
        (:func:`~torch_geometric_regcn.linalg.laplacian_eigenpairs`).

        Args:
            data (torch_geometric.data.Data): The graph.
            stacklevel (int, optional): Where a non-convergence warning
                points, as :func:`warnings.warn` counts from this method
                (:obj:`2`: its caller's line). (default: :obj:`2`)
        """
        num_nodes = data.num_nodes
        if num_nodes is None:
            raise ValueError("LaplacianEigenPE needs the number of nodes: set 'data.num_nodes' "
                             "or 'data.x'")
        graphs = getattr(data, 'num_graphs', 1) if isinstance(data, Batch) else 1
        if graphs > 1:  # the union's k smallest pairs would mix the graphs
            raise ValueError(f"LaplacianEigenPE got a Batch of {graphs} graphs, whose "
                             f"encodings would be the union's eigenvectors, mixed across "
                             f"graphs; apply it to each graph before batching (e.g. as the "
                             f"dataset's 'pre_transform' or 'transform')")
        if self.k >= num_nodes:
            raise ValueError(f"'k' must be smaller than the number of nodes, as the first of "
                             f"the {num_nodes} eigenvectors is skipped (got k={self.k} for "
                             f"{num_nodes} nodes); lower 'k' or leave out graphs with at most "
                             f"k nodes")
        edge_index = data.edge_index
        weight = data.edge_weight if 'edge_weight' in data else None
        if edge_index is None:  # a sparse adjacency (PyG's ToSparseTensor), or no edges
            for name in SPARSE_ADJACENCIES:
                if data.get(name) is not None:
                    edge_index, weight = as_edge_index(data[name], None)
                    if name == 'adj_t':  # its entries are (target, source)
                        edge_index = edge_index.flip(0)
                    break
        elif not (isinstance(edge_index, Tensor) and edge_index.layout == torch.strided):
            edge_index, weight = as_edge_index(edge_index, weight)  # a sparse adjacency
        if edge_index is None:
            device = data.x.device if data.x is not None else torch.device('cpu')
            edge_index = torch.empty(2, 0, dtype=torch.long, device=device)
        check_materialized(edge_index=edge_index, edge_weight=weight)  # before any copy
        if isinstance(weight, Tensor) and isinstance(edge_index, Tensor):
            check_real_dtype('edge_weight', weight)  # before the cast drops a part
            # L does not change with the weights' scale: divided by the largest,
            # tiny weights no longer make subnormal degrees and products.
            weight = divided_by_largest(weight.to(edge_index.device))
        device = edge_index.device
        if num_nodes <= self.DENSE_THRESHOLD and device.type != 'cpu':
            # A small graph costs an accelerator a few kernel launches and host syncs
            # per step, far more than the arithmetic: solved on the CPU, moved back.
            pairs = self._solve(edge_index.cpu(), None if weight is None else weight.cpu(),
                                num_nodes, stacklevel + 1)
            return pairs._replace(eigenvalues=pairs.eigenvalues.to(device),
                                  eigenvectors=pairs.eigenvectors.to(device))
        return self._solve(edge_index, weight, num_nodes, stacklevel + 1)

    def _solve(self, edge_index: Tensor, weight: Optional[Tensor], num_nodes: int,
               stacklevel: int) -> EigenPairs:
        if num_nodes <= self.DENSE_THRESHOLD:  # one dense eigh when connected
            check_edge_index(edge_index, num_nodes, weight)
            pairs = connected_dense_eigenpairs(edge_index, weight, num_nodes, self.k, self.tol)
            if pairs is not None:
                return pairs
        edge_index, weight, degree = normalized_adjacency(
            edge_index, num_nodes, weight, torch.float64, self_loops=False, reduce='sum',
            return_degree=True)
        return laplacian_eigenpairs(edge_index, weight, degree, self.k, seed=self.seed,
                                    tol=self.tol, max_iter=self.max_iter,
                                    dense_threshold=self.DENSE_THRESHOLD,
                                    dense_fallback=self.DENSE_FALLBACK,
                                    stacklevel=stacklevel + 1)

    def __repr__(self) -> str:
        # Every argument the encoding depends on, those at their default left
        # out: PyG compares a pre_transform's repr with the processed dataset's.
        options = ''.join(f', {name}={value!r}' for name, value, default in (
            ('attr_name', self.attr_name, 'laplacian_eigenvector_pe'),
            ('is_undirected', self.is_undirected, False), ('seed', self.seed, 0),
            ('tol', self.tol, 1e-6), ('max_iter', self.max_iter, 100),
            ('dtype', self.dtype, None)) if value != default)
        return f'{self.__class__.__name__}(k={self.k}{options})'
