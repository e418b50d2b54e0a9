"""laplacian_eigenpairs against dense numpy.linalg.eigh of the normalised
Laplacian, through both solvers (batched dense and block Lanczos), and its
warning when Lanczos stops short, attributed to the caller's line."""
import inspect

import numpy as np
import pytest
import torch
from torch_geometric.utils import to_undirected

import torch_geometric_regcn.linalg.laplacian_spectrum as spectrum
from torch_geometric_regcn.linalg import laplacian_eigenpairs, normalized_adjacency
from torch_geometric_regcn.linalg.laplacian_spectrum import (
    CONNECTED_GAP,
    SIGN_TIE,
    TIE_TOLERANCE,
    connected_dense_eigenpairs,
    tie_groups,
)


def pieces(sizes, isolated=0, seed=0):
    """Rings with random chords of the given sizes, then isolated nodes."""
    gen = torch.Generator().manual_seed(seed)
    parts, offset = [], 0
    for size in sizes:
        ring = torch.arange(size)
        parts.append(torch.stack([ring, (ring + 1) % size]) + offset)
        parts.append(torch.randint(0, size, (2, size), generator=gen) + offset)
        offset += size
    return torch.cat(parts, dim=1), offset + isolated


def dense_laplacian(edge_index, weight, n):
    a = torch.zeros(n, n, dtype=torch.float64)
    a[edge_index[0], edge_index[1]] = weight
    return torch.eye(n, dtype=torch.float64) - a


@pytest.mark.parametrize('sizes, isolated, k', [
    ([50, 30], 2, 6),  # dense only
    ([400, 40], 3, 9),  # a Lanczos component and a dense one
])
def test_matches_dense_eigh(sizes, isolated, k):
    edge_index, n = pieces(sizes, isolated)
    ei, w, degree = normalized_adjacency(edge_index, n, dtype=torch.float64, self_loops=False,
                                         reduce='sum', return_degree=True)
    pairs = laplacian_eigenpairs(ei, w, degree, k, tol=1e-10)
    lap = dense_laplacian(ei, w, n)
    values = np.linalg.eigvalsh(lap.numpy())
    # float64 eigenvalues of a matrix of norm <= 2: agreement far below 1e-8
    assert np.abs(pairs.eigenvalues.numpy() - values[1:k + 1]).max() < 1e-8
    vectors = pairs.eigenvectors
    assert vectors.shape == (n, k) and vectors.dtype == torch.float64
    residual = lap @ vectors - vectors * pairs.eigenvalues
    assert float(residual.abs().max()) < 1e-7
    assert torch.allclose(vectors.T @ vectors, torch.eye(k, dtype=torch.float64), atol=1e-10)


def test_kernel_and_isolated_nodes_are_known_exactly():
    edge_index, n = pieces([20, 10, 10], isolated=2)
    ei, w, degree = normalized_adjacency(edge_index, n, dtype=torch.float64, self_loops=False,
                                         return_degree=True)
    pairs = laplacian_eigenpairs(ei, w, degree, 2)
    assert torch.equal(pairs.eigenvalues, torch.zeros(2, dtype=torch.float64))
    for column, piece in enumerate([slice(20, 30), slice(30, 40)]):  # components 2 and 3
        expected = torch.zeros(n, dtype=torch.float64)
        expected[piece] = degree[piece].sqrt() / degree[piece].sqrt().norm()
        torch.testing.assert_close(pairs.eigenvectors[:, column], expected)
    assert pairs.residual == 0.0 and pairs.iterations == 0  # nothing solved


def test_a_stopped_lanczos_solve_warns_with_its_residual():
    edge_index, n = pieces([600])
    ei, w, degree = normalized_adjacency(edge_index, n, dtype=torch.float64, self_loops=False,
                                         return_degree=True)
    with pytest.warns(UserWarning,
                      match=r'relative residual \d\.\d\de[-+]\d+ > tol=1e-18') as record:
        pairs = laplacian_eigenpairs(ei, w, degree, 4, tol=1e-18, max_iter=1,
                                     dense_fallback=100)
    assert not pairs.converged and pairs.residual > 1e-18
    # The warning points at the line that called laplacian_eigenpairs, here.
    assert [w.filename for w in record] == [__file__]


