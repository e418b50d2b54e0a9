r"""The deterministic top-:math:`k` of the cosine kNN search: the :math:`k`
best scores of each row, ties to the lower node index, and the running
top-:math:`k` that merges the candidates of one block of nodes after another
into that same total order."""
import math
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

#: Columns per group of the two-stage top-:math:`k` (:func:`top_k_lowest_index`).
GROUP = 16


def top_k_lowest_index(scores: Tensor, k: int, key: Optional[Tensor] = None) -> Tensor:
    r"""The column indices of the :obj:`k` largest scores of each row,
    ascending, ties broken towards the lower column index (or the lower
    :obj:`key` of the column, when given):

    .. math::
        \operatorname{top-}k(s) = \text{the first } k \text{ columns } j
        \text{ in the order } (-s_j, \text{key}_j), \quad \text{key}_j = j
        \text{ by default}.

    Wide rows (:math:`C \ge 4 \cdot` :data:`GROUP` :math:`\cdot (k + 1)`)
    go in two stages: the maximum of each of :math:`W = \lfloor C /
    16 \rfloor` strided groups of 16 columns :math:`\{g, g + W, \dots, g +
    15 W\}` (one vectorised pass, about a tenth of the cost of
    :meth:`~torch.Tensor.topk` per score), the :obj:`k` groups of the largest
    maxima, and the top-:math:`k` of their :math:`16 k` scores (with the
    :math:`C - 16 W` columns left over). A score outside those groups lies
    below :obj:`k` group maxima, so the set is exact whenever the
    :obj:`k`-th and :obj:`(k+1)`-th group maxima and the :obj:`k`-th and
    :obj:`(k+1)`-th gathered scores differ. Narrow rows take one
    :meth:`~torch.Tensor.topk` of :obj:`k + 1`. Only rows with a tie across
    that boundary (rare with real features) pay for full-width masks.

    Args:
        scores (torch.Tensor): Scores :obj:`[R, C]`, :math:`C > k`.
        k (int): Columns to keep per row.
        key (torch.Tensor, optional): Distinct tie keys of the columns
            :obj:`[C]` (e.g. the nodes' indices in another numbering).
            (default: :obj:`None`, the column index)

    Shapes:
        - **output:** :obj:`[R, k]`, :obj:`torch.long`.
    """
    width = scores.size(1) // GROUP
    if width >= 4 * (k + 1):
        chosen, tied = _grouped_top_k(scores, k, width)
    else:
        values, index = scores.topk(k + 1, dim=1)
        chosen = index[:, :k].sort(dim=1).values
        tied = (values[:, k - 1] == values[:, k]).nonzero().flatten()
    if tied.numel():
        rows = scores[tied]
        values = rows.topk(k + 1, dim=1).values
        kth = values[:, k - 1:k]
        above = rows > kth
        at_kth = rows == kth
        need = k - above.sum(dim=1, keepdim=True)
        if key is None:
            first = at_kth.cumsum(dim=1) <= need
        else:  # the same count, over the columns in the order of their keys
            order = key.argsort()
            first = torch.empty_like(at_kth)
            first[:, order] = at_kth[:, order].cumsum(dim=1) <= need
        mask = above | (at_kth & first)
        chosen[tied] = mask.nonzero()[:, 1].view(-1, k)
    return chosen


def _grouped_top_k(scores: Tensor, k: int, width: int) -> Tuple[Tensor, Tensor]:
    r"""The two-stage top-:math:`k` of :func:`top_k_lowest_index` on rows of
    at least :math:`16 \cdot` :obj:`width` columns: the chosen columns,
    ascending (exact except in the rows returned as tied), and the rows with
    a tie across the :obj:`k`-th place of the group maxima or of the
    gathered scores."""
    rows, columns = scores.shape
    maxima = scores[:, :GROUP * width].unflatten(1, (GROUP, width)).amax(dim=1)
    group_values, groups = maxima.topk(k + 1, dim=1)
    steps = torch.arange(0, GROUP * width, width, device=scores.device)
    candidates = (groups[:, :k, None] + steps).flatten(1)
    if columns > GROUP * width:  # the columns left over are candidates too
        rest = torch.arange(GROUP * width, columns, device=scores.device)
        candidates = torch.cat([candidates, rest.expand(rows, -1)], dim=1)
    values, best = scores.gather(1, candidates).topk(k + 1, dim=1)
    chosen = candidates.gather(1, best[:, :k]).sort(dim=1).values
    tied = ((group_values[:, k - 1] == group_values[:, k])
            | (values[:, k - 1] == values[:, k])).nonzero().flatten()
    return chosen, tied


