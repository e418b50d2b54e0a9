r"""linalg.woodbury against dense float64 references: factors_from_eigenpairs
(W Vᵀ = -U Λ Uᵀ), woodbury_apply (= (I + W Vᵀ)⁻¹ X by torch.linalg.solve, with
and without a core, with a summary, in another dtype), woodbury_core (its LU
and its checks), check_core_condition (the one verdict on a core's
condition), WoodburyCache (kept while the factors' content is, refactorised
when any number changes). The layers that call them are tested in
tests/nn/conv/test_tsgcn_conv.py and test_subgraph.py; LowRankInverse and the
layers giving one verdict in tests/reliability/test_tsgcn_factors.py."""
import copy
import io
import math
import re
import warnings

import pytest
import torch

from tests.nn.helpers import eigen_factors
from torch_geometric_regcn.linalg import (
    WoodburyCache,
    WoodburyCore,
    factors_from_eigenpairs,
    woodbury_apply,
    woodbury_core,
)
from torch_geometric_regcn.linalg.woodbury import (
    GAIN_ACCURACY,
    ROUNDING_UNITS,
    SINGULAR_ERROR,
    CoreCondition,
    _check_core,
    check_core_condition,
    eigenpair_tolerance,
)

EPS = torch.finfo(torch.float64).eps
SLICED = 'not those of one whole graph'


def dense_solve(x, w, v):
    r"""The reference :math:`(\mathbf{I} + \mathbf{W}\mathbf{V}^{\top})^{-1}
    \mathbf{X}`, an :math:`N \times N` LU solve in float64."""
    eye = torch.eye(x.size(0), dtype=torch.float64)
    return torch.linalg.solve(eye + w.double() @ v.double().T, x.double())


def general_factors(n=40, rank=4, seed=0):
    r"""Random factors with no structure (:math:`\mathbf{V}^{\top}\mathbf{W}`
    full), small enough that :math:`\mathbf{I} + \mathbf{W}\mathbf{V}^{\top}`
    is well conditioned."""
    gen = torch.Generator().manual_seed(seed)
    w = 0.1 * torch.randn(n, rank, dtype=torch.float64, generator=gen)
    v = 0.1 * torch.randn(n, rank, dtype=torch.float64, generator=gen)
    return w, v


def solve_tolerance(x, w, v):
    r"""A forward-error bound of a backward-stable solve of :math:`(\mathbf{I}
    + \mathbf{W}\mathbf{V}^{\top})\mathbf{Y} = \mathbf{X}`: the rounding of
    the :math:`N`-term products, :math:`N\epsilon`, amplified by the condition
    number, times a safety factor of 16, relative to :math:`\max|\mathbf{X}|`."""
    cond = float(torch.linalg.cond(torch.eye(x.size(0), dtype=torch.float64) + w @ v.T))
    return 16 * x.size(0) * cond * EPS * float(x.abs().max())


# factors_from_eigenpairs ----------------------------------------------------

def test_factors_from_eigenpairs_are_minus_the_truncated_operator():
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(25, 6, dtype=torch.float64, generator=gen))
    lam = torch.tensor([0.9, -0.7, 0.3, 0.0, -1e-3, 0.5], dtype=torch.float64)
    w, v = factors_from_eigenpairs(lam, u)
    assert w.shape == v.shape == (25, 6) and w.dtype == torch.float64
    # Each entry of W Vᵀ and of U Λ Uᵀ is a 6-term sum of products of entries
    # below 1 in magnitude (|λ| < 1, orthonormal U): both round to within
    # 6 eps per entry, hence 16 eps.
    torch.testing.assert_close(w @ v.T, -(u * lam) @ u.T, rtol=0, atol=16 * EPS)
    # VᵀW = -Λ for orthonormal U: the off-diagonal entries are the inner
    # products of distinct columns of a QR basis, O(N eps).
    torch.testing.assert_close(v.T @ w, -torch.diag(lam), rtol=0, atol=25 * 16 * EPS)
    # W = U |Λ|^½ exactly as the authors' code writes it: |λ|^½ per column.
    assert torch.equal(w, u * lam.abs().sqrt())


def test_full_rank_factors_give_the_exact_inverse():
    # r = N: (I + W Vᵀ) = I - S for S = U Λ Uᵀ, so the application is (I - S)⁻¹ X.
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(20, 20, dtype=torch.float64, generator=gen)
    s = 0.4 * (a + a.T) / float(torch.linalg.matrix_norm(a + a.T, 2))  # |λ| <= 0.4
    lam, u = torch.linalg.eigh(s)
    w, v = factors_from_eigenpairs(lam, u)
    x = torch.randn(20, 3, dtype=torch.float64, generator=gen)
    expected = torch.linalg.solve(torch.eye(20, dtype=torch.float64) - s, x)
    # cond(I - S) <= 1.4 / 0.6; eigh's residual and the products are O(N eps).
    torch.testing.assert_close(woodbury_apply(x, w, v), expected, rtol=0,
                               atol=16 * 20 * (1.4 / 0.6) * EPS * float(x.abs().max()))


