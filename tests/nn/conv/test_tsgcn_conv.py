r"""TSGCNConv against the dense (I + W Vᵀ)⁻¹ X Θ, its Woodbury cache, the
checks of its factors, and woodbury_apply with and without a summary."""
import copy
import io

import pytest
import torch

from tests.conftest import CUDA
from tests.nn.helpers import eigen_factors
from torch_geometric_regcn import TSGCNConv
from torch_geometric_regcn.linalg import factors_from_eigenpairs, woodbury_apply, woodbury_core


def dense_reference(conv, x, w, v):
    eye = torch.eye(x.size(0), dtype=torch.float64)
    p = torch.linalg.inv(eye + w.double() @ v.double().T)  # (I + W Vᵀ)⁻¹, the Woodbury identity
    out = p @ (x.double() @ conv.lin.weight.double().T)
    return out if conv.bias is None else out + conv.bias.double()


@pytest.mark.parametrize('bias', [True, False])
def test_matches_dense_formula(bias):
    w, v = eigen_factors()
    x = torch.randn(30, 7, dtype=torch.float64)
    conv = TSGCNConv(7, 4, bias=bias).double()
    if bias:
        torch.nn.init.normal_(conv.bias)
    torch.testing.assert_close(conv(x, w, v), dense_reference(conv, x, w, v))


def test_float32_and_lazy_in_channels():
    w, v = eigen_factors(dtype=torch.float32)
    x = torch.randn(30, 11)
    conv = TSGCNConv(-1, 3)
    out = conv(x, w, v)
    assert out.shape == (30, 3) and out.dtype == torch.float32
    assert conv.lin.weight.shape == (3, 11)
    # float32 against the float64 reference: 30 x 11 products of O(1) terms.
    torch.testing.assert_close(out.double(), dense_reference(conv, x, w, v), rtol=1e-4,
                               atol=1e-5)


def test_gradcheck():
    w, v = eigen_factors(n=12, rank=3)
    x = torch.randn(12, 4, dtype=torch.float64, requires_grad=True)
    w.requires_grad_()
    v.requires_grad_()
    conv = TSGCNConv(4, 2).double()
    assert torch.autograd.gradcheck(lambda *args: conv(*args), (x, w, v))
    params = (conv.lin.weight, conv.bias)
    assert torch.autograd.gradcheck(
        lambda weight, bias: torch.func.functional_call(
            conv, {'lin.weight': weight, 'bias': bias}, (x.detach(), w.detach(), v.detach())),
        params)


def test_core_is_kept_for_the_same_factors_and_rebuilt_for_changed_ones():
    w, v = eigen_factors()
    x = torch.randn(30, 7, dtype=torch.float64)
    conv = TSGCNConv(7, 4).double()
    conv(x, w, v)
    core = conv._woodbury._core
    torch.testing.assert_close(conv(x, w, v), dense_reference(conv, x, w, v))
    assert conv._woodbury._core is core  # same, unmodified factors: not refactorised
    w.mul_(2.0)  # in place: the stored core would now be wrong
    torch.testing.assert_close(conv(x, w, v), dense_reference(conv, x, w, v))
    assert conv._woodbury._core is not core
    w.data = 3 * w.data  # same object and version, new storage
    torch.testing.assert_close(conv(x, w, v), dense_reference(conv, x, w, v))
    w2, v2 = eigen_factors(seed=1)  # new tensors
    torch.testing.assert_close(conv(x, w2, v2), dense_reference(conv, x, w2, v2))


def test_inference_mode_bypasses_the_cache():
    w, v = eigen_factors()
    x = torch.randn(30, 7, dtype=torch.float64)
    conv = TSGCNConv(7, 4).double()
    with torch.inference_mode():
        torch.testing.assert_close(conv(x, w, v), dense_reference(conv, x, w, v))
        w_inf, v_inf = eigen_factors(seed=1)  # inference tensors: no version counter
        torch.testing.assert_close(conv(x, w_inf, v_inf), dense_reference(conv, x, w_inf, v_inf))
    assert conv._woodbury._core is None
    conv(x, w, v).sum().backward()  # no inference tensor was kept for training
    assert conv.lin.weight.grad is not None


def test_copies_and_pickles_drop_the_cached_core():
    w, v = eigen_factors()
    x = torch.randn(30, 7, dtype=torch.float64)
    conv = TSGCNConv(7, 4).double()
    expected = conv(x, w, v)
    buffer = io.BytesIO()
    torch.save(conv, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(conv), torch.load(buffer, weights_only=False)):
        assert other._woodbury._core is None and conv._woodbury._core is not None
        torch.testing.assert_close(other(x, w, v), expected, rtol=0, atol=0)


