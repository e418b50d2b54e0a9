r"""The symmetrised cosine :math:`k`-nearest-neighbour graph, in one
process or on row shards."""
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import coalesce

from torch_geometric_regcn.distributed.collectives import Group, rank_of
from torch_geometric_regcn.distributed.halo import reversed_edges
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.knn.checks import check_search
from torch_geometric_regcn.knn.exact import exact_search, normalize_rows
from torch_geometric_regcn.knn.faiss_ivf import faiss_search
from torch_geometric_regcn.knn.ivf import ivf_options, ivf_search


def knn_graph_cosine(x: Tensor, k: int, block_size: Optional[int] = None,
                     method: str = 'auto', progress: bool = True,
                     generator: Optional[torch.Generator] = None, *,
                     partition: Optional[RowPartition] = None, group: Group = None,
                     node_id: Optional[Tensor] = None) -> Tensor:
    r"""The symmetrised cosine :obj:`k`-nearest-neighbour graph of the rows of
    :obj:`x`: the edge :math:`(i, j)` for

    .. math::
        j \in \mathcal{N}_k(i) \;\text{or}\; i \in \mathcal{N}_k(j),

    with :math:`\mathcal{N}_k` the neighbours of :func:`exact_knn_cosine`
    (:obj:`method="exact"`) or of the approximate :func:`ivf_knn_cosine`
    with its default settings (:obj:`"ivf"`), or of its optional faiss
    backend :func:`faiss_knn_cosine` (:obj:`"faiss"`, one process, needs
    ``faiss-cpu``); :obj:`"auto"` searches exactly on CUDA, for sparse
    :obj:`x` or up to :data:`EXACT_LIMIT` nodes in all, else by the
    pure-torch IVF (``benchmarks/results/knn_scale.md`` compares the two).

    On row shards (:obj:`group` given) each rank gets its own rows of the
    graph: the edges :math:`(i, j)` found here are sent, reversed, to the
    owner of :math:`j` in one all-to-all of :math:`2 \cdot 8` bytes per edge,
    and each rank coalesces its rows. Concatenated in rank order, the ranks'
    edges are the graph of one process, up to the rounding caveat of
    :func:`exact_knn_cosine` (see ``docs/reliability.md``, Determinism).

    Args:
        x (torch.Tensor): This rank's rows of the node features
            :obj:`[n, F]` (all :math:`N` rows without a :obj:`group`): dense,
            or sparse COO or CSR (exact search only).
        k (int): Neighbours per node, less than :math:`N`.
        block_size (int, optional): Query rows per block of the exact search.
            (default: :obj:`None`, about :math:`2^{24}` similarities per block
            on the CPU, :math:`2^{27}` on CUDA)
        method (str, optional): :obj:`"auto"`, :obj:`"exact"`, :obj:`"ivf"`
            or :obj:`"faiss"`. (default: :obj:`"auto"`)
        progress (bool, optional): Show a progress bar (on rank 0) when the
            search takes longer than a second. (default: :obj:`True`)
        generator (torch.Generator, optional): The IVF search's random
            numbers; the same state on every rank. (default: torch's default
            generator)
        partition (RowPartition, optional): The row blocks, as on this rank's
            shard; required with a :obj:`group`. (default: one part)
        group (torch.distributed.ProcessGroup, optional): The ranks that hold
            the shards; every rank must call. (default: :obj:`None`, one
            process)
        node_id (torch.Tensor, optional): The index of each row in the
            graph's original numbering (:obj:`data.node_id` of a shard), on
            every rank or on none: the exact and IVF searches break ties by
            it and IVF draws its random rows by it (see
            :func:`exact_knn_cosine`, :func:`ivf_knn_cosine`), so that METIS
            shards find the graph of one process on the original numbering;
            the faiss backend (one process) ignores it. (default:
            :obj:`None`)

    Shapes:
        - **output:** :obj:`edge_index` :obj:`[2, E]` of global node indices
          whose first index is one of this rank's nodes, sorted, without
          duplicates or self loops.
    """
    col, partition = search(x, k, method, block_size, generator, progress, partition, group,
                            'knn_graph_cosine', node_id)
    return symmetrise(col, partition, group)


def search(x: Tensor, k: int, method: str, block_size: Optional[int],
           generator: Optional[torch.Generator], progress: bool,
           partition: Optional[RowPartition], group: Group,
           what: str, node_id: Optional[Tensor] = None) -> Tuple[Tensor, RowPartition]:
    r"""The :obj:`[n, k]` neighbours of the search that :obj:`method` names
    (IVF with its default settings), and the checked partition."""
    x, partition, method, k, block_size = check_search(x, k, partition, group, what, method,
                                                       block_size, generator, node_id=node_id)
    xn, show = normalize_rows(x), progress and rank_of(group) == 0
    if method == 'exact':
        return exact_search(xn, k, partition, group, block_size, show, node_id), partition
    options = ivf_options(partition.num_nodes)
    if method == 'faiss':
        return faiss_search(xn, k, partition, generator, **options), partition
    return (ivf_search(xn, k, partition, group, generator, show, **options, node_id=node_id),
            partition)


def symmetrise(col: Tensor, partition: RowPartition, group: Group) -> Tensor:
    r"""This rank's rows of the union of the kNN edges :obj:`(i, col[i])` and
    their reverses: each reversed edge goes to the owner of its first
    index."""
    k = col.size(1)
    row = torch.arange(partition.start, partition.end, device=col.device).repeat_interleave(k)
    edge_index = torch.stack([row, col.reshape(-1)])
    reverse, _ = reversed_edges(edge_index, partition, group)
    return coalesce(torch.cat([edge_index, reverse], dim=1), num_nodes=partition.num_nodes)