# woodbury_apply ----------------------------------------------------------------

def test_woodbury_apply_with_and_without_a_core():
    w, v = eigen_factors()
    x = torch.randn(30, 3, dtype=torch.float64)
    expected = torch.linalg.solve(torch.eye(30, dtype=torch.float64) + w @ v.T, x)
    # Solves of a well-conditioned system (gains <= 1 / (1 - 0.8) = 5, sums of 30
    # terms: ~150 eps of the largest entry at worst):
    # 1024 eps leaves room, and a wrong inverse is O(1) off.
    tol = dict(rtol=0, atol=1024 * EPS * float(x.abs().max()))
    torch.testing.assert_close(woodbury_apply(x, w, v), expected, **tol)
    torch.testing.assert_close(woodbury_apply(x, w, v, woodbury_core(w, v)), expected, **tol)


@pytest.mark.parametrize('n, rank, columns', [(40, 4, 3), (40, 1, 1), (12, 12, 5)])
def test_woodbury_apply_of_general_factors_equals_the_dense_solve(n, rank, columns):
    w, v = general_factors(n, rank)
    x = torch.randn(n, columns, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(1))
    tol = solve_tolerance(x, w, v)
    expected = dense_solve(x, w, v)
    torch.testing.assert_close(woodbury_apply(x, w, v), expected, rtol=0, atol=tol)
    core = woodbury_core(w, v)
    assert isinstance(core, WoodburyCore)
    # With a core: the same operations, so the same bits.
    assert torch.equal(woodbury_apply(x, w, v, core), woodbury_apply(x, w, v))


def test_woodbury_apply_of_rank_zero_is_the_identity():
    x = torch.randn(10, 3, dtype=torch.float64)
    empty = torch.zeros(10, 0, dtype=torch.float64)
    assert torch.equal(woodbury_apply(x, empty, empty), x)


def test_woodbury_apply_with_a_summary_gives_the_rows_of_the_full_application():
    # Rows B of (I + W Vᵀ)⁻¹ X from W_B, X_B and the summary VᵀX of all rows,
    # bit for bit as the full application (the same operations on those rows).
    w, v = eigen_factors()
    x = torch.randn(30, 3, dtype=torch.float64)
    core = woodbury_core(w, v)
    full = woodbury_apply(x, w, v, core)
    rows = torch.tensor([4, 17, 0, 29])
    got = woodbury_apply(x[rows], w[rows], None, core, summary=v.T @ x)
    torch.testing.assert_close(got, full[rows], rtol=0, atol=0)
    expected = torch.linalg.solve(torch.eye(30, dtype=torch.float64) + w @ v.T, x)
    torch.testing.assert_close(got, expected[rows], rtol=0,
                               atol=1024 * EPS * float(x.abs().max()))
    # float32 rows with a float64 summary and core: computed in the factors' dtype.
    got32 = woodbury_apply(x[rows].float(), w[rows], None, core, summary=v.T @ x)
    assert got32.dtype == torch.float32
    # float32 rows: the result is rounded to float32 (and x[rows] was), so it is
    # within a few float32 ulps of the float64 one.
    eps32 = torch.finfo(torch.float32).eps
    torch.testing.assert_close(got32.double(), expected[rows], rtol=0,
                               atol=16 * eps32 * float(expected.abs().max()))
    with pytest.raises(ValueError, match="'summary' needs 'core'"):
        woodbury_apply(x[rows], w[rows], None, summary=v.T @ x)
    with pytest.raises(ValueError, match="needs the factor 'v', or the summary"):
        woodbury_apply(x, w, None, core)


def test_the_summary_path_equals_the_full_path_for_every_batch():
    # Batches that cover the graph, through the summary of all rows, put
    # together are the full application, bit for bit, and v is never read.
    w, v = general_factors(n=30, rank=3)
    x = torch.randn(30, 4, dtype=torch.float64)
    core = woodbury_core(w, v)
    full = woodbury_apply(x, w, v, core)
    summary = v.T @ x
    order = torch.randperm(30, generator=torch.Generator().manual_seed(3))
    out = torch.empty_like(full)
    for batch in order.split(7):
        out[batch] = woodbury_apply(x[batch], w[batch], None, core, summary=summary)
    assert torch.equal(out, full)
    torch.testing.assert_close(out, dense_solve(x, w, v), rtol=0,
                               atol=solve_tolerance(x, w, v))
    # A wrong summary gives a wrong result: the summary is what is read.
    wrong = woodbury_apply(x[:5], w[:5], None, core, summary=2 * summary)
    assert (wrong - full[:5]).abs().max() > 1e-3


