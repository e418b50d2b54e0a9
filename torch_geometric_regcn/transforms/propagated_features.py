r"""Propagated node features, precomputed once for mini-batch training."""
from typing import Any, Union

import torch
from torch import Tensor
from torch.nn.parameter import is_lazy
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from torch_geometric_regcn.regularizers.base import Regularizer
from torch_geometric_regcn.regularizers.graph import build_graph
from torch_geometric_regcn.regularizers.iterative import IterativeRegularizer
from torch_geometric_regcn.regularizers.registry import get
from torch_geometric_regcn.transforms.attributes import (
    NODE_MATRIX,
    check_attr_name,
    check_edge_attribute,
    check_homogeneous,
    check_outputs,
    check_single_graph,
)
from torch_geometric_regcn.utils.validation import (
    all_finite,
    check_finite,
    check_int,
    check_node_features,
    check_real,
    solve_dtype,
)


def _column_block(x: Tensor, start: int, end: int, dtype: torch.dtype) -> Tensor:
    r"""Columns :obj:`start:end` of :obj:`x` (dense, or sparse CSC), dense, in
    :obj:`dtype`."""
    if x.layout == torch.strided:
        return x[:, start:end].to(dtype)
    ccol = x.ccol_indices()
    first, last = int(ccol[start]), int(ccol[end])
    return torch.sparse_csc_tensor(ccol[start:end + 1] - first, x.row_indices()[first:last],
                                   x.values()[first:last], (x.size(0), end - start),
                                   check_invariants=False).to_dense().to(dtype)