def test_a_stopped_solve_states_the_residual_of_the_pairs_it_returns():
    # It stated the Lanczos residual from before the trivial vector was
    # projected out. A path of 3,000 nodes (clustered small eigenvalues) after
    # one cycle: a residual of order 1e-2. Reference: ||A v - (1 - lambda) v||
    # with the dense float64 normalised adjacency A (norm one); the two
    # products differ by rounding, about 1e-15, so rel=1e-9 holds with room.
    n = 3000
    ring = torch.arange(n - 1)
    edge_index = torch.cat([torch.stack([ring, ring + 1]), torch.stack([ring + 1, ring])], 1)
    ei, w, degree = normalized_adjacency(edge_index, n, dtype=torch.float64,
                                         self_loops=False, return_degree=True)
    with pytest.warns(UserWarning, match='relative residual') as record:
        pairs = laplacian_eigenpairs(ei, w, degree, 4, tol=1e-12, max_iter=1,
                                     dense_fallback=100)
    dense = torch.sparse_coo_tensor(ei, w, (n, n)).to_dense()
    v, theta = pairs.eigenvectors, 1.0 - pairs.eigenvalues
    true = float((dense @ v - v * theta).norm(dim=0).max())
    assert not pairs.converged and true > 1e-4
    assert pairs.residual == pytest.approx(true, rel=1e-9)
    assert f'{pairs.residual:.2e}' in str(record[0].message)


def starved_solve(*args, **kwargs):
    r"""A wrapper that adds one frame, as :class:`LaplacianEigenPE` does."""
    return laplacian_eigenpairs(*args, tol=1e-18, max_iter=1, dense_fallback=100,
                                stacklevel=3, **kwargs)


def test_the_warning_points_at_the_caller_of_a_wrapper():
    edge_index, n = pieces([600])
    ei, w, degree = normalized_adjacency(edge_index, n, dtype=torch.float64, self_loops=False,
                                         return_degree=True)
    with pytest.warns(UserWarning, match='relative residual') as record:
        starved_solve(ei, w, degree, 4)  # the warning's line
    line = inspect.currentframe().f_lineno - 1
    assert [(r.filename, r.lineno) for r in record] == [(__file__, line)]


def test_rejects_k_not_below_the_number_of_nodes():
    ei, w, degree = normalized_adjacency(torch.tensor([[0], [1]]), 3, self_loops=False,
                                         return_degree=True)
    with pytest.raises(ValueError, match="'k' must be smaller than the number of nodes 3"):
        laplacian_eigenpairs(ei, w.double(), degree.double(), 3)


def test_inputs_are_checked_and_float32_ones_accepted():
    edge_index, n = pieces([50, 30], 2)
    ei, w, degree = normalized_adjacency(edge_index, n, self_loops=False, reduce='sum',
                                         return_degree=True)  # float32, its default
    # float32 inputs failed in an index_put of float64; they are the float64 solve
    # of the float32 values (so equal to it, the same arithmetic after the cast).
    expected = laplacian_eigenpairs(ei, w.double(), degree.double(), 4)
    pairs = laplacian_eigenpairs(ei, w, degree, 4)
    assert torch.equal(pairs.eigenvalues, expected.eigenvalues)
    w, degree = w.double(), degree.double()
    nan_weight, nan_degree, negative = w.clone(), degree.clone(), degree.clone()
    nan_weight[0], nan_degree[3], negative[3] = float('nan'), float('nan'), -1.0
    # The dense path read one triangle: a NaN in the other returned clean values.
    with pytest.raises(ValueError, match="'edge_weight' contains NaN"):
        laplacian_eigenpairs(ei, nan_weight, degree, 4)
    with pytest.raises(ValueError, match="'degree' contains NaN"):
        laplacian_eigenpairs(ei, w, nan_degree, 4)
    with pytest.raises(ValueError, match="'degree' must be non-negative"):
        laplacian_eigenpairs(ei, w, negative, 4)
    with pytest.raises(ValueError, match="'edge_index' refers to nodes outside"):
        laplacian_eigenpairs(ei + n - int(ei.max()), w, degree, 4)
    with pytest.raises(TypeError, match="'edge_index' must hold integer node indices"):
        laplacian_eigenpairs(ei.float(), w, degree, 4)


