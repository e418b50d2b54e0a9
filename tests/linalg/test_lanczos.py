import math

import numpy as np
import pytest
import torch

import torch_geometric_regcn.linalg.lanczos as lanczos
from tests.linalg.helpers import operator, reference
from torch_geometric_regcn.linalg import block_lanczos, combine, normalized_adjacency


@pytest.mark.parametrize('which', ['LA', 'LM'])
@pytest.mark.parametrize('degree', [1, 8])
def test_block_lanczos_matches_eigsh(which, degree):
    s, k = operator(), 20
    pairs = block_lanczos(s, k, which, tol=1e-10, degree=degree, block_size=4,
                          generator=torch.Generator().manual_seed(0))
    assert pairs.converged and pairs.residual <= 1e-10
    ref_val, ref_vec = reference(s, k, which)
    # A relative residual of 1e-10 bounds the eigenvalue error by far less than 1e-9.
    np.testing.assert_allclose(pairs.eigenvalues.numpy(), ref_val, atol=1e-9)
    # Sign- and basis-invariant: the spectral projectors U Λ Uᵀ agree; the error is
    # about residual / gap, and the gaps of this spectrum exceed 1e-4.
    ours = (pairs.eigenvectors * pairs.eigenvalues) @ pairs.eigenvectors.T
    theirs = (ref_vec * ref_val) @ ref_vec.T
    np.testing.assert_allclose(ours.numpy(), theirs, atol=1e-6)
    eye = torch.eye(k, dtype=torch.float64)
    torch.testing.assert_close(pairs.eigenvectors.T @ pairs.eigenvectors, eye, atol=1e-12,
                               rtol=0)


def test_block_lanczos_residual_is_the_true_residual():
    s = operator()
    pairs = block_lanczos(s, 10, tol=1e-6, generator=torch.Generator().manual_seed(1))
    x, theta = pairs.eigenvectors, pairs.eigenvalues
    dense = s.to_dense()
    true = (dense @ x - x * theta).norm(dim=0).max() / torch.linalg.eigvalsh(dense).abs().max()
    # Ours scales by the largest Ritz value in magnitude, below ‖S‖₂: never optimistic.
    assert pairs.residual >= float(true) * (1 - 1e-6)
    assert pairs.residual <= 1e-6


def test_block_lanczos_float32_and_input_layouts_agree():
    s = operator()
    ref_val, _ = reference(s, 8, 'LA')
    for matrix in [s, s.to_sparse_coo(), s.to_dense(), s.float()]:
        pairs = block_lanczos(matrix, 8, tol=1e-5, generator=torch.Generator().manual_seed(0))
        assert pairs.eigenvalues.dtype == matrix.dtype
        # float32 eigenvalues carry ~1e-7 relative rounding; 1e-5 residual bounds the rest.
        np.testing.assert_allclose(pairs.eigenvalues.double().numpy(), ref_val, atol=1e-5)


def test_float32_rayleigh_quotients_of_equal_entries_do_not_drift():
    # A 3-regular graph (a cycle and a perfect matching): its top eigenvector is
    # constant, eigenvalue 1. Its float32 Rayleigh quotient summed in float32 came
    # out 255 rounding units low, a residual of 3e-5 the solver could not get
    # below: not converged after 60 cycles at tol 1e-5, with advice that could not
    # help. Products in float64 round the quotient once.
    n = 3000
    ring = torch.arange(n)
    pairs = torch.randperm(n, generator=torch.Generator().manual_seed(0)).view(2, -1)
    edge_index = torch.cat([torch.stack([ring, (ring + 1) % n]), pairs], dim=1)
    s = combine([normalized_adjacency(edge_index, n, dtype=torch.float32)], [1.0], n)
    found = block_lanczos(s, 8, 'LA', tol=1e-5, max_iter=60,
                          generator=torch.Generator().manual_seed(0))
    assert found.converged and found.residual <= 1e-5
    # The top eigenvalue is 1 (S = (A + I) / 4, its entries exact in float32); the
    # Ritz value's error, about residual² / gap < 1e-9, is far below eps.
    assert abs(float(found.eigenvalues[0]) - 1.0) <= 8 * torch.finfo(torch.float32).eps


