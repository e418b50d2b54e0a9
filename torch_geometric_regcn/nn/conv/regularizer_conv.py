r"""One layer for the whole regularizer-centred framework."""
import copy
import functools
from typing import Any, Dict, Optional, Sequence, Tuple, Type, Union

import torch
from torch import Tensor
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.nn.inits import zeros

from torch_geometric_regcn.linalg.graph_batch import check_batch, graph_count
from torch_geometric_regcn.nn.conv import edge_masking
from torch_geometric_regcn.nn.conv.graph_cache import GraphCache
from torch_geometric_regcn.nn.conv.state_dict_upgrade import upgrade_0_1_state_dict
from torch_geometric_regcn.nn.linear import Linear
from torch_geometric_regcn.regularizers.base import Regularizer
from torch_geometric_regcn.regularizers.graph import (
    GraphOperators,
    build_graph,
    check_graph_types,
    wanting_gradients,
)
from torch_geometric_regcn.regularizers.iterative import IterativeRegularizer
from torch_geometric_regcn.regularizers.registry import get
from torch_geometric_regcn.utils.compat import is_compiling
from torch_geometric_regcn.utils.deprecation import moved, warn_deprecated
from torch_geometric_regcn.utils.validation import (
    all_finite,
    check_channels,
    check_factors,
    check_flag,
    check_layer_dtype,
    check_materialized,
    check_module_materialized,
    check_node_features,
    check_projection,
    check_stopping_rule,
    solve_dtype,
)
from torch_geometric_regcn.utils.warn_once import warn_once

#: Why a layer set to explain without an edge mask cannot run.
_NO_MASK = ("RegularizerConv was set to explain without an edge mask; use "
            "torch_geometric.explain.Explainer (or set_masks)")