def test_rounded_ties_across_components_follow_the_lowest_node():
    # The eigenvalue 1 on six components, interleaved: paths P2 = 0-11-13 and
    # P1 = 3-8-10 (spectrum 0, 1, 2), the 4-cycle 1-5-9-12-1 (0, 1, 1, 2), the
    # isolated nodes 2 and 4 (exactly 1), and the edge 6-7 (0, 2). The dense solver
    # returns the 1s rounded differently per component (a few eps apart); equal to
    # TIE_TOLERANCE, they follow the components' lowest node: after the kernel
    # vectors of components 1, 3 and 6 (0 is the skipped u_0) come P2, the cycle
    # (twice), node 2, P1, node 4. Each column is checked against a dense eigh of
    # its own component: the support, and L v = v to the rounding of an eigh of at
    # most 4 nodes (a few eps; 1e-13 leaves a wide margin).
    edges = [[0, 11], [11, 13], [1, 5], [5, 9], [9, 12], [12, 1], [3, 8], [8, 10], [6, 7]]
    edge_index = torch.tensor(edges).T
    edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    n = 14
    ei, w, degree = normalized_adjacency(edge_index, n, dtype=torch.float64, self_loops=False,
                                         return_degree=True)
    pairs = laplacian_eigenpairs(ei, w, degree, 9)
    lap = dense_laplacian(ei, w, n)
    supports = [[1, 5, 9, 12], [3, 8, 10], [6, 7], [0, 11, 13], [1, 5, 9, 12],
                [1, 5, 9, 12], [2], [3, 8, 10], [4]]
    expected_values = [0.0] * 3 + [1.0] * 6
    np.testing.assert_allclose(pairs.eigenvalues.numpy(), expected_values, rtol=0, atol=1e-13)
    for column, support in enumerate(supports):
        vector = pairs.eigenvectors[:, column]
        outside = torch.ones(n, dtype=torch.bool)
        outside[support] = False
        assert float(vector[outside].abs().max()) == 0.0, column
        residual = lap @ vector - expected_values[column] * vector
        assert float(residual.abs().max()) < 1e-13, column


def test_tie_groups_merge_values_within_the_tolerance():
    # Sorted, a group takes the values within TIE_TOLERANCE of its first one; the
    # next value starts the next group. Groups are numbered in ascending value
    # order, whatever the input order.
    eps = torch.finfo(torch.float64).eps
    values = torch.tensor([1.0, 0.5, 1.0 - 2 * eps, 0.5 + 0.9 * TIE_TOLERANCE,
                           0.5 + 1.8 * TIE_TOLERANCE, 0.5 + 3.0 * TIE_TOLERANCE, 0.0],
                          dtype=torch.float64)
    assert tie_groups(values).tolist() == [4, 1, 4, 1, 2, 3, 0]
    assert tie_groups(values[:0]).tolist() == []


def test_tie_groups_do_not_chain_beyond_the_tolerance():
    # Values 1e-13 apart (each step below TIE_TOLERANCE = 1.14e-13): chained, all
    # five would form one group spanning 4e-13, though the docs promise that a
    # group descends by at most the tolerance. Anchored at its first value, a group
    # spans at most TIE_TOLERANCE: {0, 1e-13}, {2e-13, 3e-13}, {4e-13}.
    values = torch.tensor([4e-13, 0.0, 3e-13, 1e-13, 2e-13], dtype=torch.float64)
    groups = tie_groups(values)
    assert groups.tolist() == [2, 0, 1, 0, 1]
    for group in groups.unique():
        members = values[groups == group]
        assert float(members.max() - members.min()) <= TIE_TOLERANCE


# The dense path of a small connected graph ------------------------------------------------

def molecule_like(n, rings, seed, weighted=False):
    """A random tree of n nodes, `rings` random chords, a duplicated edge and a
    self loop (both as PyG's Laplacian treats them: summed, dropped), with
    random asymmetric weights when `weighted`."""
    gen = torch.Generator().manual_seed(seed)
    child = torch.arange(1, n)
    parent = (torch.rand(n - 1, generator=gen) * child).long()
    chords = torch.randint(0, n, (2, rings), generator=gen)
    edge_index = torch.cat([torch.stack([parent, child]), torch.stack([child, parent]), chords,
                            chords.flip(0), torch.tensor([[0, 3], [1, 3]])], dim=1)
    weight = None
    if weighted:
        weight = torch.rand(edge_index.size(1), generator=gen, dtype=torch.float64) + 0.1
    return edge_index, weight


def reference_laplacian(edge_index, weight, n):
    """PyG's normalised Laplacian, built densely in numpy from the raw edges."""
    a = np.zeros((n, n))
    w = np.ones(edge_index.size(1)) if weight is None else weight.numpy()
    np.add.at(a, (edge_index[0].numpy(), edge_index[1].numpy()), w)
    np.fill_diagonal(a, 0.0)
    a = np.maximum(a, a.T)
    root = np.sqrt(a.sum(1))
    return np.eye(n) - a / np.outer(root, root)


