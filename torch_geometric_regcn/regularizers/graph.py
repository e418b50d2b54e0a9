r"""The graph operators a regulariser reads, built from PyG inputs on first use."""
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    FrozenSet,
    Hashable,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

import torch
from torch import Tensor
from torch_geometric.typing import WITH_TORCH_SPARSE, SparseTensor
from torch_geometric.utils import to_edge_index

from torch_geometric_regcn.distributed.collectives import (
    Group,
    agree_arguments,
    all_gather_ints,
    check_group,
)
from torch_geometric_regcn.distributed.row_partition import (
    RowPartition,
    check_node_id,
    check_node_id_sums,
    check_partition,
    node_id_sums,
)
from torch_geometric_regcn.knn import knn_graph_cosine
from torch_geometric_regcn.linalg.adjoint_product import symmetric_matmul
from torch_geometric_regcn.linalg.cg import first_order
from torch_geometric_regcn.linalg.directed_adjacency import DIRECTIONS, directed_adjacency
from torch_geometric_regcn.linalg.graph_operator import (
    Edges,
    combine,
    coo_entries,
    normalized_adjacency,
    normalized_rows,
)
from torch_geometric_regcn.linalg.sharded_matrix import ShardedMatrix
from torch_geometric_regcn.utils.compat import is_compiling
from torch_geometric_regcn.utils.sparse import csr_matrix, sparse_identity
from torch_geometric_regcn.utils.validation import (
    check_choice,
    check_dtype,
    check_edge_index,
    check_factors,
    check_int,
    check_real_dtype,
    check_seed,
    check_tensor,
)

if TYPE_CHECKING:
    from torch_geometric_regcn.regularizers.base import Regularizer

T = TypeVar('T')

#: A sparse operator of a graph: CSR in one process, this rank's rows on shards.
Operator = Union[Tensor, ShardedMatrix]

#: What a solver may read of a graph (see :meth:`Regularizer.requires`):
#: :obj:`"adj"` the renormalised adjacency, :obj:`"semantic"` the semantic
#: graph's, :obj:`"lowrank"` precomputed low-rank factors.
REQUIREMENTS = ('adj', 'semantic', 'lowrank')


def is_sparse_tensor(edge_index: Any) -> bool:
    r"""Whether :obj:`edge_index` is a :class:`torch_sparse.SparseTensor`
    (only possible where torch-sparse is installed)."""
    return WITH_TORCH_SPARSE and isinstance(edge_index, SparseTensor)


#: How every graph input is read where it holds an entry more than once: the
#: entries add up (see :func:`adjacency_edges`).
DUPLICATES = 'sum'


def as_edge_index(edge_index: Any,
                  edge_weight: Optional[Tensor]) -> Tuple[Tensor, Optional[Tensor]]:
    r"""The entries of a graph input as :obj:`(edge_index, edge_weight)`,
    without touching it: a :obj:`torch.sparse` COO matrix is read through a
    coalesced copy (:meth:`torch.Tensor.coalesce`, which sums duplicates and
    returns the tensor itself when it is coalesced already), never through
    PyG's :func:`~torch_geometric.utils.to_edge_index`, which would mark the
    caller's tensor as coalesced without merging its duplicates."""
    if is_sparse_tensor(edge_index) or (isinstance(edge_index, Tensor)
                                        and edge_index.layout != torch.strided):
        if edge_weight is not None:
            raise ValueError("Pass 'edge_weight' only with an 'edge_index' tensor; a sparse "
                             "adjacency carries its own weights")
        if isinstance(edge_index, Tensor) and edge_index.layout == torch.sparse_coo:
            matrix = edge_index.coalesce()
            return matrix.indices(), matrix.values()
        return to_edge_index(edge_index)  # CSR, CSC, SparseTensor: read, not marked
    return edge_index, edge_weight


#: What a graph input :obj:`edge_index` may be, as the errors say.
GRAPH_INPUT = ('an edge index tensor [2, num_edges], a torch.sparse adjacency matrix or a '
               'torch_sparse.SparseTensor')


def check_graph_types(edge_index: Any = None, edge_weight: Any = None,
                      semantic_edge_index: Any = None) -> None:
    r"""The types of a layer's graph inputs, those given (:obj:`O(1)`, reads
    no values): each a tensor (:obj:`edge_index` also a
    :class:`torch_sparse.SparseTensor`); a NumPy array or a list is named
    with its conversion (:func:`~torch_geometric_regcn.utils.validation.check_tensor`)."""
    if edge_index is not None and not is_sparse_tensor(edge_index):
        check_tensor('edge_index', edge_index, GRAPH_INPUT)
    if edge_weight is not None:
        check_tensor('edge_weight', edge_weight, 'a tensor [num_edges]')
    if semantic_edge_index is not None:
        check_tensor('semantic_edge_index', semantic_edge_index, 'a tensor [2, num_edges]')


