r"""A PyG :class:`~torch_geometric.loader.NodeLoader` whose mini-batches are
the seed nodes alone: the loader of :class:`~torch_geometric_regcn.MiniBatchTSGCN`
and of models on precomputed features, with nothing beyond PyG itself."""
from typing import Any, Callable, Dict, Optional, Sequence, Union

import torch
from torch import Tensor
from torch.utils.data import RandomSampler
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader
from torch_geometric.sampler import BaseSampler, NodeSamplerInput, SamplerOutput

from torch_geometric_regcn.utils.validation import check_callable, check_index, type_name

#: Sparse layouts whose rows :func:`torch.index_select` cannot take.
_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
# What PyG's NodeLoader sets on each mini-batch (PyG 2.8.1); a sampler without neighbours
# or time leaves the last four None, which deletes an attribute of that name.
_RESERVED = ('n_id', 'batch_size', 'input_id', 'batch', 'seed_time', 'num_sampled_nodes',
             'num_sampled_edges')


class SeedNodeSampler(BaseSampler):
    r"""A :class:`~torch_geometric.sampler.BaseSampler` that samples no
    neighbours: the nodes of a mini-batch are its seed nodes, in their order
    (a node given twice appears twice), and it has no edges. PyG's
    :class:`~torch_geometric.loader.NodeLoader` with this sampler slices
    every node-level attribute of a :class:`~torch_geometric.data.Data` to
    the seed rows, what :class:`~torch_geometric_regcn.MiniBatchTSGCN` (the
    propagation through the whole graph is in its factors and summaries) and
    a model on :class:`~torch_geometric_regcn.PropagateFeatures`' outputs
    need. Unlike :class:`~torch_geometric.sampler.NeighborSampler`, it needs
    neither :obj:`pyg-lib` nor :obj:`torch-sparse`. Sampling costs nothing
    (the seed indices are passed on); :class:`SeedNodeLoader` builds the
    loader.
    """
    def sample_from_nodes(self, inputs: NodeSamplerInput) -> SamplerOutput:
        r"""Returns the seed nodes :obj:`inputs.node` as the sampled nodes,
        with no edges.

        Args:
            inputs (torch_geometric.sampler.NodeSamplerInput): The seed nodes
                of a mini-batch.
        """
        empty = torch.empty(0, dtype=torch.long, device=inputs.node.device)
        return SamplerOutput(node=inputs.node, row=empty, col=empty, edge=None,
                             metadata=(inputs.input_id, inputs.time))

    def sample_from_edges(self, index: Any, neg_sampling: Any = None) -> Any:
        r"""Not supported: the sampler starts from nodes only."""
        raise NotImplementedError(
            f"{type(self).__name__} samples seed nodes only, for node-level mini-batches "
            f"(SeedNodeLoader); for mini-batches of edges use PyG's LinkNeighborLoader")

    def __repr__(self) -> str:
        return f'{type(self).__name__}()'  # it has no arguments


def _edge_indices(data: Data) -> Dict[str, Tensor]:
    r"""The edge index attributes of :obj:`data`: dense :obj:`[2, E']` tensors
    under a key ending in :obj:`edge_index`."""
    return {key: value for key, value in data.items()
            if key.endswith('edge_index') and isinstance(value, Tensor)
            and value.layout == torch.strided and value.dim() == 2 and value.size(0) == 2}


class _EmptyEdgeIndices:
    r"""Writes an empty :obj:`[2, 0]` tensor for each edge index attribute
    that :obj:`data` holds when a mini-batch is made (their node numbers are
    the whole graph's), of its dtype, then applies :obj:`transform`. The
    empty tensor is written whether the batch still holds the key or not:
    PyG's :func:`filter_data` drops a :obj:`[2, E']` key that it takes for
    an edge-level attribute (:math:`E'` equal to the number of edges, which
    without :obj:`edge_index` is :math:`E'` itself) and slices or keeps the
    others. A class rather than a closure, so that worker processes started
    with :obj:`spawn` can pickle it."""
    def __init__(self, data: Data, transform: Optional[Callable]) -> None:
        self.data, self.transform = data, transform

    def __call__(self, batch: Data) -> Data:
        for key, value in _edge_indices(self.data).items():
            held = batch[key] if key in batch else None
            device = held.device if isinstance(held, Tensor) else value.device
            batch[key] = torch.empty((2, 0), dtype=value.dtype, device=device)
        return batch if self.transform is None else self.transform(batch)

    def __repr__(self) -> str:
        return f'{type(self).__name__}(transform={self.transform!r})'


