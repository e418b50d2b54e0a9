r"""Low-rank factors of the tsGCN propagation matrix."""
import copy
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from torch_geometric_regcn.distributed.collectives import (
    Group,
    SharesGroup,
    agree_arguments,
    all_gather_ints,
    check_group,
    rank_of,
    real,
)
from torch_geometric_regcn.distributed.partition import shard_node_id
from torch_geometric_regcn.distributed.row_partition import (
    RowPartition,
    check_partition,
    check_shard_edges,
)
from torch_geometric_regcn.linalg.eigenpairs import WHICH
from torch_geometric_regcn.linalg.eigensolver import EIGENSOLVER_METHODS, extreme_eigenpairs
from torch_geometric_regcn.linalg.woodbury import (
    ROUNDING_UNITS,
    SINGULAR_ERROR,
    factors_from_eigenpairs,
    woodbury_core,
)
from torch_geometric_regcn.regularizers.graph import GraphOperators, Operator
from torch_geometric_regcn.regularizers.tsgcn import check_tsgcn_coefficients, tsgcn_adjacency
from torch_geometric_regcn.transforms import factor_cache
from torch_geometric_regcn.transforms.attributes import (
    NODE_MATRIX,
    check_edge_attribute,
    check_homogeneous,
    check_outputs,
    check_single_graph,
    computed_for_the_batch,
)
from torch_geometric_regcn.utils.deprecation import moved
from torch_geometric_regcn.utils.progress import EigensolverProgress
from torch_geometric_regcn.utils.validation import (
    check_choice,
    check_finite,
    check_int,
    check_node_features,
    check_real,
    check_seed,
    check_tensor,
    real_features,
    solve_dtype,
)

__getattr__ = moved(__name__, {
    'PROGRESS_DELAY': 'torch_geometric_regcn.utils.progress:PROGRESS_DELAY',
    'PROGRESS_INTERVAL': 'torch_geometric_regcn.utils.progress:PROGRESS_INTERVAL',
})


def paper_rank(num_nodes: int, p: int) -> int:
    r"""The rank :math:`r = \lfloor d / p \rfloor` of the tsGCN paper's
    parameter table, with :math:`d` read as the number of nodes :math:`N`, as
    the authors' code does (the paper's text calls :math:`d` the feature
    dimension, which would give :math:`r = 0` on PubMed with :math:`p = 2048`).

    Both arguments are positive integers (NumPy integers accepted); a
    :obj:`bool`, a float, or a value below one raises an error that names it.

    Example: Cora (:math:`N = 2708`) with :math:`p = 16` gives :math:`r = 169`.
    """
    num_nodes, p = check_int('num_nodes', num_nodes), check_int('p', p)
    rank = num_nodes // p
    if rank < 1:
        raise ValueError(f"num_nodes // p = {num_nodes} // {p} = 0; choose p <= {num_nodes}")
    return rank


def _target(data: Data) -> Tuple[torch.dtype, torch.device]:
    r"""The dtype and device of the factors: those of :obj:`data.x` when present."""
    x = data.x
    dtype = x.dtype if x is not None and x.is_floating_point() else torch.get_default_dtype()
    if x is not None:
        return dtype, x.device
    edges = [data[key] for key in ('edge_index', 'semantic_edge_index')
             if key in data and isinstance(data[key], Tensor)]
    return dtype, edges[0].device if edges else torch.device('cpu')


def _semantic(data: Data) -> Optional[Tensor]:
    return data.semantic_edge_index if 'semantic_edge_index' in data else None


def _edge_weight(data: Data) -> Optional[Tensor]:
    return data.edge_weight if 'edge_weight' in data else None


