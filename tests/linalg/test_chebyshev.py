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