def test_half_precision_features_are_computed_in_the_factors_dtype():
    w, v = eigen_factors(dtype=torch.float32)
    x = torch.randn(30, 3).half()
    core = woodbury_core(w, v)
    with torch.autocast('cpu', dtype=torch.bfloat16):  # disabled inside
        out = woodbury_apply(x, w, v, core)
    assert out.dtype == torch.float16
    # x cast to float32, the float32 application, then one rounding to half.
    assert torch.equal(out, woodbury_apply(x.float(), w, v, core).half())


def test_the_core_is_computed_in_the_factors_dtype_under_autocast():
    # The large gains of the core need the factors' precision: a core computed
    # on a first call under autocast (and then kept by the cache) must be the
    # float32 one, bit for bit. In bfloat16 VᵀW is off by about 2e-3.
    w, v = eigen_factors(dtype=torch.float32)
    x = torch.randn(30, 3)
    core = woodbury_core(w, v)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = woodbury_apply(x, w, v)
        cached = WoodburyCache()(w, v, from_eigenpairs=True)
    assert torch.equal(cached.lu, core.lu)
    assert torch.equal(out, woodbury_apply(x, w, v, core))


def test_woodbury_apply_gradients():
    w, v = general_factors(n=12, rank=3)
    x = torch.randn(12, 2, dtype=torch.float64)
    assert torch.autograd.gradcheck(woodbury_apply, (x.requires_grad_(), w.requires_grad_(),
                                                     v.requires_grad_()))


def test_accepts_a_well_posed_core_close_to_singular_in_float32():
    # tsGCN's core is I - Λ with 1 - λ >= 1 / (1 + α + β): here α + β = 1e4.
    # The float32 solve is then accurate to about cond * eps = 1e4 * 6e-8,
    # so 1e-2 relative is a loose bound that still fails on a wrong inverse.
    # The core warns that its largest gain is accurate to a few percent only:
    # 16 eps32 (1 + 1) / 1e-4 = 3.8%.
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(200, 40, dtype=torch.float64, generator=gen))
    lam = torch.linspace(0.5, 1e4 / (1 + 1e4), 40, dtype=torch.float64)
    w, v = factors_from_eigenpairs(lam, u)
    x = torch.randn(200, 3, dtype=torch.float64, generator=gen)
    expected = torch.linalg.solve(torch.eye(200, dtype=torch.float64) + w @ v.T, x)
    with pytest.warns(UserWarning, match=r'accurate to about \d\.\d%'):
        got = woodbury_apply(x.float(), w.float(), v.float()).double()
    assert (got - expected).norm() / expected.norm() < 1e-2


# woodbury_core -----------------------------------------------------------------

def test_woodbury_core_is_the_lu_of_the_small_core():
    w, v = general_factors(n=40, rank=5)
    core = woodbury_core(w, v)
    small = torch.eye(5, dtype=torch.float64) + v.T @ w
    rhs = torch.randn(5, 2, dtype=torch.float64)
    # A 5 x 5 solve of a matrix within 0.5 of I: cond < 3, error ~ 5 eps.
    torch.testing.assert_close(torch.linalg.lu_solve(core.lu, core.pivots, rhs),
                               torch.linalg.solve(small, rhs), rtol=0, atol=64 * EPS)


def test_woodbury_core_rejects_a_singular_core():
    w, _ = eigen_factors(n=30, rank=2)
    v = -w @ torch.linalg.inv(w.T @ w)  # VᵀW = -I, so I + VᵀW = 0
    with pytest.raises(ValueError, match='numerically singular.*float64.*lower the rank'):
        woodbury_core(w, v)


def test_woodbury_core_rejects_non_finite_factors():
    w, v = eigen_factors()
    w[3, 1] = float('inf')
    with pytest.raises(ValueError, match="'w' and 'v' contain NaN or infinite"):
        woodbury_core(w, v)


def test_woodbury_core_checks_eigenpair_factors_only_when_asked():
    w, v = eigen_factors()
    rows = torch.arange(0, 30, 2)  # a subgraph's rows: VᵀW is no longer diagonal
    woodbury_core(w[rows], v[rows])  # general factors: accepted
    with pytest.raises(ValueError, match=f'{SLICED}.*full graph'):
        woodbury_core(w[rows], v[rows], from_eigenpairs=True)
    woodbury_core(w, v, from_eigenpairs=True)  # the whole graph's: accepted
    # Learned factors are not eigenpairs: not checked.
    woodbury_core(w[rows].requires_grad_(), v[rows], from_eigenpairs=True)