def _check_graph(data: Data, beta: float, group: Group = None, rank: Optional[int] = None,
                what: str = 'tsgcn_operator',
                arguments: Optional[Mapping[str, Any]] = None,
                outputs: Sequence[str] = ()) -> Optional[RowPartition]:
    r"""The checks of a graph from which tsGCN's operator is built (with a
    :obj:`group`: of this rank's shard), before any work; returns the shard's
    :obj:`data.partition` (:obj:`None` without a group).

    Nodes, at least :obj:`rank` of them when given, and finite features;
    the edges are checked as the operator is built. On shards also the
    partition against the group, the shard's edges, and features or a
    semantic graph when :obj:`beta > 0`, and the outcome is agreed across
    the ranks, so a rank with bad input makes every rank raise (the error of
    :obj:`what`; see ``docs/distributed.md``), in the one collective that
    also checks that every rank holds the same :obj:`arguments` and the same
    row blocks, inputs, dtype and device (:func:`_shard_arguments`). The
    attributes :obj:`outputs` must be free for :obj:`what` to write
    (:func:`~torch_geometric_regcn.transforms.attributes.check_outputs`)."""
    error = part = None
    values: Dict[str, Any] = {}
    try:
        check_homogeneous(data, what)
        if data.x is not None:  # before PyG infers data.num_nodes from it
            check_tensor('data.x', data.x, 'a tensor of node features [num_nodes, channels]')
            if data.x.dim() == 0:
                raise ValueError("'data.x' must be a node feature matrix [num_nodes, "
                                 "channels] (got a 0-dimensional tensor)")
        if group is not None:
            part = check_partition(data.partition if 'partition' in data else None, group)
        elif isinstance(data.partition if 'partition' in data else None, RowPartition) \
                and data.partition.num_parts > 1:  # else: the factors of its rows alone
            check_partition(data.partition, None)  # names the missing group
        if arguments is None or arguments.get("'alpha'", 1.0) > 0:  # it reads the edges
            check_edge_attribute(data, what)
        num_nodes = (data.num_nodes or 0) if part is None else part.num_nodes
        if rank is not None and num_nodes and rank > num_nodes:
            raise ValueError(f"'rank' must not exceed the number of nodes {num_nodes} "
                             f"(got {rank})")
        if not num_nodes:
            raise ValueError('The graph is empty (it has no nodes)')
        if data.x is not None:
            rows = data.x.size(0)
            expected = num_nodes if part is None else part.num_local
            if rows != expected:  # the kNN graph would miss nodes, or blame its edges
                raise ValueError(f"'data.x' has {rows} rows but the graph has {expected} "
                                 f"nodes{'' if part is None else ' on this shard'} "
                                 f"(data.num_nodes); give one row per node")
            if beta > 0 and _semantic(data) is None:  # searched: a real [N, F] matrix
                check_node_features(real_features(data.x), 'data.x')
                check_single_graph(
                    data, what, 'kNN graph over all rows',
                    fix=f"apply SemanticGraph to each graph before batching ({what} then "
                        f"reads the collated 'data.semantic_edge_index'), or work per graph "
                        f"(LowRankInverse as the dataset's 'pre_transform', the layers on "
                        f"each graph)")
            else:  # its dtype and device alone are read
                check_finite('data.x', data.x)
        check_outputs(data, outputs, what, NODE_MATRIX)
        if part is not None:
            _check_shard_edges(data, part, beta)
            values = {**(arguments or {}), **_shard_arguments(data, part)}
    except (ValueError, TypeError) as failure:
        error = failure
    agree_arguments(group, what, values, error)
    return part


def _shard_arguments(data: Data, part: RowPartition) -> Dict[str, Any]:
    r"""What every rank's shard must have alike: the row blocks, which
    optional inputs are given (each adds or removes collectives), and the
    dtype and device of the operator."""
    dtype, device = _target(data)
    return {"the row blocks of 'data.partition'": part.bounds,
            "whether 'data.edge_weight' is given": _edge_weight(data) is not None,
            "whether 'data.semantic_edge_index' is given": _semantic(data) is not None,
            "whether 'data.x' is given": data.x is not None,
            "the dtype and device of 'data.x'": (dtype, device.type),
            "the graph the shard was cut from ('data.graph_key', see partition())":
                data.get('graph_key')}


def _check_shard_edges(data: Data, part: RowPartition, beta: float) -> None:
    semantic = _semantic(data)
    if data.edge_index is not None:
        check_shard_edges(data.edge_index, part, _edge_weight(data), 'data.edge_index')
    if semantic is not None:
        check_shard_edges(semantic, part, name='data.semantic_edge_index')
    if beta > 0 and semantic is None and data.x is None:
        raise ValueError("beta > 0 needs node features 'data.x' or a precomputed "
                         "'data.semantic_edge_index' (see SemanticGraph)")


