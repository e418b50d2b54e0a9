r"""The non-quadratic regularisers: an energy that is not a quadratic form,
minimised by an outer iteration around the shared solvers."""
import math
from typing import Any, Callable, ClassVar, List, NamedTuple, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.linalg.cg import first_order, implicit_cg_solve
from torch_geometric_regcn.linalg.components import graph_components
from torch_geometric_regcn.linalg.incidence import Incidence, normalized_incidence
from torch_geometric_regcn.regularizers.base import Regularizer
from torch_geometric_regcn.regularizers.graph import GraphOperators
from torch_geometric_regcn.utils.compat import compiler_disable
from torch_geometric_regcn.utils.validation import (
    all_finite,
    check_flag,
    check_int,
    check_real,
    check_tensor,
)
from torch_geometric_regcn.utils.warn_once import outside_stacklevel, warn_once


class Solve(NamedTuple):
    r"""The result of :meth:`IterativeRegularizer.solve`."""
    #: the minimiser reached, :obj:`[N, F]`
    out: Tensor
    #: the energy at the start and after every iteration (:obj:`trace=True`),
    #: else :obj:`None`
    energy: Optional[Tensor]
    #: the iterations run
    iterations: int
    #: the relative change :math:`\|\mathbf{H}_k - \mathbf{H}_{k-1}\|_F /
    #: \max(\|\mathbf{H}_k\|_F, \|\mathbf{H}_{k-1}\|_F)` of the last
    #: iteration, the largest over the graph's connected components
    #: (:obj:`nan` where not measured: the papers' rules without
    #: :obj:`trace`)
    change: float


#: A linear system of one reweighting: the product :math:`\mathbf{M}\mathbf{Y}`
#: (differentiable in whatever :math:`\mathbf{M}` is built from), the diagonal
#: of :math:`\mathbf{M}` (for the preconditioner) and the right-hand side.
System = Tuple[Callable[[Tensor], Tensor], Tensor, Tensor]


