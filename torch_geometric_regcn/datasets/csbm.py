r"""A contextual stochastic block model: a synthetic attributed graph that
needs no download, whole (:func:`contextual_sbm`) or as one process's row
shard of a graph too large for one machine (:func:`contextual_sbm_shard`)."""
import hashlib
from typing import Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, to_undirected

from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.utils.validation import all_finite, check_int, check_real, check_seed

#: :func:`contextual_sbm_shard` draws the nodes in chunks of this many, each
#: from its own seed, so that the graph does not depend on the number of parts.
CHUNK_SIZE = 2**16


def _check_model(num_nodes: int, num_classes: int, num_features: int, avg_degree: float,
                 homophily: float, signal: float,
                 seed: int) -> Tuple[int, int, int, float, float, float, int]:
    r"""The arguments of the model, checked, as Python numbers."""
    num_nodes = check_int('num_nodes', num_nodes)
    num_classes = check_int('num_classes', num_classes, minimum=2)
    if num_classes > num_nodes:
        raise ValueError(f"'num_classes' must not exceed 'num_nodes' (got {num_classes} "
                         f"classes for {num_nodes} nodes); lower 'num_classes' or raise "
                         f"'num_nodes'")
    num_features = check_int('num_features', num_features)
    avg_degree = check_real('avg_degree', avg_degree, 0.0)
    if num_nodes * avg_degree / 2 >= 2**62:  # torch failed, naming nothing
        raise ValueError(f"'avg_degree' = {avg_degree:g} asks for N * avg_degree / 2 = "
                         f"{num_nodes * avg_degree / 2:.3g} edge draws, more than a tensor "
                         f"holds; lower it")
    homophily = check_real('homophily', homophily, 0.0, 1.0)
    signal = check_real('signal', signal, 0.0)
    seed = check_seed(seed)
    return num_nodes, num_classes, num_features, avg_degree, homophily, signal, seed


def _class_means(num_classes: int, num_features: int, signal: float,
                 generator: torch.Generator) -> Tensor:
    means = torch.randn(num_classes, num_features, generator=generator) * signal
    if not all_finite(means):
        raise ValueError(f"'signal' = {signal:g} makes the float32 class means overflow; "
                         f"lower it (the noise has norm about 1)")
    return means


def contextual_sbm(num_nodes: int = 3000, num_classes: int = 5, num_features: int = 64,
                   avg_degree: float = 8.0, homophily: float = 0.8, signal: float = 1.0,
                   seed: int = 0) -> Data:
    r"""Samples a contextual stochastic block model (Deshpande et al., NeurIPS
    2018): node :math:`i` of class :math:`y_i` gets features
    :math:`\mathbf{x}_i = \boldsymbol{\mu}_{y_i} + \boldsymbol{\varepsilon}_i`
    with :math:`\boldsymbol{\mu}_c \sim \mathcal{N}(0, (\text{signal}^2 / d)\,
    \mathbf{I})` and :math:`\boldsymbol{\varepsilon}_i \sim \mathcal{N}(0,
    \mathbf{I}/d)`, and undirected edges whose other end lies in the same class
    with probability :obj:`homophily`, else in a uniformly random other class.
    Sampling is vectorised: :math:`O(N \cdot \text{avg\_degree})` time.
    Draws that land on the node itself or repeat an edge are dropped, so
    the measured degree and homophily fall below the asked ones where
    classes are small or the graph is dense (e.g. 50 classes of 2 nodes;
    :obj:`avg_degree` near the class size); at the defaults they are within
    1 % of them.

    Args:
        num_nodes (int, optional): :math:`N`. (default: :obj:`3000`)
        num_classes (int, optional): The number of classes. (default: :obj:`5`)
        num_features (int, optional): :math:`d`. (default: :obj:`64`)
        avg_degree (float, optional): The expected degree. (default: :obj:`8.0`)
        homophily (float, optional): The share of intra-class edges.
            (default: :obj:`0.8`)
        signal (float, optional): The norm of the class means relative to the
            noise; smaller is harder. (default: :obj:`1.0`)
        seed (int, optional): The random seed. (default: :obj:`0`)

    Counts and the seed may be NumPy integers; a :obj:`bool`, a
    non-integer count or a value out of range raises an error that names the
    argument.
    """
    num_nodes, num_classes, num_features, avg_degree, homophily, signal, seed = _check_model(
        num_nodes, num_classes, num_features, avg_degree, homophily, signal, seed)
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(num_nodes) % num_classes
    y = y[torch.randperm(num_nodes, generator=gen)]
    means = _class_means(num_classes, num_features, signal, gen)
    x = (means[y] + torch.randn(num_nodes, num_features, generator=gen)) / num_features**0.5

    num_edges = int(num_nodes * avg_degree / 2)
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    same = torch.rand(num_edges, generator=gen) < homophily
    shift = torch.randint(1, num_classes, (num_edges,), generator=gen)
    target_class = torch.where(same, y[src], (y[src] + shift) % num_classes)
    # Draw a uniform member of the target class from the nodes sorted by class.
    order = y.argsort()
    counts = torch.bincount(y, minlength=num_classes)
    offsets = torch.cumsum(counts, 0) - counts
    dst = order[offsets[target_class] + _members(counts[target_class], gen)]
    edge_index = torch.stack([src, dst])
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    edge_index = coalesce(to_undirected(edge_index, num_nodes=num_nodes), num_nodes=num_nodes)
    return Data(x=x, edge_index=edge_index, y=y)


