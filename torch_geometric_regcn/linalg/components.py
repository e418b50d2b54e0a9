r"""The connected components of a graph given by its entries, numbered by
their lowest node: the one split that the per-component solvers share."""
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components as scipy_components
from torch import Tensor


class Components(NamedTuple):
    r"""The connected components of a graph on :math:`N` nodes."""
    label: Tensor  #: component of each node, numbered by the component's lowest node
    size: Tensor  #: nodes of each component
    start: Tensor  #: offset of each component in :obj:`order`
    order: Tensor  #: the nodes sorted by (component, index)
    local: Tensor  #: position of each node within its component


def graph_components(row: Tensor, col: Tensor, num_nodes: int) -> Components:
    r"""The connected components of the undirected graph with the entries
    :obj:`(row, col)` (either direction suffices), found by scipy on the
    CPU and numbered by their lowest node. Cost: :math:`O(E + N)`, one
    transfer of the entries to the host."""
    device = row.device
    host = torch.stack([row, col]).cpu().numpy()
    pattern = sp.csr_matrix((np.ones(host.shape[1], dtype=np.int8), (host[0], host[1])),
                            shape=(num_nodes, num_nodes))
    count, found = scipy_components(pattern, directed=False)
    found = torch.from_numpy(found.astype(np.int64)).to(device)
    nodes = torch.arange(num_nodes, device=device)
    lowest = torch.full((count,), num_nodes, dtype=torch.long, device=device)
    lowest.scatter_reduce_(0, found, nodes, reduce='amin')
    rank = torch.empty_like(lowest)
    rank[lowest.argsort()] = torch.arange(count, device=device)
    label = rank[found]
    order = label.argsort(stable=True)
    size = torch.bincount(label, minlength=count)
    start = size.cumsum(0) - size
    local = torch.empty_like(order)
    local[order] = nodes - start[label[order]]
    return Components(label, size, start, order, local)
