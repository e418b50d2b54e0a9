r"""Low-rank factors of the tsGCN propagation matrix."""
import copy
import math
import os
import os.path as osp
import warnings
from typing import Optional, Tuple, Union

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from tqdm.auto import tqdm

from torch_geometric_regcn.distributed.collectives import (
    Group,
    agree,
    all_gather_ints,
    check_group,
    rank_of,
)
from torch_geometric_regcn.distributed.row_partition import (
    RowPartition,
    check_partition,
    check_shard_edges,
)
from torch_geometric_regcn.linalg.eigenpairs import WHICH
from torch_geometric_regcn.linalg.eigensolver import EIGENSOLVER_METHODS, extreme_eigenpairs
from torch_geometric_regcn.linalg.woodbury import (
    factors_from_eigenpairs,
    gain_precision,
    warn_if_imprecise,
)
from torch_geometric_regcn.regularizers.graph import GraphOperators
from torch_geometric_regcn.regularizers.tsgcn import (
    check_tsgcn_coefficients,
    sharded_tsgcn_adjacency,
    tsgcn_adjacency,
)
from torch_geometric_regcn.transforms import factor_cache
from torch_geometric_regcn.utils.validation import (
    as_root,
    check_finite,
    check_int,
    check_real,
    solve_dtype,
)


def paper_rank(num_nodes: int, p: int) -> int:
    r"""The rank :math:`r = \lfloor d / p \rfloor` of the tsGCN paper's
    parameter table, with :math:`d` read as the number of nodes :math:`N`, as
    the authors' code does (the paper's text calls :math:`d` the feature
    dimension, which would give :math:`r = 0` on PubMed with :math:`p = 2048`).

    Example: Cora (:math:`N = 2708`) with :math:`p = 16` gives :math:`r = 169`.
    """
    if p <= 0:
        raise ValueError(f"'p' must be a positive integer (got {p})")
    rank = num_nodes // p
    if rank < 1:
        raise ValueError(f"num_nodes // p = {num_nodes} // {p} = 0; choose p <= {num_nodes}")
    return rank


def _target(data: Data) -> Tuple[torch.dtype, torch.device]:
    """The dtype and device of the factors: those of :obj:`data.x` when present."""
    x = data.x
    dtype = x.dtype if x is not None and x.is_floating_point() else torch.get_default_dtype()
    device = x.device if x is not None else data.edge_index.device
    return dtype, device


def tsgcn_operator(data: Data, alpha: float, beta: float, k: int = 10,
                   progress: bool = False, seed: int = 0) -> Tensor:
    r"""The sparse operator :math:`\mathbf{S} = (\alpha \hat{\mathbf{A}}_G +
    \beta \hat{\mathbf{A}}_X) / (1 + \alpha + \beta)` of a graph
    (:func:`~torch_geometric_regcn.regularizers.tsgcn_adjacency`), in CSR form,
    on the device and in the dtype of :obj:`data.x`.

    :math:`\hat{\mathbf{A}}_X` is built from :obj:`data.semantic_edge_index`
    when present, else from the cosine :obj:`k`-NN graph of :obj:`data.x`
    (:func:`~torch_geometric_regcn.utils.knn_graph_cosine`, exact or, above
    50,000 nodes on CPU, approximate with centroids seeded by :obj:`seed`)."""
    num_nodes = data.num_nodes
    if not num_nodes:
        raise ValueError('The graph is empty (it has no nodes)')
    x = data.x
    if x is not None:
        check_finite('data.x', x)
    dtype, device = _target(data)
    edge_index = data.edge_index.to(device) if data.edge_index is not None else None
    semantic = data.semantic_edge_index if 'semantic_edge_index' in data else None
    graph = GraphOperators(num_nodes, edge_index,
                           data.edge_weight if 'edge_weight' in data else None, dtype,
                           semantic_edge_index=None if semantic is None else semantic.to(device),
                           x=x, progress=progress, seed=seed)
    return tsgcn_adjacency(graph, alpha, beta, k)


def _compute_dtype(data: Data) -> torch.dtype:
    r"""The dtype :class:`LowRankInverse` computes and stores the factors in:
    that of :obj:`data.x` (or the default one), raised to :obj:`torch.float32`
    from a half-precision one (:obj:`float16`, :obj:`bfloat16`), in which the
    eigensolver cannot run and the gains :math:`1 / (1 - \lambda)` would keep
    about three significant digits."""
    return solve_dtype(_target(data)[0])


