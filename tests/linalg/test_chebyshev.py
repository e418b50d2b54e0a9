r"""The scaled Chebyshev filter of :mod:`torch_geometric_regcn.linalg.chebyshev`."""
import numpy as np
import pytest
import torch
from numpy.polynomial import chebyshev as C

from torch_geometric_regcn.linalg.chebyshev import chebyshev_filter


def symmetric(n=40, seed=0):
    """A dense symmetric float64 matrix with eigenvalues in [-1, 1], and its eigenpairs."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=gen)).Q
    lam = torch.linspace(-1, 1, n, dtype=torch.float64)
    return (q * lam) @ q.T, lam, q


@pytest.mark.parametrize('degree', [1, 2, 8, 20])
def test_filter_is_the_normalised_chebyshev_polynomial(degree):
    # Reference: T_d(l(lambda)) / T_d(l(top)) applied in the eigenbasis, by numpy's
    # Chebyshev series in float64.
    s, lam, q = symmetric()
    lower, upper, top = -1.0, 0.5, 1.0
    center, half = (upper + lower) / 2, (upper - lower) / 2
    coef = np.zeros(degree + 1)
    coef[degree] = 1.0
    gains = C.chebval((lam.numpy() - center) / half, coef) / C.chebval((top - center) / half, coef)
    x = torch.randn(40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expected = q @ (torch.from_numpy(gains)[:, None] * (q.T @ x))
    out = chebyshev_filter(s, lower, upper, degree, top)(x)
    # |gain| <= 1 and every step is O(1): rounding of order degree * N * eps.
    torch.testing.assert_close(out, expected, atol=1e-11, rtol=0)


def test_filter_is_linear_and_works_on_sparse_operators():
    s, _, _ = symmetric()
    apply = chebyshev_filter(s.to_sparse_csr(), -1.0, 0.3, 6, 1.0)
    dense = chebyshev_filter(s, -1.0, 0.3, 6, 1.0)
    gen = torch.Generator().manual_seed(2)
    x, y = (torch.randn(40, 2, dtype=torch.float64, generator=gen) for _ in range(2))
    torch.testing.assert_close(apply(x), dense(x), atol=1e-12, rtol=0)
    torch.testing.assert_close(apply(2.0 * x + y), 2.0 * apply(x) + apply(y), atol=1e-12,
                               rtol=0)


def test_filter_in_a_workspace_equals_the_allocating_filter_and_keeps_its_input():
    # The workspace only changes where the blocks live: the same operations in the
    # same order; blocks of any shape with enough elements serve, and the returned block
    # is one of them. Not bit-identical on every CPU: BLAS picks its kernels by the
    # blocks' alignment (on AMD EPYC the last bits differ). Degree-5 filters of entries of
    # order one over 40 rows: a few hundred eps at most.
    s, _, _ = symmetric()
    workspace = torch.empty(3, 40 * 4 + 5, dtype=torch.float64).unbind(0)
    x = torch.randn(40, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    before = x.clone()
    for degree in (1, 2, 5):
        out = chebyshev_filter(s, -1.0, 0.3, degree, 1.0, workspace)(x)
        torch.testing.assert_close(out, chebyshev_filter(s, -1.0, 0.3, degree, 1.0)(x),
                                   rtol=0, atol=1e-13)
        assert any(out.data_ptr() == block.data_ptr() for block in workspace)
        assert torch.equal(x, before)


def test_plain_window_is_the_product():
    # lower=-1, upper=1, degree 1, top 1: T_1(x) / T_1(1) = x, so the map is S x;
    # two dot products of 40 terms (|s_ij| <= 1, |x| < 5), summed in different orders
    # by the sparse and the dense kernel: they differ by at most 2 * 40 * 5 * eps ~ 5e-14.
    s, _, _ = symmetric()
    x = torch.randn(40, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(chebyshev_filter(s.to_sparse_csr(), -1.0, 1.0, 1, 1.0)(x),
                               s @ x, atol=1e-12, rtol=0)
