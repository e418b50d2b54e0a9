r"""Deprecated: the names of this module moved (see ``docs/architecture.md``)."""
from torch_geometric_regcn.utils.deprecation import moved

__getattr__ = moved(__name__, {
    'HaloPlan': 'torch_geometric_regcn.distributed.halo:HaloPlan',
    'ShardedMatrix': 'torch_geometric_regcn.linalg.sharded_matrix:ShardedMatrix',
    'gather_dense': 'torch_geometric_regcn.linalg.sharded_matrix:gather_dense',
    'gram': 'torch_geometric_regcn.linalg.blocks:gram',
    'column_norms': 'torch_geometric_regcn.linalg.blocks:column_norms',
    'tall_qr': 'torch_geometric_regcn.linalg.blocks:tall_qr',
    'sharded_normalized_adjacency':
        'torch_geometric_regcn.linalg.graph_operator:sharded_normalized_adjacency',
})