class PropagateFeatures(BaseTransform):
    r"""Precomputes propagated node features, SIGN-style, for the
    regulariser-centred framework of the `"Beyond Graph Convolutional
    Network: An Interpretable Regularizer-centered Optimization Framework"
    <https://arxiv.org/abs/2301.04318>`_ paper (AAAI 2023): what SGC is to
    GCN, the propagation taken out of training. It stores

    .. math::
        \mathbf{X}^{(k)} = \mathbf{P}^{k} \mathbf{X}, \qquad k = 1, \dots, K,

    as :obj:`data[f"{prefix}{k}"]` (:obj:`x1`, ..., :obj:`xK` by default,
    PyG's :class:`~torch_geometric.transforms.SIGN` names), each
    :obj:`[N, F]`; :obj:`data.x` stays as it is (:math:`k = 0`).
    :math:`\mathbf{P} = \mathbf{R}^{-1}` is the propagation of a regulariser
    (:class:`~torch_geometric_regcn.regularizers.Regularizer`), applied with
    one of its solvers (:meth:`~torch_geometric_regcn.regularizers.Regularizer.propagate`):

    - :obj:`"lowrank"` (the default, tsGCN): the factors :obj:`data.lowrank_w`
      and :obj:`data.lowrank_v` of :class:`~torch_geometric_regcn.LowRankInverse`,
      :math:`\mathbf{P} = \mathbf{I} - \mathbf{W}(\mathbf{I}_r +
      \mathbf{V}^{\top}\mathbf{W})^{-1}\mathbf{V}^{\top}`, the propagation of
      :class:`~torch_geometric_regcn.TSGCNConv`: :math:`O(K N r F + N r^2)`
      time;
    - :obj:`"cg"`: conjugate gradient on the regulariser's sparse operator
      (for tsGCN the exact :math:`(\mathbf{I} - \mathbf{S})^{-1}`, no
      factors needed): :math:`O(K \cdot \text{iterations} \cdot
      \text{nnz} \cdot F)` time;
    - :obj:`"series"` (the regulariser's truncated series) and
      :obj:`"closed"` (a dense solve, :math:`O(N^3)`: small graphs and tests).

    The features are propagated :obj:`block_size` columns at a time, so
    beyond the :math:`K` outputs the memory is :math:`O(N (r +
    \text{block\_size}))` (CG keeps a few :math:`N \times
    \text{block\_size}` iterates) and, for sparse :obj:`x`, one CSC copy of
    it. Any model that takes per-node inputs, an MLP on
    :math:`[\mathbf{X}, \mathbf{X}^{(1)}, \dots, \mathbf{X}^{(K)}]` for
    instance, then trains on mini-batches of nodes with a plain
    :class:`~torch.utils.data.DataLoader` over node indices or
    :class:`~torch_geometric_regcn.loader.SeedNodeLoader` (PyG's
    :class:`~torch_geometric.loader.NodeLoader` of the seed nodes, which
    slices the new attributes with :obj:`x`). Several transforms, each with a
    :obj:`prefix` of its own, combine several regularisers or coefficients.

    Args:
        hops (int, optional): The number of powers :math:`K \geq 1`.
            (default: :obj:`1`)
        solver (str, optional): :obj:`"lowrank"`, :obj:`"cg"`, :obj:`"series"`
            or :obj:`"closed"`, one that the regulariser supports.
            (default: :obj:`"lowrank"`)
        regularizer (str or Regularizer, optional): The regulariser, by name
            (see :func:`~torch_geometric_regcn.regularizers.get`) or as an
            instance. (default: :obj:`"tsgcn"`)
        block_size (int, optional): Feature columns propagated at a time
            by a linear propagation; a non-quadratic regulariser
            (:class:`~torch_geometric_regcn.regularizers.IterativeRegularizer`),
            whose reweighting reads whole rows of :math:`\mathbf{X}`,
            propagates all columns at once. (default: :obj:`64`)
        tol (float, optional): The relative residual of :obj:`"cg"`.
            (default: :obj:`1e-6`)
        max_iter (int, optional): The iterations of :obj:`"cg"`.
            (default: :obj:`1000`)
        prefix (str, optional): The attributes' names are :obj:`prefix`
            followed by :math:`k`. With the default :obj:`"x"`, earlier
            :obj:`x1`, ..., :obj:`xK` (floating-point matrices, as this
            transform and PyG's :class:`~torch_geometric.transforms.SIGN`
            write) are replaced; with a prefix of your own, an existing
            attribute of one of the names raises a :class:`ValueError`
            before any work (delete it first, or choose another prefix).
            (default: :obj:`"x"`)
        **coefficients (optional): The regulariser's coefficients, e.g.
            :obj:`alpha=1.0, beta=0.3` for :obj:`"tsgcn"` with :obj:`"cg"`.
            One that the solver does not read raises a :class:`ValueError`
            (see :meth:`~torch_geometric_regcn.regularizers.Regularizer.unread`):
            :obj:`"lowrank"`'s factors hold the coefficients
            :class:`~torch_geometric_regcn.LowRankInverse` was given.

    Example:
        .. code-block:: python

            import torch
            from torch_geometric_regcn import LowRankInverse, PropagateFeatures
            from torch_geometric_regcn.datasets import contextual_sbm

            data = contextual_sbm(num_nodes=500, num_classes=5, num_features=16)
            data = LowRankInverse(alpha=1.0, beta=0.2, rank=32)(data)
            data = PropagateFeatures(hops=2)(data)  # data.x1 = P X, data.x2 = P² X
            inputs = torch.cat([data.x, data.x1, data.x2], dim=-1)  # [500, 48]

            # the exact tsGCN propagation by conjugate gradient, no factors:
            data = PropagateFeatures(solver='cg', alpha=1.0, beta=0.2, prefix='exact')(data)
    """
    def __init__(self, hops: int = 1, solver: str = 'lowrank',
                 regularizer: Union[str, Regularizer] = 'tsgcn', block_size: int = 64,
                 tol: float = 1e-6, max_iter: int = 1000, prefix: str = 'x',
                 **coefficients: Any) -> None:
        self.hops = check_int('hops', hops)
        self.regularizer = get(regularizer, **coefficients)
        trainable = [name for name, p in self.regularizer.named_parameters()
                     if p.requires_grad or is_lazy(p)]
        if trainable:  # a transform trains nothing: they would stay where they are
            raise ValueError(
                f"PropagateFeatures precomputes a fixed propagation, but {self.regularizer!r} "
                f"has trainable parts {trainable}, which it would not train; use a "
                f"regulariser without them (for DAGNN, adaptive=False: the Neumann weights), "
                f"or freeze trained ones first ('regularizer.requires_grad_(False)')")
        self.solver = self.regularizer.check_solver(solver)
        unread = sorted(set(coefficients) & self.regularizer.unread(self.solver))
        if unread:
            hint = (" (the factors of LowRankInverse hold the coefficients they were computed "
                    "for: give them there, or solver='cg' to propagate with these)"
                    if self.solver == 'lowrank' else '')
            raise ValueError(f"{unread} would be ignored: solver={self.solver!r} of "
                             f"{type(self.regularizer).__name__} does not read "
                             f"{'it' if len(unread) == 1 else 'them'}{hint}")
        read = {'alpha', 'beta'} & set(self.regularizer.coefficients())
        missing = sorted(read - self.regularizer.unread(self.solver) - set(coefficients))
        if self.solver == 'lowrank' and isinstance(regularizer, str) and missing:
            raise ValueError(f"solver='lowrank' of {self.regularizer!r} scales the factors' "
                             f"propagation by 1 / (1 + alpha + beta) of the coefficients they "
                             f"were computed for: pass {missing} (those given to "
                             f"LowRankInverse), not the defaults")
        self.block_size = check_int('block_size', block_size)
        try:
            self.tol = check_real('tol', tol, 0.0, low_open=True)
        except ValueError:
            raise ValueError(f"'tol' must be a finite positive number (got {tol!r}), "
                             f"e.g. 1e-6") from None
        self.max_iter = check_int('max_iter', max_iter)
        if not isinstance(prefix, str) or not prefix.isidentifier():
            raise ValueError(f"'prefix' must be a name that can start an attribute name, "
                             f"e.g. 'x' (got {prefix!r})")
        self.prefix = prefix
        self.attr_names = [check_attr_name(f'{prefix}{k}', 'prefix', 'PropagateFeatures')
                      for k in range(1, self.hops + 1)]

    @torch.no_grad()  # a precomputation: no autograd history on what it writes
    def forward(self, data: Data) -> Data:
        check_homogeneous(data, 'PropagateFeatures')
        x = data.x if 'x' in data else None
        if x is None:
            raise ValueError("PropagateFeatures needs node features 'data.x'")
        check_node_features(x, 'data.x', finite=False)
        # Every value before any propagation: one min/max reduction of the
        # stored values (of a COO matrix as stored: coalescing would copy it).
        check_finite('data.x', x if x.layout == torch.strided else
                     x._values() if x.layout == torch.sparse_coo else x.values())
        check_outputs(data, self.attr_names, 'PropagateFeatures', NODE_MATRIX, 'prefix',
                      chosen=self.prefix != 'x')
        needs = self.regularizer.requires(self.solver)
        if 'adj' in needs:
            check_edge_attribute(data, 'PropagateFeatures')
        if 'lowrank' in needs:
            check_single_graph(data, 'PropagateFeatures', 'propagation by low-rank factors',
                               collated=('lowrank_w', 'lowrank_v'))
        elif 'semantic' in needs and 'semantic_edge_index' not in data:
            check_single_graph(data, 'PropagateFeatures', 'kNN graph over all rows')
        num_nodes = x.size(0)
        dtype = solve_dtype(x.dtype)
        graph = build_graph(
            self.regularizer, data.edge_index if 'edge_index' in data else None, num_nodes,
            edge_weight=data.edge_weight if 'edge_weight' in data else None, dtype=dtype,
            semantic_edge_index=(data.semantic_edge_index if 'semantic_edge_index' in data
                                 else None),
            x=x, lowrank_w=data.lowrank_w if 'lowrank_w' in data else None,
            lowrank_v=data.lowrank_v if 'lowrank_v' in data else None, solver=self.solver)
        if x.layout != torch.strided:  # columns of a sparse matrix: CSC
            x = x.to_sparse_csc() if x.layout != torch.sparse_coo else \
                x.coalesce().to_sparse_csr().to_sparse_csc()
        outs = [torch.empty(num_nodes, x.size(1), dtype=data.x.dtype, device=x.device)
                for _ in range(self.hops)]
        # A non-quadratic regulariser reweights by whole rows: one block of all columns.
        step = max(x.size(1), 1) if isinstance(self.regularizer, IterativeRegularizer) \
            else self.block_size
        for start in range(0, x.size(1), step):
            end = min(start + step, x.size(1))
            block = _column_block(x, start, end, dtype)
            for out in outs:
                block = self.regularizer.propagate(block, graph, self.solver, self.tol,
                                                   self.max_iter)
                out[:, start:end] = block
                if out.dtype != block.dtype and not all_finite(out[:, start:end]):
                    raise ValueError(
                        f"PropagateFeatures: the propagated features exceed the range of "
                        f"'data.x' ({out.dtype}, largest {torch.finfo(out.dtype).max:.3g}), "
                        f"which they are stored in; pass 'data.x' in {block.dtype}")
        for name, out in zip(self.attr_names, outs):
            data[name] = out
        return data

    def __repr__(self) -> str:
        # As LowRankInverse's: every argument the output depends on, defaults left out.
        extra = ''.join(f', {name}={value!r}' for name, value, default in (
            ('block_size', self.block_size, 64), ('tol', self.tol, 1e-6),
            ('max_iter', self.max_iter, 1000), ('prefix', self.prefix, 'x'))
            if value != default)
        return (f'{self.__class__.__name__}(hops={self.hops}, solver={self.solver!r}, '
                f'regularizer={self.regularizer!r}{extra})')

