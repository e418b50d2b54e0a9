r"""linalg.blocks in one process (group=None): gram and column_norms against
float64 sums, tall_qr against the defining properties of a QR factorisation
(R upper triangular, Q orthonormal, QR = B, RᵀR = BᵀB) for full-rank,
rank-deficient, nearly square and square blocks, and against torch's
Householder QR (the same factors up to row signs on the CholeskyQR2 route,
bit for bit beyond its conditioning limit). The TSQR on row shards is
tested against the single-process factors in tests/distributed/test_pipeline.py."""
import math

import pytest
import torch

from torch_geometric_regcn.linalg import blocks
from torch_geometric_regcn.linalg.blocks import cholesky_qr_limit, column_norms, gram, tall_qr

EPS64 = torch.finfo(torch.float64).eps
EPS32 = torch.finfo(torch.float32).eps


def block(rows, cols, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, dtype=torch.float64, generator=gen).to(dtype)


def test_gram_of_float32_blocks_is_the_float64_inner_product_to_rounding():
    a, b = block(200, 4, 0, torch.float32), block(200, 3, 1, torch.float32)
    got = gram(a, b, None)
    assert got.shape == (4, 3) and got.dtype == torch.float32
    exact = a.double().T @ b.double()  # products of float32 numbers are exact in float64
    # A float32 sum of N products errs by at most N eps32 Σ|a_i b_i| (the float64
    # reference's own error, N eps64 Σ|a_i b_i|, is 2^-29 of that).
    bound = 200 * EPS32 * (a.double().abs().T @ b.double().abs())
    assert bool(((got.double() - exact).abs() <= bound).all())
    # The one-process case is the local product itself, bit for bit.
    assert torch.equal(got, a.T @ b)


def test_gram_of_tall_float32_blocks_sums_its_chunks_in_float64():
    # torch's float32 product of narrow blocks erred by about 300 eps relative at 300,000
    # rows of positive entries (1,500 at a million): the Woodbury core and the Rayleigh
    # quotients inherited it. Chunks of GRAM_CHUNK rows summed in float64 err as one chunk
    # does: even summed one term after another, 4,096 random positive terms err by about
    # sqrt(4096) / 6 = 11 eps32 (standard deviation), so 64 eps holds on any CPU.
    gen = torch.Generator().manual_seed(0)
    a, b = torch.rand(300_000, 4, generator=gen), torch.rand(300_000, 3, generator=gen)
    got = gram(a, b, None)
    exact = a.double().T @ b.double()
    assert got.dtype == torch.float32
    assert float(((got.double() - exact).abs() / exact).max()) < 64 * EPS32

def test_gram_of_tall_float32_blocks_differentiates_in_one_pass():
    # A loop over chunks put one slice per chunk in the autograd graph, each of whose
    # backward passes allocated the whole input: quadratic in N (a 400,000-row TSGCNConv's
    # backward 11x slower). Now a handful of nodes, and the gradient is the float64 one to
    # float32 rounding of sums of a few thousand terms.
    gen = torch.Generator().manual_seed(1)
    n = 10 * blocks.GRAM_CHUNK + 123
    a = torch.randn(n, 5, generator=gen)
    b = torch.randn(n, 3, generator=gen, requires_grad=True)
    out = gram(a, b, None)

    def nodes(fn, seen):
        if fn is not None and fn not in seen:
            seen.add(fn)
            for child, _ in fn.next_functions:
                nodes(child, seen)
        return seen

    assert len(nodes(out.grad_fn, set())) < 20  # a loop: three or more per chunk, 30+ here
    (grad,) = torch.autograd.grad(out.square().sum(), b)
    b64 = b.detach().double().requires_grad_()
    (want,) = torch.autograd.grad((a.double().T @ b64).square().sum(), b64)
    torch.testing.assert_close(grad.double(), want, rtol=1e-4, atol=1e-4 * float(want.abs().max()))