@pytest.mark.parametrize('weighted', [False, True])
def test_connected_dense_path_matches_dense_eigh_and_the_component_path(weighted):
    for seed, n in enumerate([10, 23, 38, 64, 200]):
        edge_index, weight = molecule_like(n, 3, seed, weighted)
        k = min(8, n - 1)
        pairs = connected_dense_eigenpairs(edge_index, weight, n, k)
        lap = reference_laplacian(edge_index, weight, n)
        values = np.linalg.eigvalsh(lap)
        vectors = pairs.eigenvectors.numpy()
        # Both solves are backward stable on a matrix of norm <= 2 and n <= 200
        # nodes: eigenvalues agree to n * eps * 2 < 1e-13, residuals and
        # orthonormality are of the same order.
        assert np.abs(pairs.eigenvalues.numpy() - values[1:k + 1]).max() < 1e-12
        assert np.abs(lap @ vectors - vectors * pairs.eigenvalues.numpy()).max() < 1e-12
        assert np.abs(vectors.T @ vectors - np.eye(k)).max() < 1e-12
        check_signs(pairs.eigenvectors)
        assert (pairs.residual, pairs.iterations, pairs.converged) == (0.0, 0, True)
        # The component-wise path solves the same matrix with the same eigh:
        # identical for integer degrees; with weights the degrees are summed
        # in the same order, so equal to rounding of the last bit at most.
        ei, w, degree = normalized_adjacency(edge_index, n, weight, torch.float64,
                                             self_loops=False, return_degree=True)
        sparse = laplacian_eigenpairs(ei, w, degree, k)
        if not weighted:
            assert torch.equal(pairs.eigenvalues, sparse.eigenvalues)
            assert torch.equal(pairs.eigenvectors, sparse.eigenvectors)
        else:
            torch.testing.assert_close(pairs.eigenvalues, sparse.eigenvalues,
                                       atol=1e-13, rtol=0)
            # A simple eigenvalue's vector (gap > 1e-4 to both neighbours)
            # moves by at most about eps / gap under last-bit changes.
            gaps = np.diff(values[:k + 2])
            simple = np.minimum(gaps[:-1], gaps[1:]) > 1e-4
            assert simple.sum() >= k // 2
            torch.testing.assert_close(pairs.eigenvectors[:, simple],
                                       sparse.eigenvectors[:, simple], atol=1e-10, rtol=0)


def check_signs(vectors):
    magnitude = vectors.abs()
    first = (magnitude >= SIGN_TIE * magnitude.max(dim=0).values).to(torch.uint8).argmax(dim=0)
    assert bool((vectors.gather(0, first[None]) > 0).all())


def test_connected_dense_path_declines_what_is_not_connected():
    edge_index, n = pieces([12, 9])  # two components
    assert connected_dense_eigenpairs(edge_index, None, n, 3) is None
    edge_index, n = pieces([12], isolated=1)  # an isolated node
    assert connected_dense_eigenpairs(edge_index, None, n, 3) is None
    # Connected through a bridge of weight 1e-20: lambda_1 ~ 1e-20, below
    # CONNECTED_GAP, where the eigh cannot tell it from a disconnected graph.
    edge_index, n = pieces([12, 9])
    edge_index = torch.cat([edge_index, torch.tensor([[0], [12]])], dim=1)
    weight = torch.ones(edge_index.size(1), dtype=torch.float64)
    weight[-1] = 1e-20
    assert connected_dense_eigenpairs(edge_index, weight, n, 3) is None
    assert CONNECTED_GAP > 1e3 * TIE_TOLERANCE


# The float32 solve of a large component, refined in float64 --------------------------------

def ring_with_chords(n, chords, seed):
    gen = torch.Generator().manual_seed(seed)
    ring = torch.arange(n)
    return torch.cat([torch.stack([ring, (ring + 1) % n]),
                      torch.randint(0, n, (2, chords), generator=gen)], dim=1)


@pytest.fixture
def float32_from_300_nodes(monkeypatch):
    """The float32 path from 300 nodes (4,096 by default), and its outcomes."""
    monkeypatch.setattr(spectrum, 'FLOAT32_NODES', 300)
    outcomes, solve = [], spectrum._float32_refined

    def recorded(*args, **kwargs):
        pairs = solve(*args, **kwargs)
        outcomes.append(pairs.converged)
        return pairs

    monkeypatch.setattr(spectrum, '_float32_refined', recorded)
    return outcomes


