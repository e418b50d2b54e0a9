import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

from tests.conftest import messy_graph
from torch_geometric_regcn.linalg import combine, normalized_adjacency, subspace_iteration


def operator(num_nodes=300, seed=0):
    edge_index = torch.randint(0, num_nodes, (2, 4 * num_nodes),
                               generator=torch.Generator().manual_seed(seed))
    a = normalized_adjacency(edge_index, num_nodes, dtype=torch.float64)
    return combine([a], [0.5], num_nodes)


def to_scipy(matrix):
    return sp.csr_matrix((matrix.values().numpy(), matrix.col_indices().numpy(),
                          matrix.crow_indices().numpy()), shape=matrix.shape)


@pytest.mark.parametrize('which', ['LA', 'LM'])
@pytest.mark.parametrize('method', ['chebyshev', 'power'])
def test_subspace_iteration_matches_eigsh(which, method):
    s = operator()
    k = 12
    pairs = subspace_iteration(s, k, which, tol=1e-9, max_iter=5000, method=method,
                               generator=torch.Generator().manual_seed(0))
    assert pairs.converged and pairs.residual <= 1e-9
    v0 = np.random.default_rng(0).standard_normal(s.size(0))  # ARPACK is seeded too
    ref_val, ref_vec = spla.eigsh(to_scipy(s), k, which=which, tol=1e-12, v0=v0)
    order = np.argsort(-(ref_val if which == 'LA' else np.abs(ref_val)))
    ref_val, ref_vec = ref_val[order], ref_vec[:, order]
    # Residual 1e-9 bounds the eigenvalue error by about residual**2 / gap: far below 1e-7.
    np.testing.assert_allclose(pairs.eigenvalues.numpy(), ref_val, atol=1e-7)
    # Sign-invariant: the spectral projectors U Λ Uᵀ agree.
    ours = (pairs.eigenvectors * pairs.eigenvalues) @ pairs.eigenvectors.T
    theirs = (ref_vec * ref_val) @ ref_vec.T
    np.testing.assert_allclose(ours.numpy(), theirs, atol=1e-6)


def test_largest_magnitude_on_a_bipartite_spectrum_filters_at_the_block_scale():
    # A cycle of even length is bipartite: its eigenvalues come in pairs +-lambda,
    # and a block vector a u+ + b u- has the Ritz value (a² - b²) / (a² + b²) lambda,
    # often near zero. As the filter's cut (its smallest |theta|) that value
    # filtered nothing: 100 iterations, residual 3.6e-3, not converged (LA: 9).
    n = 300
    ring = torch.arange(n)
    edge_index = torch.stack([ring, (ring + 1) % n])
    s = combine([normalized_adjacency(edge_index, n, dtype=torch.float64, self_loops=False)],
                [1.0], n)
    pairs = subspace_iteration(s, 5, 'LM', tol=1e-5, max_iter=60,
                               generator=torch.Generator().manual_seed(0))
    assert pairs.converged and pairs.iterations <= 40
    exact = np.sort(np.abs(np.linalg.eigvalsh(s.to_dense().numpy())))[::-1][:5]
    # The fifth |eigenvalue| is cos(2 pi / n), four times over, 6.6e-4 above the next:
    # a residual of 1e-5 bounds the error by about residual² / gap = 1.5e-7.
    np.testing.assert_allclose(pairs.eigenvalues.abs().sort(descending=True).values.numpy(),
                               exact, atol=1e-6)


def test_subspace_iteration_warns_with_residual_when_not_converged():
    with pytest.warns(UserWarning, match=r'relative residual \d\.\d\de[-+]\d+'):
        pairs = subspace_iteration(operator(), 20, 'LA', tol=1e-12, max_iter=2,
                                   method='power')
    assert not pairs.converged and pairs.iterations == 2


def test_subspace_iteration_is_reproducible():
    s = operator()
    with pytest.warns(UserWarning, match='relative residual'):
        runs = [subspace_iteration(s, 5, max_iter=3, tol=1e-30,
                                   generator=torch.Generator().manual_seed(7))
                for _ in range(2)]
    torch.testing.assert_close(runs[0].eigenvectors, runs[1].eigenvectors, rtol=0, atol=0)


def test_subspace_iteration_dense_full_rank():
    a = normalized_adjacency(messy_graph(), 40, dtype=torch.float64)
    s = combine([a], [0.5], 40).to_dense()
    pairs = subspace_iteration(s, 40)
    np.testing.assert_allclose(pairs.eigenvalues.sort().values.numpy(),
                               np.linalg.eigvalsh(s.numpy()), atol=1e-12)


@pytest.mark.parametrize('kwargs, message', [
    (dict(k=0), "'k'"), (dict(k=301), "'k'"), (dict(k=3, which='SM'), "'which'"),
    (dict(k=3, method='arnoldi'), "'method'"), (dict(k=3, degree=0), "'degree'"),
])
def test_subspace_iteration_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        subspace_iteration(operator(), **kwargs)


@pytest.mark.parametrize('method', ['chebyshev', 'power'])
def test_the_residual_is_the_largest_of_every_pair_returned(method):
    # Pairs locked early left the residual: it was the largest of the pairs
    # still iterated at the last step (2.4e-5 where a returned pair had
    # 7.4e-5). Reference: the residuals of the returned pairs, from S.
    n = 300
    gen = torch.Generator().manual_seed(1)
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=gen))
    spectrum = torch.cat([torch.tensor([3.0, 2.5, 2.0], dtype=torch.float64),
                          torch.linspace(1.0, 0.98, 5, dtype=torch.float64),
                          torch.linspace(0.97, -1.0, n - 8, dtype=torch.float64)])
    s = (q * spectrum) @ q.T
    s = (s + s.T) / 2
    pairs = subspace_iteration(s, 8, 'LA', tol=1e-4, max_iter=2000, method=method,
                               generator=torch.Generator().manual_seed(0))
    vectors, values = pairs.eigenvectors, pairs.eigenvalues
    true = (s @ vectors - vectors * values).norm(dim=0) / s.abs().sum(1).max()
    assert pairs.converged
    assert pairs.residual == pytest.approx(float(true.max()), rel=1e-6)