def check_graph_input(edge_index: Any, num_nodes: int,
                      edge_weight: Optional[Tensor] = None) -> None:
    r"""Checks an :obj:`edge_index` (with :obj:`edge_weight`), a
    :obj:`torch.sparse` adjacency matrix or a :class:`torch_sparse.SparseTensor`
    of a graph with :obj:`num_nodes` nodes."""
    if is_sparse_tensor(edge_index):
        sizes = (edge_index.size(0), edge_index.size(1))
        if sizes != (num_nodes, num_nodes):
            raise ValueError(f"The SparseTensor 'edge_index' must have shape [{num_nodes}, "
                             f"{num_nodes}] to match 'x' (got {list(sizes)})")
        if edge_weight is not None:
            raise ValueError("Pass 'edge_weight' only with an 'edge_index' tensor; a sparse "
                             "adjacency carries its own weights")
        return
    check_tensor('edge_index', edge_index, GRAPH_INPUT)
    if edge_index.layout == torch.strided:
        check_edge_index(edge_index, num_nodes, edge_weight)
    elif tuple(edge_index.shape) != (num_nodes, num_nodes):
        raise ValueError(f"The sparse adjacency 'edge_index' must have shape [{num_nodes}, "
                         f"{num_nodes}] to match 'x' (got {list(edge_index.shape)})")
    elif edge_weight is not None:
        raise ValueError("Pass 'edge_weight' only with an 'edge_index' tensor; a sparse "
                         "adjacency carries its own weights")


def adjacency_edges(edge_index: Any, num_nodes: int, edge_weight: Optional[Tensor] = None,
                    dtype: torch.dtype = torch.float32, name: str = 'edge_index',
                    partition: Optional[RowPartition] = None, group: Group = None) -> Edges:
    r"""The renormalised adjacency :math:`\hat{\mathbf{A}}` as
    :obj:`(edge_index, edge_weight)` in :obj:`dtype`
    (:func:`~torch_geometric_regcn.linalg.normalized_adjacency`), from an
    :obj:`edge_index` (with optional :obj:`edge_weight`) or a
    :obj:`torch.sparse` adjacency matrix; with a :obj:`partition` and
    :obj:`group`, this rank's rows of it.

    Entries that occur more than once add up (:data:`DUPLICATES`): a
    :obj:`torch.sparse` matrix is the matrix torch means (the one
    :meth:`~torch.Tensor.coalesce` gives), and an :obj:`edge_index` with
    repeated pairs is read as PyG's :class:`~torch_geometric.nn.conv.GCNConv`,
    :class:`~torch_geometric.nn.conv.SGConv` and
    :class:`~torch_geometric.nn.conv.APPNP` read it (their messages and
    degrees add up over the repeats, with or without :obj:`edge_weight`).
    The summed matrix is then made symmetric by the maximum, its self loops
    replaced by unit ones. The caller's tensors and their flags are never
    modified. On a graph without repeated entries the sum changes nothing:
    the result is the one of :obj:`reduce="max"`, to the bit."""
    edge_index, edge_weight, weight_name = _graph_arguments(edge_index, edge_weight, dtype, name,
                                                            group)
    return normalized_adjacency(edge_index, num_nodes, edge_weight, dtype, name, weight_name,
                                reduce=DUPLICATES, partition=partition, group=group)


def _graph_arguments(edge_index: Any, edge_weight: Optional[Tensor], dtype: torch.dtype,
                     name: str, group: Group = None) -> Tuple[Tensor, Optional[Tensor], str]:
    r"""An :obj:`edge_index` or :obj:`torch.sparse` adjacency as
    :obj:`(edge_index, edge_weight in dtype, the weight's name for errors)`.
    With a :obj:`group`, a failed check raises on every rank: the others
    are at the first agreement of :func:`normalized_rows`, which this
    rank's error joins."""
    try:
        return _edges_and_weights(edge_index, edge_weight, dtype, name)
    except (TypeError, ValueError) as error:
        if group is None:
            raise
        agree_arguments(group, 'normalized_adjacency', {}, error)
        raise


