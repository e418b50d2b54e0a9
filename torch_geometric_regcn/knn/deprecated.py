r"""The earlier entry points of the row-sharded search,
``sharded_knn_cosine`` and ``sharded_knn_graph_cosine`` (added after
0.1.0, in no release), kept with a deprecation warning for code written
against them: the search of
:func:`~torch_geometric_regcn.knn.exact_knn_cosine`,
:func:`~torch_geometric_regcn.knn.ivf_knn_cosine` and
:func:`~torch_geometric_regcn.knn.knn_graph_cosine` takes
:obj:`partition=` and :obj:`group=` itself."""
from typing import Optional

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group
from torch_geometric_regcn.distributed.row_partition import RowPartition, check_partition
from torch_geometric_regcn.knn.exact import exact_knn_cosine
from torch_geometric_regcn.knn.graph import knn_graph_cosine, search
from torch_geometric_regcn.knn.ivf import ivf_knn_cosine
from torch_geometric_regcn.utils.deprecation import warn_deprecated


def _warn(old: str, new: str) -> None:
    warn_deprecated(f"'{old}(x, k, partition, group, ...)' is deprecated; call "
                    f"'torch_geometric_regcn.knn.{new}(x, k, ..., partition=partition, "
                    f"group=group)'", stacklevel=3)


def sharded_knn_cosine(x_local: Tensor, k: int, partition: RowPartition, group: Group,
                       method: str = 'exact', block_size: Optional[int] = None,
                       generator: Optional[torch.Generator] = None,
                       progress: bool = False) -> Tensor:
    r"""Deprecated: :func:`~torch_geometric_regcn.knn.exact_knn_cosine` (or
    :func:`~torch_geometric_regcn.knn.ivf_knn_cosine` for
    :obj:`method="ivf"`) with :obj:`partition=partition, group=group`."""
    _warn('sharded_knn_cosine', 'ivf_knn_cosine' if method == 'ivf' else 'exact_knn_cosine')
    if group is None:  # the partition was required here; with a group the search checks it
        check_partition(partition, None, 'partition')
    if method == 'ivf':
        return ivf_knn_cosine(x_local, k, generator=generator, progress=progress,
                              partition=partition, group=group)
    if method == 'exact':
        return exact_knn_cosine(x_local, k, block_size, progress, partition=partition,
                                group=group)
    # 'auto' (or a wrong name, which the search names): resolved as the graph's search
    return search(x_local, k, method, block_size, generator, progress, partition, group,
                  'sharded_knn_cosine')[0]


def sharded_knn_graph_cosine(x_local: Tensor, k: int, partition: RowPartition,
                             group: Group, method: str = 'auto',
                             block_size: Optional[int] = None,
                             generator: Optional[torch.Generator] = None,
                             progress: bool = False) -> Tensor:
    r"""Deprecated: :func:`~torch_geometric_regcn.knn.knn_graph_cosine` with
    :obj:`partition=partition, group=group`."""
    _warn('sharded_knn_graph_cosine', 'knn_graph_cosine')
    if group is None:
        check_partition(partition, None, 'partition')
    return knn_graph_cosine(x_local, k, block_size, method, progress, generator,
                            partition=partition, group=group)
