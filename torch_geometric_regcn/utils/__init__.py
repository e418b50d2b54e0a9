r"""The bottom layer: argument checks and sparse-matrix helpers. Everything
else may import from here; nothing here imports from the rest of the
package."""
from torch_geometric_regcn.utils.deprecation import moved
from torch_geometric_regcn.utils.sparse import (
    compact_csr,
    diagonal,
    sparse_identity,
    spectral_bound,
    to_csr,
)

__all__ = ['compact_csr', 'diagonal', 'sparse_identity', 'spectral_bound', 'to_csr']

# The cosine kNN search has its own home since 0.3: torch_geometric_regcn.knn.
__getattr__ = moved(__name__, {
    name: f'torch_geometric_regcn.knn:{name}'
    for name in ('exact_knn_cosine', 'ivf_knn_cosine', 'knn_graph_cosine', 'normalize_rows',
                 'sharded_knn_cosine', 'sharded_knn_graph_cosine')})
