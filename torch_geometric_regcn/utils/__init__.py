r"""The bottom layer: argument checks, sparse-matrix helpers and the cosine
k-nearest-neighbour search. Everything else may import from here; nothing
here imports from the rest of the package."""
from torch_geometric_regcn.utils.knn import (
    exact_knn_cosine,
    ivf_knn_cosine,
    knn_graph_cosine,
    normalize_rows,
)
from torch_geometric_regcn.utils.knn_distributed import (
    sharded_knn_cosine,
    sharded_knn_graph_cosine,
)
from torch_geometric_regcn.utils.sparse import (
    compact_csr,
    diagonal,
    sparse_identity,
    spectral_bound,
    to_csr,
)

__all__ = ['compact_csr', 'diagonal', 'exact_knn_cosine', 'ivf_knn_cosine', 'knn_graph_cosine',
           'normalize_rows', 'sharded_knn_cosine', 'sharded_knn_graph_cosine',
           'sparse_identity', 'spectral_bound', 'to_csr']