def _check_seed_nodes(input_nodes: Optional[Tensor], num_nodes: int) -> None:
    r"""Checks the seed nodes, a boolean mask or node indices, against
    :obj:`num_nodes` before any batch is drawn (:math:`O(|\text{input\_nodes}|)`,
    once)."""
    if input_nodes is None:
        return
    if isinstance(input_nodes, Tensor) and input_nodes.dtype == torch.bool:
        if input_nodes.shape != (num_nodes,):
            raise ValueError(f"'input_nodes' as a boolean mask must have one entry per node "
                             f"[{num_nodes}] (got shape {list(input_nodes.shape)})")
        return
    check_index('input_nodes', input_nodes, num_nodes, graph="'data'")


class SeedNodeLoader(NodeLoader):
    r"""A data loader over mini-batches of seed nodes, without neighbours:
    PyG's :class:`~torch_geometric.loader.NodeLoader` with a
    :class:`SeedNodeSampler`, the loader of
    :class:`~torch_geometric_regcn.MiniBatchTSGCN` (whose propagation through
    the whole graph lies in the factors and summaries, so a batch needs its
    own rows only) and of any model on per-node inputs, such as an MLP on
    :class:`~torch_geometric_regcn.PropagateFeatures`' outputs. It is
    :class:`~torch_geometric.loader.NeighborLoader` with
    :obj:`num_neighbors=[0]`, but needs neither :obj:`pyg-lib` nor
    :obj:`torch-sparse`.

    Each mini-batch is a :class:`~torch_geometric.data.Data` of :math:`B`
    nodes that holds

    - every node-level attribute of :obj:`data`, sliced to the seed rows:
      :obj:`x`, :obj:`y`, :obj:`lowrank_w`, :obj:`lowrank_v`, :obj:`x1`,
      ... and the masks;
    - :obj:`n_id`, the seed nodes' indices in :obj:`data` (pass it to
      :class:`~torch_geometric_regcn.MiniBatchTSGCN`, which then checks the
      rows against those it was refreshed with), :obj:`batch_size`
      :math:`= B` and :obj:`input_id`, the seeds' positions in
      :obj:`input_nodes` (their indices when :obj:`input_nodes` is a mask);
    - no edges: :obj:`edge_index` and every other edge index attribute
      (a :obj:`[2, E']` tensor under a key ending in :obj:`edge_index`,
      such as :obj:`semantic_edge_index`, whose node numbers are the whole
      graph's) are empty :obj:`[2, 0]` of their dtype, whatever
      :math:`E'`, and edge-level attributes are left out;
    - anything else (graph-level values) as in :obj:`data`, shared, not
      copied.

    An epoch visits every entry of :obj:`input_nodes` once, in order or
    shuffled. A mini-batch costs :math:`O(B \cdot D)` time and memory for
    the :math:`D` numbers per node of the node-level attributes (one
    :func:`torch.index_select` each) and nothing per edge: no edge is read
    or copied. With :obj:`num_workers > 0` and :obj:`data` on the CPU
    (without sparse COO node attributes), the slicing runs by default in
    the worker processes (PyG's :obj:`filter_per_worker=True`), which
    pass each mini-batch to the main process through shared memory
    (workers started with :obj:`spawn` or
    :obj:`forkserver` also get :obj:`data`'s tensors through it, a file
    handle each); with :obj:`data` on a GPU it runs in the main process.
    Attributes in a compressed sparse layout (CSR, CSC) are refused:
    :func:`torch.index_select` cannot take their rows (COO can). The
    arguments are checked when the loader is built; edge index attributes
    are found in :obj:`data` when each mini-batch is made.

    Args:
        data (torch_geometric.data.Data): The whole graph. It must not hold
            an :obj:`n_id`, :obj:`batch_size`, :obj:`input_id`,
            :obj:`batch`, :obj:`seed_time`, :obj:`num_sampled_nodes` or
            :obj:`num_sampled_edges` of its own (PyG would slice the first
            into the mini-batches' :obj:`n_id`, which would then not index
            :obj:`data`, and overwrite or delete the others: a
            :class:`~torch_geometric.data.Batch`'s :obj:`batch` vector must
            be renamed), nor per-node values that PyG does not slice by
            row: a list with one entry per node, or an :obj:`[N, *]` tensor
            under a key containing :obj:`index` or :obj:`face`, which PyG
            concatenates along its last dimension.
        input_nodes (torch.Tensor, optional): The seed nodes: a
            :obj:`torch.BoolTensor` mask over the nodes (e.g.
            :obj:`data.train_mask`) or a :obj:`torch.LongTensor` (or list)
            of node indices. If set to :obj:`None`, all nodes.
            (default: :obj:`None`)
        transform (callable, optional): A function/transform that takes in
            a mini-batch and returns a transformed version, applied after its
            edge indices were emptied. (default: :obj:`None`)
        filter_per_worker (bool, optional): Whether to slice the mini-batches
            in each worker's subprocess (:obj:`True`) or in the main process
            (:obj:`False`); :obj:`None` infers it as
            :class:`~torch_geometric.loader.NodeLoader` does: :obj:`True`
            when :obj:`data` lies on the CPU, :obj:`False` when it lies on a
            GPU or holds a sparse COO node attribute (PyG's workers cannot
            pass one through shared memory; :obj:`True` then raises).
            Without :obj:`num_workers` the slicing runs in the main process
            either way. (default: :obj:`None`)
        **kwargs (optional): Additional arguments of
            :class:`torch.utils.data.DataLoader`, such as :obj:`batch_size`,
            :obj:`shuffle`, :obj:`drop_last`, :obj:`generator` or
            :obj:`num_workers`.

    Example:
        .. code-block:: python

            import torch
            import torch.nn.functional as F
            from torch_geometric_regcn import LowRankInverse, MiniBatchTSGCN
            from torch_geometric_regcn.datasets import contextual_sbm, paper_split
            from torch_geometric_regcn.loader import SeedNodeLoader

            data = contextual_sbm(num_nodes=500, num_classes=5, num_features=16)
            data = LowRankInverse(alpha=1.0, beta=0.2, rank=32)(data)
            data = paper_split(data, num_val=100, num_test=200)  # 20 labels per class
            loader = SeedNodeLoader(data, input_nodes=data.train_mask, batch_size=32,
                                    shuffle=True)
            model = MiniBatchTSGCN(16, 32, 5)  # the paper's network, mode A
            optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
            for epoch in range(5):
                model.refresh(data.x, data.lowrank_w, data.lowrank_v)
                for batch in loader:  # batch.x: [32, 16], batch.lowrank_w: [32, 32]
                    optimizer.zero_grad()
                    out = model(batch.x, batch.lowrank_w, batch.lowrank_v, batch.n_id)
                    F.cross_entropy(out, batch.y).backward()
                    optimizer.step()
    """
    def __init__(
        self,
        data: Data,
        input_nodes: Union[Tensor, Sequence[int], None] = None,
        transform: Optional[Callable] = None,
        filter_per_worker: Optional[bool] = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(data, Data):
            raise TypeError(f"{type(self).__name__} takes one graph as a "
                            f"torch_geometric.data.Data (got {type_name(data)}); for "
                            f"HeteroData or remote stores use PyG's NodeLoader with a sampler "
                            f"of their own")
        for key in _RESERVED:
            if key in data:
                raise ValueError(f"'data' holds an attribute '{key}' ({type_name(data[key])}), "
                                 f"a name PyG sets on each mini-batch ('n_id': the seed nodes' "
                                 f"indices in 'data'; {', '.join(_RESERVED[1:])}), which it "
                                 f"would slice, overwrite or delete: rename it (e.g. "
                                 f"'data.graph_id = data.{key}; del data.{key}') before "
                                 f"building the loader")
        check_callable('transform', transform)
        if isinstance(data.get('adj_t'), Tensor):
            # PyG's filter_data rebuilds 'adj_t' as a torch_sparse.SparseTensor and
            # fails inside PyG, on the first batch, for any torch.Tensor under that key.
            raise TypeError(f"'data.adj_t' is a torch.Tensor ({data.adj_t.layout}), which "
                            f"PyG's loaders cannot slice (they take 'adj_t' for a "
                            f"torch_sparse.SparseTensor); the batches hold no edges anyway: "
                            f"delete it ('del data.adj_t') or keep the graph as 'edge_index'")
        num_nodes = data.num_nodes
        sparse_keys = [key for key, value in data.items()
                       if isinstance(value, Tensor) and value.layout == torch.sparse_coo
                       and data.is_node_attr(key)]
        if sparse_keys and kwargs.get('num_workers', 0) and filter_per_worker is not False:
            # PyG's workers put each sliced attribute into shared memory, which a
            # sparse tensor has no storage for: slice those batches in the main process.
            if filter_per_worker:
                raise ValueError(f"'data.{sparse_keys[0]}' is a sparse COO tensor, whose rows "
                                 f"PyG's worker processes cannot pass on (shared memory): pass "
                                 f"filter_per_worker=False (or None) with num_workers > 0, or "
                                 f"make it dense ('.to_dense()')")
            filter_per_worker = False
        for key, value in data.items():
            if isinstance(value, Tensor) and value.layout in _COMPRESSED \
                    and data.is_node_attr(key):
                raise TypeError(f"'data.{key}' is a {value.layout} tensor, whose rows PyG "
                                f"cannot select for a batch; convert it with "
                                f"'data.{key} = data.{key}.to_sparse_coo()' (or '.to_dense()')")
            if isinstance(value, (list, tuple)) and len(value) == num_nodes:
                raise TypeError(f"'data.{key}' is a {type(value).__name__} with one entry per "
                                f"node, which PyG cannot slice for a batch; make it a tensor, "
                                f"or delete it before building the loader")
            if isinstance(value, Tensor) and value.layout == torch.strided \
                    and value.dim() >= 2 and value.size(0) == num_nodes \
                    and not key.endswith('edge_index') and data.__cat_dim__(key, value) == -1 \
                    and not data.is_node_attr(key) and not data.is_edge_attr(key):
                # PyG concatenates keys holding 'index' or 'face' along their last dimension.
                raise ValueError(f"'data.{key}' has one row per node (shape "
                                 f"{list(value.shape)}), "
                                 f"but PyG reads a key named like '{key}' as indexed along its "
                                 f"last dimension and would pass it to every mini-batch whole; "
                                 f"rename it (without 'index' or 'face') to have its rows "
                                 f"sliced, or delete it before building the loader")
        for key in ('input_time', 'node_sampler', 'neighbor_sampler', 'num_neighbors'):
            if key in kwargs:
                raise TypeError(f"{type(self).__name__} samples the seed nodes only, without "
                                f"time or neighbours: it takes no '{key}'; use PyG's "
                                f"NeighborLoader for neighbourhoods")
        if isinstance(input_nodes, (list, tuple)) and len(input_nodes) == 2 \
                and isinstance(input_nodes[0], str):  # PyG's (node type, nodes)
            raise TypeError(f"{type(self).__name__} loads homogeneous graphs ('Data'): "
                            f"'input_nodes' names the node type {input_nodes[0]!r}; pass the "
                            f"nodes alone, or (None, nodes)")
        if isinstance(input_nodes, tuple) and len(input_nodes) == 2 and input_nodes[0] is None:
            input_nodes = input_nodes[1]  # PyG's form for a homogeneous graph
        if isinstance(input_nodes, (list, tuple, range)):
            # A list of booleans stays a mask (a long tensor would read it as nodes 0 and 1).
            input_nodes = torch.as_tensor(list(input_nodes))
            if input_nodes.numel() == 0:
                input_nodes = input_nodes.long()
        _check_seed_nodes(input_nodes, data.num_nodes)
        super().__init__(data, SeedNodeSampler(), input_nodes=input_nodes,
                         transform=_EmptyEdgeIndices(data, transform),
                         filter_per_worker=filter_per_worker, **kwargs)

    def __repr__(self) -> str:
        # NodeLoader's is the bare class name: the seeds and the batching tell loaders apart.
        shuffle = ', shuffle=True' if isinstance(self.sampler, RandomSampler) else ''
        return (f'{type(self).__name__}(num_seeds={self.input_data.node.numel()}, '
                f'batch_size={self.batch_size}{shuffle})')
