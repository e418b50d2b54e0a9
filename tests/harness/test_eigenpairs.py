import math

import numpy as np
import pytest
from scipy.linalg import subspace_angles

from harness.eigenpairs import load_eigenpairs, save_eigenpairs, sort_eigenpairs, subspace_errors


def test_sort_eigenpairs_keeps_pairs_together():
    vals = np.array([0.3, -0.9, 0.5, 0.1])
    vecs = np.eye(4)
    la_vals, la_vecs = sort_eigenpairs(vals, vecs, 'LA')
    np.testing.assert_array_equal(la_vals, [0.5, 0.3, 0.1, -0.9])
    np.testing.assert_array_equal(la_vecs, vecs[:, [2, 0, 3, 1]])
    lm_vals, lm_vecs = sort_eigenpairs(vals, vecs, 'LM')
    np.testing.assert_array_equal(lm_vals, [-0.9, 0.5, 0.3, 0.1])
    np.testing.assert_array_equal(lm_vecs, vecs[:, [1, 2, 0, 3]])


@pytest.mark.parametrize('seed', range(3))
def test_subspace_errors_against_dense_references(seed):
    rng = np.random.default_rng(seed)
    n, r = 40, 5
    ref = np.linalg.qr(rng.standard_normal((n, r)))[0]
    vecs = (ref + 0.05 * rng.standard_normal((n, r))).astype(np.float32)
    sin, frob = subspace_errors(ref, vecs)
    # The references: scipy's principal angles, and the projectors formed densely.
    assert sin == pytest.approx(math.sin(subspace_angles(ref, vecs.astype(np.float64)).max()),
                                rel=1e-6)
    q = np.linalg.qr(vecs.astype(np.float64))[0]
    assert frob == pytest.approx(np.linalg.norm(ref @ ref.T - q @ q.T), rel=1e-6)


def test_subspace_errors_of_the_same_subspace_and_of_a_known_angle():
    rng = np.random.default_rng(0)
    ref = np.linalg.qr(rng.standard_normal((30, 4)))[0]
    mixed = ref @ rng.standard_normal((4, 4))  # another basis of the same subspace
    assert subspace_errors(ref, mixed) == pytest.approx((0.0, 0.0), abs=1e-6)
    theta = 0.3
    u = np.array([[1.0], [0.0], [0.0]])
    v = np.array([[math.cos(theta)], [math.sin(theta)], [0.0]])
    sin, frob = subspace_errors(u, v)
    assert sin == pytest.approx(math.sin(theta)) and frob == pytest.approx(
        math.sqrt(2) * math.sin(theta))


def test_eigenpairs_files_round_trip(tmp_path):
    vals = np.array([2.0, 1.0])
    vecs = np.arange(6, dtype=np.float32).reshape(3, 2)
    save_eigenpairs(str(tmp_path / 'pairs'), vals, vecs)
    got_vals, got_vecs = load_eigenpairs(str(tmp_path / 'pairs'))
    np.testing.assert_array_equal(got_vals, vals)
    np.testing.assert_array_equal(got_vecs, vecs)
    assert got_vecs.dtype == np.float32