def _operator(data: Data, alpha: float, beta: float, k: int, progress: bool, seed: int,
              partition: Optional[RowPartition], group: Group) -> Operator:
    r""":func:`tsgcn_operator` of an already checked graph."""
    dtype, device = _target(data)
    edge_index = data.edge_index.to(device) if data.edge_index is not None else None
    semantic = _semantic(data)
    graph = GraphOperators(data.num_nodes if partition is None else partition.num_nodes,
                           edge_index, _edge_weight(data), dtype,
                           semantic_edge_index=None if semantic is None else semantic.to(device),
                           x=data.x, progress=progress, seed=seed, partition=partition,
                           group=group, node_id=shard_node_id(data, partition, device))
    return tsgcn_adjacency(graph, alpha, beta, k)


def tsgcn_operator(data: Data, alpha: float, beta: float, k: int = 10,
                   progress: bool = False, seed: int = 0, *, group: Group = None) -> Operator:
    r"""The sparse operator :math:`\mathbf{S} = (\alpha \hat{\mathbf{A}}_G +
    \beta \hat{\mathbf{A}}_X) / (1 + \alpha + \beta)` of a graph
    (:func:`~torch_geometric_regcn.regularizers.tsgcn_adjacency`), in CSR form,
    on the device and in the dtype of :obj:`data.x`; with a :obj:`group`,
    this rank's rows of it (a
    :class:`~torch_geometric_regcn.linalg.ShardedMatrix`) from its shard
    :obj:`data` (with :obj:`data.partition`).

    :math:`\hat{\mathbf{A}}_X` is built from :obj:`data.semantic_edge_index`
    when present, else from the cosine :obj:`k`-NN graph of :obj:`data.x`
    (:func:`~torch_geometric_regcn.knn.knn_graph_cosine`, exact or, above
    50,000 nodes on CPU, approximate with centroids seeded by :obj:`seed`)."""
    group = check_group(group)
    partition = _check_graph(data, beta, group, arguments={  # 1 and 1.0 agree; checked later
        "'alpha'": real(alpha), "'beta'": real(beta), "'k'": k, "'seed'": seed})
    return _operator(data, alpha, beta, k, progress, seed, partition, group)


def _compute_dtype(data: Data) -> torch.dtype:
    r"""The dtype :class:`LowRankInverse` computes and stores the factors in:
    that of :obj:`data.x` (or the default one), raised to :obj:`torch.float32`
    from a half-precision one (:obj:`float16`, :obj:`bfloat16`), in which the
    eigensolver cannot run and the gains :math:`1 / (1 - \lambda)` would keep
    about three significant digits."""
    return solve_dtype(_target(data)[0])


def check_solvable(alpha: float, beta: float, dtype: torch.dtype) -> None:
    r"""Raises, before any search or eigensolve, where :obj:`alpha` and
    :obj:`beta` alone make the factors' core numerically singular in
    :obj:`dtype` (the verdict :func:`~torch_geometric_regcn.linalg.woodbury_core`
    would give after the eigensolve): the core's smallest pivot
    :math:`1 - \lambda_{\max}(\mathbf{S})` is at most :math:`(1 +
    2\min(\alpha, \beta)) / (1 + \alpha + \beta)` on every graph, since
    :math:`\lambda_{\max}(\mathbf{S}) \geq |\alpha - \beta| / (1 + \alpha +
    \beta)` (each normalised adjacency has the eigenvalue 1 and none below
    -1), and its rounding level is at least :obj:`ROUNDING_UNITS`
    :math:`\epsilon` times one plus that bound; it raises where that level
    reaches twice the bound on the pivot (a margin for the eigensolve's
    rounding of :math:`\lambda`, so that it never refuses what the verdict
    would accept). :math:`O(1)`."""
    total = 1.0 + alpha + beta
    pivot = (1.0 + 2.0 * min(alpha, beta)) / total
    rounding = ROUNDING_UNITS * torch.finfo(dtype).eps * (1.0 + abs(alpha - beta) / total)
    # Twice the verdict's threshold: the eigensolve's 1 - lambda in float32 lies up to a
    # few eps from the exact pivot, which the verdict reads.
    if not rounding / pivot < 2 * SINGULAR_ERROR:
        raise ValueError(
            f"LowRankInverse(alpha={alpha:g}, beta={beta:g}) has factors whose core I + V^T W "
            f"is numerically singular in {dtype} on every graph: its smallest pivot, "
            f"1 - lambda_max(S), is at most {pivot:.2g}, not above the rounding level "
            f"{rounding:.2g}; use float64 (data.x.double()) or a smaller alpha + beta")


