r"""tsGCN on several processes and machines through :mod:`torch.distributed`:
the graph split into row shards, one per rank (see ``docs/distributed.md``)."""
from torch_geometric_regcn.distributed.partition import (
    PARTITION_METHODS,
    load_partition,
    partition,
    save_partition,
)
from torch_geometric_regcn.distributed.training import global_mean
from torch_geometric_regcn.utils.distributed import (
    TRAFFIC,
    DistributedError,
    RowPartition,
    traffic,
    traffic_stage,
)

__all__ = ['PARTITION_METHODS', 'TRAFFIC', 'DistributedError', 'RowPartition',
           'global_mean', 'load_partition', 'partition', 'save_partition', 'traffic',
           'traffic_stage']
