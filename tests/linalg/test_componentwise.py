r"""Eigenpairs of a disconnected operator, one connected component at a time:
:func:`~torch_geometric_regcn.linalg.componentwise.componentwise_eigenpairs`
through :func:`~torch_geometric_regcn.linalg.extreme_eigenpairs`."""
import re
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from harness.graphs import connected_pieces
from tests.linalg.helpers import operator as connected_operator
from torch_geometric_regcn import LowRankInverse
from torch_geometric_regcn.linalg import (
    block_lanczos,
    combine,
    componentwise,
    extreme_eigenpairs,
    normalized_adjacency,
)

METHODS = ['lanczos', 'chebyshev', 'power']
GIANT, SMALL = 1000, 100  # 101 components: block Lanczos alone found 48 of 60 copies


def forest_edges(giant=GIANT, small=SMALL, seed=0):
    r"""A connected random graph of :obj:`giant` nodes (above the dense
    threshold, 256) followed by :obj:`small` small components: paths of 2 to
    5 nodes, and every fifth an isolated node."""
    gen = torch.Generator().manual_seed(seed)
    edges = [torch.randint(0, giant, (2, 4 * giant), generator=gen),
             torch.stack([torch.arange(giant - 1), torch.arange(1, giant)])]  # connected
    first = giant
    for c in range(small):
        size = 1 if c % 5 == 0 else 2 + c % 4
        path = torch.arange(first, first + size)
        edges.append(torch.stack([path[:-1], path[1:]]))
        first += size
    return torch.cat(edges, dim=1), first


def tsgcn_t(alpha=1.0, dtype=torch.float64, self_loops=True):
    r""":math:`\mathbf{S} = \alpha \hat{\mathbf{A}} / (1 + \alpha)` of the
    forest: with self loops every component adds the top eigenvalue
    :math:`\alpha / (1 + \alpha)`, 101 copies."""
    edge_index, n = forest_edges()
    a = normalized_adjacency(edge_index, n, dtype=dtype, self_loops=self_loops)
    return combine([a], [alpha / (1 + alpha)], n)


def exact(s, k, which):
    values = np.linalg.eigvalsh(s.to_dense().double().numpy())
    key = values if which == 'LA' else np.abs(values)
    return values[np.argsort(-key, kind='stable')[:k]]


def check_pairs(s, pairs, k, which, atol):
    r"""Values against the dense float64 spectrum, vectors as eigenvectors
    (residual) and orthonormal, all to :obj:`atol`."""
    dense = s.to_dense().double()
    values, vectors = pairs.eigenvalues.double(), pairs.eigenvectors.double()
    assert values.shape == (k,) and vectors.shape == (s.size(0), k)
    key = values if which == 'LA' else values.abs()
    np.testing.assert_allclose(key.numpy(), np.abs(exact(s, k, which)) if which == 'LM'
                               else exact(s, k, which), atol=atol)
    assert bool((key[:-1] >= key[1:] - atol).all())  # in the selection's order
    assert float((dense @ vectors - vectors * values).norm(dim=0).max()) <= atol
    assert float((vectors.T @ vectors - torch.eye(k, dtype=torch.float64)).abs().max()) <= atol


@pytest.mark.parametrize('method, k', [(method, 60) for method in METHODS]
                         + [('lanczos', 120)])
def test_every_copy_of_a_shared_top_eigenvalue_is_found(method, k):
    # Block Lanczos (block 16) found 48 of the 60 copies wanted (64 of the 101
    # the components share for k = 120) and filled the rest with lower
    # eigenvalues (errors 0.08 and 0.14), converged and without a warning, as on
    # CiteSeer's 438 components at beta = 0; method='chebyshev' did too at k = 60.
    # Reference: the dense float64 spectrum. Tolerance: the solves' residual 1e-10 (relative,
    # spectral norm 0.5) bounds each value's error by 5e-11 and the eigenvector
    # residual likewise (a value's error is at most the squared residual over its
    # gap, far below the 1e-12 that counts the copies); the dense pairs are exact
    # to a few hundred eps.
    s = tsgcn_t()
    pairs = extreme_eigenpairs(s, k, 'LA', tol=1e-10, max_iter=5000, method=method,
                               generator=torch.Generator().manual_seed(0))
    assert pairs.converged
    check_pairs(s, pairs, k, 'LA', atol=1e-9)
    assert int((pairs.eigenvalues - 0.5).abs().le(1e-12).sum()) == min(k, SMALL + 1)