def check_against_dense(pairs, ei, w, n, k, gap, value_error):
    r"""The pairs against a dense float64 eigendecomposition of the graph's
    Laplacian: each pair has a float64 relative residual <= tol = 1e-6
    (||A_hat|| <= 1), so its eigenvalue errs by at most residual^2 / gap (the
    gaps asserted >= :obj:`gap`) plus the dense solve's rounding, 1e-13."""
    lap = dense_laplacian(ei, w, n)
    values = np.linalg.eigvalsh(lap.numpy())
    vectors = pairs.eigenvectors
    assert np.diff(values[:k + 2]).min() > gap
    assert pairs.converged and pairs.residual <= 1e-6
    assert np.abs(pairs.eigenvalues.numpy() - values[1:k + 1]).max() < value_error
    assert float((lap @ vectors - vectors * pairs.eigenvalues).norm(dim=0).max()) < 1.1e-6
    torch.testing.assert_close(vectors.T @ vectors, torch.eye(k, dtype=torch.float64),
                               atol=1e-10, rtol=0)
    return vectors


@pytest.mark.parametrize('rough', [False, True])
def test_float32_solve_matches_dense_eigh(float32_from_300_nodes, monkeypatch, rough):
    if rough:  # a float32 result too rough for the refinement: float64 Lanczos follows
        solve = spectrum.block_lanczos

        def one_plain_cycle(operator, *args, **kwargs):
            if operator.dtype == torch.float32:
                kwargs.update(degree=1, callback=None)
                args = args[:3] + (1,)  # k, which, tol; max_iter = 1
            return solve(operator, *args, **kwargs)

        monkeypatch.setattr(spectrum, 'block_lanczos', one_plain_cycle)
        monkeypatch.setattr(spectrum, 'REFINE_SWEEPS', 0)
    n, k = 600, 8
    ei, w, degree = normalized_adjacency(ring_with_chords(n, 30, 0), n, dtype=torch.float64,
                                         self_loops=False, return_degree=True)
    pairs = laplacian_eigenpairs(ei, w, degree, k)
    assert float32_from_300_nodes == [not rough]  # solved in float32, or not converged there
    # gaps >= 5e-5: eigenvalue error <= 1e-12 / 5e-5 = 2e-8 (1e-8 asserted).
    vectors = check_against_dense(pairs, ei, w, n, k, gap=5e-5, value_error=1e-8)
    check_signs(vectors)
    again = laplacian_eigenpairs(ei, w, degree, k)  # deterministic
    assert torch.equal(again.eigenvectors, vectors)


def test_float32_solve_deflates_the_trivial_vector(float32_from_300_nodes):
    # A random graph of average degree 30, the 169k benchmark graph's model:
    # its 16 wanted eigenvalues of A_hat lie about 0.65 below the trivial 1
    # within gaps of 1e-4 to 2e-3 (1e-5 asserted), so a filter that does not
    # deflate the trivial vector lifts it far above them and the float32 solve
    # stalls (6 cycles, abandoned to float64, when the deflation is dropped);
    # deflated, it converges in one.
    n, k = 3000, 16
    gen = torch.Generator().manual_seed(0)
    edge_index = to_undirected(torch.randint(0, n, (2, 15 * n), generator=gen), num_nodes=n)
    ei, w, degree = normalized_adjacency(edge_index, n, dtype=torch.float64,
                                         self_loops=False, return_degree=True)
    pairs = laplacian_eigenpairs(ei, w, degree, k)
    assert float32_from_300_nodes == [True]
    # gaps >= 1e-5: eigenvalue error <= 1e-12 / 1e-5 = 1e-7.
    check_against_dense(pairs, ei, w, n, k, gap=1e-5, value_error=1e-7)


@pytest.mark.parametrize('bridge', [1e-10, 1e-13, 1e-16])
def test_a_weakly_bridged_component_keeps_the_columns_orthonormal(bridge):
    # A triangle, then two 10-cliques joined by one edge of weight `bridge`: lambda_1 of the
    # second component is about bridge / 5, and the dense eigh's first kept vector mixed with
    # its own kernel vector, not the exact one the encoding puts beside it (two columns with
    # inner product 0.70 at 1e-16). Reference: orthonormality and the dense Laplacian.
    clique = torch.combinations(torch.arange(10)).t()
    pairs = torch.cat([torch.tensor([[0, 1, 0], [1, 2, 2]]), clique + 3, clique + 13,
                       torch.tensor([[12], [13]])], dim=1)
    weight = torch.ones(pairs.size(1), dtype=torch.float64)
    weight[-1] = bridge
    edge_index, weight = to_undirected(pairs, weight, num_nodes=23)
    ei, w, degree = normalized_adjacency(edge_index, 23, weight, torch.float64,
                                         self_loops=False, return_degree=True)
    pairs_ = laplacian_eigenpairs(ei, w, degree, 3)
    v = pairs_.eigenvectors
    # Orthonormal columns from float64 solves of 23 nodes: to a few hundred eps.
    torch.testing.assert_close(v.T @ v, torch.eye(3, dtype=torch.float64), rtol=0, atol=1e-13)
    lap = dense_laplacian(ei, w, 23)
    residual = lap @ v - v * pairs_.eigenvalues
    assert float(residual.abs().max()) < 1e-13