def test_block_lanczos_survives_an_invariant_krylov_space():
    # 150 disjoint triangles: S = 0.5 * blockdiag(J / 3) is a scaled projection, so
    # S² = S / 2 and the Krylov space of any block stops growing after two blocks.
    tri = torch.tensor([[0, 1, 2, 0, 1, 2], [1, 2, 0, 2, 0, 1]])
    edge_index = torch.cat([tri + 3 * i for i in range(150)], dim=1)
    s = combine([normalized_adjacency(edge_index, 450, dtype=torch.float64)], [0.5], 450)
    pairs = block_lanczos(s, 6, tol=1e-10, generator=torch.Generator().manual_seed(0))
    assert not pairs.eigenvalues.isnan().any()
    np.testing.assert_allclose(pairs.eigenvalues.numpy(), 0.5, atol=1e-12)
    x = pairs.eigenvectors
    torch.testing.assert_close(x.T @ x, torch.eye(6, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(s @ x, 0.5 * x, atol=1e-10, rtol=0)


@pytest.mark.parametrize('seed', [0, 2])
def test_block_lanczos_stays_orthogonal_on_a_highly_repeated_spectrum(seed):
    # A hub with 100 pendant paths hub - a - b: the eigenvalues of S (no self
    # loops) repeat about 99 times each. Columns that orthogonalisation left
    # tiny kept their rounding against the basis, and normalising raised it to
    # O(1): Ritz values outside [-1, 1], a stated residual below the true one.
    # Reference: the dense float64 eigendecomposition.
    p = 100
    a = torch.arange(1, 2 * p, 2)
    edges = torch.cat([torch.stack([torch.zeros(p, dtype=torch.long), a]),
                       torch.stack([a, a + 1])], dim=1)
    edges = torch.cat([edges, edges.flip(0)], dim=1)
    index, weight = normalized_adjacency(edges, 2 * p + 1, dtype=torch.float64,
                                         self_loops=False)
    s = torch.sparse_coo_tensor(index, weight, (2 * p + 1,) * 2)
    pairs = block_lanczos(s, 20, 'LA', 1e-6, 30, generator=torch.Generator().manual_seed(seed))
    x = pairs.eigenvectors
    expected = torch.linalg.eigvalsh(s.to_dense()).flip(0)[:20]
    assert pairs.converged
    # Each pair's residual is at most tol = 1e-6 of the norm 1; eigenvalue
    # errors are at most the squared residual over the gap, far below 1e-8.
    torch.testing.assert_close(pairs.eigenvalues, expected, atol=1e-8, rtol=0)
    torch.testing.assert_close(x.T @ x, torch.eye(20, dtype=torch.float64), atol=1e-12, rtol=0)
    true = (s @ x - x * pairs.eigenvalues).norm(dim=0).max()
    assert float(true) <= 1e-6 and float(true) <= 1.01 * pairs.residual + 1e-12


def record_degrees(monkeypatch):
    degrees, real = [], lanczos.chebyshev_filter

    def recording(operator, lower, upper, degree, top, workspace=None):
        if (lower, upper, degree, top) != (-1.0, 1.0, 1, 1.0):  # not the plain product S x
            degrees.append(degree)
        return real(operator, lower, upper, degree, top, workspace)

    monkeypatch.setattr(lanczos, 'chebyshev_filter', recording)
    return degrees


def test_block_lanczos_lowers_the_degree_when_the_residual_stalls(monkeypatch):
    # float32 cannot reach a relative residual of 1e-12: once rounding is all
    # that is left the residual stops improving, and every stall of
    # lanczos.STALL cycles lowers the degree, down to plain block Lanczos (1),
    # whose own stall stops the run before max_iter, with a warning that names
    # the rounding (it ran to max_iter and advised raising it).
    degrees = record_degrees(monkeypatch)
    s = operator()
    with pytest.warns(UserWarning, match=r'relative residual.*lowest filter degree no longer '
                                         r'halve it: the rounding of torch.float32'):
        pairs = block_lanczos(s.float(), 8, tol=1e-12, max_iter=80, degree=16,
                              generator=torch.Generator().manual_seed(0))
    assert degrees[0] == 16 and degrees[-1] == 1
    assert all(a > b for a, b in zip(degrees, degrees[1:]))
    assert not pairs.converged and pairs.iterations < 80
    # The pairs are right to float32 accuracy.
    np.testing.assert_allclose(pairs.eigenvalues.double().numpy(), reference(s, 8, 'LA')[0],
                               atol=1e-5)


def test_block_lanczos_keeps_the_degree_when_progress_is_slow_far_above_rounding(monkeypatch):
    # A basis barely larger than k: the float64 residual sits near 1e-1 for
    # dozens of cycles before it falls. Rounding (1e-16 under a degree-4
    # filter) cannot be the cause, so the degree stays and the run converges.
    degrees = record_degrees(monkeypatch)
    pairs = block_lanczos(operator(num_nodes=1500), 40, tol=1e-4, degree=4, block_size=4,
                          basis_size=48, max_iter=300,
                          generator=torch.Generator().manual_seed(0))
    assert pairs.converged and degrees == [4]


def test_block_lanczos_returns_the_best_pairs_across_restarts():
    # The stall (float32's floor, about 1e-6 here, from cycle 3) restarts Lanczos
    # at a lower degree from a random block (at cycle 9 on the machines measured;
    # 12 cycles leave room for a floor reached a cycle or two later elsewhere):
    # the restart's first cycles are far worse than the pairs kept before it.
    s = operator()
    reports = []
    with pytest.warns(UserWarning, match='relative residual'):
        pairs = block_lanczos(s.float(), 8, tol=1e-12, max_iter=12, degree=16,
                              generator=torch.Generator().manual_seed(0),
                              callback=lambda cycle, residual: reports.append((cycle, residual)))
    assert reports[0] == (0, math.inf)  # the spectrum located, no pairs yet
    assert [cycle for cycle, _ in reports[1:]] == list(range(1, 13))
    residuals = [residual for _, residual in reports[1:]]
    best = residuals.index(min(residuals))
    assert max(residuals[best + 1:], default=0.0) > 100 * min(residuals)  # a restart after it
    assert pairs.residual == min(residuals)
    # float32 rounding plus a residual of ~1e-6 (times ‖S‖ ≤ 1) bound the error.
    np.testing.assert_allclose(pairs.eigenvalues.double().numpy(), reference(s, 8, 'LA')[0],
                               atol=1e-4)


def test_block_lanczos_solves_small_problems_densely():
    s = operator(num_nodes=30)
    pairs = block_lanczos(s, 30)
    np.testing.assert_allclose(np.sort(pairs.eigenvalues.numpy()),
                               np.linalg.eigvalsh(s.to_dense().numpy()), atol=1e-12)
    # The residual is that of the pairs returned (it was 0.0, converged,
    # whatever the dtype): in float64 at the rounding of a dense eigh (about
    # N eps = 7e-15; two evaluations of it differ by as much, so both are only
    # bounded), and in float32 above a tol of 1e-9, with a warning.
    dense = s.to_dense()
    true = ((dense @ pairs.eigenvectors - pairs.eigenvectors * pairs.eigenvalues).norm(dim=0)
            / pairs.eigenvalues.abs().max()).max()
    assert pairs.converged and float(true) < 1e-12
    assert 0 < pairs.residual < 1e-12 and pairs.residual <= 10 * float(true) + 1e-14
    with pytest.warns(UserWarning, match=r'densely, to relative residual .*float32'):
        single = block_lanczos(s.float(), 4, tol=1e-9)
    vectors, values = single.eigenvectors.double(), single.eigenvalues.double()
    true = ((dense @ vectors - vectors * values).norm(dim=0) / dense.abs().sum(1).max()).max()
    assert not single.converged and 1e-9 < single.residual <= 10 * float(true) + 1e-6


def test_block_lanczos_warns_with_residual_and_is_reproducible():
    s = operator()
    with pytest.warns(UserWarning, match=r'relative residual \d\.\d\de[-+]\d+'):
        runs = [block_lanczos(s, 10, tol=1e-30, max_iter=2,
                              generator=torch.Generator().manual_seed(3)) for _ in range(2)]
    assert not runs[0].converged and runs[0].iterations == 2
    assert torch.equal(runs[0].eigenvectors, runs[1].eigenvectors)


@pytest.mark.parametrize('kwargs, message', [
    (dict(k=0), "'k'"), (dict(k=601), "'k'"), (dict(k=3, which='SM'), "'which'"),
    (dict(k=3, degree=0), "'degree'"), (dict(k=3, max_iter=0), "'max_iter'"),
    (dict(k=3, block_size=0), "'block_size'"), (dict(k=8, block_size=4, basis_size=12),
                                                 "'basis_size' must be at least"),
])
def test_block_lanczos_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        block_lanczos(operator(), **kwargs)


def rotated(diagonal, seed=0):
    """A dense symmetric matrix with the given eigenvalues, in a random basis."""
    n = diagonal.numel()
    q = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64,
                                    generator=torch.Generator().manual_seed(seed))).Q
    return ((q * diagonal.double()) @ q.T).to(diagonal.dtype)