def _members(size: Tensor, gen: torch.Generator) -> Tensor:
    r"""A uniformly random index in :math:`[0, \text{size}_i)` for each entry
    of :obj:`size`. float32 draws take :math:`2^{24}` values, so members of
    a larger class beyond them would never be drawn: where a class is
    larger, the draws are float64; below, float32 as in earlier versions,
    whose graphs stay the same."""
    wide = torch.float64 if size.numel() and int(size.max()) > 2**24 else torch.float32
    pick = (torch.rand(size.numel(), generator=gen, dtype=wide) * size).long()
    return torch.minimum(pick, size - 1)


def _derived_seed(seed: int, *tags: object) -> int:
    r"""A seed for :class:`torch.Generator` derived from :obj:`seed` and
    :obj:`tags` (SHA-256): the same on every process and platform, and
    unrelated between tags."""
    digest = hashlib.sha256(':'.join(str(t) for t in (seed, *tags)).encode()).digest()
    return int.from_bytes(digest[:8], 'little') >> 1


def _chunk(index: int, num_nodes: int, means: Tensor, avg_degree: float, homophily: float,
           seed: int) -> Tuple[Tensor, Tensor]:
    r"""The features and the edges (sources first, global indices, sorted,
    without self loops or repeats) of the nodes of chunk :obj:`index`, drawn
    from their own generator."""
    num_classes, num_features = means.shape
    lo, hi = index * CHUNK_SIZE, min((index + 1) * CHUNK_SIZE, num_nodes)
    gen = torch.Generator().manual_seed(_derived_seed(seed, 'chunk', index))
    nodes = torch.arange(lo, hi)
    y = nodes % num_classes
    x = means[y]
    x += torch.randn(hi - lo, num_features, generator=gen)
    x /= num_features**0.5

    rate = torch.full((hi - lo,), avg_degree / 2, dtype=torch.float64)
    src = nodes.repeat_interleave(torch.poisson(rate, generator=gen).long())
    num_edges = src.numel()
    same = torch.rand(num_edges, generator=gen) < homophily
    shift = torch.randint(1, num_classes, (num_edges,), generator=gen)
    target = torch.where(same, src % num_classes, (src + shift) % num_classes)
    # Class c holds the nodes c, c + C, c + 2C, ... < N: draw one uniformly.
    size = (num_nodes - target + num_classes - 1) // num_classes
    pick = (torch.rand(num_edges, generator=gen, dtype=torch.float64) * size).long()
    dst = target + num_classes * torch.minimum(pick, size - 1)
    edge_index = torch.stack([src, dst])
    edge_index = edge_index[:, src != dst]
    return x, coalesce(edge_index, num_nodes=num_nodes)


