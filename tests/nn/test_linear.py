import copy
import io

import pytest
import torch
import torch.nn.functional as F

from torch_geometric_regcn.nn.dropout import dropout
from torch_geometric_regcn.nn.linear import Linear


def sparse_features(n=30, f=12, density=0.3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, f, generator=gen, dtype=torch.float64)
    x[torch.rand(n, f, generator=gen) > density] = 0
    x[3] = 0  # an empty row
    x[:, 5] = 0  # an empty column
    return x


@pytest.mark.parametrize('bias', [True, False])
def test_sparse_input_matches_dense_value_and_gradients(bias):
    # Reference: F.linear on the dense matrix, float64; both sides sum the same
    # products in other orders, so 1e-12 covers the rounding.
    x = sparse_features()
    lin = Linear(12, 4, bias=bias).double()
    target = torch.randn(30, 4, dtype=torch.float64)
    out = lin(x.to_sparse_csr())
    (out * target).sum().backward()
    grads = [p.grad.clone() for p in lin.parameters()]
    lin.zero_grad()
    ref = F.linear(x, lin.weight, lin.bias)
    (ref * target).sum().backward()
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for grad, p in zip(grads, lin.parameters()):
        torch.testing.assert_close(grad, p.grad, rtol=0, atol=1e-12)


def test_pattern_is_kept_under_dropout_and_rebuilt_for_a_new_graph():
    x = sparse_features().to_sparse_csr()
    lin = Linear(12, 4).double()
    first = None
    for seed in range(3):  # dropout keeps x's index tensors: one pattern
        torch.manual_seed(seed)
        dropped = dropout(x, 0.5, True)
        lin.zero_grad()
        lin(dropped).sum().backward()
        first = first or lin._matmul._pattern
        assert lin._matmul._pattern is first
        ref_weight = lin.weight.detach().clone().requires_grad_()
        F.linear(dropped.to_dense(), ref_weight).sum().backward()
        torch.testing.assert_close(lin.weight.grad, ref_weight.grad, rtol=0, atol=1e-12)
    other = sparse_features(seed=1)
    lin.zero_grad()
    lin(other.to_sparse_csr()).sum().backward()
    assert lin._matmul._pattern is not first
    ref_weight = lin.weight.detach().clone().requires_grad_()
    F.linear(other, ref_weight).sum().backward()
    torch.testing.assert_close(lin.weight.grad, ref_weight.grad, rtol=0, atol=1e-12)


def test_copies_and_pickles_drop_the_pattern():
    x = sparse_features().to_sparse_csr()
    lin = Linear(12, 4).double()
    lin(x).sum().backward()
    buffer = io.BytesIO()
    torch.save(lin, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(lin), torch.load(buffer, weights_only=False)):
        assert other._matmul._pattern is None and lin._matmul._pattern is not None
        other.zero_grad()
        other(x).sum().backward()
        torch.testing.assert_close(other.weight.grad, lin.weight.grad, rtol=0, atol=0)


def test_lazy_and_no_grad_paths():
    x = sparse_features()
    lin = Linear(-1, 3).double()
    out = lin(x.to_sparse_csr())
    assert lin.in_channels == 12 and out.shape == (30, 3)
    with torch.no_grad():
        torch.testing.assert_close(lin(x.to_sparse_csr()), lin(x), rtol=0, atol=1e-12)
    assert 'Linear(12, 3, bias=True)' == repr(lin)