def _check_cache_dir(cache_dir: Union[str, 'os.PathLike[str]']) -> str:
    r"""Checks that :obj:`cache_dir` is a writable folder, creating it if
    needed, and returns it as a string."""
    cache_dir = as_root(cache_dir, 'cache_dir')
    path = osp.expanduser(cache_dir)
    if osp.exists(path) and not osp.isdir(path):
        raise ValueError(f"'cache_dir' must be a folder, but '{path}' is a file; pass "
                         f"another path, or cache_dir=None not to cache the factors")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        raise ValueError(f"'cache_dir' '{path}' cannot be created ({error}); pass a "
                         f"writable folder, or cache_dir=None not to cache the factors"
                         ) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"'cache_dir' '{path}' is not writable; pass a writable folder "
                         f"(or fix its permissions), or cache_dir=None not to cache the "
                         f"factors")
    return cache_dir


#: The eigensolver's progress bar appears once it has run this many seconds
#: and is redrawn at most this often (seconds).
PROGRESS_DELAY, PROGRESS_INTERVAL = 1.0, 0.5


class _EigenProgress:
    r"""The progress bar of :class:`LowRankInverse`'s eigensolver, and the
    solver's callbacks. At the end of each cycle (or iteration) the
    percentage is the share of the decades of relative residual, from one (a
    random start) down to :obj:`tol`, gained so far. Within a filtered Lanczos
    cycle, which can take long on a large graph, it moves step by step towards
    an estimate of the cycle's outcome: the previous cycle's gain, or half the
    way left for the first one. It never goes back, and stops at 99 until the
    residual reaches :obj:`tol`. The postfix tells the stage (locating the
    spectrum, then each cycle, its step and the last residual). The bar is
    drawn through :meth:`tqdm.update`, which honours the delay and the redraw
    interval and lets :meth:`close` draw the last state and end the line, in
    a terminal or a file."""

    def __init__(self, tol: float, disable: bool) -> None:
        self.tol, self.span = tol, math.log(1.0 / tol)
        self.percent = 0  # shown
        self.reached, self.gain = 0.0, None  # at the last cycle's end; its gain
        self.residual: Optional[str] = None  # the last one, formatted
        self.bar = tqdm(total=100, desc='LowRankInverse eigenpairs', unit='%',
                        delay=PROGRESS_DELAY, mininterval=PROGRESS_INTERVAL, miniters=0,
                        disable=disable)

    def __call__(self, iteration: int, residual: float) -> None:
        if not math.isfinite(residual):  # no pairs yet: the spectrum was located
            self.bar.set_postfix_str('spectrum located', refresh=False)
            self.bar.update(0)
            return
        if residual <= self.tol:
            reached = 100.0
        elif self.span > 0:
            reached = min(99.0, max(0.0, 100 * math.log(1.0 / residual) / self.span))
        else:
            reached = 0.0
        self.gain = reached - self.reached if reached > self.reached else self.gain
        self.reached, self.residual = max(self.reached, reached), f'{residual:.1e}'
        self.bar.set_postfix(iteration=iteration, residual=self.residual, refresh=False)
        self._advance(self.reached)

    def step(self, cycle: int, step: int, steps: int) -> None:
        r"""Step :obj:`step` of :obj:`steps` of cycle :obj:`cycle` (:obj:`0`:
        locating the spectrum)."""
        if cycle == 0:
            self.bar.set_postfix_str(f'locating the spectrum, step {step}/{steps}',
                                     refresh=False)
            self.bar.update(0)
            return
        gain = (100 - self.reached) / 2 if self.gain is None else self.gain
        target = min(99.0, self.reached + gain)
        known = {} if self.residual is None else {'residual': self.residual}
        self.bar.set_postfix(iteration=cycle, step=f'{step}/{steps}', **known, refresh=False)
        self._advance(self.reached + (target - self.reached) * step / steps)

    def _advance(self, percent: float) -> None:
        percent = min(100, int(round(percent, 6)))  # whole percents, none lost to rounding
        self.bar.update(max(0, percent - self.percent))
        self.percent = max(self.percent, percent)

    def finish(self, converged: bool) -> None:
        r"""Fills the bar when the solver converged (also when it reported
        nothing, as the dense solve of a small problem)."""
        if converged:
            self._advance(100)

    def __enter__(self) -> '_EigenProgress':
        return self

    def __exit__(self, *args: object) -> None:
        self.bar.close()