def test_gram_of_float64_blocks_against_a_sum_of_outer_products():
    a, b = block(120, 5, 2), block(120, 2, 3)
    reference = (a[:, :, None] * b[:, None, :]).sum(dim=0)  # another summation order
    bound = 2 * 120 * EPS64 * (a.abs().T @ b.abs())  # both sums err by <= N eps Σ|a_i b_i|
    assert bool(((gram(a, b, None) - reference).abs() <= bound).all())


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_column_norms_against_an_exactly_rounded_sum(dtype):
    a = block(300, 4, 4, dtype)
    a[:, 2] = 0.0  # a zero column has norm 0, not NaN
    got = column_norms(a, None)
    assert got.shape == (4,) and got.dtype == dtype
    # math.fsum adds the float64 squares (exact for float32 entries) with one rounding.
    reference = torch.tensor([math.sqrt(math.fsum(t * t for t in column))
                              for column in a.double().T.tolist()], dtype=torch.float64)
    assert got[2] == 0
    # A sum of N squares errs by at most N eps relative; the square root halves it.
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got.double(), reference, rtol=(300 / 2 + 2) * eps, atol=0)


@pytest.fixture
def householder(monkeypatch):
    r"""Counts the calls of :func:`torch.linalg.qr` (tall_qr's Householder
    route) while the test runs; :obj:`householder.original` is the function."""
    original = torch.linalg.qr
    calls = []

    def counted(*args, **kwargs):
        calls.append(args[0].shape)
        return original(*args, **kwargs)
    monkeypatch.setattr(torch.linalg, 'qr', counted)
    counted.calls, counted.original = calls, original
    return counted


def check_qr(b, q, r):
    r"""The properties that define the reduced QR of :obj:`b`, with tolerances
    from Householder QR's backward error, :math:`O(N c\,\epsilon)\|\mathbf{B}\|`
    for an :math:`N \times c` block (here with the constant 4)."""
    n, c = b.shape
    k = min(n, c)
    assert q.shape == (n, k) and r.shape == (k, c)
    assert torch.equal(r, r.triu())  # exactly zero below the diagonal
    scale = float(torch.linalg.matrix_norm(b))
    # Q is orthonormal to the rounding of its N-term inner products.
    torch.testing.assert_close(q.T @ q, torch.eye(k, dtype=b.dtype), rtol=0,
                               atol=4 * n * k * EPS64)
    torch.testing.assert_close(q @ r, b, rtol=0, atol=4 * n * c * EPS64 * scale)
    # RᵀR = BᵀB: R is the Cholesky factor of the Gram matrix up to row signs.
    torch.testing.assert_close(r.T @ r, b.T @ b, rtol=0, atol=4 * n * c * EPS64 * scale ** 2)


@pytest.mark.parametrize('rows, cols', [(200, 6), (8, 6), (6, 6), (3, 1)])
def test_tall_qr_factorises_the_block(rows, cols, householder):
    b = block(rows, cols, 5)
    q, r = tall_qr(b, None)
    check_qr(b, q, r)
    # Full column rank: |diag R| are the norms of the parts orthogonal to the
    # columns before, far from zero for Gaussian columns.
    assert bool((r.diagonal().abs() > 1e-3).all())
    # A well-conditioned block takes CholeskyQR2 (no Householder QR ran): R's
    # diagonal is positive, and the factors are Householder's (torch's) with
    # its rows' signs flipped to match, to the rounding of a factorisation of
    # condition number ~ 10.
    assert householder.calls == []
    assert bool((r.diagonal() > 0).all())
    expected = householder.original(b)
    signs = expected.R.diagonal().sign()
    torch.testing.assert_close(q, expected.Q * signs, rtol=0, atol=100 * rows * EPS64)
    torch.testing.assert_close(r, expected.R * signs[:, None], rtol=0,
                               atol=100 * rows * EPS64 * float(b.abs().max()))


