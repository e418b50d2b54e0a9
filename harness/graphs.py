r"""The graphs of the benchmarks: a stochastic-block-model-like synthetic
graph of any size, Planetoid's citation graphs (PubMed) as PyG loads them
from the offline copy, and sparse matrices between scipy and torch."""
import tempfile
from typing import Callable, Optional

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor
from torch_geometric.data import Data

from harness.data import SHARED_DATA, has_offline_copy, offline_root


def synthetic_graph(n: int, avg_degree: int = 10, blocks: int = 256, p_in: float = 0.8,
                    features: int = 64, classes: int = 8, seed: int = 0) -> Data:
    r"""A stochastic-block-model-like graph: :obj:`blocks` communities of
    uneven sizes, a fraction :obj:`p_in` of the ``n * avg_degree / 2``
    random directed edges inside a community, the rest uniform; features are
    a community centroid plus Gaussian noise; labels are the community modulo
    :obj:`classes`. The same :obj:`seed` gives the same graph."""
    g = torch.Generator().manual_seed(seed)
    blocks = min(blocks, n)
    sizes = torch.rand(blocks, generator=g).square() + 0.05
    sizes = (sizes / sizes.sum() * n).long().clamp_min(1)
    sizes[-1] += n - sizes.sum()
    community = torch.repeat_interleave(torch.arange(blocks), sizes)
    first = sizes.cumsum(0) - sizes
    m = n * avg_degree // 2
    src = torch.randint(0, n, (m,), generator=g)
    c = community[src]
    inside = first[c] + (torch.rand(m, generator=g) * sizes[c]).long()
    outside = torch.randint(0, n, (m,), generator=g)
    dst = torch.where(torch.rand(m, generator=g) < p_in, inside, outside)
    centers = torch.randn(blocks, features, generator=g)
    x = centers[community] + 1.5 * torch.randn(n, features, generator=g)
    return Data(x=x, edge_index=torch.stack([src, dst]), y=community % classes, num_nodes=n)


def connected_pieces(count: int, size: int, seed: int = 0) -> Tensor:
    r"""The normalised adjacency with self loops (float64, sparse CSR) of
    :obj:`count` random connected graphs of :obj:`size` nodes each, a path
    plus ``2 * size`` random edges: every one has the top eigenvalue 1."""
    from torch_geometric_regcn.linalg import combine, normalized_adjacency
    gen = torch.Generator().manual_seed(seed)
    edges = []
    for c in range(count):
        path = torch.arange(c * size, (c + 1) * size)
        edges += [torch.stack([path[:-1], path[1:]]),
                  c * size + torch.randint(0, size, (2, 2 * size), generator=gen)]
    a = normalized_adjacency(torch.cat(edges, dim=1), count * size, dtype=torch.float64)
    return combine([a], [1.0], count * size)


def load_planetoid(name: str, transform: Optional[Callable] = None,
                   shared: str = SHARED_DATA) -> Data:
    r"""Planetoid's :obj:`name` (``'Cora'``, ``'CiteSeer'``, ``'PubMed'``)
    exactly as :class:`~torch_geometric.datasets.Planetoid` loads it (raw
    features unless :obj:`transform` changes them; the public split as
    masks), from the offline copy in :obj:`shared`, processed in a temporary
    folder that is removed once the graph is in memory. Raises
    :class:`FileNotFoundError` when the raw files are absent."""
    from torch_geometric.datasets import Planetoid

    with tempfile.TemporaryDirectory(prefix='regcn-planetoid-') as tmp:
        return Planetoid(offline_root(name, tmp, shared), name, transform=transform)[0]


def load_pubmed(shared: str = SHARED_DATA) -> Data:
    r"""PubMed as :class:`~torch_geometric.datasets.Planetoid` loads it
    (:func:`load_planetoid`): 19,717 nodes, 500 TF-IDF features."""
    return load_planetoid('PubMed', shared=shared)


def has_pubmed(shared: str = SHARED_DATA) -> bool:
    r"""Whether PubMed's raw files lie in :obj:`shared`."""
    return has_offline_copy('PubMed', shared)


def csr_to_scipy(op: Tensor) -> sp.csr_matrix:
    r"""The torch sparse CSR matrix :obj:`op` as a scipy CSR matrix (values,
    column indices and row pointers as numpy arrays of the same dtypes)."""
    return sp.csr_matrix((op.values().numpy(), op.col_indices().numpy(),
                          op.crow_indices().numpy()), shape=tuple(op.shape))


def scipy_to_csr(mat: sp.csr_matrix) -> Tensor:
    r"""The scipy CSR matrix :obj:`mat` as a torch sparse CSR tensor of the
    same dtype, with int64 indices (the invariants are not checked: scipy's
    CSR already holds them)."""
    return torch.sparse_csr_tensor(torch.from_numpy(mat.indptr.astype(np.int64)),
                                   torch.from_numpy(mat.indices.astype(np.int64)),
                                   torch.from_numpy(mat.data), size=mat.shape,
                                   check_invariants=False)
