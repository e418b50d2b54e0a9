r"""Deprecated: the cosine kNN search moved to :mod:`torch_geometric_regcn.knn`."""
from torch_geometric_regcn.utils.deprecation import moved

__getattr__ = moved(__name__, {
    'EXACT_LIMIT': 'torch_geometric_regcn.knn:EXACT_LIMIT',
    'KNN_METHODS': 'torch_geometric_regcn.knn:KNN_METHODS',
    'exact_knn_cosine': 'torch_geometric_regcn.knn:exact_knn_cosine',
    'ivf_knn_cosine': 'torch_geometric_regcn.knn:ivf_knn_cosine',
    'knn_graph_cosine': 'torch_geometric_regcn.knn:knn_graph_cosine',
    'normalize_rows': 'torch_geometric_regcn.knn:normalize_rows',
    'spherical_kmeans': 'torch_geometric_regcn.knn:spherical_kmeans',
})
