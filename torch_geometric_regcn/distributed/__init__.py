r"""tsGCN on several processes and machines through :mod:`torch.distributed`:
the graph split into row shards, one per rank (see ``docs/distributed.md``)."""
from torch_geometric_regcn.distributed.collectives import DistributedError
from torch_geometric_regcn.distributed.partition import (
    PARTITION_METHODS,
    load_partition,
    partition,
    save_partition,
)
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.distributed.traffic import TRAFFIC, traffic, traffic_stage
from torch_geometric_regcn.distributed.training import global_mean

__all__ = ['PARTITION_METHODS', 'TRAFFIC', 'DistributedError', 'RowPartition',
           'global_mean', 'load_partition', 'partition', 'save_partition', 'traffic',
           'traffic_stage']