def test_eigenpair_tolerance_is_ten_square_roots_of_eps():
    for dtype, value in ((torch.float32, 3.45e-3), (torch.float64, 1.49e-7)):
        assert eigenpair_tolerance(dtype) == 10 * math.sqrt(torch.finfo(dtype).eps)
        assert eigenpair_tolerance(dtype) == pytest.approx(value, rel=1e-3)


def test_float64_casts_of_float32_factors_get_the_float32_tolerance():
    # Eigenvectors bent by 1e-4 (between the float64 tolerance, 1.5e-7, and
    # the float32 one, 3.5e-3): refused in float64, accepted as a float32 cast.
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(50, 3, dtype=torch.float64, generator=gen))
    u[:, 1] = 1e-4 * u[:, 0] + (1 - 1e-8) ** 0.5 * u[:, 1]
    lam = torch.tensor([0.6, -0.4, 0.2], dtype=torch.float64)
    w, v = factors_from_eigenpairs(lam, u)
    with pytest.raises(ValueError, match=SLICED):
        woodbury_core(w, v, from_eigenpairs=True)
    w32, v32 = (t.float().double() for t in (w, v))
    woodbury_core(w32, v32, from_eigenpairs=True)


# check_core_condition -------------------------------------------------------------

def test_check_core_condition_warns_and_raises_at_its_two_thresholds():
    eps32 = torch.finfo(torch.float32).eps
    pivot = 1e-3
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # accurate to GAIN_ACCURACY: silent
        check_core_condition(CoreCondition(pivot, GAIN_ACCURACY * pivot, torch.float32))
    with pytest.warns(UserWarning, match=r'pivot as small as 0\.001 against a rounding level '
                                         r'of 1e-05 .*in torch\.float32 .*about 1\.0% only'):
        check_core_condition(CoreCondition(pivot, 10 * GAIN_ACCURACY * pivot, torch.float32))
    # From SINGULAR_ERROR on (the pivot at or below the rounding level), and for
    # a zero pivot, it raises.
    for pivot, rounding in ((1e-3, SINGULAR_ERROR * 1e-3), (1e-3, 2e-3), (0.0, eps32)):
        with pytest.raises(ValueError, match=rf'numerically singular in torch\.float32: '
                                             rf'its smallest pivot {pivot:.2g} is not above '
                                             rf'the rounding level {rounding:.2g}'):
            check_core_condition(CoreCondition(pivot, rounding, torch.float32))
    assert CoreCondition(0.0, eps32, torch.float32).error == math.inf


def pivot_and_rounding(message):
    pivot, rounding = re.search(r'pivot (?:as small as )?(-?[\d.e+-]+)(?: is not above the| '
                                r'against a) rounding level (?:of )?([\d.e+-]+)',
                                message).groups()
    return float(pivot), float(rounding)


@pytest.mark.parametrize('gap, verdict', [(1e-11, 'silent'), (1e-12, 'warns'),
                                          (1e-15, 'raises'), (-1e-15, 'raises')])
def test_woodbury_core_judges_the_pivot_one_minus_the_largest_eigenvalue(gap, verdict):
    # tsGCN's core is I - Λ: its smallest pivot is 1 - λ_max = gap, the rounding
    # level ROUNDING_UNITS eps (1 + max|λ|) = 16 eps (2 - gap). A pivot pushed
    # below zero by rounding is as singular as one above it.
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(40, 5, dtype=torch.float64, generator=gen))
    lam = torch.tensor([1 - gap, 0.5, -0.3, 0.2, 0.1], dtype=torch.float64)
    w, v = factors_from_eigenpairs(lam, u)
    rounding = ROUNDING_UNITS * EPS * (2 - gap)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        try:
            woodbury_core(w, v, from_eigenpairs=True)
        except ValueError as error:
            assert verdict == 'raises'
            assert 'numerically singular in torch.float64' in str(error)
            pivot, level = pivot_and_rounding(str(error))
        else:
            assert verdict != 'raises'
            messages = [str(w.message) for w in caught]
            assert len(messages) == (verdict == 'warns')
            if verdict == 'silent':
                return
            pivot, level = pivot_and_rounding(messages[0])
    # The diagonal of VᵀW is -λ ||u||² with ||u||² = 1 to a few eps: the pivot
    # is gap to about 40 eps (the message prints two digits).
    assert pivot == pytest.approx(abs(gap), rel=0.05, abs=64 * EPS)
    assert level == pytest.approx(rounding, rel=0.05)