class IterativeRegularizer(Regularizer):
    r"""Base class of a regulariser whose energy is not a quadratic form, so
    that the layer is no longer a linear filter of its input
    :math:`\mathbf{X}` (in a layer, :math:`\mathbf{X}\mathbf{\Theta}`): it
    computes

    .. math::
        \mathbf{H} = \operatorname*{arg\,min}_{\mathbf{H}} E(\mathbf{H};
        \mathbf{X}, \mathcal{G})

    for the energy :meth:`objective`, by an outer iteration from
    :math:`\mathbf{H}_0 = \mathbf{X}` (for :obj:`"irls"`, from
    :meth:`irls_start`):

    - :obj:`"irls"` (every such regulariser): iteratively reweighted least
      squares. Each iteration majorises the non-quadratic terms at the
      current :math:`\mathbf{H}_k` by quadratics (see
      :class:`~torch_geometric_regcn.regularizers.penalties.Penalty`) and
      solves the weighted quadratic problem exactly, by conjugate gradient
      with the implicit backward pass
      (:func:`~torch_geometric_regcn.linalg.cg.implicit_cg_solve`, to the layer's
      :obj:`tol`), so the energy never increases. It stops when the relative
      change of :math:`\mathbf{H}` (the largest over the graph's connected
      components, so that rows elsewhere, isolated nodes or a batch's graphs
      already at their minimum, do not dilute it) falls to
      :attr:`irls_tol`, and warns with
      the change reached after :obj:`K` iterations otherwise (once per
      regulariser; :meth:`solve` reports the change of every call).
    - the paper's own rule of the regulariser (:obj:`"emp"`, :obj:`"amp"`,
      :obj:`"fixed_point"`): :obj:`K` steps, as the paper defines its model
      (like APPNP's :obj:`K`), differentiated by autograd through the steps.

    :meth:`solve` also reports the energy along the iteration. The solvers
    run eagerly under :func:`torch.compile` (a graph break), as the sparse
    quadratic ones do; their products are index operations on the graph's
    incidence matrix (:func:`~torch_geometric_regcn.linalg.incidence.normalized_incidence`).
    An explainer's edge mask :math:`m` reaches them as edge weights: a
    :class:`~torch_geometric_regcn.RegularizerConv` being explained builds
    its graph with weight :math:`m w_{ij}` on each edge (renormalised), so
    every solver minimises one energy of that graph and the mask's gradient
    is the edge weights'. With fixed coefficients
    and no trainable part, every layer's weights train through them (and
    gradients reach the input and the edge weights, e.g. for an attack).
    """
    solvers: ClassVar[Tuple[str, ...]] = ('irls',)
    default_solver: ClassVar[str] = 'irls'
    decoupled: ClassVar[bool] = True
    projection: ClassVar[str] = 'relu'
    #: the incidence matrix's normalisation (see :func:`normalized_incidence`)
    self_loops: ClassVar[bool] = True
    #: the coefficients that scale the iterates (checked against the range of
    #: the input's dtype before any step; others may be compared only)
    scales: ClassVar[Tuple[str, ...]] = ()
    K: int = 10
    #: the relative change of :math:`\mathbf{H}` at which :obj:`"irls"` stops
    irls_tol: float = 1e-3

    # -- what a non-quadratic regulariser is ----------------------------------------
    def objective(self, h: Tensor, x: Tensor, graph: GraphOperators) -> Tensor:
        r"""The energy :math:`E(\mathbf{H}; \mathbf{X}, \mathcal{G})`, a scalar."""
        raise NotImplementedError(f'{type(self).__name__} must implement objective()')

    def system(self, h: Tensor, x: Tensor, graph: GraphOperators) -> System:
        r"""The weighted quadratic problem that majorises :meth:`objective` at
        :obj:`h`, as :obj:`(product, diagonal, rhs)`: its minimiser solves
        :math:`\mathbf{M}\mathbf{Y} = \text{rhs}` with :math:`\mathbf{M}`
        symmetric positive definite."""
        raise NotImplementedError(f'{type(self).__name__} must implement system()')

    def step(self, solver: str, h: Tensor, x: Tensor, graph: GraphOperators,
             state: Any) -> Tuple[Tensor, Any]:
        r"""One step of the paper's rule :obj:`solver`, from :obj:`h` and the
        rule's :obj:`state` (:obj:`None` at the start)."""
        raise NotImplementedError(f'{type(self).__name__} has no rule {solver!r}')

    def irls_start(self, x: Tensor, graph: GraphOperators) -> Tensor:
        r"""The first iterate :math:`\mathbf{H}_0` of :obj:`"irls"`:
        :math:`\mathbf{X}`, unless the weights there say nothing (a penalty
        on :math:`\mathbf{H} - \mathbf{X}`, which is zero at
        :math:`\mathbf{X}`), where a regulariser starts from a point of
        lower energy."""
        return x

    def incidence(self, graph: GraphOperators) -> Incidence:
        r"""The normalised incidence matrix of the graph, built once per graph
        (one process: a rank's shard of the graph is refused), with its
        unweighted rows as sparse matrices where the graph's weights want no
        gradient (:meth:`Incidence.with_csr`)."""
        if graph.partition is not None or graph.group is not None:
            raise ValueError(f"{type(self).__name__} runs in one process: its incidence "
                             f"matrix is not built on shards (drop 'partition' and 'group')")

        def build() -> Incidence:
            index, value = graph.adjacency_edges()
            return normalized_incidence(index, value, graph.num_nodes,
                                        self.self_loops).with_csr()
        return graph.memo(('incidence', self.self_loops), build)

    def operator(self, graph: GraphOperators) -> Tensor:
        raise NotImplementedError(f'{type(self).__name__} is not quadratic: it has no operator '
                                  f'M; use objective() and solve()')

    def frequency_response(self, lam: Tensor) -> Tensor:
        raise NotImplementedError(f'{type(self).__name__} is not a linear filter: its response '
                                  f'depends on the input')

    # -- the shared outer iteration -------------------------------------------------
    def propagate(self, x: Tensor, graph: GraphOperators, solver: Optional[str] = None,
                  tol: float = 1e-6, max_iter: int = 1000) -> Tensor:
        r"""The minimiser :math:`\mathbf{H}` of :meth:`objective` for the input
        :obj:`x` (:meth:`solve`'s :obj:`out`)."""
        return self.solve(x, graph, solver, tol, max_iter).out

    def solve(self, x: Tensor, graph: GraphOperators, solver: Optional[str] = None,
              tol: float = 1e-6, max_iter: int = 1000, trace: bool = False) -> Solve:
        r"""Minimises :meth:`objective` from :math:`\mathbf{H}_0 = \mathbf{X}`
        (:obj:`"irls"`: :meth:`irls_start`) with :obj:`solver` (see the
        class). :obj:`tol` and :obj:`max_iter` are those of the conjugate
        gradient solves of :obj:`"irls"`. With
        :obj:`trace=True` the energy is evaluated at the start and after
        every iteration (one more pass over the edges each). A NaN or an
        infinity in :obj:`x`, a coefficient that torch cannot convert to its
        dtype, and an iterate that overflows (checked after every step: one
        reduction each, read on the host after the last step, or at every
        step of :obj:`"irls"` and with :obj:`trace`) raise a
        :class:`ValueError` naming them."""
        solver = self.check_solver(solver)
        return _solve(self, check_tensor('x', x), graph, solver, tol, max_iter,
                      check_flag('trace', trace))

    def energy(self, h: Tensor, h_in: Tensor, edge_index: Any = None, **graph: Any) -> Tensor:
        r""":meth:`objective` of :obj:`h` for the input :obj:`h_in`, both
        :obj:`[N, F]` of one shape or both :obj:`[N]` (one column, as
        :meth:`solve` reads a 1-D input); :obj:`edge_index` may be a prepared
        :class:`GraphOperators`."""
        h, h_in = check_tensor('h', h), check_tensor('h_in', h_in)
        if h.dim() == 1 and h_in.dim() == 1:
            h, h_in = h.unsqueeze(-1), h_in.unsqueeze(-1)
        if h.dim() != 2 or h_in.shape != h.shape:
            raise ValueError(f"'h' and 'h_in' must be [N, F] matrices (or [N] vectors) of one "
                             f"shape (got {list(h.shape)} and {list(h_in.shape)})")
        return self.objective(h, h_in, self._energy_graph(h, edge_index, graph))

    def regularizer_matrix(self, graph: GraphOperators) -> Tensor:
        raise NotImplementedError(f'{type(self).__name__} is not quadratic: it has no matrix R')


