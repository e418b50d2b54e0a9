r"""Deprecated: communication moved to :mod:`torch_geometric_regcn.distributed`."""
from torch_geometric_regcn.utils.deprecation import moved

__getattr__ = moved(__name__, {
    'Group': 'torch_geometric_regcn.distributed.collectives:Group',
    'DistributedError': 'torch_geometric_regcn.distributed.collectives:DistributedError',
    'rank_of': 'torch_geometric_regcn.distributed.collectives:rank_of',
    'size_of': 'torch_geometric_regcn.distributed.collectives:size_of',
    'check_group': 'torch_geometric_regcn.distributed.collectives:check_group',
    'all_reduce': 'torch_geometric_regcn.distributed.collectives:all_reduce',
    'all_gather': 'torch_geometric_regcn.distributed.collectives:all_gather',
    'all_gather_ints': 'torch_geometric_regcn.distributed.collectives:all_gather_ints',
    'all_to_all': 'torch_geometric_regcn.distributed.collectives:all_to_all',
    'broadcast': 'torch_geometric_regcn.distributed.collectives:broadcast',
    'differentiable_all_reduce':
        'torch_geometric_regcn.distributed.collectives:differentiable_all_reduce',
    'agree': 'torch_geometric_regcn.distributed.collectives:agree',
    'RowPartition': 'torch_geometric_regcn.distributed.row_partition:RowPartition',
    'check_partition': 'torch_geometric_regcn.distributed.row_partition:check_partition',
    'check_shard_edges': 'torch_geometric_regcn.distributed.row_partition:check_shard_edges',
    'TRAFFIC': 'torch_geometric_regcn.distributed.traffic:TRAFFIC',
    'traffic': 'torch_geometric_regcn.distributed.traffic:traffic',
    'traffic_stage': 'torch_geometric_regcn.distributed.traffic:traffic_stage',
})