def test_ties_go_to_the_lowest_components_whatever_the_seed():
    # 101 components share the top eigenvalue: with k = 5 any five of their
    # vectors are a top eigenspace; the rule takes the five components with the
    # lowest nodes (the giant one, then the first four small ones), each a
    # multiple of D^(1/2) 1 on its component.
    s = tsgcn_t()
    found = [extreme_eigenpairs(s, 5, tol=1e-10, max_iter=5000,
                                generator=torch.Generator().manual_seed(seed))
             for seed in (0, 1)]
    support = [sorted(set(torch.nonzero(p.eigenvectors.abs() > 1e-12)[:, 1].tolist()))
               for p in found]
    assert support[0] == support[1] == [0, 1, 2, 3, 4]
    first_small = [GIANT, GIANT + 1, GIANT + 4, GIANT + 8]  # opening the first small ones
    columns = found[0].eigenvectors.abs() > 1e-12
    assert bool(columns[:GIANT, 0].all()) and not bool(columns[GIANT:, 0].any())
    for column, node in enumerate(first_small, start=1):
        assert bool(columns[node, column])
    # The giant component's Perron vector from two seeds: residual 1e-10 (norm 1/2)
    # over its gap (above 1e-2) bounds the difference by 1e-8; the others are exact.
    torch.testing.assert_close(found[0].eigenvectors.abs(), found[1].eigenvectors.abs(),
                               rtol=0, atol=1e-7)


def test_largest_magnitude_takes_both_ends():
    # Without self loops a path is bipartite: its normalised adjacency has both
    # 1 and -1, so 'LM' holds copies of both. Reference: the dense spectrum by
    # magnitude; the same tolerance as above.
    s = tsgcn_t(self_loops=False)
    pairs = extreme_eigenpairs(s, 120, 'LM', tol=1e-10, max_iter=5000,
                               generator=torch.Generator().manual_seed(0))
    check_pairs(s, pairs, 120, 'LM', atol=1e-9)
    assert bool((pairs.eigenvalues < -0.49).any())


def test_float32_and_every_layout():
    # float32: the dense pairs are float64 ones rounded (residual a few eps_32 =
    # 1.2e-7), the giant component's to tol 1e-5 of the norm 0.5; 2e-5 covers
    # both. COO and dense operators give the CSR one's pairs.
    s = tsgcn_t(dtype=torch.float32)
    for layout in (s, s.to_sparse_coo(), s.to_dense()):
        pairs = extreme_eigenpairs(layout, 120, tol=1e-5, max_iter=500,
                                   generator=torch.Generator().manual_seed(0))
        assert pairs.eigenvalues.dtype == pairs.eigenvectors.dtype == torch.float32
        check_pairs(s, pairs, 120, 'LA', atol=2e-5)


def test_stored_zeros_join_no_components():
    # A stored zero entry between the giant component and each small one would
    # make the graph connected and the copies invisible to the block method.
    s = tsgcn_t()
    n = s.size(0)
    coo = s.to_sparse_coo()
    bridges = torch.stack([torch.zeros(n - GIANT, dtype=torch.long), torch.arange(GIANT, n)])
    indices = torch.cat([coo.indices(), bridges, bridges.flip(0)], dim=1)
    values = torch.cat([coo.values(), torch.zeros(2 * (n - GIANT), dtype=torch.float64)])
    zeros = torch.sparse_coo_tensor(indices, values, s.shape).coalesce().to_sparse_csr()
    pairs = extreme_eigenpairs(zeros, 120, tol=1e-10, max_iter=5000,
                               generator=torch.Generator().manual_seed(0))
    check_pairs(s, pairs, 120, 'LA', atol=1e-9)


def test_a_connected_operator_is_solved_as_before():
    # The split adds nothing to a connected graph: the same bits as the method alone.
    s = connected_operator()
    ours = extreme_eigenpairs(s, 8, generator=torch.Generator().manual_seed(3))
    alone = block_lanczos(s, 8, generator=torch.Generator().manual_seed(3))
    assert torch.equal(ours.eigenvalues, alone.eigenvalues)
    assert torch.equal(ours.eigenvectors, alone.eigenvectors)


