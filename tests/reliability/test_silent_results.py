r"""No plausible number from a wrong computation: non-finite values, indefinite
operators, rounding, stale caches and half precision (docs/reliability.md)."""
import math
import warnings

import pytest
import torch
from torch_geometric.data import Data

from torch_geometric_regcn import (
    LowRankInverse,
    RegularizerConv,
    RegularizerGNN,
    SemanticGraph,
    TSGCNConv,
)
from torch_geometric_regcn.datasets import contextual_sbm
from torch_geometric_regcn.linalg.cg import cg_solve
from torch_geometric_regcn.regularizers import Regularizer
from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator

N, F = 60, 6
SOLVERS = [('appnp', 'series'), ('appnp', 'cg'), ('appnp', 'closed'), ('tsgcn', 'series'),
           ('tsgcn', 'cg'), ('tsgcn', 'closed'), ('tsgcn', 'lowrank'), ('gcn', 'series'),
           ('dagnn', 'series')]


@pytest.fixture(scope='module')
def graph():
    data = contextual_sbm(num_nodes=N, num_classes=3, num_features=F, seed=0)
    data = SemanticGraph(4, progress=False)(data)
    return LowRankInverse(1.0, 0.2, rank=N, progress=False)(data)


def layer_inputs(data, regularizer, solver):
    kwargs = {}
    if regularizer == 'tsgcn':
        kwargs = ({'lowrank_w': data.lowrank_w, 'lowrank_v': data.lowrank_v}
                  if solver == 'lowrank' else {'semantic_edge_index': data.semantic_edge_index})
    return kwargs


@pytest.mark.parametrize('regularizer, solver', SOLVERS)
def test_non_finite_gradient_stays_non_finite(graph, regularizer, solver):
    # A NaN reaching a layer's output gradient must reach its input gradient,
    # never turn into zeros (CG used to stop at once on a NaN residual).
    conv = RegularizerConv(F, 3, regularizer, solver=solver).double()
    x = graph.x.double().requires_grad_()
    kwargs = {k: v.double() if v.is_floating_point() else v
              for k, v in layer_inputs(graph, regularizer, solver).items()}
    out = conv(x, graph.edge_index, **kwargs)
    poisoned = torch.ones_like(out)
    poisoned[:, 1] = math.nan
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)  # CG says which columns
        out.backward(poisoned)
    assert torch.isnan(x.grad).all()  # column 1 mixes into every input feature
    assert torch.isnan(conv.lin.weight.grad[1]).all()
    if regularizer != 'dagnn':  # DAGNN's gate scores every hop from all channels
        assert torch.isfinite(conv.lin.weight.grad[[0, 2]]).all()


