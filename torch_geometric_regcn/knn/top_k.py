r"""The deterministic top-:math:`k` of the cosine kNN search: the :math:`k`
best scores of each row, ties to the lower node index, and the running
top-:math:`k` that merges the candidates of one block of nodes after another
into that same total order."""
import math
from typing import Optional, Tuple, Union

import torch
from torch import Tensor


def top_k_lowest_index(scores: Tensor, k: int) -> Tensor:
    r"""The column indices of the :obj:`k` largest scores of each row,
    ascending, ties broken towards the lower column index:

    .. math::
        \operatorname{top-}k(s) = \text{the first } k \text{ columns } j
        \text{ in the order } (-s_j, j).

    One :meth:`~torch.Tensor.topk` of :obj:`k + 1` settles every row whose
    :obj:`k`-th and :obj:`(k+1)`-th scores differ; only rows with a tie across
    that boundary (rare with real features) pay for full-width masks.

    Args:
        scores (torch.Tensor): Scores :obj:`[R, C]`, :math:`C > k`.
        k (int): Columns to keep per row.

    Shapes:
        - **output:** :obj:`[R, k]`, :obj:`torch.long`.
    """
    values, index = scores.topk(k + 1, dim=1)
    chosen = index[:, :k].sort(dim=1).values
    tied = (values[:, k - 1] == values[:, k]).nonzero().flatten()
    if tied.numel():
        rows = scores[tied]
        kth = values[tied, k - 1:k]
        above = rows > kth
        at_kth = rows == kth
        need = k - above.sum(dim=1, keepdim=True)
        mask = above | (at_kth & (at_kth.cumsum(dim=1) <= need))
        chosen[tied] = mask.nonzero()[:, 1].view(-1, k)
    return chosen


def merge_top_k(values: Tensor, index: Tensor, new_values: Tensor, new_index: Tensor,
                k: int) -> Tuple[Tensor, Tensor]:
    r"""The best :obj:`k` of two candidate lists of each row (distinct node
    indices) in the order of :func:`top_k_lowest_index`: score descending,
    then node index ascending; as :obj:`(values, index)`, best first."""
    values = torch.cat([values, new_values], dim=1)
    index = torch.cat([index, new_index], dim=1)
    by_index = index.argsort(dim=1, stable=True)
    values, index = values.gather(1, by_index), index.gather(1, by_index)
    by_score = values.argsort(dim=1, descending=True, stable=True)[:, :k]
    return values.gather(1, by_score), index.gather(1, by_score)


class RunningTopK:
    r"""The best :obj:`k` candidates seen so far of each of :obj:`rows`
    queries, in the order of :func:`top_k_lowest_index`, fed one block of
    scores at a time by :meth:`add`.

    It starts from :math:`k` candidates of score :math:`-\infty` at node
    index :math:`N`, which every real candidate beats. When all candidates of
    a row come in one block (:obj:`merges=False`: a search in one part), the
    block's top-:math:`k` is the answer and no merge is paid for.

    Args:
        rows (int): Query rows.
        k (int): Candidates kept per row.
        num_nodes (int): :math:`N`, one past the largest node index.
        like (torch.Tensor): Gives the dtype of the scores and the device.
        merges (bool): Whether a row may receive several blocks.
    """
    def __init__(self, rows: int, k: int, num_nodes: int, like: Tensor,
                 merges: bool = True) -> None:
        self.k = k
        self.index = torch.full((rows, k), num_nodes, dtype=torch.long, device=like.device)
        self.values: Optional[Tensor] = None
        if merges:
            self.values = torch.full((rows, k), -math.inf, dtype=like.dtype,
                                     device=like.device)

    def add(self, rows: Union[slice, Tensor], scores: Tensor, columns: Tensor) -> None:
        r"""Merges the :obj:`scores` :obj:`[R, C]` of the queries :obj:`rows`
        against the candidates :obj:`columns` :obj:`[C]` (ascending node
        indices) into the running top-:math:`k`."""
        k = self.k
        if scores.size(1) > k:
            best = top_k_lowest_index(scores, k)
        else:
            best = torch.arange(scores.size(1), device=scores.device).expand(scores.size(0), -1)
        if self.values is None:
            self.index[rows] = columns[best]
            return
        self.values[rows], self.index[rows] = merge_top_k(
            self.values[rows], self.index[rows], scores.gather(1, best), columns[best], k)

    def result(self) -> Tensor:
        r"""The node indices :obj:`[rows, k]`, ascending in each row."""
        return self.index.sort(dim=1).values