def test_woodbury_apply_with_and_without_a_core():
    w, v = eigen_factors()
    x = torch.randn(30, 3, dtype=torch.float64)
    expected = torch.linalg.solve(torch.eye(30, dtype=torch.float64) + w @ v.T, x)
    torch.testing.assert_close(woodbury_apply(x, w, v), expected)
    torch.testing.assert_close(woodbury_apply(x, w, v, woodbury_core(w, v)), expected)


def test_rejects_a_singular_core():
    w, v = eigen_factors(n=30, rank=2)
    v = -w @ torch.linalg.inv(w.T @ w)  # V^T W = -I, so I + V^T W = 0
    with pytest.raises(ValueError, match='singular'):
        TSGCNConv(6, 4).double()(torch.randn(30, 6, dtype=torch.float64), w, v)


def test_rejects_non_finite_factors():
    w, v = eigen_factors()
    w[3, 1] = float('nan')
    with pytest.raises(ValueError, match='NaN or infinite'):
        TSGCNConv(6, 4).double()(torch.randn(30, 6, dtype=torch.float64), w, v)


def test_accepts_a_well_posed_core_close_to_singular_in_float32():
    # tsGCN's core is I - Λ with 1 - λ >= 1 / (1 + α + β): here α + β = 1e4.
    # The float32 solve is then accurate to about cond * eps = 1e4 * 6e-8,
    # so 1e-2 relative is a loose bound that still fails on a wrong inverse.
    # The core warns that its largest gain is accurate to a fraction of a percent.
    gen = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(200, 40, dtype=torch.float64, generator=gen))
    lam = torch.linspace(0.5, 1e4 / (1 + 1e4), 40, dtype=torch.float64)
    w, v = factors_from_eigenpairs(lam, u)
    x = torch.randn(200, 3, dtype=torch.float64, generator=gen)
    expected = torch.linalg.solve(torch.eye(200, dtype=torch.float64) + w @ v.T, x)
    with pytest.warns(UserWarning, match=r'accurate to about 0\.\d%'):
        got = woodbury_apply(x.float(), w.float(), v.float()).double()
    assert (got - expected).norm() / expected.norm() < 1e-2


def test_reset_parameters_and_repr():
    conv = TSGCNConv(5, 3)
    torch.nn.init.ones_(conv.bias)
    before = conv.lin.weight.clone()
    conv.reset_parameters()
    assert torch.equal(conv.bias, torch.zeros(3))
    assert not torch.equal(before, conv.lin.weight)
    assert repr(conv) == 'TSGCNConv(5, 3)'
    assert repr(TSGCNConv(-1, 3)) == 'TSGCNConv(-1, 3)'


def test_torch_compile():
    w, v = eigen_factors(dtype=torch.float32)
    x = torch.randn(30, 6)
    conv = TSGCNConv(6, 4)
    compiled = torch.compile(conv, fullgraph=True)
    torch.testing.assert_close(compiled(x, w, v), conv(x, w, v), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('shapes, message', [
    (((30,), (30, 5), (30, 5)), "'x' must be a node feature matrix"),
    (((30, 6), (30, 5), (30, 4)), "'w' and 'v' must both have shape"),
    (((30, 6), (30,), (30,)), "'w' and 'v' must both have shape"),
    (((29, 6), (30, 5), (30, 5)), 'recompute the factors'),
])
def test_rejects_bad_shapes(shapes, message):
    conv = TSGCNConv(6, 4)
    with pytest.raises(ValueError, match=message):
        conv(*(torch.randn(*s) for s in shapes))


def test_rejects_tensors_on_different_devices():
    conv = TSGCNConv(6, 4)
    w = torch.randn(30, 5, device='meta')
    with pytest.raises(ValueError, match="one device.*'w' on meta"):
        conv(torch.randn(30, 6), w, torch.randn(30, 5))


@CUDA
def test_cuda_matches_cpu():
    w, v = eigen_factors(dtype=torch.float32)
    x = torch.randn(30, 6)
    conv = TSGCNConv(6, 4)
    expected = conv(x, w, v)
    got = conv.cuda()(x.cuda(), w.cuda(), v.cuda())
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)


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
    torch.testing.assert_close(got, expected[rows])
    # float32 rows with a float64 summary and core: computed in the factors' dtype.
    got32 = woodbury_apply(x[rows].float(), w[rows], None, core, summary=v.T @ x)
    assert got32.dtype == torch.float32
    torch.testing.assert_close(got32.double(), expected[rows], rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="'summary' needs 'core'"):
        woodbury_apply(x[rows], w[rows], None, summary=v.T @ x)
    with pytest.raises(ValueError, match="needs the factor 'v', or the summary"):
        woodbury_apply(x, w, None, core)