class RegularizerConv(MessagePassing):
    r"""The graph convolution of the regularizer-centred framework from the
    `"Beyond Graph Convolutional Network: An Interpretable Regularizer-centered
    Optimization Framework" <https://arxiv.org/abs/2301.04318>`_ paper
    (AAAI 2023): the minimiser of a fitting term and a graph regulariser
    :math:`\mathbf{R}`,

    .. math::
        \mathbf{X}^{\prime} = \operatorname*{arg\,min}_{\mathbf{H}}
        -\mathrm{Tr}(\mathbf{H}^{\top}\mathbf{X}\mathbf{\Theta}) +
        \tfrac{1}{2}\mathrm{Tr}(\mathbf{H}^{\top}\mathbf{R}\mathbf{H}) + \mathbf{b}
        = \mathbf{R}^{-1}\mathbf{X}\mathbf{\Theta} + \mathbf{b}.

    With :obj:`root_weight=True` the ego features bypass the regulariser
    (ego/neighbour separation, as in PyG's
    :class:`~torch_geometric.nn.conv.SAGEConv`),
    :math:`\mathbf{X}^{\prime} = \mathbf{R}^{-1}\mathbf{X}\mathbf{\Theta} +
    \mathbf{X}\mathbf{\Theta}_{\mathrm{root}} + \mathbf{b}`; with
    :obj:`directed=True` the graph is read as stored, the regulariser (its
    coefficients shared) applied in each direction with weights of its own,
    as Dir-GNN
    (`Rossi et al., LoG 2023 <https://arxiv.org/abs/2305.10498>`_) does with
    message passing,

    .. math::
        \mathbf{X}^{\prime} = \tfrac{1}{2}\mathbf{R}_{\mathrm{in}}^{-1}
        \mathbf{X}\mathbf{\Theta}_{\mathrm{in}} + \tfrac{1}{2}
        \mathbf{R}_{\mathrm{out}}^{-1}\mathbf{X}\mathbf{\Theta}_{\mathrm{out}}
        \;(+\, \mathbf{X}\mathbf{\Theta}_{\mathrm{root}}) + \mathbf{b},

    where :math:`\mathbf{R}_{\mathrm{in}}` and :math:`\mathbf{R}_{\mathrm{out}}`
    are the regulariser built on the normalised in- and out-neighbour
    operators (:func:`~torch_geometric_regcn.linalg.directed_adjacency`)
    instead of :math:`\hat{\mathbf{A}}`. These operators are not symmetric,
    so the directed layer solves by :obj:`"series"` or :obj:`"closed"`
    (not :obj:`"cg"`, which needs a symmetric positive definite system).

    Choosing the regulariser chooses the model: :obj:`"gcn"`, :obj:`"sgc"`,
    :obj:`"appnp"`, :obj:`"jknet"`, :obj:`"dagnn"`, :obj:`"gnn_lf"`,
    :obj:`"gnn_hf"`, :obj:`"tsgcn"` (see :mod:`torch_geometric_regcn.regularizers`),
    or any :class:`~torch_geometric_regcn.regularizers.Regularizer` subclass. The
    activation (the projection of the framework, :obj:`regularizer.projection`)
    is applied outside the layer, as in PyG.

    The graph inputs describe one whole graph: use the layer transductively,
    on the full graph, and index its output rows. Loaders and
    :meth:`~torch_geometric.data.Data.subgraph` re-index :obj:`edge_index`
    only; a :obj:`semantic_edge_index` or low-rank factors carried along
    then belong to another graph, which raises an error where it shows.
    Under :func:`torch.compile`, the sparse solvers run eagerly, a graph
    break (see :meth:`~torch_geometric_regcn.regularizers.Regularizer.propagate`).

    The layer is a :class:`~torch_geometric.nn.conv.MessagePassing`: every
    product of a solver with a sparse graph operator (:math:`\hat{\mathbf{A}}`,
    :math:`\mathbf{M}`) goes through :meth:`propagate` (fused as a sparse
    matrix product, :meth:`message_and_aggregate`), so PyG's propagate and
    message hooks fire and :class:`~torch_geometric.explain.Explainer`
    algorithms such as :class:`~torch_geometric.explain.algorithm.GNNExplainer`
    apply their edge masks with the :obj:`"series"`, :obj:`"cg"` and
    :obj:`"closed"` solvers (through the implicit backward pass of conjugate
    gradient too; :obj:`"closed"` forms its dense operators through the
    mask). An edge's
    mask scales the operator's entries between its two nodes; as the
    operators are symmetric, the two directions of an edge share the mean of
    their masks, and self loops keep weight one (see
    :class:`~torch_geometric_regcn.nn.conv.edge_masking.EdgeMasking`).
    :obj:`"lowrank"` (factors) has no edges to mask and refuses to be
    explained. The non-quadratic regularisers, which read the graph's weights
    into their incidence matrix, take an edge of mask :math:`m` as an edge
    of weight :math:`m w_{ij}` (the graph renormalised for the call), with
    every solver.

    Entries that occur more than once add up, so every graph input means one
    matrix: an :obj:`edge_index` that lists a pair several times (a
    multigraph) is read as PyG's :class:`~torch_geometric.nn.conv.GCNConv`,
    :class:`~torch_geometric.nn.conv.SGConv` and
    :class:`~torch_geometric.nn.conv.APPNP` read it, each repeat adding its
    :obj:`edge_weight` (one without), so :obj:`"gcn"`, :obj:`"sgc"` and
    :obj:`"appnp"` equal those layers on undirected multigraphs too (PyG
    does not symmetrise a directed graph, this layer does; PyG keeps the
    weight of a self loop in :obj:`edge_weight`, this layer replaces it by
    one, so the layers differ on graphs with self loops of other weights); a
    :obj:`torch.sparse` adjacency is the matrix torch means, its duplicates
    summed as :meth:`~torch.Tensor.coalesce` sums them, coalesced or not.
    The summed matrix is made symmetric by the maximum and its self loops
    are replaced by unit ones (see
    :func:`~torch_geometric_regcn.regularizers.graph.adjacency_edges`). The
    layer never modifies its inputs, their values or their flags (a COO
    matrix is read through a coalesced copy, never marked coalesced).

    Args:
        in_channels (int): Size of each input sample, or :obj:`-1` to derive the
            size from the first input(s) to the forward method.
        out_channels (int): Size of each output sample.
        regularizer (str or Regularizer, optional): The regulariser: a registered
            name, a class, or an instance. (default: :obj:`"gcn"`)
        bias (bool, optional): If set to :obj:`False`, the layer will not learn
            an additive bias. (default: :obj:`True`)
        solver (str, optional): :obj:`"closed"`, :obj:`"series"`, :obj:`"cg"` or
            :obj:`"lowrank"` for a quadratic regulariser; :obj:`"irls"` or a
            rule of the regulariser's own (:obj:`"emp"`, :obj:`"amp"`,
            :obj:`"fixed_point"`) for a non-quadratic one (see
            :class:`~torch_geometric_regcn.regularizers.IterativeRegularizer`);
            :obj:`None` takes the regulariser's default.
            :obj:`"closed"` raises where the coefficients make the system
            singular to working precision (see
            :func:`~torch_geometric_regcn.regularizers.base.closed_solve`).
            (default: :obj:`None`)
        cached (bool, optional): If set to :obj:`True`, the graph operators
            (and, for :obj:`"tsgcn"` without :obj:`semantic_edge_index`, the
            :math:`O(N^2 d)` semantic kNN graph of the first call's :obj:`x`:
            after dropout where that applies, and in a later layer of a
            network the hidden features of that call, kept while they change)
            are built on the first call and reused; only for transductive
            learning, with edge weights that want no gradient. Each later call checks,
            by one pass over them, that its graph inputs hold the numbers
            they held then (writes through :obj:`.data` or a NumPy view
            included; see :class:`~torch_geometric_regcn.nn.conv.graph_cache.GraphCache`)
            and raises otherwise; after :meth:`double` or :meth:`to` into
            another dtype or device, the operators are built again for it
            (the semantic kNN graph is kept).
            (default: :obj:`False`)
        tol (float, optional): Relative residual of :obj:`"cg"` (also of
            each reweighting of :obj:`"irls"`; the papers' rules of the
            non-quadratic regularisers run their :obj:`K` steps and ignore
            it). (default: :obj:`1e-6`)
        max_iter (int, optional): Iteration cap of :obj:`"cg"` (as
            :obj:`tol`).
            (default: :obj:`1000`)
        learn (Sequence[str], optional): Coefficients to learn, from their
            given values, e.g. :obj:`("alpha", "beta")` for :obj:`"tsgcn"`
            (see :meth:`~torch_geometric_regcn.regularizers.Regularizer.learn`;
            not with :obj:`solver="lowrank"`, whose factors are precomputed).
            Keep them out of weight decay: an optimizer that decays them
            warns at its first step (see ``docs/learnable.md``).
            (default: :obj:`()`)
        root_weight (bool, optional): If set to :obj:`True`, the layer adds
            the transformed ego features :math:`\mathbf{X}\mathbf{\Theta}_{\mathrm{root}}`
            (ego/neighbour separation). (default: :obj:`False`)
        directed (bool, optional): If set to :obj:`True`, the graph is read
            as directed (:obj:`edge_index[0]` the source; an edge index
            tensor, not a sparse adjacency), with one weight
            per direction and the regulariser's coefficients shared (see
            above); solvers
            :obj:`"series"` and :obj:`"closed"`, regularisers that read the
            adjacency only, no explainer masks. (default: :obj:`False`)
        **coefficients (optional): The regulariser's coefficients, e.g.
            :obj:`K=10, alpha=0.1` for :obj:`"appnp"`.

    Shapes:
        - **input:**
          node features :math:`(|\mathcal{V}|, F_{in})`,
          edge indices :math:`(2, |\mathcal{E}|)` or a sparse adjacency
          :math:`(|\mathcal{V}|, |\mathcal{V}|)` (:obj:`torch.sparse` or
          :class:`torch_sparse.SparseTensor`, as PyG's :obj:`adj_t`; the
          layer symmetrises the graph, so either orientation gives the same
          result),
          edge weights :math:`(|\mathcal{E}|)` *(optional)*,
          semantic edge indices :math:`(2, |\mathcal{E}_X|)` *(optional)*,
          factors :math:`(|\mathcal{V}|, r)` and :math:`(|\mathcal{V}|, r)`
          *(optional)*, for :obj:`solver="lowrank"`
        - **output:** node features :math:`(|\mathcal{V}|, F_{out})`

    Example:
        .. code-block:: python

            from torch_geometric_regcn import RegularizerConv, SemanticGraph
            from torch_geometric_regcn.datasets import contextual_sbm

            data = contextual_sbm(num_nodes=500, num_features=16)
            conv = RegularizerConv(16, 8, regularizer='appnp', K=10, alpha=0.1)
            out = conv(data.x, data.edge_index)  # [500, 8]

            # tsGCN, exact up to the tolerance, by conjugate gradient:
            data = SemanticGraph(k=10)(data)
            conv = RegularizerConv(16, 8, regularizer='tsgcn', solver='cg',
                                   alpha=1.0, beta=0.2)
            out = conv(data.x, data.edge_index,
                       semantic_edge_index=data.semantic_edge_index)  # [500, 8]
    """
    # Defaults for modules pickled before these options existed (see __setstate__).
    root_weight: bool = False
    directed: bool = False

    def __init__(self, in_channels: int, out_channels: int,
                 regularizer: Union[str, Regularizer, Type[Regularizer]] = 'gcn',
                 bias: bool = True, solver: Optional[str] = None, cached: bool = False,
                 tol: float = 1e-6, max_iter: int = 1000, learn: Sequence[str] = (),
                 root_weight: bool = False, directed: bool = False,
                 **coefficients: Any) -> None:
        super().__init__(aggr='add')
        in_channels, out_channels = check_channels(in_channels=in_channels,
                                                   out_channels=out_channels)
        self.in_channels = in_channels
        self.out_channels = out_channels
        check_stopping_rule(tol, max_iter)
        self.regularizer = get(regularizer, **coefficients)
        self.solver = self.regularizer.check_solver(solver)
        if isinstance(learn, str):
            learn = (learn,)
        elif not isinstance(learn, (list, tuple)) or not all(isinstance(n, str) for n in learn):
            raise TypeError(f"'learn' must be a coefficient's name or a sequence of them, "
                            f"e.g. ('alpha', 'beta') (got {learn!r})")
        learn = tuple(learn)
        if learn and self.solver == 'lowrank':
            raise ValueError("'learn' needs solver 'cg', 'series' or 'closed' (got "
                             "solver='lowrank', whose factors are computed for fixed "
                             "coefficients)")
        self.root_weight = check_flag('root_weight', root_weight)
        self.directed = check_flag('directed', directed)
        self._check_directed()
        self.cached = check_flag('cached', cached)
        # Last of the checks: it changes the regulariser, which may be the caller's.
        self.regularizer.learn(*learn)
        self.regularizer.initialize_channels(out_channels)
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self._graph_cache = GraphCache()
        # While a product is explained: the masking and the operator.
        self._masking: Optional[Tuple[edge_masking.EdgeMasking, Tensor]] = None
        self.lin = Linear(in_channels, out_channels, bias=False, weight_initializer='glorot')
        #: the weights of the out-neighbours' regulariser (directed=True; lin: the in-neighbours')
        self.lin_out = (Linear(in_channels, out_channels, bias=False, weight_initializer='glorot')
                        if self.directed else None)
        self.lin_root = (Linear(in_channels, out_channels, bias=False,
                                weight_initializer='glorot') if self.root_weight else None)
        if check_flag('bias', bias):
            self.bias = torch.nn.Parameter(torch.empty(out_channels))
        else:
            self.register_parameter('bias', None)
        self._register_load_state_dict_pre_hook(upgrade_0_1_state_dict, with_module=True)
        self.register_load_state_dict_post_hook(_clear_cache_after_loading)
        # A learned coefficient the caller set stays where it was set (the regulariser's
        # own reset_parameters, a user's override included, returns it to its start).
        learned = self.regularizer.learned_parameters()
        kept = [p.detach().clone() for p in learned]
        self.reset_parameters()
        with torch.no_grad():
            for param, value in zip(learned, kept):
                param.copy_(value)

    def reset_parameters(self) -> None:
        r"""Resets all learnable parameters of the module, the regulariser's
        included (learned coefficients return to the values they were
        learned from), and the cache."""
        super().reset_parameters()
        for lin in (self.lin, self.lin_out, self.lin_root):
            if lin is not None:
                lin.reset_parameters()
        self.regularizer.reset_parameters()
        zeros(self.bias)
        self._clear_cache()

    @property
    def extra(self) -> Optional[torch.nn.Module]:
        r"""Deprecated: the regulariser's trainable part, now
        :obj:`regularizer.gate` (DAGNN)."""
        warn_deprecated("'RegularizerConv.extra' is deprecated; the trainable part lives in "
                        "the regulariser (e.g. 'conv.regularizer.gate')")
        return getattr(self.regularizer, 'gate', None)

    def __getstate__(self) -> Dict[str, Any]:
        # Copies and pickles start with an empty cache of their own (a shallow
        # copy would otherwise share this layer's GraphCache).
        return {**super().__getstate__(), '_graph_cache': GraphCache(), '_masking': None}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)
        for name in ('lin_out', 'lin_root'):  # a module pickled before these options
            if name not in self._modules and name not in self.__dict__:
                self.__dict__[name] = None

    def _check_directed(self) -> None:
        r"""With :obj:`directed=True`, the solver and what the regulariser
        reads: checked when built and again before each forward pass, as
        either may be changed since (a coefficient set, a checkpoint loaded)."""
        if not self.directed:
            return
        if not {'series', 'closed'} & set(self.regularizer.solvers):
            raise ValueError(f"directed=True is not available for {self.regularizer!r}: it "
                             f"has neither solver='series' nor 'closed', which the directed "
                             f"operators need (its energy is over undirected edges); use "
                             f"directed=False")
        if self.solver not in ('series', 'closed'):
            raise ValueError(f"directed=True needs solver='series' or 'closed' (got "
                             f"solver={self.solver!r}): the directed operators are not "
                             f"symmetric, and conjugate gradient needs a symmetric "
                             f"positive definite system")
        if self.regularizer.requires(self.solver) != {'adj'}:
            raise ValueError(f"directed=True needs a regulariser that reads the adjacency "
                             f"only ({self.regularizer!r} with solver={self.solver!r} "
                             f"reads {sorted(self.regularizer.requires(self.solver))})")

    def reset_cache(self) -> None:
        r"""Forgets the graph cached by :obj:`cached=True`, so the next call
        may pass another graph."""
        self._clear_cache()

    def _clear_cache(self) -> None:
        self._graph_cache.clear()

    def graph(self, x: Tensor, edge_index: Any, edge_weight: Optional[Tensor] = None,
              **graph: Optional[Tensor]) -> GraphOperators:
        r"""The graph operators of this layer's regulariser and solver: only
        what they :meth:`~torch_geometric_regcn.regularizers.Regularizer.requires`
        is kept, and each operator is built on first use (and kept if
        :obj:`cached=True`)."""
        # The factors are not part of the cached graph: they may be learned or
        # edited, and the Woodbury cache follows them.
        inputs = {'edge_index': edge_index, 'edge_weight': edge_weight,
                  **{k: v for k, v in graph.items() if not k.startswith('lowrank_')}}
        cached, dtype = self._graph_cache.graph, solve_dtype(x.dtype)
        if self.cached and 'adj' in self.regularizer.requires(self.solver) \
                and wanting_gradients(edge_index, edge_weight):
            raise ValueError(f"{self.__class__.__name__}(cached=True) keeps the operators "
                             f"built on its first call, which carry no gradient to a later "
                             f"call's edge weights; to learn or attack the edge weights, use "
                             f"cached=False (or detach them)")
        needs = self.regularizer.requires(self.regularizer.check_solver(self.solver))
        if self.cached and cached is not None:
            self._graph_cache.check(self.__class__.__name__, x.size(0), inputs)
            # Kept unless the layer was cast or moved (.double(), .to(device)),
            # its regulariser now reads other inputs (tsGCN's beta from 0 to
            # > 0 adds the semantic graph), or it was built in inference mode
            # (its tensors cannot be saved for a later backward pass).
            if (cached.dtype, cached.device) == (dtype, x.device) \
                    and self._graph_cache.needs == needs \
                    and (self._graph_cache.inference <= torch.is_inference_mode_enabled()):
                if cached.lowrank is not None:
                    w, v = graph.get('lowrank_w'), graph.get('lowrank_v')
                    if w is None or v is None:
                        raise ValueError("solver='lowrank' needs the factors on every call: "
                                         "pass both 'lowrank_w=' and 'lowrank_v='")
                    check_factors(w, v, x.size(0), ('lowrank_w', 'lowrank_v'))
                    cached.lowrank = (w, v)
                return cached
            # Else the same graph is built again, for what is needed now.
        ops = build_graph(self.regularizer, edge_index, x.size(0), edge_weight,
                          dtype, x=x, solver=self.solver, **graph)
        if self.cached and cached is not None:
            ops.adopt_semantic_graphs(cached)
        if ops.semantic_edge_index is None and ops.x is not None and not self.cached:
            warn_once(self, 'semantic_knn', (
                f"{self.__class__.__name__} builds the semantic kNN graph from its input "
                f"features on every call (O(N^2 d), and from hidden features after the "
                f"first layer); pass 'semantic_edge_index=' (see SemanticGraph), or set "
                f"cached=True to keep the first call's (each layer warns once)"))
        if self.cached:  # the inputs it read: a later call may leave out the others
            read = {name: value for name, value in inputs.items()
                    if ('adj' in needs or name not in ('edge_index', 'edge_weight'))
                    and ('semantic' in needs or not name.startswith('semantic'))}
            self._graph_cache.store(ops, x.size(0), read, needs)
        return ops

    def forward(self, x: Tensor, edge_index: Any, edge_weight: Optional[Tensor] = None,
                semantic_edge_index: Optional[Tensor] = None,
                lowrank_w: Optional[Tensor] = None,
                lowrank_v: Optional[Tensor] = None, batch: Optional[Tensor] = None,
                batch_size: Optional[int] = None) -> Tensor:
        r"""Runs the forward pass of the module. Each graph input is read only
        if the regulariser and solver need it
        (:meth:`~torch_geometric_regcn.regularizers.Regularizer.requires`).
        Before any work, :obj:`x` must have the dtype of the layer's
        parameters (outside :func:`torch.autocast`; :class:`TypeError`
        naming both fixes otherwise), the graph inputs must be tensors (a
        NumPy array is named with its conversion, :class:`TypeError`) and no
        input may lie on the :obj:`meta` device (:class:`ValueError`).

        Args:
            x (torch.Tensor): The node features, shape :obj:`[N, F_in]`.
            edge_index (torch.Tensor): The edge indices, shape :obj:`[2, E]`,
                or a :obj:`torch.sparse` adjacency matrix.
            edge_weight (torch.Tensor, optional): The edge weights, shape
                :obj:`[E]`. (default: :obj:`None`)
            semantic_edge_index (torch.Tensor, optional): tsGCN's semantic
                graph (see :class:`~torch_geometric_regcn.SemanticGraph`);
                without it, :obj:`"tsgcn"` builds it from :obj:`x`, on every
                call unless :obj:`cached=True` (and warns, once per layer):
                a kNN graph over all rows of :obj:`x`, so the graphs of a
                mini-batch of several graphs link to each other (pass each
                graph's own, e.g. :class:`~torch_geometric_regcn.SemanticGraph`
                as a transform).
                (default: :obj:`None`)
            lowrank_w (torch.Tensor, optional): The factor :math:`\mathbf{W}`
                of :class:`~torch_geometric_regcn.LowRankInverse`, for
                :obj:`solver="lowrank"`: one graph's (or those computed for
                a :class:`~torch_geometric.data.Batch` as a whole), or,
                with :obj:`batch`, those of graphs batched with their own
                factors. (default: :obj:`None`)
            lowrank_v (torch.Tensor, optional): The factor :math:`\mathbf{V}`,
                for :obj:`solver="lowrank"`. (default: :obj:`None`)
            batch (torch.Tensor, optional): The graph of each node,
                :obj:`[N]` (:obj:`data.batch` of a
                :class:`~torch_geometric.data.Batch`). :obj:`solver="lowrank"`
                then propagates each graph with its own factors (as
                :class:`~torch_geometric_regcn.TSGCNConv` does; without it,
                the factors of graphs batched with their own would couple
                them). :obj:`solver="cg"` then solves each graph as its
                own system, to its own tolerance (one test per column of
                the whole batch let a graph of small features stop far
                from it). The other solvers read the edges, which stay
                within each graph; every solver refuses a semantic graph
                built from :obj:`x` across the graphs (pass each graph's
                :obj:`semantic_edge_index`). (default: :obj:`None`, one
                graph)
            batch_size (int, optional): The number of graphs in
                :obj:`batch`. (default: :obj:`None`, :obj:`batch[-1] + 1`)
        """
        if not is_compiling():  # before any work: the inputs, then the layer's dtype
            check_node_features(x, finite=False)
            check_graph_types(edge_index, edge_weight, semantic_edge_index)
            check_materialized(x=x, edge_index=edge_index, edge_weight=edge_weight,
                               semantic_edge_index=semantic_edge_index, lowrank_w=lowrank_w,
                               lowrank_v=lowrank_v)
            check_module_materialized(self)
            check_layer_dtype('x', x, self.lin.weight.dtype, self.__class__.__name__)
            self._check_directed()
            batch_size = check_batch(batch, x.size(0), batch_size, x.device)
        # No tensor data read: refused under torch.compile too, where the kNN search
        # (run eagerly) would otherwise link the graphs silently.
        if batch is not None and semantic_edge_index is None \
                and 'semantic' in self.regularizer.requires(self.solver):
            raise ValueError("With 'batch' (a batch of graphs), pass each graph's "
                             "'semantic_edge_index' (SemanticGraph as a transform of the "
                             "dataset): built here from 'x', the kNN graph would link "
                             "the graphs to each other")
        if not is_compiling():
            if self.directed and not (isinstance(edge_index, Tensor)
                                      and edge_index.layout == torch.strided):
                raise ValueError(f"directed=True reads the direction of each edge from "
                                 f"'edge_index' as an edge index tensor [2, E] (edge_index[0] "
                                 f"the source; got {type(edge_index).__name__} with layout "
                                 f"{getattr(edge_index, 'layout', None)}): pass one instead "
                                 f"of a sparse adjacency, whose orientation (adj or PyG's "
                                 f"adj_t) it cannot tell")
        graph = self.graph(x, edge_index, edge_weight, semantic_edge_index=semantic_edge_index,
                           lowrank_w=lowrank_w, lowrank_v=lowrank_v)
        graph.propagate, graph.propagate_params = self._propagate_matrix, ()
        if batch is not None and is_compiling():  # unchecked above
            batch_size = graph_count(batch, batch_size)
        graph.batch = None if batch is None else (batch, batch_size)
        if self.explain:
            if self.directed:
                raise ValueError("Explaining a RegularizerConv with directed=True is not "
                                 "supported: its edge masks would apply to the symmetric "
                                 "operators; explain the undirected layer")
            if not (isinstance(edge_index, Tensor) and edge_index.layout == torch.strided):
                raise ValueError("Explaining a RegularizerConv needs 'edge_index' as an edge "
                                 "index tensor (the edge mask refers to its columns)")
            graph = self._masked_graph(x, graph, edge_index, edge_weight, semantic_edge_index,
                                       lowrank_w, lowrank_v)
        h = self.lin(x)
        if not is_compiling():
            check_projection(h, x)
        if self.directed:  # (R_in^-1 X Θ_in + R_out^-1 X Θ_out) / 2
            h_out = self.lin_out(x)
            if not is_compiling():  # its own weights may diverge too
                check_projection(h_out, x)
            out = 0.5 * (self._solve(h, graph.directed('in'))
                         + self._solve(h_out, graph.directed('out')))
        else:
            out = self._solve(h, graph)
        if self.lin_root is not None:
            root = self.lin_root(x)
            if not is_compiling():
                check_projection(root, x)
            out = out + root
        if self.bias is not None:
            out = out + self.bias
        return out

    def _masked_graph(self, x: Tensor, graph: GraphOperators, edge_index: Tensor,
                      edge_weight: Optional[Tensor], semantic_edge_index: Optional[Tensor],
                      lowrank_w: Optional[Tensor], lowrank_v: Optional[Tensor]
                      ) -> GraphOperators:
        # The graph of this call under the explainer's edge mask; the layer's
        # (cached) graph is never changed.
        if getattr(self, '_edge_mask', None) is None:  # explain=True set by hand
            raise ValueError(_NO_MASK)
        if isinstance(edge_index, Tensor) and edge_index.layout == torch.strided \
                and self._edge_mask.numel() != edge_index.size(-1):
            raise ValueError(f"The explainer's edge mask of this layer has "
                             f"{self._edge_mask.numel()} entries, but 'edge_index' has "
                             f"{edge_index.size(-1)} columns: the mask needs one entry per "
                             f"column of the edge_index the layer is called with")
        # A diverged explainer: the series solvers returned NaN, CG blamed the matrix.
        # Through a sigmoid, +-inf is a hard mask (1 or 0): NaN alone is refused then.
        if not is_compiling() and (bool(self._edge_mask.isnan().any()) if self._apply_sigmoid
                                   else not all_finite(self._edge_mask)):
            raise ValueError("The explainer's edge mask of this layer holds NaN"
                             f"{'' if self._apply_sigmoid else ' or infinite'} values (its "
                             "optimisation diverged): lower the explainer's learning rate or "
                             "restart it")
        masking = edge_masking.EdgeMasking(self._edge_mask, self._apply_sigmoid, edge_index)
        if isinstance(self.regularizer, IterativeRegularizer):
            # They read the graph's weights themselves (the incidence matrix):
            # the mask enters as the weights m w_ij of a graph built for this
            # call and renormalised, so every solver minimises one energy.
            weight = masking.entry_weights(edge_index, x.size(0))
            if edge_weight is not None:
                weight = weight * edge_weight
            masked = build_graph(self.regularizer, edge_index, x.size(0), weight,
                                 solve_dtype(x.dtype), x=x, solver=self.solver,
                                 semantic_edge_index=semantic_edge_index,
                                 lowrank_w=lowrank_w, lowrank_v=lowrank_v)
            masked.propagate = None  # plain products: the mask is in the weights already
            masked.batch = graph.batch  # each graph of a batch its own system, as unmasked
            return masked
        # The others scale the entries of every product by it (message
        # passing), on a shallow copy that shares the graph's operators. The
        # solvers' backward passes, which may run after the explainer has
        # cleared its masks, keep the masking of this call.
        if self.solver == 'lowrank':  # reads the factors only: the mask would change nothing
            raise ValueError("Explaining a RegularizerConv with solver='lowrank' is not "
                             "supported: its factors hold no edges to mask; explain the layer "
                             "with solver='cg' (or 'series', 'closed')")
        masked = copy.copy(graph)
        masked.masked = True  # "closed" forms its dense operators through the mask too
        masked.propagate = functools.partial(self._propagate_matrix, masking=masking)
        if self._edge_mask.requires_grad:
            masked.propagate_params = (self._edge_mask,)
        return masked

    def _solve(self, h: Tensor, graph: GraphOperators) -> Tensor:
        # The solvers run in float32 or above, also under torch.autocast.
        with torch.autocast(h.device.type, enabled=False):
            return self.regularizer.propagate(h.to(solve_dtype(h.dtype)), graph, self.solver,
                                              self.tol, self.max_iter).to(h.dtype)

    def _propagate_matrix(self, matrix: Tensor, x: Tensor,
                          masking: Optional[edge_masking.EdgeMasking] = None) -> Tensor:
        # One product of a solver with a sparse graph operator of this layer's
        # graph, as a message passing step: matrix @ x, fused (adj_t = matrix; the
        # operators are symmetric, but for the directed ones, where matrix @ x is meant).
        # A dense operator (a user's regulariser may return one) has no edges.
        if matrix.layout == torch.strided:
            return matrix @ x
        if masking is not None and not self.explain:  # masks cleared since the forward
            return masking.apply(matrix, x)
        self._masking = (masking, matrix) if masking is not None else None
        try:
            return self.propagate(matrix, x=x, edge_weight=None)
        finally:
            self._masking = None

    def message(self, x_j: Tensor, edge_weight: Tensor) -> Tensor:
        return edge_weight.view(-1, 1) * x_j

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor) -> Tensor:
        return adj_t @ x

    def explain_message(self, inputs: Tensor, dim_size: Optional[int]) -> Tensor:
        r"""Scales the messages of an operator's entries by the explainer's
        edge mask (see :class:`~torch_geometric_regcn.nn.conv.edge_masking.EdgeMasking`)."""
        if self._masking is None:
            raise ValueError(_NO_MASK)
        masking, matrix = self._masking
        return inputs * masking.weights(matrix).view(-1, 1).to(inputs.dtype)

    def __repr__(self) -> str:
        options = ''.join(f', {name}=True' for name in ('root_weight', 'directed')
                          if getattr(self, name))
        return (f'{self.__class__.__name__}({self.in_channels}, {self.out_channels}, '
                f'regularizer={self.regularizer}, solver={self.solver!r}{options})')


def _clear_cache_after_loading(module: RegularizerConv, incompatible_keys: Any) -> None:
    module._clear_cache()  # new coefficients may change the operators


# The explainer's edge masking has a module of its own.
__getattr__ = moved(__name__, {
    'EdgeMasking': 'torch_geometric_regcn.nn.conv.edge_masking:EdgeMasking'})