def contextual_sbm_shard(num_nodes: int, num_parts: int, rank: int, num_classes: int = 5,
                         num_features: int = 64, avg_degree: float = 8.0,
                         homophily: float = 0.8, signal: float = 1.0, seed: int = 0) -> Data:
    r"""The row shard of process :obj:`rank` out of :obj:`num_parts` of a
    contextual stochastic block model (Deshpande et al., NeurIPS 2018),
    generated where it is used: no process draws, holds or sends the whole
    graph, so the graph can exceed one machine's memory. The shard has the
    format of :func:`~torch_geometric_regcn.distributed.partition`'s
    (:obj:`method="contiguous"`): the rows :obj:`bounds[rank]` to
    :obj:`bounds[rank + 1] - 1` of
    :obj:`RowPartition.even(num_nodes, num_parts)` in :obj:`x` and :obj:`y`,
    the edges whose first (source) index is one of them in :obj:`edge_index`,
    with global indices, :obj:`node_id` (:obj:`arange(start, end)`),
    :obj:`partition`, :obj:`num_nodes`, the number of local nodes, and
    :obj:`graph_key`, a digest of the arguments that define the graph (all
    but :obj:`num_parts` and :obj:`rank`), the same on every rank, so that
    shards drawn with different arguments on some ranks are refused, as
    those :func:`~torch_geometric_regcn.distributed.partition` cuts from
    different graphs are.

    Node :math:`i` has class :math:`y_i = i \bmod C` and features

    .. math::
        \mathbf{x}_i = \frac{\boldsymbol{\mu}_{y_i} + \boldsymbol{\varepsilon}_i}
        {\sqrt{d}}, \qquad \boldsymbol{\mu}_c \sim \mathcal{N}(\mathbf{0},
        \text{signal}^2\,\mathbf{I}_d), \quad \boldsymbol{\varepsilon}_i \sim
        \mathcal{N}(\mathbf{0}, \mathbf{I}_d),

    as in :func:`contextual_sbm`. Each node draws
    :math:`\mathrm{Poisson}(\text{avg\_degree} / 2)` edges, stored once with
    the node as source: the other end is a uniformly random node of the same
    class with probability :obj:`homophily`, else of a uniformly random other
    class (class :math:`c` holds the nodes :math:`c, c + C, c + 2C, \dots`,
    so a member is drawn in :math:`O(1)`); self loops and repeated edges are
    dropped. The graph has about :math:`N \cdot \text{avg\_degree} / 2`
    directed edges, an expected degree of about :obj:`avg_degree` once they
    are symmetrised, as the tsGCN operator
    (:func:`~torch_geometric_regcn.regularizers.tsgcn_adjacency` of a shard's
    :class:`~torch_geometric_regcn.regularizers.GraphOperators` with
    :obj:`partition` and :obj:`group`) and
    :func:`~torch_geometric.utils.to_undirected` do. The other ends are
    spread over all the nodes, so contiguous row blocks cut about
    :math:`(P - 1) / P` of the edges and a rank's halo holds nearly every
    node of the other ranks: a random graph has no locality to exploit.

    The graph does not depend on :obj:`num_parts`: the class means are drawn
    from :obj:`seed` alone, and the nodes in chunks of
    :data:`~torch_geometric_regcn.datasets.csbm.CHUNK_SIZE` (:math:`2^{16}`),
    each from a generator seeded by :obj:`seed` and the chunk's index; a
    process draws the chunks that overlap its rows and keeps its rows, so the
    shards of any :obj:`num_parts` put together give the same tensors. The
    cost per process is :math:`O((n + 2^{17}) (d + \text{avg\_degree}))` time and
    :math:`O((n + 2^{16}) (d + \text{avg\_degree}))` memory for its
    :math:`n \approx N / P` rows (at most two chunks are drawn beyond them);
    nothing of size :math:`N \times d` is made. The draws differ from
    :func:`contextual_sbm`'s for the same seed.

    Args:
        num_nodes (int): :math:`N`, the nodes of the whole graph.
        num_parts (int): The number of shards :math:`P`, at most :math:`N`
            (typically :obj:`torch.distributed.get_world_size()`).
        rank (int): This shard, :math:`0 \leq \text{rank} < P` (typically
            :obj:`torch.distributed.get_rank()`).
        num_classes (int, optional): :math:`C`, at least two, at most
            :math:`N`. (default: :obj:`5`)
        num_features (int, optional): :math:`d`. (default: :obj:`64`)
        avg_degree (float, optional): The expected degree once symmetrised;
            each node draws half as many edges. (default: :obj:`8.0`)
        homophily (float, optional): The share of intra-class edges.
            (default: :obj:`0.8`)
        signal (float, optional): The norm of the class means relative to the
            noise; smaller is harder. (default: :obj:`1.0`)
        seed (int, optional): The random seed. (default: :obj:`0`)

    Counts, the rank and the seed may be NumPy integers; a :obj:`bool`, a
    non-integer count or a value out of range raises an error that names the
    argument.

    Example:
        .. code-block:: python

            import torch.distributed as dist
            from torch_geometric_regcn import LowRankInverse
            from torch_geometric_regcn.datasets import contextual_sbm_shard

            # on every rank, after dist.init_process_group()
            shard = contextual_sbm_shard(2_000_000, dist.get_world_size(),
                                         dist.get_rank(), avg_degree=20)
            shard = LowRankInverse(1.0, 0.2, 64, group=dist.group.WORLD)(shard)
    """
    num_nodes, num_classes, num_features, avg_degree, homophily, signal, seed = _check_model(
        num_nodes, num_classes, num_features, avg_degree, homophily, signal, seed)
    num_parts = check_int('num_parts', num_parts)
    if num_parts > num_nodes:
        raise ValueError(f"'num_parts' must not exceed 'num_nodes' (got {num_parts} parts "
                         f"for {num_nodes} nodes)")
    rank = check_int('rank', rank, minimum=0)
    if rank >= num_parts:
        raise ValueError(f"'rank' must be below 'num_parts' {num_parts} (got {rank})")
    part = RowPartition.even(num_nodes, num_parts, rank)
    start, end = part.start, part.end

    gen = torch.Generator().manual_seed(_derived_seed(seed, 'means'))
    means = _class_means(num_classes, num_features, signal, gen)
    x = torch.empty(end - start, num_features)
    edges = []
    for index in range(start // CHUNK_SIZE, (end - 1) // CHUNK_SIZE + 1):
        lo = index * CHUNK_SIZE
        chunk_x, chunk_edges = _chunk(index, num_nodes, means, avg_degree, homophily, seed)
        first, last = max(start, lo), min(end, lo + chunk_x.size(0))
        x[first - start:last - start] = chunk_x[first - lo:last - lo]
        del chunk_x
        cuts = torch.searchsorted(chunk_edges[0], torch.tensor([first, last])).tolist()
        edges.append(chunk_edges[:, cuts[0]:cuts[1]])
    node_id = torch.arange(start, end)
    key = hashlib.blake2b(repr(('contextual_sbm_shard', num_nodes, num_classes, num_features,
                                avg_degree, homophily, signal, seed)).encode(),
                          digest_size=20).hexdigest()
    return Data(x=x, y=node_id % num_classes, edge_index=torch.cat(edges, dim=1),
                node_id=node_id, partition=part, num_nodes=end - start, graph_key=key)