def test_two_stacked_graphs_whose_eigenvalues_add_up_to_one_are_named():
    # Each graph's S at alpha + beta = 1 reaches 1/2: two graphs' factors stacked
    # by rows (batch= forgotten) give V^T W = -(1/2 + 1/2) = -1, not beyond 1,
    # and the singular verdict advised float64 or a smaller alpha + beta, neither
    # of which helps (review s55/conv). Reference: the stacked core, diag(0, 0.6).
    gen = torch.Generator().manual_seed(1)
    lam = torch.tensor([0.5, 0.2], dtype=torch.float64)
    pieces = [factors_from_eigenpairs(lam, torch.linalg.qr(torch.randn(
        n, 2, dtype=torch.float64, generator=gen))[0]) for n in (20, 15)]
    w, v = (torch.cat(parts) for parts in zip(*pieces))
    torch.testing.assert_close(-(v.T @ w).diagonal(), 2 * lam, rtol=0, atol=16 * EPS)
    with pytest.raises(ValueError, match=r"numerically singular in torch\.float64.*S an "
                                         r"eigenvalue 1, 1 to rounding.*stacked by rows.*"
                                         r"batch=data\.batch"):
        woodbury_core(w, v, from_eigenpairs=True)
    with pytest.raises(ValueError, match='numerically singular') as error:
        woodbury_core(w, v)  # general factors: nothing known of S
    assert 'batch=data.batch' not in str(error.value)


def test_an_indefinite_core_is_judged_by_the_magnitude_of_its_pivot():
    # I + VᵀW = diag(-0.5, 1, 0.7): indefinite, well conditioned, (I + W Vᵀ)⁻¹
    # exists, and nothing is said of general factors.
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(40, 3, dtype=torch.float64, generator=gen))
    w, v = factors_from_eigenpairs(torch.tensor([1.5, 0.0, 0.3], dtype=torch.float64), u)
    x = torch.randn(40, 2, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        core = woodbury_core(w, v)
    torch.testing.assert_close(woodbury_apply(x, w, v, core), dense_solve(x, w, v), rtol=0,
                               atol=solve_tolerance(x, w, v))
    # As factors of eigenpairs, those of an S with the eigenvalue 1.5, which no
    # tsGCN operator has (factors of two graphs stacked by rows add theirs).
    with pytest.raises(ValueError, match=r'eigenvalue 1\.5 > 1 of S.*stacked by rows'):
        woodbury_core(w, v, from_eigenpairs=True)
    # just above one by rounding: the singular verdict, not this one
    root = torch.tensor([1 + 4 * EPS, 0.5], dtype=torch.float64).sqrt()
    w, v = u[:, :2] * root, -u[:, :2] * root  # (factors_from_eigenpairs refuses it)
    with pytest.raises(ValueError, match='singular'):
        woodbury_core(w, v, from_eigenpairs=True)


def test_float64_casts_of_float32_factors_get_the_float32_rounding_level():
    # The float64 core of float32 factors still carries float32 rounding.
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(40, 3, dtype=torch.float64, generator=gen))
    lam = torch.tensor([1 - 1e-4, 0.5, -0.3], dtype=torch.float64)
    w32, v32 = (t.float().double() for t in factors_from_eigenpairs(lam, u))
    with pytest.warns(UserWarning, match=r'in torch\.float32 the largest gain') as caught:
        woodbury_core(w32, v32, from_eigenpairs=True)
    _, level = pivot_and_rounding(str(caught[0].message))
    eps32 = torch.finfo(torch.float32).eps
    assert level == pytest.approx(ROUNDING_UNITS * eps32 * (2 - 1e-4), rel=0.05)


# WoodburyCache -----------------------------------------------------------------

def test_cache_keeps_the_core_of_the_same_factors():
    w, v = eigen_factors()
    cache = WoodburyCache()
    core = cache(w, v)
    assert cache(w, v) is core
    expected = woodbury_core(w, v)
    assert torch.equal(core.lu, expected.lu) and torch.equal(core.pivots, expected.pivots)
    # New tensors with the same numbers: the same core (it depends on them only).
    assert cache(w.clone(), v.detach().clone()) is core


@pytest.mark.parametrize('change', ['in place', 'through NumPy', 'one row through NumPy',
                                    'one entry through .data', 'new storage', 'new tensors',
                                    'dtype', 'flag'])