def smoothing_system(inc: Incidence, weight: Tensor, rhs: Tensor) -> System:
    r"""The system :math:`(\mathbf{I} + \mathbf{B}^{\top}\mathrm{diag}(\mathbf{w})
    \mathbf{B})\mathbf{H} = \text{rhs}` of a reweighted edge penalty: edge
    weights :obj:`weight` :obj:`[E']`, or :obj:`[E', F]` for one weight per
    edge and feature (an elementwise penalty). Its diagonal (exact for one
    weight per edge, the preconditioner of :obj:`"irls"`, a Jacobi sweep's
    divisor) uses the mean weight of each edge over the features."""
    base, scale = inc.scaled(weight)  # the weights w * u, once for every product

    def product(y: Tensor) -> Tensor:
        return y + base.weighted_laplacian(y, scale)

    # (a mean over no features, F = 0, is zero rather than NaN: the solve then has nothing to do)
    diag = 1.0 + base.weighted_diagonal(scale.sum(dim=-1) / max(scale.size(-1), 1)
                                        if scale.dim() == 2 else scale)
    return product, diag, rhs


def check_steps(K: int, irls_tol: float) -> Tuple[int, float]:
    r"""The iteration budget of a non-quadratic regulariser: :obj:`K >= 1`
    steps and :obj:`irls_tol` in :math:`(0, 1)`."""
    return (check_int('K', K),
            check_real('irls_tol', irls_tol, 0.0, 1.0, low_open=True, high_open=True))


def _relative_change(new: Tensor, old: Tensor, label: Optional[Tensor] = None) -> Tensor:
    r"""The largest over the connected components :obj:`label` (one for
    :obj:`None`) of :math:`\|\mathbf{H}_k - \mathbf{H}_{k-1}\|_F /
    \max(\|\mathbf{H}_k\|_F, \|\mathbf{H}_{k-1}\|_F)` on the component's
    rows (0 for two zero iterates): per component, rows elsewhere in the
    graph (isolated nodes, a batch's graphs already at their minimum) do not
    dilute it, where a whole-graph norm let a path beside 25 settled graphs
    stop after 3 reweightings, its middle rows at 0.0007 for 0.186. The
    iterates are divided by their largest magnitude first, so that no square
    overflows for large finite entries nor underflows for tiny ones."""
    new, old = new.detach(), old.detach()
    if new.numel() == 0:
        return new.new_zeros(())
    tiny = torch.finfo(new.dtype).tiny
    scale = torch.maximum(new.abs().amax(), old.abs().amax()).clamp_min(tiny)
    new, old = new / scale, old / scale
    if label is None:
        return (new - old).norm() / torch.maximum(new.norm(), old.norm()).clamp_min(tiny)
    count = int(label.max()) + 1 if label.numel() else 0
    rows = [(new - old).square().sum(-1), new.square().sum(-1), old.square().sum(-1)]
    step, size_new, size_old = (torch.zeros(count, dtype=new.dtype, device=new.device)
                                .index_add_(0, label, r) for r in rows)
    ratio = step.sqrt() / torch.maximum(size_new, size_old).sqrt().clamp_min(tiny)
    return ratio.amax() if count else new.new_zeros(())


