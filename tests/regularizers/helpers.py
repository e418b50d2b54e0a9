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


def dense_weights(seed=0, weighted=False):
    """The float64 weight matrix of conftest.undirected_graph without its self
    loops (the non-quadratic regularisers' graph), and its edges."""
    ei, weight = undirected_graph(seed, weighted=weighted)
    w = torch.zeros(N, N, dtype=torch.float64)
    w[ei[0], ei[1]] = 1.0 if weight is None else weight
    w.fill_diagonal_(0.0)
    return w, ei, weight


def dense_incidence(w, self_loops=True):
    """ElasticGNN's normalised incidence matrix, written from its definition:
    one row per edge i > j, +1/sqrt(d_i) at the larger node, -1/sqrt(d_j) at
    the smaller, scaled by sqrt(w_ij); d with the unit self loop or not."""
    d = w.sum(1) + (1.0 if self_loops else 0.0)
    rows = []
    for i in range(N):
        for j in range(i):
            if w[i, j] > 0:
                row = torch.zeros(N, dtype=torch.float64)
                row[i], row[j] = 1 / d[i].sqrt(), -1 / d[j].sqrt()
                rows.append(w[i, j].sqrt() * row)
    return torch.stack(rows)