def test_entries_that_are_not_a_symmetric_a_hat_without_self_loops_are_refused():
    # The dense path read one triangle: a one-directional path gave the edgeless spectrum.
    ring = torch.arange(9)
    path = torch.stack([ring, ring + 1])
    weight = torch.full((9,), 0.5, dtype=torch.float64)
    degree = torch.ones(10, dtype=torch.float64)
    with pytest.raises(ValueError, match="'edge_index' and 'edge_weight' are not symmetric"):
        laplacian_eigenpairs(path, weight, degree, 3)
    both = torch.cat([path, path.flip(0)], dim=1)
    with pytest.raises(ValueError, match="'edge_index' and 'edge_weight' are not symmetric"):
        laplacian_eigenpairs(both, torch.cat([weight, 2 * weight]), degree, 3)
    looped = torch.cat([both, torch.tensor([[4], [4]])], dim=1)
    with pytest.raises(ValueError, match="'edge_index' holds self loops"):
        laplacian_eigenpairs(looped, torch.cat([weight, weight, weight[:1]]), degree, 3)
    # Duplicates that sum to a symmetric matrix are entries of one: accepted (a cycle,
    # whose A_hat has entries 1/2 at degree 2).
    cycle = torch.stack([ring, (ring + 1) % 9])
    split = torch.cat([cycle, cycle.flip(0), cycle], dim=1)
    laplacian_eigenpairs(split, torch.cat([weight / 2, weight, weight / 2]),
                         torch.full((9,), 2.0, dtype=torch.float64), 3)


def test_weights_whose_sums_overflow_are_refused_on_the_dense_path():
    # An infinite degree made A_hat zero: the edgeless graph's encoding for a cycle.
    ring = torch.arange(20)
    edge_index = to_undirected(torch.stack([ring, (ring + 1) % 20]))
    weight = torch.full((edge_index.size(1),), 1e308, dtype=torch.float64)
    with pytest.raises(ValueError, match="'edge_weight' overflows torch.float64"):
        connected_dense_eigenpairs(edge_index, weight, 20, 3)


def grid_graph(rows=16, cols=16):
    r"""The normalised adjacency of a rows x cols grid (PyG's ``grid``, its
    eight neighbours, self loops dropped): its symmetries repeat eigenvalues."""
    from torch_geometric.utils import grid
    edge_index = grid(rows, cols)[0]
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return normalized_adjacency(edge_index, rows * cols, dtype=torch.float64,
                                self_loops=False, return_degree=True)


