r"""Deprecated: the cosine kNN search moved to :mod:`torch_geometric_regcn.knn`."""
from torch_geometric_regcn.utils.deprecation import moved

__getattr__ = moved(__name__, {
    'sharded_knn_cosine': 'torch_geometric_regcn.knn:sharded_knn_cosine',
    'sharded_knn_graph_cosine': 'torch_geometric_regcn.knn:sharded_knn_graph_cosine',
})