@pytest.mark.parametrize('k', [1, 2, 3])
def test_block_lanczos_lm_separates_plus_minus_pairs(k):
    # ±λ share the even filter's value, so the wanted k are chosen on S itself.
    values = torch.cat([torch.linspace(0.1, 1, 30), -torch.linspace(0.1, 1, 30)]).double()
    values[28:30] += torch.tensor([1e-3, 2e-3])  # break the ± ties: a unique answer for all k
    pairs = block_lanczos(rotated(values), k, 'LM', tol=1e-10, block_size=1,
                          basis_size=k + 4, generator=torch.Generator().manual_seed(0))
    assert pairs.converged
    expected = sorted(values.tolist(), key=abs, reverse=True)[:k]
    np.testing.assert_allclose(np.sort(pairs.eigenvalues.numpy()), np.sort(expected),
                               atol=1e-8)


def test_block_lanczos_float32_filter_cannot_overflow():
    # A cut far below the top makes T_16 of the top about 1e48 > float32's max;
    # the scaled recurrence keeps every vector of order one.
    values = torch.zeros(200)
    values[:3] = torch.tensor([1.0, -0.9, 0.8])
    pairs = block_lanczos(rotated(values, seed=1), 3, 'LM', tol=1e-4,
                          generator=torch.Generator().manual_seed(0))
    assert pairs.converged
    np.testing.assert_allclose(np.sort(pairs.eigenvalues.numpy()), [-0.9, 0.8, 1.0],
                               atol=1e-5)


