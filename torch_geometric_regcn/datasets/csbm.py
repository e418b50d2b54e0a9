r"""A contextual stochastic block model: a synthetic attributed graph that
needs no download."""
import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, to_undirected

from torch_geometric_regcn.utils.validation import check_int, check_real


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
    num_nodes = check_int('num_nodes', num_nodes)
    num_classes = check_int('num_classes', num_classes, minimum=2)
    if num_classes > num_nodes:
        raise ValueError(f"'num_classes' must not exceed 'num_nodes' (got {num_classes} "
                         f"classes for {num_nodes} nodes); lower 'num_classes' or raise "
                         f"'num_nodes'")
    num_features = check_int('num_features', num_features)
    avg_degree = check_real('avg_degree', avg_degree, 0.0)
    homophily = check_real('homophily', homophily, 0.0, 1.0)
    signal = check_real('signal', signal, 0.0)
    seed = check_int('seed', seed, minimum=-2**63)
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(num_nodes) % num_classes
    y = y[torch.randperm(num_nodes, generator=gen)]
    means = torch.randn(num_classes, num_features, generator=gen) * signal
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
    pick = (torch.rand(num_edges, generator=gen) * counts[target_class]).long()
    dst = order[offsets[target_class] + pick]
    edge_index = torch.stack([src, dst])
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    edge_index = coalesce(to_undirected(edge_index, num_nodes=num_nodes), num_nodes=num_nodes)
    return Data(x=x, edge_index=edge_index, y=y)