def _edges_and_weights(edge_index: Any, edge_weight: Optional[Tensor], dtype: torch.dtype,
                       name: str) -> Tuple[Tensor, Optional[Tensor], str]:
    weight_name = 'edge_weight'
    if is_sparse_tensor(edge_index) or edge_index.layout != torch.strided:
        weight_name = f'{name}.values()'
    edge_index, edge_weight = as_edge_index(edge_index, edge_weight)
    if edge_weight is not None:
        if isinstance(edge_weight, Tensor):
            check_real_dtype(weight_name, edge_weight)  # before the cast drops a part
        cast = edge_weight.to(dtype)
        if cast is not edge_weight and edge_weight.is_floating_point() \
                and bool((edge_weight.isfinite() & ~cast.isfinite()).any()):  # one sync
            raise ValueError(f"'{weight_name}' holds finite {edge_weight.dtype} weights beyond "
                             f"the range of the layer's {dtype} (largest magnitude "
                             f"{float(edge_weight.abs().max()):.3g}); rescale them or use a "
                             f"{edge_weight.dtype} layer ('.double()')")
        edge_weight = cast
    return edge_index, edge_weight, weight_name


def adjacency_rows(edge_index: Any, num_nodes: int, edge_weight: Optional[Tensor] = None,
                   dtype: torch.dtype = torch.float32, name: str = 'edge_index',
                   partition: Optional[RowPartition] = None, group: Group = None) -> Tensor:
    r""":func:`adjacency_edges`'s matrix as sparse CSR rows :obj:`[n, N]` with
    global, 32-bit column indices where they fit (the whole matrix in one
    process), built without a list of pairs
    (:func:`~torch_geometric_regcn.linalg.graph_operator.normalized_rows`)."""
    edge_index, edge_weight, weight_name = _graph_arguments(edge_index, edge_weight, dtype, name,
                                                            group)
    return normalized_rows(edge_index, num_nodes, edge_weight, dtype, name, weight_name,
                           reduce=DUPLICATES, partition=partition, group=group)[0]


def adjacency(edge_index: Any, num_nodes: int, edge_weight: Optional[Tensor] = None,
              dtype: torch.dtype = torch.float32, name: str = 'edge_index') -> Tensor:
    r"""The renormalised adjacency :math:`\hat{\mathbf{A}}` as sparse CSR (64-bit
    indices), from an :obj:`edge_index` (with optional :obj:`edge_weight`)
    or a :obj:`torch.sparse` adjacency matrix."""
    return _long_indices(adjacency_rows(edge_index, num_nodes, edge_weight, dtype, name))


def _long_indices(matrix: Tensor) -> Tensor:
    r"""A CSR :obj:`matrix` with 64-bit indices, as the operators built in one
    process are kept (its values shared)."""
    if matrix.crow_indices().dtype == torch.long:
        return matrix
    return csr_matrix(matrix.crow_indices().long(), matrix.col_indices().long(),
                      matrix.values(), matrix.shape)


def _shard_arguments(partition: RowPartition, dtype: torch.dtype, seed: int,
                     **inputs: Any) -> Dict[str, Any]:
    r"""What every rank's :class:`GraphOperators` must hold alike: the row
    blocks, the dtype, the seed of a search, and which inputs are given
    (each operator built from them runs its own collectives)."""
    return {"the row blocks of 'partition'": partition.bounds, "'dtype'": dtype,
            "'seed'": seed, **{f"whether '{name}' is given": value is not None
                               for name, value in inputs.items()}}