@pytest.mark.parametrize('which', ['LA', 'LM'])
def test_block_lanczos_row_chunks_change_nothing(monkeypatch, which):
    # The Ritz rotation in place and the residuals run a chunk of ROW_CHUNK rows
    # at a time; chunks of 7 rows (not dividing N) must give the pairs of one
    # chunk for all rows (the same operations per row: equal to rounding, 1e-12
    # on these O(1) float64 entries), and a reported residual that is the true one.
    s = operator()
    whole = block_lanczos(s, 10, which, tol=1e-8, generator=torch.Generator().manual_seed(1))
    monkeypatch.setattr(lanczos, 'ROW_CHUNK', 7)
    pairs = block_lanczos(s, 10, which, tol=1e-8, generator=torch.Generator().manual_seed(1))
    assert pairs.iterations == whole.iterations
    torch.testing.assert_close(pairs.eigenvalues, whole.eigenvalues, atol=1e-12, rtol=0)
    # Each vector up to its sign, which the Rayleigh-Ritz eigh may pick either way when
    # the chunks round differently (they do on AMD EPYC).
    sign = (pairs.eigenvectors * whole.eigenvectors).sum(0).sign()
    torch.testing.assert_close(pairs.eigenvectors * sign, whole.eigenvectors, atol=1e-9, rtol=0)
    x, theta, dense = pairs.eigenvectors, pairs.eigenvalues, s.to_dense()
    true = (dense @ x - x * theta).norm(dim=0).max() / torch.linalg.eigvalsh(dense).abs().max()
    assert float(true) * (1 - 1e-6) <= pairs.residual <= 1e-8


