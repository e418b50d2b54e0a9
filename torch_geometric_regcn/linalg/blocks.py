r"""Inner products and QR of tall blocks whose rows may be split over the
ranks of a process group (:obj:`group=None`: one process holds every row)."""
from typing import Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, all_gather, all_reduce, rank_of
from torch_geometric_regcn.utils.validation import check_matrix


def gram(a: Tensor, b: Tensor, group: Group) -> Tensor:
    r"""The inner products of the columns of two row-sharded blocks,

    .. math::
        \mathbf{A}^{\top}\mathbf{B} = \sum_{p} \mathbf{A}_p^{\top}\mathbf{B}_p,

    over the ranks :math:`p` of :obj:`group`: the local product, all-reduced.
    Time :math:`O(n k m)` for :math:`n` local rows; :math:`k m` numbers
    all-reduced.

    Args:
        a (torch.Tensor): This rank's rows of :math:`\mathbf{A}`.
        b (torch.Tensor): This rank's rows of :math:`\mathbf{B}`, the same
            rows.
        group (torch.distributed.ProcessGroup, optional): The ranks that hold the rows;
            :obj:`None` for one process, which holds them all.

    Shapes:
        - **a:** :obj:`[n, k]`; **b:** :obj:`[n, m]`
        - **output:** :obj:`[k, m]`, the same on every rank.
    """
    return all_reduce(a.T @ b, group)


def column_norms(a: Tensor, group: Group) -> Tensor:
    r"""The Euclidean norm of each column of a row-sharded block,
    :math:`\|\mathbf{a}_j\|_2 = (\sum_p \|\mathbf{a}_{p,j}\|_2^2)^{1/2}`
    over the ranks :math:`p` of :obj:`group`: the local sums of squares,
    all-reduced. Time :math:`O(n b)`; :math:`b` numbers all-reduced.

    Args:
        a (torch.Tensor): This rank's rows of the block.
        group (torch.distributed.ProcessGroup, optional): The ranks that hold the rows;
            :obj:`None` for one process, which holds them all.

    Shapes:
        - **a:** :obj:`[n, b]`
        - **output:** :obj:`[b]`, the same on every rank.
    """
    return all_reduce(a.square().sum(dim=0), group).sqrt()


def tall_qr(block: Tensor, group: Group) -> Tuple[Tensor, Tensor]:
    r"""The reduced QR factorisation of a tall row-sharded block

    .. math::
        \mathbf{B} = \mathbf{Q}\mathbf{R}, \qquad
        \mathbf{Q}^{\top}\mathbf{Q} = \mathbf{I}_b,

    by TSQR (Demmel et al., 2012): each rank factorises its rows, the
    :math:`b \times b` factors are all-gathered and factorised once more, as
    stable as a Householder QR of the whole block. With :obj:`group=None` it
    is :func:`torch.linalg.qr`. Time :math:`O(n b^2 + P b^3)` for :math:`n`
    local rows and :math:`P` ranks; :math:`P b^2` numbers all-gathered.

    Args:
        block (torch.Tensor): This rank's rows of :math:`\mathbf{B}`.
        group (torch.distributed.ProcessGroup, optional): The ranks that hold the rows;
            :obj:`None` for one process, which holds them all.

    Returns:
        (torch.Tensor, torch.Tensor): This rank's rows of :math:`\mathbf{Q}`,
        :obj:`[n, b]`, and :math:`\mathbf{R}`, :obj:`[b, b]`, the same on
        every rank.

    Shapes:
        - **block:** :obj:`[n, b]`, :math:`b \leq N`, dense floating point
          (checked on each rank before any collective, :obj:`O(1)`)
    """
    check_matrix('block', block)
    if block.layout != torch.strided or not (block.is_floating_point() or block.is_complex()):
        raise TypeError(f"'block' must be a dense floating-point matrix (got {block.dtype}, "
                        f"{block.layout}); convert it with '.to_dense()' and '.float()' or "
                        f"'.double()'")
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
