r"""Inputs shared by the tests of :mod:`torch_geometric_regcn.regularizers`."""
import torch

from tests.conftest import undirected_graph
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.regularizers.graph import build_graph

N = 30  # the node count of conftest.undirected_graph
EXACT = ['appnp', 'jknet', 'dagnn', 'gnn_lf', 'gnn_hf', 'tsgcn']


def operators(reg, seed=0, weighted=False):
    ei, weight = undirected_graph(seed, weighted=weighted)
    return build_graph(reg, ei, N, weight, torch.float64, semantic_edge_index=undirected_graph(
        seed + 1)[0])


def neumann(name, **coefficients):
    """The regulariser alone: DAGNN without its learned gate (the Neumann weights)."""
    return R.get(name, **coefficients, **({'adaptive': False} if name == 'dagnn' else {}))


def h_in(channels=3, seed=0):
    return torch.randn(N, channels, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(seed))
