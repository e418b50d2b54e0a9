r"""Building the :class:`GraphOperators` a regulariser needs from PyG inputs."""
from typing import Any, Optional

import torch
from torch import Tensor
from torch_geometric.utils import to_edge_index

from torch_geometric_regcn.linalg.graph_operator import combine, normalized_adjacency
from torch_geometric_regcn.regularizers.base import GraphOperators, Regularizer
from torch_geometric_regcn.transforms.cosine_knn import knn_graph_cosine


def _as_edge_index(edge_index: Any, edge_weight: Optional[Tensor]):
    if isinstance(edge_index, Tensor) and edge_index.layout != torch.strided:
        if edge_weight is not None:
            raise ValueError("Pass 'edge_weight' only with an 'edge_index' tensor; a sparse "
                             "adjacency carries its own weights")
        return to_edge_index(edge_index)
    return edge_index, edge_weight


def adjacency(edge_index: Any, num_nodes: int, edge_weight: Optional[Tensor] = None,
              dtype: torch.dtype = torch.float32) -> Tensor:
    r"""The renormalised adjacency :math:`\hat{\mathbf{A}}` as sparse CSR, from
    an :obj:`edge_index` (with optional :obj:`edge_weight`) or a
    :obj:`torch.sparse` adjacency matrix."""
    edge_index, edge_weight = _as_edge_index(edge_index, edge_weight)
    if edge_weight is not None:
        edge_weight = edge_weight.to(dtype)
    return combine([normalized_adjacency(edge_index, num_nodes, edge_weight, dtype)], [1.0],
                   num_nodes)


def build_graph(regularizer: Regularizer, edge_index: Any, num_nodes: int,
                edge_weight: Optional[Tensor] = None, dtype: torch.dtype = torch.float32,
                semantic_edge_index: Optional[Tensor] = None, x: Optional[Tensor] = None,
                lowrank_w: Optional[Tensor] = None,
                lowrank_v: Optional[Tensor] = None) -> GraphOperators:
    r"""Prepares the operators :obj:`regularizer` uses; the semantic graph only
    when it asks for one (:obj:`needs_semantic`), from
    :obj:`semantic_edge_index` or else from the cosine :obj:`k`-NN graph of
    :obj:`x`."""
    ops = GraphOperators(adjacency(edge_index, num_nodes, edge_weight, dtype))
    if getattr(regularizer, 'needs_semantic', False):
        if semantic_edge_index is None:
            if x is None:
                raise ValueError(f"Regularizer '{regularizer.name}' needs a semantic graph: "
                                 f"pass 'semantic_edge_index=' (see SemanticGraph)")
            semantic_edge_index = knn_graph_cosine(x.detach(), regularizer.k)
        ops.semantic = adjacency(semantic_edge_index, num_nodes, None, dtype)
    if lowrank_w is not None or lowrank_v is not None:
        if lowrank_w is None or lowrank_v is None:
            raise ValueError("Pass both 'lowrank_w' and 'lowrank_v' (see LowRankInverse)")
        ops.lowrank = (lowrank_w, lowrank_v)
    return ops
