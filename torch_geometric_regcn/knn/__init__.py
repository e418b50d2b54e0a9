r"""The cosine k-nearest-neighbour graph of node features: exact in row
blocks or approximate by an inverted file index, in one process or on row
shards over :mod:`torch.distributed`."""
from torch_geometric_regcn.knn.cosine import (
    EXACT_LIMIT,
    KNN_METHODS,
    exact_knn_cosine,
    ivf_knn_cosine,
    knn_graph_cosine,
    normalize_rows,
    spherical_kmeans,
)
from torch_geometric_regcn.knn.sharded import sharded_knn_cosine, sharded_knn_graph_cosine

__all__ = ['EXACT_LIMIT', 'KNN_METHODS', 'exact_knn_cosine', 'ivf_knn_cosine',
           'knn_graph_cosine', 'normalize_rows', 'sharded_knn_cosine',
           'sharded_knn_graph_cosine', 'spherical_kmeans']