def deflated_reference(s, u, k, which):
    """Dense float64 eigenpairs of P S P, P = I - U Uᵀ, without the d zeros it
    has on span(U): the pairs of S restricted to the complement of span(U)."""
    p = torch.eye(s.size(0), dtype=torch.float64) - u @ u.T
    values, vectors = torch.linalg.eigh(p @ s.to_dense() @ p)
    keep = (vectors.T @ u).norm(dim=1) < 0.5  # the d eigenvectors in span(U) have norm 1
    values, vectors = values[keep], vectors[:, keep]
    order = (values if which == 'LA' else values.abs()).argsort(descending=True)
    return values[order], vectors[:, order]


def random_orthonormal(n, d, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.linalg.qr(torch.randn(n, d, dtype=torch.float64, generator=gen)).Q


def invariant(s, positions, which, seed=0):
    """Orthonormal columns spanning S's eigenvectors at the given positions of
    the order of 'which', rotated by a random orthogonal matrix."""
    values, vectors = torch.linalg.eigh(s.to_dense())
    order = (values if which == 'LA' else values.abs()).argsort(descending=True)
    return vectors[:, order[positions]] @ random_orthonormal(len(positions), len(positions),
                                                             seed)


@pytest.mark.parametrize('which', ['LA', 'LM'])
@pytest.mark.parametrize('known', [False, True])
def test_block_lanczos_deflate_matches_dense_deflated_matrix(which, known):
    # deflate: the 3 leading eigenvectors of S (a known trivial eigenvector's
    # case), or a rotated basis of 3 eigenvectors among the wanted ones.
    s, k = operator(), 10
    u = invariant(s, [0, 1, 2] if known else [0, 4, 7], which)
    pairs = block_lanczos(s, k, which, tol=1e-10, block_size=4,
                          generator=torch.Generator().manual_seed(0), deflate=u)
    assert pairs.converged
    ref_val, ref_vec = deflated_reference(s, u, k + 1, which)
    # A relative residual of 1e-10 bounds the eigenvalue error by far less than 1e-9.
    torch.testing.assert_close(pairs.eigenvalues, ref_val[:k], atol=1e-9, rtol=0)
    # The projector error is about residual / gap; the gaps here exceed 1e-4
    # (asserted), so 1e-6 holds with room.
    gaps = (ref_val[:k + 1] - ref_val[:k + 1].roll(-1))[:k].abs()
    assert float(gaps.min()) > 1e-4
    ours = (pairs.eigenvectors * pairs.eigenvalues) @ pairs.eigenvectors.T
    theirs = (ref_vec[:, :k] * ref_val[:k]) @ ref_vec[:, :k].T
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    # Orthogonal to U to float64 rounding of the Gram--Schmidt (N eps ~ 1e-13).
    assert float((u.T @ pairs.eigenvectors).abs().max()) < 1e-12
    full, _ = deflated_reference(s, u[:, :0], k + 3, which)  # S's own eigenvalues
    left = full[[i for i in range(k + 3) if i not in ([0, 1, 2] if known else [0, 4, 7])]]
    torch.testing.assert_close(pairs.eigenvalues, left, atol=1e-9, rtol=0)


def test_block_lanczos_deflate_dense_path():
    # m + b >= N: solved densely on a basis of the complement of span(U).
    s = operator(num_nodes=30)
    u = invariant(s, [3, 20], 'LA')
    pairs = block_lanczos(s, 28, deflate=u)
    ref_val, _ = deflated_reference(s, u, 28, 'LA')
    torch.testing.assert_close(pairs.eigenvalues, ref_val, atol=1e-12, rtol=0)
    assert float((u.T @ pairs.eigenvectors).abs().max()) < 1e-12


@pytest.mark.parametrize('deflate, message', [
    (lambda: torch.ones(599, 1, dtype=torch.float64), r"'deflate' must be a matrix \[600, d\]"),
    (lambda: torch.ones(600, dtype=torch.float64), r"'deflate' must be a matrix"),
    (lambda: torch.zeros(600, 0, dtype=torch.float64), r"'deflate' must be a matrix"),
    (lambda: random_orthonormal(600, 2).float(), "'deflate' must have the operator's dtype"),
    (lambda: random_orthonormal(600, 2).index_put_((torch.tensor([3]), torch.tensor([1])),
                                                   torch.tensor(math.nan, dtype=torch.float64)),
     "'deflate' contains NaN"),
    (lambda: 2 * invariant(operator(), [0, 1], 'LA'), "'deflate' must have orthonormal"),
    (lambda: random_orthonormal(600, 595), r"'k' must be at most N - d = 5"),
    (lambda: random_orthonormal(600, 2), "'deflate' must span an invariant subspace"),
])
def test_block_lanczos_rejects_bad_deflate(deflate, message):
    with pytest.raises(ValueError, match=message):
        block_lanczos(operator(), 6, deflate=deflate())


@pytest.mark.parametrize('solver', ['block_lanczos', 'subspace_iteration'])
def test_a_tolerance_below_the_dtypes_rounding_stops_and_says_so(solver):
    # float32 cannot reach tol = 1e-10 (its eps is 1.2e-7): the solvers ran
    # every cycle (1000 in 12 s) and advised raising 'max_iter'; CG stops at
    # once and names the rounding. Reference: the float64 eigenvalues.
    from torch_geometric_regcn.linalg import subspace_iteration
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(60, 60, dtype=torch.float64, generator=gen)
    a = (a + a.T) / 2
    a = a / torch.linalg.eigvalsh(a).abs().max()
    solve = block_lanczos if solver == 'block_lanczos' else subspace_iteration
    with pytest.warns(UserWarning, match=r"the rounding of torch.float32 limits it; solve in "
                                         r"float64 or raise 'tol'"):
        pairs = solve(a.float(), 4, tol=1e-10, max_iter=1000,
                      generator=torch.Generator().manual_seed(0))
    assert pairs.iterations < 200 and not pairs.converged
    expected = torch.linalg.eigvalsh(a).flip(0)[:4]
    # float32 eigenvalues of a matrix of norm 1: within 1e-5.
    torch.testing.assert_close(pairs.eigenvalues.double().sort(descending=True).values,
                               expected, rtol=0, atol=1e-5)


def test_slow_progress_at_the_lowest_degree_far_above_rounding_goes_on():
    # A stall at the lowest filter degree stops the run only near the dtype's
    # eps: a float32 'LM' problem with a small gap, stalled near 1e-2 for a
    # while, converges to tol = 1e-4 (it was stopped after 7 cycles).
    n = 600
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=gen))
    gap = 1e-2
    values = torch.cat([torch.tensor([50.0, 1.0, 1 - gap / 2, 1 - gap], dtype=torch.float64),
                        torch.linspace(-(1 - 2 * gap), 1 - 2 * gap, n - 4,
                                       dtype=torch.float64)])
    s = ((q * values) @ q.T).float()
    pairs = block_lanczos((s + s.T) / 2, 4, which='LM', max_iter=400, basis_size=12,
                          generator=torch.Generator().manual_seed(0))
    assert pairs.converged and pairs.residual <= 1e-4
    np.testing.assert_allclose(pairs.eigenvalues.double().abs().sort(descending=True).values,
                               [50.0, 1.0, 1 - gap / 2, 1 - gap], atol=1e-3)