class LowRankInverse(SharesGroup, BaseTransform):
    r"""Precomputes the low-rank factors of the tsGCN propagation matrix from
    the `"Beyond Graph Convolutional Network: An Interpretable
    Regularizer-centered Optimization Framework"
    <https://arxiv.org/abs/2301.04318>`_ paper (AAAI 2023) and stores them as
    :obj:`data.lowrank_w` and :obj:`data.lowrank_v`, such that

    .. math::
        \mathbf{I} - \mathbf{W} (\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W})^{-1}
        \mathbf{V}^{\top} \approx (\mathbf{I} - \mathbf{S})^{-1}
        = (1 + \alpha + \beta)
        (\mathbf{I} + \alpha \tilde{\mathbf{L}}_G + \beta \tilde{\mathbf{L}}_X)^{-1},
        \qquad
        \mathbf{S} = \frac{\alpha \hat{\mathbf{A}}_G + \beta \hat{\mathbf{A}}_X}
        {1 + \alpha + \beta},

    with equality when :obj:`rank` equals :math:`N`.
    :math:`\hat{\mathbf{A}}_G` is the renormalised adjacency of
    :obj:`data.edge_index` (weighted by :obj:`data.edge_weight` when present),
    :math:`\hat{\mathbf{A}}_X` that of :obj:`data.semantic_edge_index`, else of
    the cosine :obj:`k`-NN graph of :obj:`data.x`
    (:func:`tsgcn_operator`). With the :obj:`rank` eigenpairs
    :math:`(\mathbf{\Lambda}, \mathbf{U})` of :math:`\mathbf{S}` selected by
    :obj:`which`, :math:`\mathbf{W} = \mathbf{U}|\mathbf{\Lambda}|^{1/2}` and
    :math:`\mathbf{V} = -\mathbf{U}\,\mathrm{sign}(\mathbf{\Lambda})
    |\mathbf{\Lambda}|^{1/2}`: directions outside them get the gain one
    instead of :math:`1 / (1 - \lambda)`. :obj:`beta=0` gives tsGCN-t (no
    features needed), :obj:`alpha=0` tsGCN-s. The factors belong to the whole
    graph (transductive use); the layers reject rows sliced by a loader.
    Applied again, it replaces the factors it wrote before; a
    :obj:`data.lowrank_w` or :obj:`data.lowrank_v` that is not a
    floating-point matrix raises a :class:`ValueError` before any work.
    ``docs/tsgcn.md`` explains the choices (:obj:`which`, the eigensolver, the
    rank) and the cache; ``docs/distributed.md`` the row shards.

    Args:
        alpha (float): The weight :math:`\alpha \geq 0` of the topological
            regulariser.
        beta (float): The weight :math:`\beta \geq 0` of the semantic
            regulariser.
        rank (int): The rank :math:`r` of the factors, :math:`1 \leq r \leq N`
            (see :func:`paper_rank` for the paper's convention).
        k (int, optional): Neighbours per node of the semantic graph, used when
            :obj:`data.semantic_edge_index` is absent. (default: :obj:`10`)
        which (str, optional): :obj:`"LA"` (largest algebraic eigenvalues) or
            :obj:`"LM"` (largest magnitude, as the authors' code).
            (default: :obj:`"LA"`)
        tol (float, optional): The relative eigen-residual to reach, finite
            and positive. (default: :obj:`1e-4`)
        max_iter (int, optional): The maximum number of Lanczos restart
            cycles (or subspace iterations), positive. (default: :obj:`100`)
        method (str, optional): :obj:`"lanczos"` (filtered block Lanczos),
            :obj:`"chebyshev"` (filtered subspace iteration) or :obj:`"power"`
            (the paper's plain subspace iteration). (default: :obj:`"lanczos"`)
        seed (int, optional): The seed of the random starting block (and of
            the approximate kNN's centroids). (default: :obj:`0`)
        cache_dir (str, optional): A folder where the factors are saved,
            keyed by a hash of the input and of every argument, and loaded on
            a rerun; checked here, before any work (see ``docs/tsgcn.md``).
            (default: :obj:`None`, no cache)
        progress (bool, optional): Show progress bars with ETA for the
            semantic kNN and the eigensolver when they take longer than a
            second. (default: :obj:`True`)
        group (torch.distributed.ProcessGroup, optional): The input is this
            rank's shard of the graph (with :obj:`data.partition`), every rank
            of :obj:`group` calls the transform and gets its rows of the
            factors (:obj:`method="lanczos"` only; see
            ``docs/distributed.md``). (default: :obj:`None`, one process)

    Shapes:
        - **input:** :obj:`data` with :obj:`edge_index` :math:`[2, E]`, and
          :obj:`x` :math:`[N, F]` or :obj:`semantic_edge_index`
          :math:`[2, E_X]` when :obj:`beta > 0`
        - **output:** :obj:`data.lowrank_w`, :obj:`data.lowrank_v`
          :math:`[N, r]` (on shards, this rank's :math:`[n, r]`), in the
          dtype of :obj:`data.x` (:obj:`float32` for half precision) and on
          its device

    Precision: the factors get the verdict that the layers give them
    (:func:`~torch_geometric_regcn.linalg.woodbury.check_core_condition` on
    their core :math:`\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W}`, also
    when loaded from the cache): a warning that states the accuracy of the
    largest gain :math:`1 / (1 - \lambda_{\max})` when rounding in their
    dtype leaves it worse than 0.1% (float32 factors from :math:`\alpha +
    \beta \approx 260` on), a :class:`ValueError` when the core is
    numerically singular (float32 factors from :math:`\alpha + \beta \approx
    2.6 \cdot 10^5` on); computed factors are saved to the cache before.

    Cost: the operator (:func:`tsgcn_operator`; the :math:`k`-NN search
    dominates when the semantic graph is built, :math:`O(N^2 F)` exact),
    then the eigensolver: :math:`O(N r)` memory and at most :obj:`max_iter`
    cycles (:obj:`"lanczos"`; iterations otherwise) of sparse products with
    :math:`O(r)` columns each, :math:`O(\mathrm{nnz}(\mathbf{S}) \cdot
    \text{degree} \cdot r + N r^2)` time per cycle (see
    :func:`~torch_geometric_regcn.linalg.block_lanczos`; how many cycles
    reach :obj:`tol` depends on the spectrum, see
    ``benchmarks/results/eigensolver.md``), and :math:`O(N r^2 + r^3)` for
    the core of the verdict. A disconnected :math:`\mathbf{S}` (at
    :obj:`beta=0`, one component per component of the graph, each with the
    top eigenvalue :math:`\alpha / (1 + \alpha)`) is solved one connected
    component at a time, the small ones densely
    (:func:`~torch_geometric_regcn.linalg.extreme_eigenpairs`).

    Example:
        .. code-block:: python

            import torch_geometric.transforms as T
            from torch_geometric_regcn import LowRankInverse, SemanticGraph, paper_rank
            from torch_geometric_regcn.datasets import contextual_sbm

            transform = T.Compose([SemanticGraph(k=10), LowRankInverse(
                alpha=1.0, beta=0.2, rank=paper_rank(1000, 16))])
            data = transform(contextual_sbm(num_nodes=1000))
            data.lowrank_w.shape, data.lowrank_v.shape  # [1000, 62] each
    """
    def __init__(self, alpha: float, beta: float, rank: int, k: int = 10, which: str = 'LA',
                 tol: float = 1e-4, max_iter: int = 100, method: str = 'lanczos',
                 seed: int = 0, cache_dir: Optional[str] = None,
                 progress: bool = True, group: Group = None) -> None:
        alpha, beta, k = check_tsgcn_coefficients(alpha, beta, k)
        try:
            rank = check_int('rank', rank)
        except ValueError as error:
            raise ValueError(f"{error}; see paper_rank() for the paper's convention") from None
        check_choice('which', which, WHICH)
        check_choice('method', method, EIGENSOLVER_METHODS)
        try:
            tol = check_real('tol', tol, 0.0, low_open=True)
        except ValueError:
            raise ValueError(f"'tol' must be a finite positive number (got {tol!r}), "
                             f"e.g. 1e-4") from None
        max_iter = check_int('max_iter', max_iter)
        seed = check_seed(seed)
        self.group = check_group(group)
        if group is not None and method != 'lanczos':
            raise ValueError(f"'group' needs method='lanczos', the row-sharded eigensolver "
                             f"(got {method!r})")
        if cache_dir is not None:
            cache_dir = factor_cache.check_cache_dir(cache_dir)
        self.alpha, self.beta, self.rank, self.k = alpha, beta, rank, k
        self.which, self.tol, self.max_iter, self.method, self.seed = (
            which, tol, max_iter, method, seed)
        self.cache_dir, self.progress = cache_dir, progress

    def forward(self, data: Data) -> Data:
        group = self.group
        part = _check_graph(data, self.beta, group, self.rank, 'LowRankInverse',
                            self._arguments(), outputs=('lowrank_w', 'lowrank_v'))
        dtype, device = _compute_dtype(data), _target(data)[1]
        check_solvable(self.alpha, self.beta, dtype)
        path = None
        if self.cache_dir is not None:
            key = factor_cache.shard_key(self._cache_key(data, part), part, group)
            path = factor_cache.factors_path(self.cache_dir, key)
            rows = data.num_nodes if part is None else part.num_local
            factors = factor_cache.load_factors(path, (rows, self.rank), dtype, device)
            if all(hit for (hit,) in all_gather_ints([factors is not None], group)):
                woodbury_core(*factors, from_eigenpairs=True, group=group)  # the verdict
                data.lowrank_w, data.lowrank_v = factors
                computed_for_the_batch(data, ('lowrank_w', 'lowrank_v'))
                return data
        source = data
        if data.x is not None and data.x.is_floating_point() and data.x.dtype != dtype:
            source = copy.copy(data)  # a half-precision data.x, computed in float32
            source.x = data.x.to(dtype)
        operator = _operator(source, self.alpha, self.beta, self.k, self.progress, self.seed,
                             part, group)
        generator = torch.Generator(operator.device).manual_seed(self.seed)
        enabled = self.progress and rank_of(group) == 0
        with EigensolverProgress(self.tol, enabled, 'LowRankInverse eigenpairs',
                                 self.max_iter) as progress:
            pairs = extreme_eigenpairs(operator, self.rank, self.which, self.tol,
                                       self.max_iter, self.method, generator=generator,
                                       callback=progress, step_callback=progress.step,
                                       residuals_callback=progress.pair_residuals)
            progress.finish(pairs.converged)
        w, v = factors_from_eigenpairs(pairs.eigenvalues, pairs.eigenvectors)
        if path is not None:  # saved first: a rerun gets the verdict without the eigensolve
            factor_cache.save_factors(path, w, v, pairs.residual, self.tol)
        # The verdict on the condition of the factors' core, the layers' one.
        woodbury_core(w, v, from_eigenpairs=True, group=group)
        data.lowrank_w, data.lowrank_v = w, v
        computed_for_the_batch(data, ('lowrank_w', 'lowrank_v'))
        return data

    def _arguments(self) -> Dict[str, Any]:
        r"""The arguments every rank of :obj:`group` must give alike: each
        decides the collectives that follow (the operator's terms, the
        eigensolver's block sizes, iterations and stopping test, the starting
        block, whether the cache is read)."""
        names = ('alpha', 'beta', 'rank', 'k', 'which', 'tol', 'max_iter', 'method', 'seed')
        return {**{f"'{name}'": getattr(self, name) for name in names},
                "whether 'cache_dir' is given": self.cache_dir is not None}

    def _cache_key(self, data: Data, partition: Optional[RowPartition] = None) -> str:
        r"""The cache key of :obj:`data` (of this rank's shard with a
        :obj:`partition`) and of the arguments."""
        semantic = _semantic(data)
        shard = {} if partition is None else {'partition': tuple(partition)}
        if partition is not None:  # the eigensolver draws its random rows by it, and the
            # kNN graph built from x breaks its ties (IVF draws its rows) by it
            shard['node_id'] = shard_node_id(data, partition, torch.device('cpu'))
        return factor_cache.cache_key(**shard,
            num_nodes=data.num_nodes, edge_index=data.edge_index,
            edge_weight=_edge_weight(data), semantic_edge_index=semantic,
            x=data.x if semantic is None and self.beta > 0 else None,
            dtype=str(_compute_dtype(data)), device=_target(data)[1].type, alpha=self.alpha,
            beta=self.beta, rank=self.rank, k=self.k, which=self.which, tol=self.tol,
            max_iter=self.max_iter, method=self.method, seed=self.seed)

    def __repr__(self) -> str:
        # Every argument the factors depend on, those at their default left out:
        # PyG compares a pre_transform's repr with the processed dataset's.
        group = '' if self.group is None else ', group=...'
        solver = ''.join(f', {name}={value!r}' for name, value, default in (
            ('tol', self.tol, 1e-4), ('max_iter', self.max_iter, 100),
            ('method', self.method, 'lanczos'), ('seed', self.seed, 0)) if value != default)
        return (f'{self.__class__.__name__}(alpha={self.alpha}, beta={self.beta}, '
                f'rank={self.rank}, k={self.k}, which={self.which!r}{solver}{group})')
