"""laplacian_eigenpairs against dense numpy.linalg.eigh of the normalised
Laplacian, through both solvers (batched dense and block Lanczos), and its
warning when Lanczos stops short, attributed to the caller's line."""
import inspect

import numpy as np
import pytest
import torch

from torch_geometric_regcn.linalg import laplacian_eigenpairs, normalized_adjacency
from torch_geometric_regcn.linalg.laplacian_spectrum import TIE_TOLERANCE, tie_groups


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