class LowRankInverse(BaseTransform):
    r"""Precomputes the low-rank factors of the tsGCN propagation matrix from
    the `"Beyond Graph Convolutional Network: An Interpretable
    Regularizer-centered Optimization Framework"
    <https://arxiv.org/abs/2301.04318>`_ paper (AAAI 2023) and stores them as
    :obj:`data.lowrank_w` and :obj:`data.lowrank_v`, both of shape
    :obj:`[N, rank]`, such that

    .. math::
        \mathbf{I} - \mathbf{W} (\mathbf{I}_r + \mathbf{V}^{\top}\mathbf{W})^{-1}
        \mathbf{V}^{\top} \approx (1 + \alpha + \beta)
        (\mathbf{I} + \alpha \tilde{\mathbf{L}}_G + \beta \tilde{\mathbf{L}}_X)^{-1}
        = (\mathbf{I} - \mathbf{S})^{-1},
        \qquad
        \mathbf{S} = \frac{\alpha \hat{\mathbf{A}}_G + \beta \hat{\mathbf{A}}_X}
        {1 + \alpha + \beta},

    with equality when :obj:`rank` equals :math:`N`. Here
    :math:`\hat{\mathbf{A}}_G` is the renormalised adjacency (symmetrised, with
    self loops, as :func:`~torch_geometric.nn.conv.gcn_conv.gcn_norm`) of
    :obj:`data.edge_index` (weighted by :obj:`data.edge_weight` when present),
    :math:`\hat{\mathbf{A}}_X` that of :obj:`data.semantic_edge_index` when
    present, else of :class:`SemanticGraph` (:obj:`k`) of :obj:`data.x`, and
    :math:`\tilde{\mathbf{L}} = \mathbf{I} - \hat{\mathbf{A}}`.

    With eigenpairs :math:`(\mathbf{\Lambda}, \mathbf{U})` of :math:`\mathbf{S}`,
    :math:`\mathbf{W} = \mathbf{U}|\mathbf{\Lambda}|^{1/2}` and
    :math:`\mathbf{V} = -\mathbf{U}\,\mathrm{sign}(\mathbf{\Lambda})
    |\mathbf{\Lambda}|^{1/2}`, so :math:`\mathbf{W}\mathbf{V}^{\top}` is the
    truncated SVD of :math:`-\mathbf{S}` of the authors' code: directions
    outside the top-:math:`r` subspace get the constant gain one (the
    exact gain is :math:`1 / (1 - \lambda)`). The eigenpairs come from
    Chebyshev-filtered thick-restart block Lanczos on the sparse
    :math:`\mathbf{S}` (:func:`~torch_geometric_regcn.linalg.block_lanczos`),
    compared with :func:`scipy.sparse.linalg.eigsh` at equal accuracy in
    ``benchmarks/results/eigensolver.md``, or from block subspace iteration
    (:obj:`method="chebyshev"` or the paper's plain :obj:`method="power"`):
    :math:`O(N r)` memory, on the device and in the dtype of :obj:`data.x`,
    reproducible for a given :obj:`seed`. Half-precision features
    (:obj:`float16`, :obj:`bfloat16`) are an exception: the factors are then
    computed and stored in :obj:`float32` (the features stay as they are),
    since the gains :math:`1/(1 - \lambda)` need more than the three
    significant digits of half precision.

    :obj:`which="LA"` (the default) keeps the largest algebraic eigenvalues,
    :obj:`which="LM"` those largest in magnitude, as the authors' code does.
    :obj:`"LA"` is the default because the exact gain :math:`1/(1 - \lambda)`
    departs most from one at the top of the spectrum, whereas a negative
    eigenvalue's gain stays in :math:`(1/2, 1)`, so :obj:`"LA"` gives the best
    rank-:math:`r` approximation of the inverse. Where the dominant
    eigenvalues are all positive both select the same subspace; they differ
    only where negative eigenvalues rank among the largest in magnitude
    (``benchmarks/results/which.md`` compares them on the citation graphs).

    :obj:`beta=0` gives the topology-only model (tsGCN-t, no features needed),
    :obj:`alpha=0` the semantic-only model (tsGCN-s).

    The factors belong to the whole graph: they serve transductive use on
    it. A loader or :meth:`~torch_geometric.data.Data.subgraph` slices their
    rows, which are not the factors of the subgraph; the layers reject them.

    Args:
        alpha (float): The weight :math:`\alpha \geq 0` of the topological
            regulariser.
        beta (float): The weight :math:`\beta \geq 0` of the semantic
            regulariser.
        rank (int): The rank :math:`r` of the factors, :math:`1 \leq r \leq N`
            (see :func:`paper_rank` for the paper's convention).
        k (int, optional): Neighbours per node of the semantic graph, used when
            :obj:`data.semantic_edge_index` is absent. (default: :obj:`10`)
        which (str, optional): :obj:`"LA"` or :obj:`"LM"`. (default: :obj:`"LA"`)
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
            keyed by a hash of the graph (:obj:`edge_index`,
            :obj:`edge_weight`, :obj:`semantic_edge_index` or :obj:`x`), its
            size, the dtype computed in and the device type, and every
            argument above, so a rerun on the same input loads them instead
            of recomputing. It is created if needed; a path that is a file,
            cannot be created or is not writable is rejected here, before any
            work. A file is saved atomically with a checksum and the residual
            reached; one that is unreadable, of an older format, fails its
            checksum, or holds other names, shapes or dtypes or non-finite
            values is reported by a warning, recomputed and overwritten.
            Factors that did not reach :obj:`tol` warn again, with their
            residual, each time they are loaded. Where saving fails, a
            warning says why and the factors are returned uncached.
            Integer arguments may be NumPy integers; they are keyed as Python
            ones. (default: :obj:`None`, no cache)
        progress (bool, optional): Show progress bars with ETA for the
            semantic kNN and the eigensolver when they take longer than a
            second. (default: :obj:`True`)
        group (ProcessGroup, optional): With a :mod:`torch.distributed`
            process group (e.g. :obj:`torch.distributed.group.WORLD`), the
            input is this rank's shard of the graph
            (:func:`~torch_geometric_regcn.distributed.partition` or
            :func:`~torch_geometric_regcn.distributed.load_partition`), every
            rank of the group calls the transform, and each gets its rows of
            :math:`\mathbf{W}` and :math:`\mathbf{V}`: the operator is built
            from the shards' edges (reversed edges and halo degrees exchanged
            once) and solved by the row-sharded block Lanczos
            (:obj:`method="lanczos"` only); no rank holds more than its rows
            of any :math:`N \times r` or :math:`N \times F` tensor. Without
            :obj:`data.semantic_edge_index` the shards' semantic graph is
            built by :class:`SemanticGraph` with the same :obj:`group`. A
            rank's input is checked before any collective, and a rank whose
            check fails makes every rank raise. The cache keys include every
            rank's inputs, the world size and the row blocks; each rank
            reads and writes its own file, and the ranks recompute together
            unless every rank found its file valid. (default: :obj:`None`, one
            process)

    Example:
        .. code-block:: python

            import torch_geometric.transforms as T
            from torch_geometric_regcn import LowRankInverse, SemanticGraph, paper_rank
            from torch_geometric_regcn.datasets import contextual_sbm

            transform = T.Compose([SemanticGraph(k=10), LowRankInverse(
                alpha=1.0, beta=0.2, rank=paper_rank(1000, 16))])
            data = transform(contextual_sbm(num_nodes=1000))
            data.lowrank_w.shape, data.lowrank_v.shape  # [1000, 62] each

        As a dataset's :obj:`pre_transform` the factors are computed once, when
        the dataset is processed, and saved with it.
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
        if which not in WHICH:
            raise ValueError(f"'which' must be one of {WHICH} (got {which!r})")
        if method not in EIGENSOLVER_METHODS:
            raise ValueError(f"'method' must be one of {EIGENSOLVER_METHODS} (got {method!r})")
        try:
            tol = check_real('tol', tol, 0.0, low_open=True)
        except ValueError:
            raise ValueError(f"'tol' must be a finite positive number (got {tol!r}), "
                             f"e.g. 1e-4") from None
        max_iter = check_int('max_iter', max_iter)
        try:
            seed = check_int('seed', seed, minimum=-2 ** 63)
            if seed >= 2 ** 64:
                raise ValueError
        except ValueError:
            raise ValueError(f"'seed' must be an integer in [-2**63, 2**64), as "
                             f"torch.Generator.manual_seed accepts (got {seed!r})") from None
        self.group = check_group(group)
        if group is not None and method != 'lanczos':
            raise ValueError(f"'group' needs method='lanczos', the row-sharded eigensolver "
                             f"(got {method!r})")
        if cache_dir is not None:
            cache_dir = _check_cache_dir(cache_dir)
        self.alpha, self.beta, self.rank, self.k = alpha, beta, rank, k
        self.which, self.tol, self.max_iter, self.method, self.seed = (
            which, tol, max_iter, method, seed)
        self.cache_dir, self.progress = cache_dir, progress

    def forward(self, data: Data) -> Data:
        if self.group is not None:
            return self._sharded(data)
        num_nodes = data.num_nodes or 0
        if num_nodes and self.rank > num_nodes:
            raise ValueError(f"'rank' must not exceed the number of nodes {num_nodes} "
                             f"(got {self.rank})")
        dtype, device = _compute_dtype(data), _target(data)[1]
        path = None
        if self.cache_dir is not None:
            path = self._cache_path(self._fingerprint(data))
            if self._load(path, data, (num_nodes, self.rank), dtype, device):
                return data
        source = data
        if data.x is not None and data.x.is_floating_point() and data.x.dtype != dtype:
            source = copy.copy(data)  # a half-precision data.x, computed in float32
            source.x = data.x.to(dtype)
        operator = tsgcn_operator(source, self.alpha, self.beta, self.k, self.progress,
                                  self.seed)
        generator = torch.Generator(operator.device).manual_seed(self.seed)
        with _EigenProgress(self.tol, disable=not self.progress) as progress:
            pairs = extreme_eigenpairs(operator, self.rank, self.which, self.tol,
                                       self.max_iter, self.method, generator=generator,
                                       callback=progress, step_callback=progress.step)
            progress.finish(pairs.converged)
        if pairs.eigenvalues.numel():
            warn_if_imprecise(*gain_precision(pairs.eigenvalues), pairs.eigenvalues.dtype,
                              stacklevel=3)
        data.lowrank_w, data.lowrank_v = factors_from_eigenpairs(pairs.eigenvalues,
                                                                 pairs.eigenvectors)
        if path is not None:
            self._save(path, data, pairs.residual)
        return data

    def _sharded(self, data: Data) -> Data:
        r"""The factors' rows of this rank's shard (see :obj:`group`)."""
        group, error = self.group, None
        semantic = data.semantic_edge_index if 'semantic_edge_index' in data else None
        try:
            part = check_partition(data.partition if 'partition' in data else None, group)
            if self.rank > part.num_nodes:
                raise ValueError(f"'rank' must not exceed the number of nodes "
                                 f"{part.num_nodes} (got {self.rank})")
            if data.x is not None:
                check_finite('data.x', data.x)
            if data.edge_index is not None:
                check_shard_edges(data.edge_index, part,
                                  data.edge_weight if 'edge_weight' in data else None,
                                  'data.edge_index')
            if semantic is not None:
                check_shard_edges(semantic, part, name='data.semantic_edge_index')
            if self.beta > 0 and semantic is None and data.x is None:
                raise ValueError("beta > 0 needs node features 'data.x' or a precomputed "
                                 "'data.semantic_edge_index' (see SemanticGraph)")
        except (ValueError, TypeError) as failure:
            error = failure
        agree(error, group, 'LowRankInverse')
        dtype, device = _compute_dtype(data), _target(data)[1]
        path = None
        if self.cache_dir is not None:
            digests = all_gather_ints(list(bytes.fromhex(self._fingerprint(data, part))), group)
            key = factor_cache.fingerprint(ranks=[bytes(d).hex() for d in digests])
            path = self._cache_path(f'{key}-part{part.rank}of{part.num_parts}')
            loaded = self._load(path, data, (part.num_local, self.rank), dtype, device)
            if all(hit for (hit,) in all_gather_ints([loaded], group)):
                return data
        if self.beta > 0 and semantic is None:
            from torch_geometric_regcn.transforms.semantic_graph import SemanticGraph
            semantic = SemanticGraph(self.k, seed=self.seed, progress=self.progress,
                                     group=group)(copy.copy(data)).semantic_edge_index
        edge_index = data.edge_index.to(device) if data.edge_index is not None else None
        operator = sharded_tsgcn_adjacency(
            part, group, self.alpha, self.beta, edge_index,
            None if semantic is None else semantic.to(device),
            data.edge_weight if 'edge_weight' in data else None, dtype)
        generator = torch.Generator(device).manual_seed(self.seed)
        quiet = not self.progress or rank_of(group) != 0
        with _EigenProgress(self.tol, disable=quiet) as progress:
            pairs = extreme_eigenpairs(operator, self.rank, self.which, self.tol,
                                       self.max_iter, self.method, generator=generator,
                                       callback=progress, step_callback=progress.step)
            progress.finish(pairs.converged)
        warn_if_imprecise(*gain_precision(pairs.eigenvalues), pairs.eigenvalues.dtype,
                          stacklevel=3)
        data.lowrank_w, data.lowrank_v = factors_from_eigenpairs(pairs.eigenvalues,
                                                                 pairs.eigenvectors)
        if path is not None:
            self._save(path, data, pairs.residual)
        return data

    def _cache_path(self, key: str) -> str:
        return osp.join(osp.expanduser(self.cache_dir), f'lowrank-{key}.pt')

    def _load(self, path: str, data: Data, shape: Tuple[int, int], dtype: torch.dtype,
              device: torch.device) -> bool:
        r"""Sets the factors from the cache file :obj:`path` if it is valid."""
        cached = factor_cache.load(path, {'lowrank_w': shape, 'lowrank_v': shape}, dtype,
                                   meta=('residual', 'tol'))
        if cached is None:
            return False
        residual, tol = cached.meta['residual'], cached.meta['tol']
        if residual > tol:
            warnings.warn(
                f"LowRankInverse factors loaded from the cache file '{path}' did not "
                f"converge: relative residual {residual:.2e} > tol={tol:g}; raise "
                f"'max_iter' (or 'tol') to compute them anew", UserWarning, stacklevel=4)
        data.lowrank_w = cached.tensors['lowrank_w'].to(device)
        data.lowrank_v = cached.tensors['lowrank_v'].to(device)
        return True

    def _save(self, path: str, data: Data, residual: float) -> None:
        try:
            factor_cache.save(path, {'lowrank_w': data.lowrank_w, 'lowrank_v': data.lowrank_v},
                              {'residual': float(residual), 'tol': self.tol})
        except OSError as error:
            warnings.warn(
                f"LowRankInverse could not save the factors to the cache ({error}); "
                f"returning them uncached; check that 'cache_dir' ('{self.cache_dir}') "
                f"is a writable folder with free space", UserWarning, stacklevel=4)

    def _fingerprint(self, data: Data, partition: Optional[RowPartition] = None) -> str:
        semantic = data.semantic_edge_index if 'semantic_edge_index' in data else None
        shard = {} if partition is None else {'partition': tuple(partition)}
        return factor_cache.fingerprint(**shard,
            num_nodes=data.num_nodes, edge_index=data.edge_index,
            edge_weight=data.edge_weight if 'edge_weight' in data else None,
            semantic_edge_index=semantic,
            x=data.x if semantic is None and self.beta > 0 else None,
            dtype=str(_compute_dtype(data)), device=_target(data)[1].type, alpha=self.alpha,
            beta=self.beta, rank=self.rank, k=self.k, which=self.which, tol=self.tol,
            max_iter=self.max_iter, method=self.method, seed=self.seed)

    def __repr__(self) -> str:
        group = '' if self.group is None else ', group=...'
        return (f'{self.__class__.__name__}(alpha={self.alpha}, beta={self.beta}, '
                f'rank={self.rank}, k={self.k}, which={self.which!r}{group})')