def test_cg_backward_warns_and_keeps_finite_columns():
    m = (torch.eye(N, dtype=torch.float64) * 2 + torch.rand(N, N, dtype=torch.float64) / N)
    m = ((m + m.T) / 2).to_sparse_csr()
    b = torch.randn(N, 3, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(N, 3, dtype=torch.float64)
    grad[4, 0] = math.inf
    with pytest.warns(RuntimeWarning, match=r'non-finite gradient in 1 of 3 columns'):
        cg_solve(m, b, 1e-12).backward(grad)
    expected = torch.linalg.solve(m.to_dense(), grad[:, 1:])
    torch.testing.assert_close(b.grad[:, 1:], expected)
    assert torch.isnan(b.grad[:, 0]).all()


class Indefinite(Regularizer):
    r"""M = I - 2 offdiag(Â): unit diagonal, yet indefinite (Â has eigenvalue one)."""
    name = 'indefinite'

    def operator(self, graph):
        adj = graph.adj.to_dense()
        return (torch.eye(graph.num_nodes, dtype=adj.dtype)
                - 2 * (adj - torch.diag(adj.diagonal()))).to_sparse_csr()


def test_indefinite_user_regularizer_raises_instead_of_nan(graph):
    conv = RegularizerConv(F, 3, Indefinite, solver='cg').double()
    with pytest.raises(ValueError, match=r"broke down.*p\^T M p <= 0.*not positive definite"):
        conv(graph.x.double(), graph.edge_index)


def exact_tsgcn(data, alpha, beta):
    s = tsgcn_operator(Data(x=data.x.double(), edge_index=data.edge_index,
                            semantic_edge_index=data.semantic_edge_index), alpha, beta)
    return torch.linalg.inv(torch.eye(N, dtype=torch.float64) - s.to_dense())


@pytest.mark.parametrize('alpha', [1e4, 1e5])
def test_float32_factors_of_a_large_alpha_warn(graph, alpha):
    # 1 - λ_max = 1 / (1 + α + β): in float32 (ε = 1.2e-7) the largest gain
    # carries a rounding error of up to 16 ε (1 + max|VᵀW|) relative to that
    # pivot (linalg.woodbury.check_core_condition), above 0.1 % here and
    # below 100 %: the transform and the layer warn alike.
    data = Data(x=graph.x.float(), edge_index=graph.edge_index,
                semantic_edge_index=graph.semantic_edge_index)
    with pytest.warns(UserWarning, match=r'in torch.float32 the largest gain .* accurate to '
                                         r'about .*float64'):
        data = LowRankInverse(alpha, 0.2, rank=N, progress=False)(data)
    conv = TSGCNConv(F, 3, bias=False)
    with pytest.warns(UserWarning, match=r'in torch.float32 the largest gain .* accurate to '
                                         r'about .*float64'):
        conv(data.x, data.lowrank_w, data.lowrank_v)


@pytest.mark.parametrize('alpha', [1.0, 1e4, 1e6])
def test_float64_factors_of_a_large_alpha_are_exact(graph, alpha):
    data = Data(x=graph.x.double(), edge_index=graph.edge_index,
                semantic_edge_index=graph.semantic_edge_index)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # float64: no precision warning
        data = LowRankInverse(alpha, 0.2, rank=N, progress=False)(data)
        conv = TSGCNConv(F, 3, bias=False).double()
        got = conv(data.x, data.lowrank_w, data.lowrank_v).detach()
    expected = exact_tsgcn(data, alpha, 0.2) @ conv.lin(data.x).detach()
    # float64 loses ε (1 + α) relative on the largest gain: 2e-10 at α = 1e6.
    assert float((got - expected).norm() / expected.norm()) < 1e-8


@pytest.mark.parametrize('edit', ['numpy', 'data', 'in_place'])
def test_factors_edited_after_the_first_forward_are_seen(graph, edit):
    w, v = graph.lowrank_w.clone(), graph.lowrank_v.clone()
    conv = TSGCNConv(F, 3)
    conv(graph.x, w, v)  # caches the Woodbury core
    if edit == 'numpy':  # bypasses the version counter
        w.numpy()[:] *= 0.5
        v.numpy()[:] *= 0.5
    elif edit == 'data':  # also bypasses it
        w.data.mul_(0.5)
        v.data.mul_(0.5)
    else:
        w.mul_(0.5)
        v.mul_(0.5)
    fresh = TSGCNConv(F, 3)
    fresh.load_state_dict(conv.state_dict())
    torch.testing.assert_close(conv(graph.x, w, v), fresh(graph.x, w.clone(), v.clone()))


@pytest.mark.parametrize('model', ['conv', 'gnn'])
@pytest.mark.parametrize('layout', ['edge_index', 'coo', 'csr'])
def test_cached_layer_refuses_another_graph(graph, model, layout):
    def adjacency(edge_index):
        if layout == 'edge_index':
            return edge_index
        adj = torch.sparse_coo_tensor(edge_index, torch.ones(edge_index.size(1)), (N, N))
        return adj.coalesce() if layout == 'coo' else adj.to_sparse_csr()

    layer = (RegularizerConv(F, 3, 'appnp', cached=True) if model == 'conv'
             else RegularizerGNN(F, 8, 3, regularizer='appnp', cached=True))
    adj = adjacency(graph.edge_index)
    first = layer(graph.x, adj)
    torch.testing.assert_close(layer(graph.x, adj), first)  # the same graph, again
    if layout == 'edge_index':  # the same graph in another integer dtype
        torch.testing.assert_close(layer(graph.x, adj.int()), first)
    keep = (graph.edge_index != 0).all(dim=0)  # node 0 loses its edges
    other = adjacency(graph.edge_index[:, keep])
    with pytest.raises(ValueError, match=r"cached=True\) was called on another graph.*"
                                         r"reset_cache"):
        layer(graph.x, other)
    layer.reset_cache()
    assert not torch.allclose(layer(graph.x, other), first)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@pytest.mark.parametrize('regularizer, solver', SOLVERS)
@torch.no_grad()  # forward values only
def test_half_precision_is_solved_in_float32(graph, regularizer, solver, dtype):
    conv = RegularizerConv(F, 3, regularizer, solver=solver)
    kwargs = layer_inputs(graph, regularizer, solver)
    expected = conv(graph.x, graph.edge_index, **kwargs)
    half = RegularizerConv(F, 3, regularizer, solver=solver).to(dtype)
    half.load_state_dict(conv.state_dict())
    out = half(graph.x.to(dtype), graph.edge_index, **kwargs)
    assert out.dtype == dtype
    # Only X Θ and the output are rounded to 8 (bfloat16) or 11 (float16)
    # bits; the solve itself runs in float32.
    tolerance = 3e-2 if dtype == torch.bfloat16 else 4e-3
    assert float((out.float() - expected).norm() / expected.norm()) < tolerance


@pytest.mark.parametrize('regularizer, solver', SOLVERS)
@torch.no_grad()  # forward values only
def test_autocast_is_solved_in_float32(graph, regularizer, solver):
    conv = RegularizerConv(F, 3, regularizer, solver=solver)
    kwargs = layer_inputs(graph, regularizer, solver)
    expected = conv(graph.x, graph.edge_index, **kwargs)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = conv(graph.x, graph.edge_index, **kwargs)
    # bfloat16 only in X Θ (8 bits): a few 1e-3 relative.
    assert float((out.float() - expected).norm() / expected.norm()) < 3e-2


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
@torch.no_grad()  # forward values only
def test_half_precision_tsgcn_conv_and_autocast(graph, dtype):
    conv = TSGCNConv(F, 3)
    expected = conv(graph.x, graph.lowrank_w, graph.lowrank_v)
    half = TSGCNConv(F, 3).to(dtype)
    half.load_state_dict(conv.state_dict())
    out = half(graph.x.to(dtype), graph.lowrank_w, graph.lowrank_v)
    assert out.dtype == dtype
    tolerance = 3e-2 if dtype == torch.bfloat16 else 4e-3
    assert float((out.float() - expected).norm() / expected.norm()) < tolerance
    if dtype == torch.bfloat16:  # CPU autocast
        with torch.autocast('cpu', dtype=dtype):
            auto = conv(graph.x, graph.lowrank_w, graph.lowrank_v)
        assert float((auto.float() - expected).norm() / expected.norm()) < tolerance
