r"""Inner products and QR of tall blocks whose rows may be split over the
ranks of a process group (:obj:`group=None`: one process holds every row)."""
from typing import Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, all_gather, all_reduce, rank_of


def gram(a: Tensor, b: Tensor, group: Group) -> Tensor:
    r""":math:`\mathbf{A}^{\top}\mathbf{B}` of row-sharded blocks: the local
    product, all-reduced (:math:`k \times m` entries)."""
    return all_reduce(a.T @ b, group)


def column_norms(a: Tensor, group: Group) -> Tensor:
    r"""The Euclidean norm of each column of a row-sharded block."""
    return all_reduce(a.square().sum(dim=0), group).sqrt()


def tall_qr(block: Tensor, group: Group) -> Tuple[Tensor, Tensor]:
    r"""The reduced QR factorisation of a tall row-sharded block
    :math:`\mathbf{B} = \mathbf{Q}\mathbf{R}` (:math:`N \times b`): this
    rank's rows of :math:`\mathbf{Q}` and the :math:`b \times b`
    :math:`\mathbf{R}`, the same on every rank. TSQR (Demmel et al., 2012):
    each rank factorises its rows, the :math:`b \times b` factors are
    all-gathered and factorised once more, as stable as a Householder QR of
    the whole block."""
    if group is None:
        return torch.linalg.qr(block)
    b = block.size(1)
    q_local, r_local = torch.linalg.qr(block)  # at most n_local x b and b x b
    q = block.new_zeros(block.size(0), b)
    q[:, :q_local.size(1)] = q_local
    r = block.new_zeros(b, b)
    r[:r_local.size(0)] = r_local
    q_top, r_top = torch.linalg.qr(torch.cat(all_gather(r, group)))
    rank = rank_of(group)
    return q @ q_top[rank * b:(rank + 1) * b], r_top