def _components(regularizer: 'IterativeRegularizer', graph: GraphOperators) -> Tensor:
    r"""The connected component of each node of the graph's incidence matrix
    (scipy, on the CPU; kept with the graph's other operators)."""
    def build() -> Tensor:
        inc = regularizer.incidence(graph)
        return graph_components(inc.src, inc.dst, graph.num_nodes).label
    return graph.memo(('components', regularizer.self_loops), build)


@compiler_disable(reason="The non-quadratic regularisers iterate in Python over sparse index "
                  "operations and run eagerly; compile without fullgraph=True (a graph break)")
def _solve(regularizer: IterativeRegularizer, x: Tensor, graph: GraphOperators, solver: str,
           tol: float, max_iter: int, trace: bool) -> Solve:
    if not all_finite(x):  # the rules without a residual would carry it into every row
        raise ValueError(f"'x' of {regularizer!r} contains NaN or infinite values (in a layer: "
                         f"the projected features, so check the input and the weights)")
    if x.dim() == 1:  # one signal: a column, as the quadratic regularisers read it
        result = _solve(regularizer, x.unsqueeze(-1), graph, solver, tol, max_iter, trace)
        return result._replace(out=result.out.squeeze(-1))
    if x.dim() != 2 or x.size(0) != graph.num_nodes:
        raise ValueError(f"'x' of {regularizer!r} must be [num_nodes, F] or [num_nodes] with "
                         f"num_nodes = {graph.num_nodes} (got {list(x.shape)})")
    _check_undirected(regularizer, graph)
    graph.check_features('x', x)
    largest = torch.finfo(x.dtype).max
    _check_range(regularizer, [name for name in regularizer.scales
                               if abs(getattr(regularizer, name)) > largest], x.dtype)
    try:
        return _iterate(regularizer, x, graph, solver, tol, max_iter, trace)
    except RuntimeError as error:  # torch's, for a scalar beyond the dtype (e.g. in clamp)
        if 'without overflow' not in str(error):
            raise
        names = [name for name, value in regularizer.coefficients().items()
                 if isinstance(value, float) and abs(value) > largest]
        if not names:  # not one of its coefficients: torch's error as it is
            raise
        _check_range(regularizer, names, x.dtype, error)


def _check_undirected(regularizer: IterativeRegularizer, graph: GraphOperators) -> None:
    r"""Raises where :obj:`graph` reads its edges as directed: the energies
    are sums over undirected edges (AMP and EMP at :math:`\lambda_1 = 0`,
    which read :math:`\hat{\mathbf{A}}`, ran on the directed operator)."""
    if graph.direction is not None:
        raise ValueError(f"{regularizer!r} minimises an energy over undirected edges, but the "
                         f"graph is directed (direction={graph.direction!r}): build the "
                         f"GraphOperators without 'direction'")


def _check_range(regularizer: IterativeRegularizer, names: List[str], dtype: torch.dtype,
                 error: Optional[Exception] = None) -> None:
    r"""Raises the error that names the coefficients :obj:`names` as beyond
    the range of :obj:`dtype`, if any."""
    if names:
        raise ValueError(f"{regularizer!r}: the coefficient(s) {names} lie beyond the range of "
                         f"{dtype} (largest {torch.finfo(dtype).max:.3g}); choose smaller ones "
                         f"or solve in float64") from error