def _bipartite(kind):
    if kind == 'star':
        a = np.zeros((150, 150))
        a[0, 1:] = a[1:, 0] = 1
    elif kind == 'complete':
        a = np.zeros((100, 100))
        a[:40, 40:] = a[40:, :40] = 1
    else:
        b = (np.random.default_rng(0).random((200, 200)) < 0.03).astype(float)
        a = np.block([[np.zeros((200, 200)), b], [b.T, np.zeros((200, 200))]])
    d = a.sum(1)
    inv = np.where(d > 0, d ** -0.5, 0.0)
    return inv[:, None] * a * inv[None]


@pytest.mark.parametrize('kind', ['star', 'complete', 'random'])
def test_lm_finds_the_largest_magnitude_of_a_bipartite_spectrum(kind):
    # A bipartite graph's spectrum is symmetric: -1 ties with 1, and the 'LM'
    # filter's cut at the tie amplified nothing (100 cycles, an eigenvalue of
    # 0.08 or a residual of 9e-4 for k = 1). The reference is scipy's eigh.
    s = _bipartite(kind)
    expected = np.abs(np.linalg.eigvalsh(s)).max()
    operator = torch.tensor(s).to_sparse_csr()
    pairs = block_lanczos(operator, 1, 'LM', tol=1e-8, generator=torch.Generator().manual_seed(0))
    assert pairs.converged
    assert abs(float(pairs.eigenvalues.abs()[0]) - expected) < 1e-10
    residual = operator @ pairs.eigenvectors - pairs.eigenvectors * pairs.eigenvalues
    assert float(residual.norm()) < 1e-7