def test_canonical_eigenbasis_depends_on_the_span_alone():
    # Reference: the same span given in a rotated basis. Values 0.3 (twice) and
    # 1.0 (three times) form runs; the others are distinct and must come back
    # to the bit. The result is orthonormal, spans the same eigenspaces, and is
    # positive at each pivot. Tolerance: a few float64 eps on unit vectors.
    gen = torch.Generator().manual_seed(0)
    values = torch.tensor([0.0, 0.1, 0.3, 0.3, 0.5, 1.0, 1.0, 1.0, 1.4, 1.9],
                          dtype=torch.float64)
    basis = torch.linalg.qr(torch.randn(12, 10, generator=gen, dtype=torch.float64)).Q
    rotated = basis.clone()
    for first, g in [(2, 2), (5, 3)]:
        q = torch.linalg.qr(torch.randn(g, g, generator=gen, dtype=torch.float64)).Q
        rotated[:, first:first + g] = basis[:, first:first + g] @ q
    one = spectrum.canonical_eigenbasis(values, basis)
    other = spectrum.canonical_eigenbasis(values, rotated)
    torch.testing.assert_close(one, other, atol=1e-13, rtol=0)
    for column in (0, 1, 4, 8, 9):
        assert torch.equal(one[:, column], basis[:, column])
    torch.testing.assert_close(one.T @ one, torch.eye(10, dtype=torch.float64),
                               atol=1e-13, rtol=0)
    for first, g in [(2, 2), (5, 3)]:
        span = basis[:, first:first + g]
        new = one[:, first:first + g]
        torch.testing.assert_close(new - span @ (span.T @ new), torch.zeros_like(new),
                                   atol=1e-13, rtol=0)
    # Batched, with a run cut by 'count' and runs beginning at or past 'used' kept.
    stacked = spectrum.canonical_eigenbasis(values.expand(2, 10), torch.stack([basis, rotated]),
                                            count=torch.tensor([10, 6]), used=5)
    torch.testing.assert_close(stacked[0, :, :5], one[:, :5], atol=1e-13, rtol=0)
    assert torch.equal(stacked[0, :, 5:], basis[:, 5:])  # the run at column 5 begins at used=5
    # A run beginning at the last used column is replaced whole (it was kept: 0.1 off)
    last = spectrum.canonical_eigenbasis(values, basis, used=6)
    torch.testing.assert_close(last, one, atol=1e-13, rtol=0)
    torch.testing.assert_close(stacked[1, :, 2:4], one[:, 2:4], atol=1e-13, rtol=0)
    assert torch.equal(stacked[1, :, 5], rotated[:, 5])  # count=6 cut the run to one column


def test_a_repeated_eigenvalue_has_the_same_basis_from_every_solver_and_thread_count():
    # A 16 x 16 grid repeats eigenvalues (0.0160 and 0.0786 twice among the first
    # 12). The basis of such an eigenspace was the solver's: the dense eigh with two
    # threads and block Lanczos returned other vectors than the dense eigh with
    # one (differences up to 0.18 and 0.21 on the machine this was found on).
    # Reference: the dense path at one thread. Tolerance: a float64 eigenvector of
    # a 256-node L errs by about n eps / gap, at most 256 * 2.2e-16 / 5e-5 (the
    # smallest gap among the first 13 distinct eigenvalues) = 1.1e-9: 1e-8;
    # Lanczos pairs carry tol = 1e-10, whose vectors err by at most tol / gap =
    # 2e-6: 5e-6. The solvers' bases of a repeated eigenvalue differed by 0.18
    # and 0.21.
    ei, w, degree = grid_graph()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        reference = laplacian_eigenpairs(ei, w, degree, 12)
        torch.set_num_threads(2)
        two = laplacian_eigenpairs(ei, w, degree, 12)
        lanczos = laplacian_eigenpairs(ei, w, degree, 12, dense_threshold=0, tol=1e-10)
    finally:
        torch.set_num_threads(threads)
    values = reference.eigenvalues
    assert float((values[1] - values[0]).abs()) < TIE_TOLERANCE  # a repeated pair
    gaps = torch.diff(laplacian_eigenpairs(ei, w, degree, 13).eigenvalues)
    assert float(gaps[gaps > TIE_TOLERANCE].min()) > 5e-5
    torch.testing.assert_close(two.eigenvectors, reference.eigenvectors, atol=1e-8, rtol=0)
    torch.testing.assert_close(lanczos.eigenvectors, reference.eigenvectors, atol=5e-6, rtol=0)


def torus_graph(rows, cols):
    r"""The normalised adjacency of a rows x cols torus: every node alike, so
    every diagonal entry of an eigenspace's projector is equal and the pivots
    of canonical_eigenbasis tie exactly."""
    idx = torch.arange(rows * cols).view(rows, cols)
    edge_index = torch.cat([torch.stack([idx.flatten(), idx.roll(-1, 1).flatten()]),
                            torch.stack([idx.flatten(), idx.roll(-1, 0).flatten()])], dim=1)
    return normalized_adjacency(to_undirected(edge_index), rows * cols, dtype=torch.float64,
                                self_loops=False, return_degree=True)


