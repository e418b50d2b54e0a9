r"""The semantic graph of tsGCN: a symmetrised cosine k-nearest-neighbour graph."""
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform

from torch_geometric_regcn.distributed.collectives import (
    Group,
    SharesGroup,
    agree_arguments,
    check_group,
)
from torch_geometric_regcn.distributed.partition import shard_node_id
from torch_geometric_regcn.distributed.row_partition import RowPartition, check_partition
from torch_geometric_regcn.knn import KNN_METHODS, knn_graph_cosine
from torch_geometric_regcn.transforms.attributes import (
    EDGE_INDEX,
    check_homogeneous,
    check_outputs,
    check_single_graph,
    computed_for_the_graph,
)
from torch_geometric_regcn.utils.validation import (
    check_choice,
    check_int,
    check_node_features,
    check_seed,
    real_features,
)

__all__ = ['SemanticGraph', 'knn_graph_cosine']


class SemanticGraph(SharesGroup, BaseTransform):
    r"""Adds the semantic graph of the tsGCN model from the `"Beyond Graph
    Convolutional Network: An Interpretable Regularizer-centered Optimization
    Framework" <https://arxiv.org/abs/2301.04318>`_ paper (AAAI 2023) as
    :obj:`data.semantic_edge_index`: each node is linked to its :obj:`k`
    nearest neighbours under cosine similarity of the node features,

    .. math::
        \mathcal{N}_k(i) = \operatorname{top-}k_{j \neq i}\;
        \frac{\mathbf{x}_i^{\top}\mathbf{x}_j}{\|\mathbf{x}_i\|\,\|\mathbf{x}_j\|},

    and the graph is symmetrised (:math:`j \in \mathcal{N}_k(i)` or
    :math:`i \in \mathcal{N}_k(j)`). Ties (similarities equal as computed:
    two that are equal in exact arithmetic may round apart) go to the lower
    node index (on a shard of
    :func:`~torch_geometric_regcn.distributed.partition`, the lower
    original index, :obj:`data.node_id`, by which IVF also draws its random
    rows: METIS shards, which renumber the nodes, get the graph of one
    process); a zero
    feature row has similarity zero to every node.

    The search is :func:`~torch_geometric_regcn.knn.knn_graph_cosine`:
    exact, in row blocks (memory :math:`O(N \cdot \text{block\_size} + N
    k)`, plus :math:`\text{block\_size} \cdot d` for sparse features, no
    :math:`N \times N` matrix, time :math:`O(N^2 d)`), for dense or sparse
    :obj:`data.x`; or, for large graphs on CPU, approximate
    (:func:`~torch_geometric_regcn.knn.ivf_knn_cosine`, an inverted file
    index whose number of probed cells is tuned to a recall of 0.95), which
    cuts the time by the number of cells over the number of probes; its
    recall against the exact search is measured in
    ``benchmarks/results/scale.md`` and ``benchmarks/results/knn_scale.md``.

    Applied again, it replaces the :obj:`data.semantic_edge_index` it wrote
    before; an attribute of that name that is not an integer edge index
    :obj:`[2, E]` raises a :class:`ValueError` before the search, as does a
    :class:`~torch_geometric.data.Batch` of several graphs (a search over its
    rows would link them: apply it to each graph before batching).

    Args:
        k (int): The number of neighbours of each node.
        block_size (int, optional): Rows per block of the exact search.
            (default: :obj:`None`, about :math:`2^{24} / N` rows on the CPU,
            eight times that on CUDA)
        method (str, optional): :obj:`"exact"`, :obj:`"ivf"` (approximate),
            :obj:`"faiss"` (the same cells searched by faiss, one process;
            needs ``faiss-cpu``), or :obj:`"auto"`: exact on CUDA, for sparse
            features or up to 50,000 nodes, IVF otherwise. (default:
            :obj:`"auto"`)
        progress (bool, optional): Show a progress bar with ETA when the
            search takes longer than a second. (default: :obj:`True`)
        seed (int, optional): The seed of the IVF centroids, in
            :math:`[-2^{63}, 2^{64})`. (default: :obj:`0`)
        group (torch.distributed.ProcessGroup, optional): Build the graph on
            the ranks of :obj:`group`: the input is then this rank's shard of
            the graph, as :func:`~torch_geometric_regcn.distributed.partition`
            or :func:`~torch_geometric_regcn.distributed.load_partition` give
            it (:obj:`data.partition` must match :obj:`group`), and
            :obj:`data.semantic_edge_index` gets this rank's rows of the same
            graph as in one process, with global node indices. Every rank
            must call the transform; see ``docs/distributed.md``. (default:
            :obj:`None`, one process)

    Example:
        .. code-block:: python

            from torch_geometric_regcn import SemanticGraph
            from torch_geometric_regcn.datasets import contextual_sbm

            data = SemanticGraph(k=10)(contextual_sbm(num_nodes=500))
            data.semantic_edge_index  # [2, E]: symmetric, without self loops
    """
    def __init__(self, k: int, block_size: Optional[int] = None, method: str = 'auto',
                 progress: bool = True, seed: int = 0, group: Group = None) -> None:
        k = check_int('k', k)
        block_size = None if block_size is None else check_int('block_size', block_size)
        seed = check_seed(seed)
        check_choice('method', method, KNN_METHODS)
        self.k, self.block_size, self.method = k, block_size, method
        self.progress, self.seed = progress, seed
        self.group = check_group(group)

    def forward(self, data: Data) -> Data:
        error = x = partition = None
        same = {}
        try:  # with a group, a rank with a bad shard makes every rank raise, none waits
            check_homogeneous(data, 'SemanticGraph')
            x = self._features(data)
            check_single_graph(data, 'SemanticGraph', 'kNN graph over all rows')
            check_outputs(data, ['semantic_edge_index'], 'SemanticGraph', EDGE_INDEX)
            partition = getattr(data, 'partition', None)
            # A shard of several parts needs its group (else its kNN graph would
            # silently be that of its rows alone); any other 'partition' is not ours.
            if self.group is not None or isinstance(partition, RowPartition):
                partition = check_partition(partition, self.group)
            else:
                partition = None
                if data.num_nodes != x.size(0):  # the graph would miss nodes, or have extra
                    raise ValueError(f"'data.x' has {x.size(0)} rows but the graph has "
                                     f"{data.num_nodes} nodes (data.num_nodes); give one row "
                                     f"per node")
            same = {"the graph the shard was cut from ('data.graph_key', see partition())":
                    data.get('graph_key')}
        except (TypeError, ValueError) as exc:
            error = exc
        agree_arguments(self.group, 'SemanticGraph', same, error)
        data.semantic_edge_index = knn_graph_cosine(
            x, self.k, self.block_size, self.method, self.progress, self._generator(),
            partition=partition, group=self.group, node_id=shard_node_id(data, partition, x.device))
        computed_for_the_graph(data, ('semantic_edge_index',))  # a Batch of the one graph
        return data

    @staticmethod
    def _features(data: Data) -> Tensor:
        x = data.x
        if x is None:
            raise ValueError("SemanticGraph needs node features 'data.x'")
        x = real_features(x)  # counts or 0/1 bag-of-words features
        check_node_features(x, 'data.x')
        return x

    def _generator(self) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed)

    def __repr__(self) -> str:
        seed = '' if self.seed == 0 else f', seed={self.seed}'  # the IVF centroids' draw
        return f'{self.__class__.__name__}(k={self.k}, method={self.method!r}{seed})'