def conditioned(rows, cols, kappa, dtype, seed=0):
    r"""A block of condition number :obj:`kappa`: orthonormal factors around
    singular values from 1 down to 1 / kappa, geometrically spaced."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.linalg.qr(torch.randn(rows, cols, dtype=torch.float64, generator=gen)).Q
    v = torch.linalg.qr(torch.randn(cols, cols, dtype=torch.float64, generator=gen)).Q
    singular = torch.logspace(0, -math.log10(kappa), cols, dtype=torch.float64)
    return ((u * singular) @ v.T).to(dtype)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_tall_qr_is_orthonormal_to_rounding_up_to_its_conditioning_limit(dtype, monkeypatch,
                                                                        householder):
    # Just below cholesky_qr_limit, CholeskyQR2's Q is orthonormal to a small
    # multiple of the dtype's rounding and QR = B to a backward error of the
    # same order (Yamamoto et al., 2015: O(eps) both, independent of kappa).
    # The constant 8 b eps covers the b-term inner products of the check.
    # ROW_CHUNK = 700: the products and the Gram matrices run over 8 chunks,
    # the last one short.
    monkeypatch.setattr(blocks, 'ROW_CHUNK', 700)
    eps, cols = torch.finfo(dtype).eps, 12
    b = conditioned(5000, cols, 0.9 * cholesky_qr_limit(dtype), dtype)
    householder.calls.clear()  # those that made the block
    q, r = tall_qr(b, None)
    assert householder.calls == []  # the CholeskyQR2 route
    q64, r64, b64 = q.double(), r.double(), b.double()
    gap = (q64.T @ q64 - torch.eye(cols, dtype=torch.float64)).abs().max()
    assert float(gap) <= 8 * cols * eps
    backward = torch.linalg.matrix_norm(q64 @ r64 - b64) / torch.linalg.matrix_norm(b64)
    assert float(backward) <= 8 * cols * eps


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_tall_qr_of_an_ill_conditioned_block_is_householders(dtype, householder):
    # Beyond the limit the Gram matrix no longer determines R: the block goes
    # to torch's Householder QR, bit for bit.
    b = conditioned(400, 6, 10 * cholesky_qr_limit(dtype), dtype)
    householder.calls.clear()  # those that made the block
    q, r = tall_qr(b, None)
    assert householder.calls == [b.shape]
    expected = householder.original(b)
    assert torch.equal(q, expected.Q) and torch.equal(r, expected.R)


def test_tall_qr_of_a_block_that_needs_a_gradient_is_householders(householder):
    # CholeskyQR2 writes in place, which autograd cannot follow: with a
    # gradient wanted the block takes torch's differentiable Householder QR,
    # whose gradient of sum(Q) + sum(R) is checked against finite differences.
    b = block(30, 4, 8).requires_grad_()
    torch.autograd.gradcheck(lambda x: tuple(tall_qr(x, None)), (b,))
    assert householder.calls  # every call went to torch.linalg.qr
    with torch.no_grad():
        householder.calls.clear()
        tall_qr(b, None)
        assert householder.calls == []  # without autograd: CholeskyQR2


def test_tall_qr_of_a_block_without_columns():
    # No columns: the factors are empty, as torch's are (no Gram matrix to read).
    for rows in (5, 0):
        q, r = tall_qr(torch.zeros(rows, 0, dtype=torch.float64), None)
        assert q.shape == (rows, 0) and r.shape == (0, 0)


def test_tall_qr_of_a_rank_deficient_block():
    b = block(60, 5, 6)
    b[:, 3] = b[:, 1] + 2 * b[:, 2]  # column 3 lies in the span of columns 1 and 2
    q, r = tall_qr(b, None)
    check_qr(b, q, r)
    # R[3, 3] is the norm of column 3's part orthogonal to columns 0-2: zero up
    # to the backward error N c eps ||B||; the other pivots are O(sqrt(N)).
    scale = float(torch.linalg.matrix_norm(b))
    assert abs(float(r[3, 3])) <= 60 * 5 * EPS64 * scale
    assert bool((r.diagonal()[[0, 1, 2, 4]].abs() > 1.0).all())


def test_tall_qr_of_a_zero_block():
    b = torch.zeros(10, 3, dtype=torch.float64)
    q, r = tall_qr(b, None)
    assert torch.equal(r, torch.zeros(3, 3, dtype=torch.float64))
    assert torch.equal(q @ r, b)
