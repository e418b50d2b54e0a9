r"""Training on row shards with :class:`~torch.nn.parallel.DistributedDataParallel`."""
import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import (
    Group,
    agree_arguments,
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
    labelled nodes take part with a zero sum that records a gradient as the
    others do (the loss of the model's output on no nodes, e.g.
    :obj:`F.cross_entropy` of an empty selection with :obj:`reduction="sum"`;
    not a constant :obj:`torch.zeros(())`, whose rank would skip the backward
    all-reduces the others wait in). With :obj:`group=None` it is
    :obj:`local_sum / local_count`.

    The counts are summed by the collective in which the ranks also agree
    on the shape, dtype and device type of :obj:`local_sum` (that of the
    all-reduce that follows) and on whether it records a gradient, so a rank
    with another loss shape or dtype, or a constant zero, gets a
    :class:`ValueError` on every rank rather than gloo's abort or a hang."""
    error, same = None, {}
    try:
        if not isinstance(local_sum, Tensor):
            raise TypeError(f"'local_sum' must be a tensor, this rank's sum of the loss (got "
                            f"{type(local_sum).__name__})")
        if isinstance(local_count, bool) or not float(local_count).is_integer() \
                or local_count < 0:
            raise ValueError(f"'local_count' must be a non-negative integer, this rank's "
                             f"number of labelled nodes (got {local_count!r})")
        same = {"the shape of 'local_sum'": tuple(local_sum.shape),
                "the dtype and device type of 'local_sum'": (local_sum.dtype,
                                                             local_sum.device.type),
                "whether 'local_sum' records a gradient (a rank without labelled nodes "
                "passes the loss of its output on none, not a constant zero)":
                    local_sum.requires_grad and torch.is_grad_enabled()}
    except (TypeError, ValueError) as failure:
        error = failure
    counts = agree_arguments(group, 'global_mean', same, error,
                             share=[int(local_count) if error is None else 0])
    count = float(sum(c for (c,) in counts))
    if count == 0:
        raise ValueError("no rank has a labelled node (every 'local_count' is zero)")
    return differentiable_all_reduce(local_sum, group) / count