def test_cache_refactorises_when_the_factors_change(change):
    w, v = eigen_factors(n=40)
    cache = WoodburyCache()
    first = cache(w, v)
    if change == 'in place':  # the version counter
        w.mul_(0.5)
    elif change == 'through NumPy':  # same object, storage and version
        w.numpy()[:] *= 0.5
    elif change == 'one row through NumPy':  # one row, not the first or last
        v.numpy()[17] *= 0.5
    elif change == 'one entry through .data':
        w.data[23, 1] += 0.25
    elif change == 'new storage':  # same object and version
        w.data = 0.5 * w.data
    elif change == 'new tensors':
        w, v = eigen_factors(n=40, seed=1)
    elif change == 'dtype':  # the same numbers in float32
        w, v = w.float(), v.float()
    core = cache(w, v, from_eigenpairs=change == 'flag')
    assert core is not first
    x = torch.randn(w.size(0), 2, dtype=w.dtype)
    expected = dense_solve(x, w, v)
    if change == 'dtype':  # float32 rounding of O(1) entries, amplified by gains <= 5
        torch.testing.assert_close(woodbury_apply(x, w, v, core).double(), expected, rtol=0,
                                   atol=1e-5)
    else:
        torch.testing.assert_close(woodbury_apply(x, w, v, core), expected, rtol=0,
                                   atol=solve_tolerance(x, w, v))
    assert cache(w, v, from_eigenpairs=change == 'flag') is core  # kept from now on


def test_cache_never_keeps_the_core_of_factors_holding_nan():
    w, v = eigen_factors()
    cache = WoodburyCache()
    cache(w, v)
    w.numpy()[5, 0] = math.nan
    for _ in range(2):  # refused on every call, never taken for the cached core
        with pytest.raises(ValueError, match='NaN or infinite'):
            cache(w, v)


def test_cache_is_bypassed_for_gradients_and_inference():
    w, v = eigen_factors()
    cache = WoodburyCache()
    learned = w.clone().requires_grad_()
    assert cache(learned, v) is not cache(learned, v)
    with torch.inference_mode():
        assert cache(w, v) is not cache(w, v)
    assert cache._core is None  # nothing was stored


def test_copies_and_pickles_of_a_cache_start_empty():
    w, v = eigen_factors()
    cache = WoodburyCache()
    core = cache(w, v)
    buffer = io.BytesIO()
    torch.save(cache, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(cache), torch.load(buffer, weights_only=False)):
        assert other._core is None and other._key is None
        again = other(w, v)
        assert again is not core and torch.equal(again.lu, core.lu)
    assert cache(w, v) is core


def test_float32_factors_of_many_rows_keep_the_largest_gain():
    # 300,000 rows, exact eigenpairs rounded to float32, the top gain 1 / (1 - 0.99) = 100:
    # V^T W and V^T X summed over the rows in float32 erred by about 300 eps, which the gain
    # multiplied into 0.12 % of the output, without a warning. Reference: the float64
    # Woodbury solve of the same float32 factors. Chunked sums of positive terms (the
    # diagonal, -lambda u_i^2) err by at most about 30 eps even one term after another,
    # times the gain of 100: 3.6e-4, so 5e-4 holds on any CPU.
    n, r = 300_000, 9
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(n, r, dtype=torch.float64, generator=gen))
    lam = torch.linspace(0.99, 0.5, r, dtype=torch.float64)
    w, v = factors_from_eigenpairs(lam.float(), u.float())
    x = torch.randn(n, 2, generator=gen)
    x[:, 0] = u[:, 0].float() * n ** 0.5  # along the top eigenvector
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        got = woodbury_apply(x, w, v).double()
    wd, vd, xd = w.double(), v.double(), x.double()
    want = xd - wd @ torch.linalg.solve(torch.eye(r, dtype=torch.float64) + vd.T @ wd, vd.T @ xd)
    assert float(((got - want).norm(dim=0) / want.norm(dim=0)).max()) < 5e-4


@pytest.mark.parametrize('dtype,rank', [(torch.float32, 30), (torch.float64, 60)])
def test_a_nearly_singular_core_with_moderate_pivots_is_refused(dtype, rank):
    # I + VᵀW = T, unit upper triangular with -1 above the diagonal (Kahan): every
    # LU pivot is about one, but cond(T) ~ 2^rank (6e9 at 30 in float32, 6e17 at
    # 60 in float64): numerically singular, and woodbury_apply's result is off by
    # 15 % (float32) and 500 % (float64) against the dense float64 solve.
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(100, rank, dtype=torch.float64, generator=gen))
    upper = torch.triu(torch.ones(rank, rank, dtype=torch.float64), 1)
    w, v = q.to(dtype), (q @ -upper.T).to(dtype)
    assert float(torch.linalg.lu_factor(torch.eye(rank, dtype=dtype) + v.T @ w)[0]
                 .diagonal().abs().min()) > 0.5
    with pytest.raises(ValueError, match='numerically singular'):
        woodbury_core(w, v)


