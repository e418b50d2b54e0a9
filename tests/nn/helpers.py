r"""Inputs shared by the tests of :mod:`torch_geometric_regcn.nn`."""
import torch
from torch_geometric.utils import to_undirected

from tests.conftest import dense_normalized_adjacency, undirected_graph
from torch_geometric_regcn import RegularizerConv
from torch_geometric_regcn.linalg import factors_from_eigenpairs

N, F_IN, F_OUT = 30, 5, 4
EYE = torch.eye(N, dtype=torch.float64)


def setup(seed=0):
    r"""Random float64 features and a random undirected graph of :obj:`N` nodes."""
    ei, _ = undirected_graph(seed)
    x = torch.randn(N, F_IN, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return x, ei


def conv(regularizer, **kwargs):
    r"""A float64 :class:`RegularizerConv` without bias."""
    return RegularizerConv(F_IN, F_OUT, regularizer, bias=False, **kwargs).double()


def dense_adj(ei):
    return dense_normalized_adjacency(ei, N)


def two_components(seed=0):
    r"""Features and a graph of two components: nodes 0..19 and 20..29, each a
    random undirected graph plus a ring."""
    gen = torch.Generator().manual_seed(seed)
    parts = []
    for start, size in ((0, 20), (20, 10)):
        ring = torch.arange(size)
        parts.append(torch.stack([ring, (ring + 1) % size]) + start)
        parts.append(torch.randint(0, size, (2, size), generator=gen) + start)
    edge_index = torch.cat(parts, dim=1)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    x = torch.randn(N, F_IN, dtype=torch.float64, generator=gen)
    return x, to_undirected(edge_index, num_nodes=N)


def layer(regularizer, solver, **kwargs):
    r"""A float64 :class:`RegularizerConv` to 3 channels, seeded."""
    torch.manual_seed(0)
    return RegularizerConv(F_IN, 3, regularizer, solver=solver, **kwargs).double()


def eigen_factors(n=N, rank=5, dtype=torch.float64, seed=0):
    r"""Factors of orthonormal eigenvectors with eigenvalues in :math:`(-0.8,
    0.8)`, the kind :class:`~torch_geometric_regcn.LowRankInverse` makes
    (:math:`\mathbf{V}^{\top}\mathbf{W} = -\mathbf{\Lambda}`, which the layers
    check)."""
    gen = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(n, rank, dtype=torch.float64, generator=gen))
    lam = 1.6 * torch.rand(rank, dtype=torch.float64, generator=gen) - 0.8
    return tuple(t.to(dtype) for t in factors_from_eigenpairs(lam, u))