def test_dense_components_below_the_rounding_of_tol_warn():
    # float32 pairs cannot reach a residual of 1e-12: the dense ones say so, as
    # block Lanczos's dense solve does (the giant component's solve warns too),
    # and the result is not converged.
    s = tsgcn_t(dtype=torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        pairs = extreme_eigenpairs(s, 120, tol=1e-12, max_iter=3,
                                   generator=torch.Generator().manual_seed(0))
    messages = [str(w.message) for w in caught]
    assert any(re.search(r"solved densely \(float64 eigh\) reached relative residual .* "
                         r"> tol=1e-12: the rounding of torch.float32", m)
               for m in messages), messages
    assert any(m.startswith('Block Lanczos stopped after 3 restart cycles') for m in messages)
    assert not pairs.converged and pairs.residual > 1e-12


@pytest.mark.parametrize('k, iterative', [(60, 0), (20, 4)])
def test_components_with_few_nodes_per_pair_are_solved_densely(k, iterative):
    # A 300-node component is solved densely when at most DENSE_PER_PAIR * k
    # nodes (k = 60): block Lanczos for a fifth of a component's spectrum cost
    # about ten times the dense solve (benchmarks/results/components.md); with
    # k = 20 each goes to the iterative solver. Reference and tolerance as in
    # the first test: the dense float64 spectrum, the solves' residual 1e-10.
    assert componentwise.DENSE_NODES < 300 <= componentwise.DENSE_PER_PAIR * 60
    assert 300 > componentwise.DENSE_PER_PAIR * 20
    s = connected_pieces(4, 300)  # each of top eigenvalue 1
    sizes = []

    def solve(operator, count, main):
        sizes.append(operator.size(0))
        return block_lanczos(operator, count, 'LA', 1e-10, 200,
                             generator=torch.Generator().manual_seed(0))

    pairs = componentwise.componentwise_eigenpairs(s, k, 'LA', 1e-10, 200, solve)
    assert sizes == [300] * iterative
    check_pairs(s, pairs, k, 'LA', atol=1e-9)


def test_low_rank_inverse_of_tsgcn_t_on_a_forest():
    # LowRankInverse(beta=0) on the forest: the factors' eigenvalues
    # -diag(V^T W) are the top 120 of the dense S (101 copies of 1/2 among them),
    # in float64 to the eigensolver's tol 1e-4 relative to ||S|| = 1/2, which
    # bounds each Ritz value's error by its square over the gap, far below 1e-6.
    edge_index, n = forest_edges()
    data = Data(edge_index=edge_index, num_nodes=n, x=torch.ones(n, 1, dtype=torch.float64))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        out = LowRankInverse(alpha=1.0, beta=0.0, rank=120, progress=False)(data)
    values = -(out.lowrank_v * out.lowrank_w).sum(dim=0)
    np.testing.assert_allclose(values.sort(descending=True).values.numpy(),
                               exact(tsgcn_t(), 120, 'LA'), atol=1e-6)


def test_block_lanczos_alone_warns_where_copies_may_be_missing():
    # Solved as one operator (as row shards are), the forest's 101 copies of 1/2
    # exceed the block: block 16 found 48 of the 60 wanted at one thread (all 60
    # at two), block 4 found 44, with lower pairs after them: every such result
    # now warns. Copies that fill the k pairs to the end are a valid choice.
    s = tsgcn_t()
    short = 0
    for block_size in (4, None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            pairs = block_lanczos(s, 60, tol=1e-10, max_iter=5000, block_size=block_size,
                                  generator=torch.Generator().manual_seed(0))
        copies = int((pairs.eigenvalues - 0.5).abs().le(1e-12).sum())
        warned = [str(w.message) for w in caught
                  if 'copies of the eigenvalue 0.5' in str(w.message)]
        if copies < 60:
            short += 1
            assert warned and re.search(r"returned \d+ copies .* at least its block size",
                                        warned[0])
        else:
            assert not warned
    assert short >= 1  # block 4 cannot hold 60 copies
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        pairs = block_lanczos(s, 16, tol=1e-10, max_iter=5000,
                              generator=torch.Generator().manual_seed(0))
    assert int((pairs.eigenvalues - 0.5).abs().le(1e-12).sum()) == 16