def test_a_general_core_is_judged_by_its_smallest_singular_value_not_the_screen():
    # The screen 1 / ||core^-1||_F is up to sqrt(r) below the smallest singular
    # value: (1 - d) I with 1 - d = 2e-5 at r = 400 read 1e-6 and was refused as
    # singular, where its gains are accurate to about 20 % (the warning).
    # Reference: the core's singular values, all 2e-5.
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(500, 400, dtype=torch.float64, generator=gen))
    w = q.float().requires_grad_()  # learned factors: the general check
    v = (q * -(1 - 2e-5)).float()
    with pytest.warns(UserWarning, match=r'pivot as small as 2e-05'):
        woodbury_core(w, v)


# a batch of graphs, each with its own factors ------------------------------------

def block_diagonal_solve(x, w, v, sizes):
    r"""The reference: each graph's rows solved with its own factors alone."""
    rows = [0, *torch.tensor(sizes).cumsum(0).tolist()]
    return torch.cat([dense_solve(x[a:b], w[a:b], v[a:b]) for a, b in zip(rows, rows[1:])])


def test_woodbury_apply_with_a_batch_solves_each_graph_with_its_own_factors():
    # Graph 1 is empty (batch_size counts it): its core is I_r, it has no rows.
    sizes = [13, 0, 21, 8]
    w, v = general_factors(n=sum(sizes), rank=5)
    w, v = w.requires_grad_(), v.requires_grad_()  # learned factors: the general check
    x = torch.randn(sum(sizes), 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    out = woodbury_apply(x, w, v, batch=batch, batch_size=len(sizes))
    want = block_diagonal_solve(x, w, v, sizes)
    # float64, condition numbers near 1: both sides round at about 1e-15.
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad(out.square().sum(), (w, v))
    want_grads = torch.autograd.grad(want.square().sum(), (w, v))
    for got, expected in zip(grads, want_grads):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    core = woodbury_core(w, v, batch=batch, batch_size=len(sizes))
    assert core.lu.shape == (4, 5, 5) and core.pivots.shape == (4, 5)
    torch.testing.assert_close(woodbury_apply(x, w, v, core, batch=batch), out)
    with pytest.raises(ValueError, match="'batch' .* cannot be combined with 'group'"):
        woodbury_apply(x, w, v, core, group=object(), batch=batch)
    with pytest.raises(ValueError, match="'batch' .* cannot be combined with 'group'"):
        woodbury_core(w, v, group=object(), batch=batch)


def test_the_verdict_on_a_batch_of_cores_is_that_of_its_worst_graph():
    # Graph 0: well-conditioned general factors; graph 1: the Kahan factors of
    # test_a_nearly_singular_core_with_moderate_pivots_is_refused (cond ~ 2^60).
    gen = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(100, 60, dtype=torch.float64, generator=gen))
    upper = torch.triu(torch.ones(60, 60, dtype=torch.float64), 1)
    good_w, good_v = general_factors(n=30, rank=60)
    w, v = torch.cat([good_w, q]), torch.cat([good_v, q @ -upper.T])
    batch = torch.cat([torch.zeros(30, dtype=torch.long), torch.ones(100, dtype=torch.long)])
    woodbury_core(good_w, good_v)  # alone, accepted
    with pytest.raises(ValueError, match='numerically singular'):
        woodbury_core(w, v, batch=batch)


def test_each_graph_of_a_batch_is_judged_against_its_own_rounding_level():
    # Graph A: a well-conditioned core of entries ~1e6 (its rounding level ~4e-9);
    # graph B: core diag(1e-9, 1) of entries ~1 (rounding level ~7e-15), a pivot
    # far above its own rounding. Each alone is accepted silently, so the batch
    # must be: B's pivot against A's rounding level refused it as singular.
    # Reference: each graph's own verdict.
    gen = torch.Generator().manual_seed(0)
    wa = torch.randn(6, 2, dtype=torch.float64, generator=gen) * 1e3
    q = torch.linalg.qr(torch.randn(5, 2, dtype=torch.float64, generator=gen))[0]
    vb = q * torch.tensor([-(1 - 1e-9), 0.0], dtype=torch.float64)
    w, v = torch.cat([wa, q]), torch.cat([wa, vb])
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor([6, 5]))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        woodbury_core(wa, wa)
        woodbury_core(q, vb)
        core = woodbury_core(w, v, batch=batch)
    assert float(core.lu[1].diagonal().abs().min()) == pytest.approx(1e-9, rel=1e-6)
    # B's pivot taken below its own rounding level is still refused in the batch.
    vb = q * torch.tensor([-(1 - 1e-16), 0.0], dtype=torch.float64)
    with pytest.raises(ValueError, match='numerically singular'):
        woodbury_core(torch.cat([wa, q]), torch.cat([wa, vb]), batch=batch)