class GraphOperators:
    r"""The operators of one graph that a regulariser reads, each built on
    first use and then kept (a layer with :obj:`cached=True` keeps the whole
    object, so nothing is built twice):

    - :attr:`adj`: the renormalised adjacency :math:`\hat{\mathbf{A}}`
      (sparse CSR) of :obj:`edge_index`, repeated entries added up (PyG's
      reading of an :obj:`edge_index`, torch's of a sparse matrix; see
      :func:`adjacency_edges`), the semantic graph's likewise;
    - :meth:`semantic_adjacency`: that of the semantic graph
      :obj:`semantic_edge_index`, or, without one, of the cosine
      :math:`k`-NN graph of :obj:`x` (:math:`O(N^2 d)`, built once per
      :math:`k`);
    - :attr:`lowrank`: the factors :math:`(\mathbf{W}, \mathbf{V})` of
      :class:`~torch_geometric_regcn.LowRankInverse` (with
      :attr:`batch`, those of a batch of graphs, each its own);
    - :meth:`memo`: any operator derived from them (a regulariser's
      :math:`\mathbf{M}`, the Woodbury core);
    - :meth:`matmul`: the product of one of these sparse operators with
      node features, through the layer's
      :meth:`~torch_geometric.nn.conv.MessagePassing.propagate` when a layer
      set :attr:`propagate` (so PyG's hooks and explainers see it).

    With a :obj:`partition` and a process :obj:`group` the inputs are this
    rank's shard of the graph (edges of its rows with global indices, its
    rows of :obj:`x`; see ``docs/distributed.md``), and :attr:`adj`,
    :meth:`semantic_adjacency` and :meth:`sparse` give this rank's rows as a
    :class:`~torch_geometric_regcn.linalg.ShardedMatrix`; every rank must then
    ask for the same operators, in the same order.

    Args:
        num_nodes (int): The number of nodes :math:`N`.
        edge_index (torch.Tensor, optional): Edge indices :obj:`[2, E]` or a
            :obj:`torch.sparse` adjacency matrix. (default: :obj:`None`)
        edge_weight (torch.Tensor, optional): Edge weights :obj:`[E]`.
            (default: :obj:`None`)
        dtype (torch.dtype, optional): The dtype of the operators.
            (default: :obj:`torch.float32`)
        semantic_edge_index (torch.Tensor, optional): The semantic graph.
            (default: :obj:`None`)
        x (torch.Tensor, optional): Node features, for a semantic graph built
            on demand. (default: :obj:`None`)
        lowrank (tuple, optional): The factors :obj:`(w, v)`.
            (default: :obj:`None`)
        progress (bool, optional): Show a progress bar for an on-demand
            :math:`k`-NN search that takes longer than a second.
            (default: :obj:`True`)
        seed (int, optional): The seed of an approximate :math:`k`-NN
            search's centroids. (default: :obj:`0`)
        partition (RowPartition, optional): The row blocks of the shards,
            seen from this rank. (default: :obj:`None`, one process)
        group (torch.distributed.ProcessGroup, optional): The ranks holding
            the shards. (default: :obj:`None`)
        direction (str, optional): :obj:`"in"` or :obj:`"out"`: :attr:`adj`
            is then the directed operator of that direction
            (:func:`~torch_geometric_regcn.linalg.directed_adjacency`), the
            graph read as stored, not symmetrised; one process only.
            (default: :obj:`None`, the renormalised symmetric adjacency)
        node_id (torch.Tensor, optional): The original index of each row (a
            shard's :obj:`data.node_id`), by which a :math:`k`-NN graph built
            from :obj:`x` breaks ties
            (:func:`~torch_geometric_regcn.knn.knn_graph_cosine`) and the
            eigensolvers draw their random rows on a sharded operator
            (:attr:`ShardedMatrix.node_id
            <torch_geometric_regcn.linalg.ShardedMatrix.node_id>`).
            (default: :obj:`None`)
    """
    def __init__(self, num_nodes: int, edge_index: Any = None,
                 edge_weight: Optional[Tensor] = None, dtype: torch.dtype = torch.float32,
                 semantic_edge_index: Optional[Tensor] = None, x: Optional[Tensor] = None,
                 lowrank: Optional[Tuple[Tensor, Tensor]] = None, progress: bool = True,
                 seed: int = 0, *, partition: Optional[RowPartition] = None,
                 group: Group = None, direction: Optional[str] = None,
                 node_id: Optional[Tensor] = None) -> None:
        self.group, error, same = check_group(group), None, {}
        try:  # on shards agreed, so that a rank with a bad partition cannot leave the
            # others waiting in the first collective of the operators
            if direction is not None:
                direction = check_choice('direction', direction, DIRECTIONS)
                if self.group is not None or partition is not None:
                    raise ValueError("The directed operators ('direction') are built in one "
                                     "process only; drop 'partition' and 'group'")
            num_nodes = check_int('num_nodes', num_nodes, minimum=0)
            dtype = check_dtype('dtype', dtype)
            seed = check_seed(seed)
            if partition is not None or group is not None:
                partition = check_partition(partition, group, 'partition')
                if partition.num_nodes != num_nodes:
                    raise ValueError(f"'num_nodes' ({num_nodes}) must be the number of nodes "
                                     f"of the whole graph, {partition.num_nodes} in 'partition'")
                check_node_id(node_id, partition.num_local, num_nodes)
                same = _shard_arguments(partition, dtype, seed, edge_index=edge_index,
                                        edge_weight=edge_weight,
                                        semantic_edge_index=semantic_edge_index, x=x,
                                        lowrank=lowrank, node_id=node_id)
            rows = num_nodes if partition is None else partition.num_local
            if isinstance(x, Tensor) and (x.dim() == 0 or x.size(0) != rows):
                # its kNN graph would have other nodes than the graph
                raise ValueError(f"'x' has {x.size(0) if x.dim() else 0} rows but the graph "
                                 f"has {rows} {'nodes' if partition is None else 'rows here'}"
                                 f": pass one row of features per node")
        except (TypeError, ValueError) as failure:
            error = failure
        # node_id, distinct on each rank, must be a permutation over the ranks: its
        # hashed sums shared in the same collective.
        shared = agree_arguments(self.group, 'GraphOperators', same, error, share=node_id_sums(
            node_id if error is None else None, self.group))
        check_node_id_sums(shared, node_id, num_nodes, self.group)
        self.partition = partition if group is not None else None
        self.num_nodes = num_nodes
        if isinstance(edge_weight, Tensor) and edge_weight.requires_grad \
                and torch.is_grad_enabled():
            # torch's autograd through the values of a sparse CSR matrix, which
            # the operators are built from, gives a wrong second derivative.
            edge_weight = first_order(edge_weight, "The gradient with respect to "
                                                   "'edge_weight' (through sparse operators)")
        self.edge_index, self.edge_weight, self.dtype = edge_index, edge_weight, dtype
        self.semantic_edge_index, self.x, self.node_id = semantic_edge_index, x, node_id
        self.lowrank = lowrank
        #: :obj:`(batch, batch_size)` when the graph is a batch of graphs
        #: (set by a layer per call): :attr:`lowrank` then holds each graph's
        #: own factors (see :func:`~torch_geometric_regcn.linalg.woodbury_apply`),
        #: and :obj:`"cg"` solves each graph as its own system (see
        #: :func:`~torch_geometric_regcn.linalg.cg.conjugate_gradient`);
        #: :obj:`None`: one graph.
        self.batch: Optional[Tuple[Tensor, Optional[int]]] = None
        self.progress, self.seed, self.direction = progress, seed, direction
        self.derived: Dict[Hashable, Any] = {}
        self._versions: Dict[Hashable, Hashable] = {}  # of the entries built with a version
        #: :obj:`propagate(matrix, x)`, set by a layer: every sparse product
        #: of a solver goes through it. :obj:`None`: a plain sparse matmul.
        self.propagate: Optional[Callable[[Tensor, Tensor], Tensor]] = None
        #: Tensors on which :attr:`propagate` depends and that want gradients
        #: through implicit solves (an explainer's edge mask).
        self.propagate_params: Tuple[Tensor, ...] = ()
        #: Whether :attr:`propagate` applies an explainer's edge mask: the
        #: dense operators of :obj:`"closed"` are then formed through it
        #: (:meth:`dense`), so that the mask enters the whole system.
        self.masked = False

    def check_rows(self, name: str, x: Tensor) -> None:
        r"""Raises :class:`ValueError` unless :obj:`x` has one row per node of
        the graph (per row of this rank's shard), the rows its operators
        apply to."""
        rows = self.num_nodes if self.partition is None else self.partition.num_local
        if x.dim() == 0 or x.size(0) != rows:
            raise ValueError(f"'{name}' has {x.size(0) if x.dim() else 0} rows but the "
                             f"GraphOperators were built for {rows} "
                             f"{'nodes' if self.partition is None else 'rows of this shard'}: "
                             f"build them for this graph (build_graph)")

    def check_features(self, name: str, x: Tensor) -> None:
        r""":meth:`check_rows`, and :class:`TypeError` unless :obj:`x` has the
        dtype the operators were built in (:attr:`dtype`): no solver mixes
        two dtypes, so the error names both fixes before any work."""
        self.check_rows(name, x)
        if x.dtype != self.dtype:
            raise TypeError(f"'{name}' is {x.dtype} but the GraphOperators were built in "
                            f"{self.dtype}: build them in {x.dtype} "
                            f"(build_graph(..., dtype={x.dtype})) or pass "
                            f"'{name}.to({self.dtype})'")

    def dense(self, matrix: Tensor) -> Tensor:
        r"""The sparse operator :obj:`matrix` as a dense matrix: under an
        explainer's edge mask (:attr:`masked`) its product with the identity
        through :attr:`propagate`, which scales its entries by the mask
        (:math:`O(\mathrm{nnz} \cdot N)`, next to the :math:`O(N^3)` dense
        solve), else :meth:`~torch.Tensor.to_dense`."""
        if not self.masked:
            return matrix.to_dense()
        eye = torch.eye(matrix.size(1), dtype=matrix.dtype, device=matrix.device)
        return self.matmul(matrix, eye)

    def differentiable_inputs(self) -> Tuple[Tensor, ...]:
        r"""The graph inputs that want a gradient (:obj:`edge_weight`, or the
        values of a sparse :obj:`edge_index`) where autograd records one: the
        implicit solves (CG's backward) differentiate the operators built
        from them, which they receive no gradient through otherwise."""
        return wanting_gradients(self.edge_weight, self.edge_index)

    def matmul(self, matrix: Tensor, x: Tensor, symmetric: bool = False) -> Tensor:
        r"""The product :math:`\mathbf{A}\mathbf{X}` of a sparse operator
        :obj:`matrix` of this graph with node features :obj:`x`, through
        :attr:`propagate` when set. With :obj:`symmetric=True`, the caller's
        word that :obj:`matrix` is symmetric (the adjacencies of an undirected
        graph, :math:`\mathbf{S}`, a regulariser's :math:`\mathbf{M}`), the
        product's backward pass is one more product with it
        (:func:`symmetric_matmul`) in one process on an undirected graph, but
        where :attr:`propagate` applies an explainer's edge mask; otherwise,
        and on shards or directed operators, torch's own."""
        if not symmetric or self.group is not None or self.direction is not None:
            return matrix @ x if self.propagate is None else self.propagate(matrix, x)
        if self.propagate is not None and (self.masked or self.propagate_params):
            return self.propagate(matrix, x)
        return symmetric_matmul(matrix, x, self.propagate)

    def memo(self, key: Hashable, build: Callable[[], T], version: Hashable = 0) -> T:
        r"""Returns :obj:`build()`, computed on the first call for :obj:`key`
        and again when :obj:`version` changes (a regulariser's coefficients
        assigned since, for an operator built from them)."""
        if key not in self.derived or self._versions.get(key, 0) != version:
            self.derived[key] = build()
            self._versions[key] = version
        return self.derived[key]

    @property
    def adj(self) -> Operator:
        r"""The renormalised adjacency :math:`\hat{\mathbf{A}}` (sparse CSR;
        on shards, this rank's rows)."""
        if self.edge_index is None and self.group is None:
            raise ValueError("This regulariser needs the graph: pass 'edge_index'")
        if self.group is not None:
            return self.memo('adj', lambda: self.sparse([(self.adjacency_rows(False), 1.0)]))
        if self.direction is not None:
            def build() -> Tensor:
                edge_index, edge_weight = as_edge_index(self.edge_index, self.edge_weight)
                return directed_adjacency(edge_index, self.num_nodes, edge_weight, self.dtype,
                                          self.direction)
            return self.memo('adj', build)
        return self.memo('adj', lambda: adjacency(self.edge_index, self.num_nodes,
                                                  self.edge_weight, self.dtype))

    def directed(self, direction: str) -> 'GraphOperators':
        r"""The operators of the same graph read as directed along
        :obj:`direction` (:obj:`"in"` or :obj:`"out"`, see
        :func:`~torch_geometric_regcn.linalg.directed_adjacency`), built once
        and kept with this object, whose :attr:`propagate` they share: the
        adjacency only (no semantic graph, no factors); one process only."""
        if self.group is not None:
            raise ValueError("The directed operators are built in one process only")
        child = self.memo(('directed', direction), lambda: GraphOperators(
            self.num_nodes, self.edge_index, self.edge_weight, self.dtype,
            progress=self.progress, seed=self.seed, direction=direction))
        child.propagate, child.propagate_params = self.propagate, self.propagate_params
        return child

    def adjacency_edges(self) -> Edges:
        r""":attr:`adj` as :obj:`(edge_index, edge_weight)`: the entries of
        the CSR matrix in one process; on shards, this rank's rows, built
        here (the reversed edges and the halo's degrees exchanged once)."""
        if self.group is None:
            return coo_entries(self.adj)
        return self.memo(('edges', 'adj'), lambda: adjacency_edges(
            self._shard_edges(self.edge_index), self.num_nodes, self.edge_weight, self.dtype,
            partition=self.partition, group=self.group))

    def adjacency_rows(self, keep: bool = True) -> Tensor:
        r""":attr:`adj` as sparse CSR rows :obj:`[n, N]` with global column
        indices (in one process :attr:`adj` itself, :math:`N \times N`):
        the kept matrix when there is one; else built, and kept only with
        :obj:`keep` (without, it is freed with the caller's last reference,
        as :func:`~torch_geometric_regcn.regularizers.tsgcn_adjacency` frees
        the terms of :math:`\mathbf{S}` once added)."""
        if self.group is None and (keep or self.direction is not None or 'adj' in self.derived
                                   or self.edge_index is None):
            return self.adj
        key = ('rows', 'adj')
        if key in self.derived:
            return self.derived[key]

        def build() -> Tensor:
            return adjacency_rows(self._shard_edges(self.edge_index), self.num_nodes,
                                  self.edge_weight, self.dtype, partition=self.partition,
                                  group=self.group)
        return self.memo(key, build) if keep else build()

    def num_edges(self) -> int:
        r"""The number of entries of :obj:`edge_index` (zero without one), over
        every rank on shards."""
        edge_index = self.edge_index
        if edge_index is None:
            count = 0
        elif is_sparse_tensor(edge_index):
            count = edge_index.nnz()
        elif edge_index.layout == torch.strided:  # a malformed one is named when checked
            count = edge_index.size(1) if edge_index.dim() == 2 else edge_index.numel()
        else:
            count = edge_index._nnz()
        if self.group is None:
            return count
        return sum(c for (c,) in all_gather_ints([count], self.group))

    def semantic_edges(self, k: int) -> Tensor:
        r"""The semantic graph's :obj:`edge_index`: :obj:`semantic_edge_index`
        when given, else the symmetrised cosine :obj:`k`-NN graph of :obj:`x`
        (on shards: this rank's rows of it, built on the shards)."""
        if self.semantic_edge_index is not None:
            return self.semantic_edge_index
        if self.x is None:
            raise ValueError("The semantic graph needs node features 'x' or a precomputed "
                             "'semantic_edge_index' (see SemanticGraph)")
        shards = {} if self.group is None else {'partition': self.partition,
                                                'group': self.group}
        return self.memo(('knn', k), lambda: knn_graph_cosine(
            self.x.detach().to(self.dtype), k, progress=self.progress,
            generator=torch.Generator().manual_seed(self.seed), node_id=self.node_id,
            **shards))

    def adopt_semantic_graphs(self, other: 'GraphOperators') -> None:
        r"""Takes over the semantic graphs that :obj:`other` (the same graph,
        built in another dtype or on another device) searched from its
        features, moved to this graph's device, so that a layer cast or moved
        with :obj:`cached=True` keeps the graph it built on its first call
        and does not search again."""
        for key, edges in other.derived.items():
            if isinstance(key, tuple) and key[0] == 'knn':
                self.derived.setdefault(key, edges.to(self.device))

    def semantic_adjacency(self, k: int = 10) -> Operator:
        r"""The renormalised adjacency :math:`\hat{\mathbf{A}}_X` of the
        semantic graph (sparse CSR; on shards, this rank's rows); :obj:`k` is
        used only to build it from :obj:`x`."""
        key = 'semantic' if self.semantic_edge_index is not None else ('semantic', k)
        if self.group is not None:
            return self.memo(key, lambda: self.sparse([(self.semantic_adjacency_rows(k, False),
                                                        1.0)]))
        return self.memo(key, lambda: adjacency(self.semantic_edges(k), self.num_nodes, None,
                                                self.dtype, 'semantic_edge_index'))

    def semantic_adjacency_rows(self, k: int = 10, keep: bool = True) -> Tensor:
        r""":meth:`semantic_adjacency` as sparse CSR rows (see
        :meth:`adjacency_rows`)."""
        key = 'semantic' if self.semantic_edge_index is not None else ('semantic', k)
        if self.group is None and (keep or key in self.derived):
            return self.semantic_adjacency(k)
        if ('rows', key) in self.derived:
            return self.derived[('rows', key)]

        def build() -> Tensor:
            return adjacency_rows(self.semantic_edges(k), self.num_nodes, None, self.dtype,
                                  'semantic_edge_index', self.partition, self.group)
        return self.memo(('rows', key), build) if keep else build()

    def semantic_adjacency_edges(self, k: int = 10) -> Edges:
        r""":meth:`semantic_adjacency` as :obj:`(edge_index, edge_weight)`
        (see :meth:`adjacency_edges`)."""
        if self.group is None:
            return coo_entries(self.semantic_adjacency(k))
        key = 'semantic' if self.semantic_edge_index is not None else ('semantic', k)
        return self.memo(('edges', key), lambda: adjacency_edges(
            self.semantic_edges(k), self.num_nodes, None, self.dtype, 'semantic_edge_index',
            self.partition, self.group))

    def sparse(self, terms: Sequence[Tuple[Union[Edges, Tensor], float]]) -> Operator:
        r""":math:`\sum_i c_i \mathbf{M}_i` of operators given as
        :obj:`((edge_index, edge_weight), c_i)` pairs or as :obj:`(rows, c_i)`
        with CSR rows (:meth:`adjacency_rows`), terms whose coefficient is
        zero skipped: sparse CSR (64-bit indices) in one process, this rank's
        rows as a :class:`~torch_geometric_regcn.linalg.ShardedMatrix` on
        shards. Terms given as rows are added by chunks of rows into the
        result (:func:`~torch_geometric_regcn.linalg.graph_operator.combine`),
        without a list of pairs."""
        operators, coefficients = [op for op, _ in terms], [c for _, c in terms]
        if self.group is None:
            return combine(operators, coefficients, self.num_nodes)
        if all(isinstance(op, Tensor) for op in operators):
            matrix = ShardedMatrix.from_rows(combine(operators, coefficients, self.num_nodes,
                                                     compact=True), self.partition, self.group)
        else:
            terms = [(index, c * weight) for (index, weight), c in terms if c != 0]
            if not terms:
                raise ValueError('sparse() needs at least one non-zero coefficient')
            matrix = ShardedMatrix(torch.cat([index for index, _ in terms], dim=1),
                                   torch.cat([weight for _, weight in terms]), self.partition,
                                   self.group)
        matrix.node_id = self.node_id  # the eigensolvers' random rows, by original index
        return matrix

    def _shard_edges(self, edge_index: Optional[Tensor]) -> Tensor:
        r"""A shard's :obj:`edge_index`; none is an empty one."""
        if edge_index is None:
            return torch.empty(2, 0, dtype=torch.long, device=self.device)
        return edge_index

    @property
    def device(self) -> torch.device:
        r"""The device of the inputs."""
        for tensor in (self.edge_index, self.semantic_edge_index, self.x, *(self.lowrank or ())):
            if isinstance(tensor, Tensor):
                return tensor.device
        return torch.device('cpu')

    def identity(self) -> Tensor:
        r"""The identity (sparse COO)."""
        return self.memo('identity',
                         lambda: sparse_identity(self.num_nodes, self.dtype, self.device))

    def __repr__(self) -> str:
        # What tells two graphs apart without reading a tensor (no synchronisation).
        inputs = [name for name in ('edge_index', 'edge_weight', 'semantic_edge_index', 'x',
                                    'lowrank') if getattr(self, name) is not None]
        direction = '' if self.direction is None else f', direction={self.direction!r}'
        shards = '' if self.partition is None else f', num_parts={self.partition.num_parts}'
        return (f'{type(self).__name__}(num_nodes={self.num_nodes}, dtype={self.dtype}, '
                f'inputs={inputs}{direction}{shards})')


