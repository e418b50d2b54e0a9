r"""The numerical routines, which know no graph model: eigensolvers for the
low-rank factors, conjugate gradient with an implicit backward pass, the
Woodbury identity, block kernels and sparse graph operators. Every routine
takes sparse (CSR or COO) or dense :class:`torch.Tensor` s and runs on their
device; those with a ``group`` argument also on row shards over
:mod:`torch.distributed`."""
from torch_geometric_regcn.linalg.blocks import tall_qr
from torch_geometric_regcn.linalg.directed_adjacency import directed_adjacency
from torch_geometric_regcn.linalg.eigenpairs import EigenPairs
from torch_geometric_regcn.linalg.eigensolver import extreme_eigenpairs
from torch_geometric_regcn.linalg.graph_operator import (  # noqa: F401 (deprecated: not in __all__)
    combine,
    normalized_adjacency,
    sharded_normalized_adjacency,
)
from torch_geometric_regcn.linalg.incidence import Incidence, normalized_incidence
from torch_geometric_regcn.linalg.lanczos import block_lanczos
from torch_geometric_regcn.linalg.laplacian_spectrum import laplacian_eigenpairs
from torch_geometric_regcn.linalg.sharded_matrix import ShardedMatrix
from torch_geometric_regcn.linalg.subspace_iteration import subspace_iteration
from torch_geometric_regcn.linalg.woodbury import (
    WoodburyCache,
    WoodburyCore,
    factors_from_eigenpairs,
    woodbury_apply,
    woodbury_core,
)

__all__ = ['EigenPairs', 'Incidence', 'ShardedMatrix', 'WoodburyCache', 'WoodburyCore',
           'block_lanczos', 'combine', 'directed_adjacency', 'extreme_eigenpairs',
           'factors_from_eigenpairs', 'laplacian_eigenpairs', 'normalized_adjacency',
           'normalized_incidence', 'subspace_iteration', 'tall_qr', 'woodbury_apply',
           'woodbury_core']
