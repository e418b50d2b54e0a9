r"""Training on row shards with :class:`~torch.nn.parallel.DistributedDataParallel`."""
import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import (
    Group,
    all_reduce,
    differentiable_all_reduce,
)


def global_mean(local_sum: Tensor, local_count: int, group: Group) -> Tensor:
    r"""The mean of a per-node loss over the nodes of every rank, from this
    rank's sum :obj:`local_sum` over its :obj:`local_count` nodes (e.g.
    :obj:`F.cross_entropy(out[mask], y[mask], reduction="sum")` and
    :obj:`int(mask.sum())`): the same value on every rank, the loss a single
    process computes on the whole graph.

    Every rank's backward pass starts from its copy of the loss and the
    all-reduces inside the model (and here, of one number) add the ranks'
    contributions, so the ranks' gradients sum to :math:`P` times the
    single-process gradient: :class:`~torch.nn.parallel.DistributedDataParallel`,
    which averages them, applies exactly that gradient. Ranks without
    labelled nodes take part with a zero sum. With :obj:`group=None` it is
    :obj:`local_sum / local_count`."""
    count = float(all_reduce(torch.tensor([float(local_count)], dtype=torch.float64),
                             group))
    if count == 0:
        raise ValueError("no rank has a labelled node (every 'local_count' is zero)")
    return differentiable_all_reduce(local_sum, group) / count