def test_a_batch_of_eigenpair_factors_is_checked_graph_by_graph():
    # Two graphs with the eigenvalues (0.6, 0.3) each: stacked without the batch
    # vector they imply 1.2 > 1 (refused); with it, each graph's core is I - Lambda.
    gen = torch.Generator().manual_seed(0)
    eigenvalues = torch.tensor([0.6, 0.3], dtype=torch.float64)
    parts = [factors_from_eigenpairs(
        eigenvalues, torch.linalg.qr(torch.randn(n, 2, dtype=torch.float64, generator=gen))[0])
        for n in (10, 14)]
    w, v = (torch.cat(t) for t in zip(*parts))
    batch = torch.repeat_interleave(torch.arange(2), torch.tensor([10, 14]))
    with pytest.raises(ValueError, match=r'eigenvalue 1\.2 > 1 of S'):
        woodbury_core(w, v, from_eigenpairs=True)
    core = woodbury_core(w, v, from_eigenpairs=True, batch=batch)
    torch.testing.assert_close(core.lu.diagonal(dim1=1, dim2=2),
                               (1 - eigenvalues).expand(2, 2))
    # Eigenvectors of a repeated eigenvalue mixed across the graphs (the factors
    # of the two graphs together, in a rotated basis): one graph's V^T W is
    # no longer diagonal.
    u = torch.zeros(24, 2, dtype=torch.float64)
    u[:10, 0] = parts[0][0][:, 0] / 0.6 ** 0.5
    u[10:, 1] = parts[1][0][:, 0] / 0.6 ** 0.5
    angle = torch.tensor(0.3, dtype=torch.float64)
    rotation = torch.stack([torch.stack([angle.cos(), -angle.sin()]),
                            torch.stack([angle.sin(), angle.cos()])])
    w, v = factors_from_eigenpairs(torch.tensor([0.6, 0.6], dtype=torch.float64), u @ rotation)
    woodbury_core(w, v, from_eigenpairs=True)  # one graph of two components: fine
    with pytest.raises(ValueError, match=SLICED + r".*each graph's own factors"):
        woodbury_core(w, v, from_eigenpairs=True, batch=batch)


def test_a_batch_of_one_large_float32_graph_is_propagated_as_the_graph_alone():
    # Above GRAM_CHUNK rows, V^T W and V^T X of a batch's graph are local_gram's
    # float64-chunked sums of its rows, as for the graph alone (a plain float32
    # product of 2^15 padded rows was 70-77 eps of the correction W (...)^-1 V^T X
    # off). What still may differ, the batched r-term products W_g (...)^-1 V_g^T X_g
    # and the subtraction from X: r eps of the sum of |terms| per product, both
    # ways, and an ulp of the result (about 16 eps of the correction here).
    n = 8 * 4096 + 1
    gen = torch.Generator().manual_seed(0)
    u = torch.linalg.qr(torch.rand(n, 4, generator=gen, dtype=torch.float64) + 1)[0]
    w, v = (u * 0.6).float(), (-u * 0.6).float()
    x = torch.rand(n, 3, generator=gen) + 1
    one = woodbury_apply(x, w, v)
    batched = woodbury_apply(x, w, v, batch=torch.zeros(n, dtype=torch.long))
    core = woodbury_core(w, v)
    solved = torch.linalg.lu_solve(core.lu, core.pivots, (v.T.double() @ x.double()).float())
    terms = (w.abs() @ solved.abs()).max()
    eps = torch.finfo(torch.float32).eps
    bound = 2 * w.size(1) * eps * terms + 2 * eps * one.abs().max()
    assert float(bound) < 30 * eps * float((x - one).abs().max())  # far below the 70 eps
    torch.testing.assert_close(batched, one, rtol=0, atol=float(bound))


def test_the_verdict_on_a_core_reads_the_device_once():
    # One synchronisation: the stats as one .tolist(), no .item() (indexing with a
    # 0-dim integer tensor is one, in PyTorch's indexing), batched or not.
    from torch.utils._python_dispatch import TorchDispatchMode

    class Items(TorchDispatchMode):
        count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten._local_scalar_dense.default:
                Items.count += 1
            return func(*args, **(kwargs or {}))

    gen = torch.Generator().manual_seed(0)
    parts = [factors_from_eigenpairs(
        torch.tensor([0.6, 0.3], dtype=torch.float64),
        torch.linalg.qr(torch.randn(n, 2, dtype=torch.float64, generator=gen))[0])
        for n in (10, 14)]
    vtw = torch.stack([v.T @ w for w, v in parts])
    lu, pivots = torch.linalg.lu_factor(torch.eye(2, dtype=torch.float64) + vtw)
    for eigenpairs in (True, False):
        for args in ((lu, pivots, vtw), (lu[0], pivots[0], vtw[0])):
            with Items():
                _check_core(*args, eigenpairs, torch.float64)
    assert Items.count == 0