def wanting_gradients(*inputs: Any) -> Tuple[Tensor, ...]:
    r"""The floating-point tensors among :obj:`inputs` that want a gradient,
    where autograd records one (:obj:`()` under :func:`torch.no_grad`)."""
    if not torch.is_grad_enabled():
        return ()
    return tuple(t for t in inputs
                 if isinstance(t, Tensor) and t.is_floating_point() and t.requires_grad)


def build_graph(regularizer: 'Regularizer', edge_index: Any, num_nodes: int,
                edge_weight: Optional[Tensor] = None, dtype: torch.dtype = torch.float32,
                semantic_edge_index: Optional[Tensor] = None, x: Optional[Tensor] = None,
                lowrank_w: Optional[Tensor] = None, lowrank_v: Optional[Tensor] = None,
                solver: Optional[str] = None) -> GraphOperators:
    r"""The :class:`GraphOperators` of :obj:`regularizer` with :obj:`solver`
    (default: its default solver): only the inputs that solver
    :meth:`~torch_geometric_regcn.regularizers.Regularizer.requires` are kept,
    and missing ones raise an error here, before any work."""
    needs: FrozenSet[str] = regularizer.requires(regularizer.check_solver(solver))
    unknown = sorted(set(needs) - set(REQUIREMENTS))
    if unknown:
        raise ValueError(f"{type(regularizer).__name__}.requires() names {unknown}, which no "
                         f"graph input provides; choose from {REQUIREMENTS}")
    lowrank = None
    if 'lowrank' in needs:
        if lowrank_w is None or lowrank_v is None:
            raise ValueError(f"Regularizer '{regularizer.name or type(regularizer).__name__}' "
                             f"with solver='lowrank' needs the factors: pass both "
                             f"'lowrank_w=' and 'lowrank_v=' (see LowRankInverse)")
        check_factors(lowrank_w, lowrank_v, num_nodes, ('lowrank_w', 'lowrank_v'))
        lowrank = (lowrank_w, lowrank_v)
    semantic = 'semantic' in needs
    if semantic and semantic_edge_index is None and x is None:
        raise ValueError(f"Regularizer '{regularizer.name or type(regularizer).__name__}' "
                         f"needs the semantic graph: pass 'semantic_edge_index' (see "
                         f"SemanticGraph) or the node features 'x' to build it from")
    if 'adj' in needs and edge_index is None:
        raise ValueError(f"Regularizer '{regularizer.name or type(regularizer).__name__}' "
                         f"needs the graph: pass 'edge_index'")
    # The graph inputs are checked here, before any work (each is O(E)); under
    # torch.compile, when the operators are built (the solvers run eagerly).
    if 'adj' in needs and edge_index is not None and not is_compiling():
        check_graph_input(edge_index, num_nodes, edge_weight)
    if semantic and semantic_edge_index is not None and not is_compiling():
        check_edge_index(semantic_edge_index, num_nodes, name='semantic_edge_index')
    return GraphOperators(num_nodes, edge_index, edge_weight, dtype,
                          semantic_edge_index=semantic_edge_index if semantic else None,
                          x=x if semantic else None, lowrank=lowrank)