def _spider(legs: int, length: int) -> torch.Tensor:
    # A root joined to the first node of each of 'legs' paths of 'length' nodes,
    # D^-1/2 A D^-1/2: bipartite, and each path's modes that vanish at the root
    # are eigenvectors legs - 1 times over, for +lambda and -lambda alike.
    n = 1 + legs * length
    a = torch.zeros(n, n, dtype=torch.float64)
    for leg in range(legs):
        first = 1 + leg * length
        a[0, first] = 1
        for i in range(first, first + length - 1):
            a[i, i + 1] = 1
    a = a + a.T
    d = a.sum(1).rsqrt()
    return d[:, None] * a * d[None]


@pytest.mark.parametrize('length,k', [(5, 3), (10, 5), (10, 8), (20, 5)])
def test_lm_finds_plus_and_minus_copies_beyond_its_block(length, k):
    # The even 'LM' filter cannot tell +lambda from -lambda: with more copies of
    # the pair than its block holds, its Ritz vectors were mixtures of both,
    # whose Rayleigh quotients on S fell low, and exact pairs of lower magnitude
    # were returned in their place, converged and silent (30 legs of 10 nodes,
    # k = 5: 0.809 and 0.588 for 0.988; of 5 nodes, k = 3: 100 cycles). The
    # reference is the dense eigvalsh.
    s = _spider(30, length)
    expected = torch.linalg.eigvalsh(s).abs().sort(descending=True).values[:k]
    pairs = block_lanczos(s.to_sparse_csr(), k, 'LM', tol=1e-8,
                          generator=torch.Generator().manual_seed(0))
    assert pairs.converged
    # a relative residual of 1e-8 bounds each eigenvalue's error by 1e-8 (||S|| = 1)
    torch.testing.assert_close(pairs.eigenvalues.abs(), expected, rtol=0, atol=1e-7)
    x = pairs.eigenvectors
    assert float((s @ x - x * pairs.eigenvalues).norm(dim=0).max()) <= 1e-8 * 1.01
    torch.testing.assert_close(x.T @ x, torch.eye(k, dtype=torch.float64), rtol=0, atol=1e-12)


