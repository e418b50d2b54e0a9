r"""Inputs shared by the tests of :mod:`torch_geometric_regcn.linalg`'s eigensolvers."""
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

from torch_geometric_regcn.linalg import combine, normalized_adjacency


def operator(num_nodes=600, seed=0, weights=(0.6, 0.3)):
    """A tsGCN-like operator: two renormalised random graphs, combined."""
    gen = torch.Generator().manual_seed(seed)
    graphs = [normalized_adjacency(torch.randint(0, num_nodes, (2, 3 * num_nodes), generator=gen),
                                   num_nodes, dtype=torch.float64) for _ in weights]
    return combine(graphs, list(weights), num_nodes)


def to_scipy(matrix):
    return sp.csr_matrix((matrix.values().numpy(), matrix.col_indices().numpy(),
                          matrix.crow_indices().numpy()), shape=matrix.shape)


def reference(s, k, which):
    v0 = np.random.default_rng(0).standard_normal(s.size(0))  # ARPACK is seeded too
    val, vec = spla.eigsh(to_scipy(s), k, which=which, tol=1e-13, v0=v0)
    order = np.argsort(-(val if which == 'LA' else np.abs(val)))
    return val[order], vec[:, order]