def _iterate(regularizer: IterativeRegularizer, x: Tensor, graph: GraphOperators, solver: str,
             tol: float, max_iter: int, trace: bool) -> Solve:
    h, state, change = x, None, math.nan
    if solver == 'irls':
        h = regularizer.irls_start(x, graph)
    label = _components(regularizer, graph) if solver == 'irls' or trace else None
    energies = [regularizer.objective(h, x, graph).detach()] if trace else []
    bounds: List[Tuple[Tensor, Tensor]] = []  # of the steps not yet checked
    iterations = 0
    for iterations in range(1, regularizer.K + 1):
        if solver == 'irls':
            product, diag, rhs = regularizer.system(h, x, graph)
            # Weights that overflowed: named here, not as CG's bad 'matrix'.
            new = _cg(product, diag, rhs, tol, max_iter, graph) \
                if all_finite(diag) and all_finite(rhs) else diag.new_full((), math.nan)
        else:
            new, state = regularizer.step(solver, h, x, graph, state)
        # Every step (one reduction): a rule has no residual that would show it.
        # Read on the host at once where the step synchronises anyway (IRLS,
        # trace), else after the last step, which then names the first.
        if new.numel() and (solver == 'irls' or trace):
            _check_steps(regularizer, solver, [torch.aminmax(new.detach())], iterations, x)
        elif new.numel():
            bounds.append(torch.aminmax(new.detach()))
        if solver == 'irls' or trace:
            change = float(_relative_change(new, h, label))
        h = new
        if trace:
            energies.append(regularizer.objective(h, x, graph).detach())
        if solver == 'irls' and change <= regularizer.irls_tol:
            break
    _check_steps(regularizer, solver, bounds, 1, x)
    if solver == 'irls' and change > regularizer.irls_tol:
        warn_once(regularizer, 'irls', (
            f"{regularizer!r}: IRLS stopped after K={regularizer.K} reweightings with relative "
            f"change {change:.2e} > irls_tol={regularizer.irls_tol:.0e}; raise 'K' or "
            f"'irls_tol' (this regulariser warns once; solve() reports the change of every "
            f"call)"), stacklevel=outside_stacklevel())
    return Solve(h, torch.stack(energies) if trace else None, iterations, change)


def _check_steps(regularizer: IterativeRegularizer, solver: str,
                 bounds: List[Tuple[Tensor, Tensor]], first: int, x: Tensor) -> None:
    r"""Raises the error that names the first of the iterations
    :obj:`first, first + 1, ...` whose iterate's smallest or largest entry
    (:obj:`bounds`, from :func:`torch.aminmax`) is NaN or infinite: one
    synchronisation for all of them."""
    if not bounds:
        return
    finite = torch.stack([value for pair in bounds for value in pair]).isfinite()
    if not bool(finite.all()):
        iteration = first + int((~finite).nonzero()[0, 0]) // 2
        raise ValueError(f"{regularizer!r} diverged: its {solver!r} iteration {iteration} "
                         f"produced NaN or infinite values; check the input and the "
                         f"coefficients (their size against {x.dtype}'s range)")


def _cg(product: Callable[[Tensor], Tensor], diag: Tensor, rhs: Tensor, tol: float,
        max_iter: int, graph: GraphOperators) -> Tensor:
    r"""One reweighted solve :math:`\mathbf{Y} = \mathbf{M}^{-1}\mathbf{B}` by
    :func:`implicit_cg_solve` from zero, not from the previous iterate: CG's
    test relative to :math:`\|\mathbf{B}\|` can hold there already (AirGNN's
    right-hand side :math:`u \odot \mathbf{X}` is dominated by the rows
    where :math:`u = \lambda/\epsilon`), and an unmoved iterate reads as
    IRLS's convergence; preconditioned by :obj:`diag`; with the graph's
    :attr:`~torch_geometric_regcn.regularizers.GraphOperators.batch` (a
    layer's :obj:`batch=`), each graph of the batch solved as its own system,
    to its own tolerance, as alone. Its gradient with
    respect to whatever :math:`\mathbf{M}` is built from (the weights, hence the previous
    iterate, and the edge weights) is :math:`-\mathbf{M}^{-1}
    (\partial\mathbf{M})\mathbf{Y}`, and that in :math:`\mathbf{B}`
    :math:`\mathbf{M}^{-1}`: one solve in the backward pass for both."""
    n = diag.numel()
    index = torch.arange(n, device=diag.device).expand(2, -1)
    matrix = torch.sparse_coo_tensor(index, diag.detach(), (n, n),
                                     check_invariants=False).to_sparse_csr()
    y = implicit_cg_solve(product, matrix, rhs, tol, max_iter, None, *(graph.batch or ()))
    # Its gradient holds the weights' derivative; a second one is wrong.
    return first_order(y, "The IRLS step's implicit gradient")
