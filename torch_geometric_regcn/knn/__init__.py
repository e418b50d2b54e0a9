r"""The cosine k-nearest-neighbour graph of node features: exact in row
blocks (:mod:`~torch_geometric_regcn.knn.exact`) or approximate by an
inverted file index (:mod:`~torch_geometric_regcn.knn.ivf`; optionally
searched by faiss, :mod:`~torch_geometric_regcn.knn.faiss_ivf`), symmetrised
(:mod:`~torch_geometric_regcn.knn.graph`). One implementation serves one
process (:obj:`group=None`) and row shards over the ranks of a process group
(:obj:`partition=`, :obj:`group=`)."""
from torch_geometric_regcn.knn.checks import EXACT_LIMIT, KNN_METHODS
from torch_geometric_regcn.knn.deprecated import (  # noqa: F401 (deprecated: not in __all__)
    sharded_knn_cosine,
    sharded_knn_graph_cosine,
)
from torch_geometric_regcn.knn.exact import exact_knn_cosine, normalize_rows
from torch_geometric_regcn.knn.faiss_ivf import faiss_knn_cosine
from torch_geometric_regcn.knn.graph import knn_graph_cosine
from torch_geometric_regcn.knn.ivf import ivf_knn_cosine, spherical_kmeans

__all__ = ['EXACT_LIMIT', 'KNN_METHODS', 'exact_knn_cosine', 'faiss_knn_cosine', 'ivf_knn_cosine',
           'knn_graph_cosine', 'normalize_rows', 'spherical_kmeans']