def test_a_lanczos_solve_at_tol_gives_the_canonical_basis_of_the_dense_one(
        float32_from_300_nodes):
    # A 24 x 24 torus: lambda_1..4 and lambda_5..8 each one eigenvalue four times. The
    # Lanczos pairs carry an error of about tol = 1e-6 (the projector's diagonal moves by
    # ~1e-5 relative), far above the 1e-9 pivot tie, so the pivots, hence the basis, were
    # picked by the solver's noise: columns 0.03-0.05 apart across seeds and paths.
    # Reference: the dense path; tolerance: the Lanczos pairs' accuracy, residual / gap
    # (gap 6e-2 to lambda_9) <= 1e-6 / 6e-2 ~ 2e-5: 1e-4.
    ei, w, degree = torus_graph(24, 24)
    dense = laplacian_eigenpairs(ei, w, degree, 8, dense_threshold=1000)
    values = dense.eigenvalues
    assert float(values[:4].max() - values[:4].min()) < TIE_TOLERANCE
    assert float(values[4:].max() - values[4:].min()) < TIE_TOLERANCE
    for seed in (0, 1):
        pairs = laplacian_eigenpairs(ei, w, degree, 8, seed=seed)
        assert pairs.residual > 1e-9  # stopped near tol, not at rounding
        torch.testing.assert_close(pairs.eigenvectors, dense.eigenvectors, atol=1e-4, rtol=0)
    assert float32_from_300_nodes == [True, True]


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_degrees_other_than_the_normalisation_are_refused(dtype):
    # Before: the unweighted counts of a weighted graph were taken as the kernel
    # vectors' D^1/2 without a word (the docs said: not checked). Reference: the
    # identity sum_j A_hat[i, j] sqrt(d_j) = sqrt(d_i) of A_hat = D^-1/2 A D^-1/2.
    edge_index, n = pieces([60, 40], isolated=2)
    weight = torch.rand(edge_index.size(1), generator=torch.Generator().manual_seed(1)) + 0.5
    edge_index, weight = to_undirected(edge_index, weight, reduce='mean')
    ei, w, degree = normalized_adjacency(edge_index, n, weight, dtype, self_loops=False,
                                         reduce='sum', return_degree=True)
    laplacian_eigenpairs(ei, w, degree, 3)  # its own degrees pass, in float32 too
    _, _, counts = normalized_adjacency(edge_index, n, None, dtype, self_loops=False,
                                        reduce='sum', return_degree=True)
    with pytest.raises(ValueError, match="'degree' is not the degree 'edge_weight' was "
                                         "normalised by"):
        laplacian_eigenpairs(ei, w, counts, 3)


def test_a_float32_hub_of_many_weights_passes_the_degree_check():
    # A node of 30,000 float32 weights: its degree, summed in float32, rounds by up to
    # 30,000 units of float32 (typically ~170); the check allows (m_i + 8) of them.
    leaves = 30_000
    edge_index = torch.stack([torch.zeros(leaves, dtype=torch.long),
                              torch.arange(1, leaves + 1)])
    ring = torch.arange(1, leaves + 1)
    edge_index = torch.cat([edge_index, torch.stack([ring, ring % leaves + 1])], dim=1)
    weight = torch.rand(edge_index.size(1), generator=torch.Generator().manual_seed(2)) + 0.1
    edge_index, weight = to_undirected(edge_index, weight, reduce='mean')
    ei, w, degree = normalized_adjacency(edge_index, leaves + 1, weight, torch.float32,
                                         self_loops=False, reduce='sum', return_degree=True)
    spectrum.check_degree(ei, w.double(), degree.double(), torch.finfo(torch.float32).eps)


def test_counts_of_a_slowly_weighted_float64_ring_are_refused():
    # A ring of 4000 nodes with weights 1 + sin(2 pi e / n) / 2: the residual of the
    # counts, sum_j A_hat[i, j] sqrt(c_j) - sqrt(c_i), is second order in the weights'
    # variation (~1e-6 here), inside float32's (m_i + 8) eps but 1e9 above float64's;
    # accepted, they gave the second eigenvector 14% off. A_hat computed in float64 is
    # checked at float64's rounding (float32-exact weights at float32's).
    n = 4000
    src = torch.arange(n)
    edge_index = torch.stack([src, (src + 1) % n])
    weight = 1 + 0.5 * torch.sin(2 * torch.pi * src.double() / n)
    edge_index, weight = to_undirected(edge_index, weight)
    ei, w, degree = normalized_adjacency(edge_index, n, weight, torch.float64,
                                         self_loops=False, return_degree=True)
    counts = torch.bincount(ei[0], minlength=n).double()
    with pytest.raises(ValueError, match="'degree' is not the degree"):
        laplacian_eigenpairs(ei, w, counts, 2)
    spectrum.check_degree(ei, w, degree, spectrum.input_rounding(w, degree))
    w32, degree32 = w.float().double(), degree.float().double()  # float32 casts: float32's
    assert spectrum.input_rounding(w32, degree32) == torch.finfo(torch.float32).eps
