from torch_geometric_regcn.linalg.eigenpairs import EigenPairs
from torch_geometric_regcn.linalg.eigensolver import extreme_eigenpairs
from torch_geometric_regcn.linalg.graph_operator import combine, normalized_adjacency
from torch_geometric_regcn.linalg.lanczos import block_lanczos
from torch_geometric_regcn.linalg.subspace_iteration import subspace_iteration
from torch_geometric_regcn.linalg.woodbury import (
    WoodburyCache,
    WoodburyCore,
    factors_from_eigenpairs,
    woodbury_apply,
    woodbury_core,
)

__all__ = ['EigenPairs', 'WoodburyCache', 'WoodburyCore', 'block_lanczos', 'combine',
           'extreme_eigenpairs', 'factors_from_eigenpairs', 'normalized_adjacency',
           'subspace_iteration', 'woodbury_apply', 'woodbury_core']