@pytest.mark.parametrize('layout', ['dense', 'csr'])
def test_a_non_symmetric_operator_is_refused_before_any_cycle(layout):
    # A dense one came back "converged" with the pairs of (M + M^T) / 2 (true
    # residual 4.4); a sparse one ran 100 cycles and blamed max_iter.
    s = torch.tensor(_bipartite('star'))
    s[0, 1] += 0.5
    operator = s if layout == 'dense' else s.to_sparse_csr()
    with pytest.raises(ValueError, match="'operator' is not symmetric"):
        block_lanczos(operator, 2, 'LA')
    symmetric = torch.tensor(_bipartite('star')).float()  # rounding of float32 entries: fine
    block_lanczos(symmetric if layout == 'dense' else symmetric.to_sparse_csr(), 2, 'LA')
    # A symmetric matrix computed in float32, asymmetric by the rounding of
    # its sums of 300 products (1e-6 of its largest entry): accepted (an
    # exact test of the entries refused it).
    a = torch.rand(300, 300, generator=torch.Generator().manual_seed(0))
    a = (a + a.T) / (2 * 300)
    cubed = a @ a @ a
    block_lanczos(cubed if layout == 'dense' else cubed.to_sparse_csr(), 2, 'LA')


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
@pytest.mark.parametrize('layout', ['dense', 'csr'])
@pytest.mark.parametrize('which', ['LA', 'LM'])
def test_a_spectrum_of_one_point_is_solved(dtype, layout, which):
    # The zero operator (a graph without edges and without self loops), too large
    # for the dense path: every Ritz value of the first cycle is 0, so the filter's
    # window had width 'tiny' and its scale 1 / half overflowed (a ValueError
    # blaming large entries in float64, a RuntimeError in float32). Its exact
    # pairs: eigenvalue 0, any orthonormal vectors, residual 0.
    s = torch.zeros(300, 300, dtype=dtype)
    s = s.to_sparse_csr() if layout == 'csr' else s
    pairs = block_lanczos(s, 8, which, generator=torch.Generator().manual_seed(0))
    assert pairs.converged and pairs.residual == 0.0
    assert torch.equal(pairs.eigenvalues, torch.zeros(8, dtype=dtype))
    eye = torch.eye(8, dtype=torch.float64)
    torch.testing.assert_close(pairs.eigenvectors.double().T @ pairs.eigenvectors.double(), eye,
                               atol=100 * torch.finfo(dtype).eps, rtol=0)


@pytest.mark.parametrize('dtype,scale,tol', [(torch.float32, 1e25, 1e-4),
                                             (torch.float64, 1e160, 1e-8)])
def test_lm_extension_at_a_scale_whose_square_overflows(dtype, scale, tol):
    # The 'LM' block's extension once came from W^T W, which squares ||S||:
    # (1e25)^2 overflows float32 and (1e160)^2 float64, and the solve raised.
    # The reference is the dense eigvalsh of the unscaled float64 matrix; a
    # relative residual of tol bounds each eigenvalue's relative error by tol.
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(600, 600, generator=g) < 0.01).double().triu(1)
    a = a + a.T
    d = a.sum(1).clamp(min=1).rsqrt()
    s = d[:, None] * a * d[None]
    expected = torch.linalg.eigvalsh(s).abs().sort(descending=True).values[:6]
    pairs = block_lanczos((s * scale).to(dtype).to_sparse_csr(), 6, 'LM', tol=tol,
                          generator=torch.Generator().manual_seed(0))
    assert pairs.converged
    found = (pairs.eigenvalues.double() / scale).abs().sort(descending=True).values
    torch.testing.assert_close(found, expected, rtol=0, atol=2 * tol)


@pytest.mark.filterwarnings('ignore:Block Lanczos returned 16 copies')  # 20 legs, block 2
def test_lm_with_k_beyond_half_of_n_keeps_its_block_orthonormal():
    # With k > N / 2, [V, S V] has more columns than N: directions of W below
    # the rounding once passed the threshold (read off W^T W, accurate to eps
    # times its largest entry only), the block was not orthonormal and the
    # Rayleigh-Ritz wrong for 12-22 cycles. The reference is the dense eigvalsh.
    s = _spider(20, 10)
    k = 140
    expected = torch.linalg.eigvalsh(s).abs().sort(descending=True).values[:k]
    pairs = block_lanczos(s.to_sparse_csr(), k, 'LM', tol=1e-8, block_size=2,
                          basis_size=k + 4, generator=torch.Generator().manual_seed(0))
    assert pairs.converged and pairs.iterations <= 3
    torch.testing.assert_close(pairs.eigenvalues.abs().sort(descending=True).values, expected,
                               rtol=0, atol=1e-7)
    x = pairs.eigenvectors
    torch.testing.assert_close(x.T @ x, torch.eye(k, dtype=torch.float64), rtol=0, atol=1e-11)
