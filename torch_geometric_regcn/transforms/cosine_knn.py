r"""Deprecated: the cosine kNN search moved to :mod:`torch_geometric_regcn.knn`."""
from torch_geometric_regcn.utils.deprecation import moved

__getattr__ = moved(__name__, {
    name: f'torch_geometric_regcn.knn:{name}'
    for name in ('EXACT_LIMIT', 'KNN_METHODS', 'exact_knn_cosine', 'ivf_knn_cosine',
                 'knn_graph_cosine', 'spherical_kmeans')})
