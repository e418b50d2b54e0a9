from torch_geometric_regcn.linalg.graph_operator import combine, normalized_adjacency
from torch_geometric_regcn.linalg.subspace_iteration import EigenPairs, subspace_iteration
from torch_geometric_regcn.linalg.woodbury import factors_from_eigenpairs, woodbury_apply

__all__ = ['EigenPairs', 'combine', 'factors_from_eigenpairs', 'normalized_adjacency',
           'subspace_iteration', 'woodbury_apply']