def merge_top_k(values: Tensor, index: Tensor, new_values: Tensor, new_index: Tensor,
                k: int, carried: Tuple[Tensor, ...] = (),
                new_carried: Tuple[Tensor, ...] = ()) -> Tuple[Tensor, ...]:
    r"""The best :obj:`k` of two candidate lists of each row (distinct node
    indices) in the order of :func:`top_k_lowest_index`: score descending,
    then node index ascending; as :obj:`(values, index)`, best first,
    followed by the tensors :obj:`carried` (and :obj:`new_carried`, of the
    new candidates) of the same shapes, in the same order (a candidate's
    index in another numbering, when :obj:`index` holds the tie keys)."""
    values = torch.cat([values, new_values], dim=1)
    tensors = [torch.cat([old, new], dim=1)
               for old, new in zip((index, *carried), (new_index, *new_carried))]
    by_index = tensors[0].argsort(dim=1, stable=True)
    values, tensors = values.gather(1, by_index), [t.gather(1, by_index) for t in tensors]
    by_score = values.argsort(dim=1, descending=True, stable=True)[:, :k]
    return (values.gather(1, by_score), *(t.gather(1, by_score) for t in tensors))


class RunningTopK:
    r"""The best :obj:`k` candidates seen so far of each of :obj:`rows`
    queries, in the order of :func:`top_k_lowest_index`, fed one block of
    scores at a time by :meth:`add`.

    It starts from :math:`k` candidates of score :math:`-\infty` at node
    index :math:`N`, which every real candidate beats. When all candidates of
    a row come in one block (:obj:`merges=False`: a search in one part), the
    block's top-:math:`k` is the answer and no merge is paid for. With
    :obj:`keyed=True` each block comes with tie keys of its candidates
    (:meth:`add`), which order equal scores in place of the node indices.

    Args:
        rows (int): Query rows.
        k (int): Candidates kept per row.
        num_nodes (int): :math:`N`, one past the largest node index (and
            tie key).
        like (torch.Tensor): Gives the dtype of the scores and the device.
        merges (bool): Whether a row may receive several blocks.
        keyed (bool): Whether the blocks come with tie keys.
    """
    def __init__(self, rows: int, k: int, num_nodes: int, like: Tensor,
                 merges: bool = True, keyed: bool = False) -> None:
        self.k = k
        self.index = torch.full((rows, k), num_nodes, dtype=torch.long, device=like.device)
        self.values: Optional[Tensor] = None
        self.keys: Optional[Tensor] = None
        if merges:
            self.values = torch.full((rows, k), -math.inf, dtype=like.dtype,
                                     device=like.device)
        self.keyed = keyed
        if merges and keyed:
            self.keys = self.index.clone()

    def add(self, rows: Union[slice, Tensor], scores: Tensor, columns: Tensor,
            keys: Optional[Tensor] = None) -> None:
        r"""Merges the :obj:`scores` :obj:`[R, C]` of the queries :obj:`rows`
        against the candidates :obj:`columns` :obj:`[C]` (ascending node
        indices) into the running top-:math:`k`; with :obj:`keyed=True`,
        :obj:`keys` :obj:`[C]` are their distinct tie keys, each below
        :math:`N`."""
        if (keys is None) == self.keyed:
            raise ValueError(f"RunningTopK(keyed={self.keyed}) takes "
                             f"{'' if self.keyed else 'no '}'keys' with each block")
        k = self.k
        if scores.size(1) > k:
            best = top_k_lowest_index(scores, k, keys)
        else:
            best = torch.arange(scores.size(1), device=scores.device).expand(scores.size(0), -1)
        if self.values is None:
            self.index[rows] = columns[best]
            return
        if self.keys is None:
            self.values[rows], self.index[rows] = merge_top_k(
                self.values[rows], self.index[rows], scores.gather(1, best), columns[best], k)
            return
        assert keys is not None
        self.values[rows], self.keys[rows], self.index[rows] = merge_top_k(
            self.values[rows], self.keys[rows], scores.gather(1, best), keys[best], k,
            (self.index[rows],), (columns[best],))

    def result(self) -> Tensor:
        r"""The node indices :obj:`[rows, k]`, ascending in each row."""
        return self.index.sort(dim=1).values
