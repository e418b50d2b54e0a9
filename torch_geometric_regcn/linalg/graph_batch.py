r"""The graphs of a PyG mini-batch of graphs (a
:class:`~torch_geometric.data.Batch` and its :obj:`batch` vector) as dense
blocks, one per graph, so that each graph's low-rank factors act on its own
rows only."""
from typing import Any, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import to_dense_batch

from torch_geometric_regcn.utils.validation import check_int, type_name


def check_batch(batch: Any, num_rows: int, batch_size: Optional[int] = None) -> int:
    r"""Returns the number of graphs of the batch vector :obj:`batch`, which
    assigns each of the :obj:`num_rows` rows to its graph as PyG's
    :class:`~torch_geometric.data.Batch` does: a 1-D integer tensor of one
    non-negative entry per row, non-decreasing (the graphs' rows
    contiguous). :obj:`batch_size` is the number of graphs when the caller
    knows it (it may exceed the last graph with rows: graphs without rows
    are empty blocks); else :obj:`batch[-1] + 1`. One pass over
    :obj:`batch` and one synchronisation."""
    if not isinstance(batch, Tensor) or batch.dim() != 1 or batch.is_floating_point() \
            or batch.is_complex() or batch.dtype == torch.bool:
        got = (f'{batch.dtype} of shape {list(batch.shape)}' if isinstance(batch, Tensor)
               else type_name(batch))
        raise TypeError(f"'batch' must be a 1-D integer tensor that assigns each node to its "
                        f"graph, as 'data.batch' of a PyG Batch (got {got})")
    if batch.numel() != num_rows:
        raise ValueError(f"'batch' must hold one graph index per node ({num_rows}), got "
                         f"{batch.numel()}: pass the 'batch' vector of the same Batch as "
                         f"'x' and the factors")
    if batch_size is not None:
        batch_size = check_int('batch_size', batch_size, minimum=1)
    if num_rows == 0:
        return batch_size or 0
    low, high, unsorted = torch.stack([
        batch.min(), batch.max(), (batch[1:] < batch[:-1]).sum()]).tolist()
    if low < 0 or unsorted:
        raise ValueError("'batch' must be non-negative and non-decreasing, each graph's "
                         "nodes contiguous, as PyG's Batch orders them (sort the nodes by "
                         "graph, or pass 'data.batch' unchanged)")
    if batch_size is not None and high >= batch_size:
        raise ValueError(f"'batch' refers to graph {high} but 'batch_size' is {batch_size}; "
                         f"pass the number of graphs (or omit 'batch_size')")
    return batch_size if batch_size is not None else high + 1


def graph_blocks(t: Tensor, batch: Tensor, batch_size: int) -> Tuple[Tensor, Tensor]:
    r"""The rows of :obj:`t` :obj:`[N, c]` as one dense block per graph,
    :obj:`[batch_size, n_max, c]` zero-padded to the largest graph's
    :math:`n_{\max}` rows, and the mask :obj:`[batch_size, n_max]` of the
    real rows (:func:`torch_geometric.utils.to_dense_batch`; the batch
    vector checked by :func:`check_batch`). Memory
    :math:`O(B\,n_{\max}\,c)`: at most :math:`B\,n_{\max}/N` times that of
    :obj:`t`."""
    return to_dense_batch(t, batch, batch_size=batch_size)


def graph_gram(a: Tensor, b: Tensor, batch: Tensor, batch_size: int) -> Tensor:
    r""":math:`\mathbf{A}_g^{\top}\mathbf{B}_g` for every graph :math:`g` of
    the batch, :obj:`[batch_size, k, m]`, of :obj:`a` :obj:`[N, k]` and
    :obj:`b` :obj:`[N, m]`: one batched product of the graphs' blocks
    (:func:`graph_blocks`), :math:`O(N k m)` time beside the padding."""
    blocks_a, _ = graph_blocks(a, batch, batch_size)
    blocks_b, _ = graph_blocks(b, batch, batch_size)
    return blocks_a.transpose(1, 2) @ blocks_b
