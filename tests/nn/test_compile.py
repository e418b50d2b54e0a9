"""torch.compile: every regulariser x solver of RegularizerConv, and TSGCNConv.

Sparse operators and the solvers 'closed', 'series' and 'cg' run eagerly (a
graph break), so those layers compile without fullgraph=True and refuse it
with a message that says so; 'lowrank' and TSGCNConv compile whole. Compiled
results are compared with eager ones in float64, forward and backward: the
compiled kernels may sum in another order (rounding, ~1e-16 relative), which
the solves amplify by at most their condition number (below 100 here) and CG,
run to tol=1e-12, by its stopping point; 1e-9 leaves room for that and fails
on any wrong propagation, whose error is of order one.
"""
import warnings

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch_geometric.data import Data

from tests.conftest import CUDA, undirected_graph
from torch_geometric_regcn import TSGCN, LowRankInverse, RegularizerConv, TSGCNConv
from torch_geometric_regcn.regularizers import REGISTRY

N, F_IN, F_OUT = 30, 5, 4
TOL = dict(rtol=1e-9, atol=1e-10)
BUILT_IN = ('gcn', 'sgc', 'appnp', 'jknet', 'dagnn', 'gnn_lf', 'gnn_hf', 'tsgcn')
PAIRS = [(name, solver) for name in BUILT_IN for solver in REGISTRY[name].solvers]
FULLGRAPH_REFUSED = "solvers 'closed', 'series' and 'cg'.*eagerly.*fullgraph=True"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # Each layer is a new guard on the same forward code: without a reset the
    # recompile limit would silently send later layers to eager mode.
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope='module')
def data():
    ei, _ = undirected_graph(0, N)
    x = torch.randn(N, F_IN, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    data = Data(x=x, edge_index=ei, semantic_edge_index=undirected_graph(5, N)[0])
    return LowRankInverse(1.0, 0.4, rank=8, progress=False)(data)


def inputs(data, name, solver):
    if solver == 'lowrank':
        return dict(edge_index=data.edge_index, lowrank_w=data.lowrank_w,
                    lowrank_v=data.lowrank_v)
    if name == 'tsgcn':
        return dict(edge_index=data.edge_index, semantic_edge_index=data.semantic_edge_index)
    return dict(edge_index=data.edge_index)


def forward_backward(module, x, **kwargs):
    """The output and the gradients of a fixed weighting of it with respect to
    the input and every parameter."""
    x = x.clone().requires_grad_()
    out = module(x, **kwargs)
    weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device).view_as(out)
    params = [p for p in module.parameters()  # DAGNN's gate is used by 'series' only
              if p.requires_grad and not torch.nn.parameter.is_lazy(p)]
    grads = torch.autograd.grad((out * weight).sum(), [x, *params], allow_unused=True)
    return [out.detach(), *grads]


def assert_same(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        if e is None:  # a parameter the solver does not use
            assert g is None
        else:
            torch.testing.assert_close(g, e, **TOL)


def coefficients(name, solver):
    if name == 'tsgcn':
        return dict(alpha=1.0, beta=0.4)
    if name == 'dagnn' and solver != 'series':  # its gate is read by the series only
        return dict(K=3, adaptive=False)
    return dict(K=3) if name in ('sgc', 'jknet', 'dagnn', 'appnp') else {}


def test_the_matrix_covers_every_registered_pair():
    assert set(BUILT_IN) <= set(REGISTRY)
    assert len(PAIRS) == 21 and ('tsgcn', 'lowrank') in PAIRS


@pytest.mark.parametrize('name, solver', PAIRS)
def test_compiled_layer_equals_eager(data, name, solver):
    layer = RegularizerConv(F_IN, F_OUT, name, solver=solver, tol=1e-12,
                            **coefficients(name, solver)).double()
    torch.nn.init.normal_(layer.bias)
    kwargs = inputs(data, name, solver)
    expected = forward_backward(layer, data.x, **kwargs)  # eager (also builds DAGNN's gate)
    counter = CompileCounterWithBackend('inductor')
    got = forward_backward(torch.compile(layer, backend=counter), data.x, **kwargs)
    assert counter.frame_count >= 1  # something was compiled, not all skipped
    assert_same(got, expected)

    fullgraph = torch.compile(layer, fullgraph=True, backend='eager')
    if solver == 'lowrank':
        assert_same(forward_backward(fullgraph, data.x, **kwargs), expected)
    else:
        with pytest.raises(torch._dynamo.exc.Unsupported, match=FULLGRAPH_REFUSED):
            fullgraph(data.x, **kwargs)


def test_compiled_cached_layer_with_a_knn_semantic_graph(data):
    # The kNN graph is built from 'x' inside the eager part and kept by the layer.
    layer = RegularizerConv(F_IN, F_OUT, 'tsgcn', solver='cg', cached=True, tol=1e-12,
                            k=3).double()
    expected = forward_backward(layer, data.x, edge_index=data.edge_index)
    layer._clear_cache()
    compiled = torch.compile(layer)
    for _ in range(2):  # builds, then reuses the cached operators
        assert_same(forward_backward(compiled, data.x, edge_index=data.edge_index), expected)
    assert ('knn', 3) in layer._graph_cache.graph.derived


def test_compiled_tsgcnconv_and_tsgcn_equal_eager(data):
    w, v = data.lowrank_w, data.lowrank_v
    for module in (TSGCNConv(F_IN, F_OUT, scale=0.5).double(),
                   TSGCN(F_IN, 8, F_OUT, bias=True).double()):
        expected = forward_backward(module, data.x, w=w, v=v)
        counter = CompileCounterWithBackend('inductor')
        got = forward_backward(torch.compile(module, fullgraph=True, backend=counter),
                               data.x, w=w, v=v)
        assert counter.frame_count == 1
        assert_same(got, expected)


NON_QUADRATIC = [(name, solver) for name in ('elastic', 'airgnn', 'pgnn', 'robust')
                 for solver in REGISTRY[name].solvers]


def non_quadratic_layer(name, solver):
    # 3 steps or reweightings, short of irls_tol on purpose (its warning is ignored)
    layer = RegularizerConv(F_IN, F_OUT, name, solver=solver, tol=1e-12, K=3,
                            irls_tol=1e-15).double()
    torch.nn.init.normal_(layer.bias)
    return layer


@pytest.mark.parametrize('name, solver', NON_QUADRATIC)
def test_compiled_non_quadratic_layer_equals_eager(data, name, solver):
    # The outer iterations run eagerly (a graph break), as the sparse solvers do.
    layer = non_quadratic_layer(name, solver)
    with warnings.catch_warnings():  # 3 reweightings stop short of irls_tol (on purpose)
        warnings.simplefilter('ignore')
        expected = forward_backward(layer, data.x, edge_index=data.edge_index)
        counter = CompileCounterWithBackend('inductor')
        got = forward_backward(torch.compile(layer, backend=counter), data.x,
                               edge_index=data.edge_index)
    assert counter.frame_count >= 1
    assert_same(got, expected)
    with pytest.raises(torch._dynamo.exc.Unsupported, match='non-quadratic.*eagerly'):
        torch.compile(layer, fullgraph=True, backend='eager')(data.x, data.edge_index)


def _weighted(data, device):
    # The fixture's graph with its symmetric positive weights (issue 30: with edge_weight).
    edge_index, weight = undirected_graph(0, N, weighted=True)
    assert torch.equal(edge_index, data.edge_index)
    return data.x.to(device), dict(edge_index=edge_index.to(device),
                                   edge_weight=weight.to(device))


@CUDA
@pytest.mark.parametrize('name, solver', NON_QUADRATIC)
def test_non_quadratic_layer_on_cuda_equals_cpu_with_edge_weights(data, name, solver):
    # The same float64 iteration on both devices: only the order of the sums
    # differs (CUDA's scatter adds atomically), within TOL as above.
    layer = non_quadratic_layer(name, solver)
    with warnings.catch_warnings():  # 3 reweightings stop short of irls_tol (on purpose)
        warnings.simplefilter('ignore')
        x, kwargs = _weighted(data, 'cpu')
        expected = forward_backward(layer, x, **kwargs)
        x, kwargs = _weighted(data, 'cuda')
        got = forward_backward(layer.cuda(), x, **kwargs)
    assert all(g.is_cuda for g in got)
    assert_same([g.cpu() for g in got], expected)


@CUDA
@pytest.mark.parametrize('name, solver', [(name, REGISTRY[name].solvers[0]) for name in
                                          ('elastic', 'airgnn', 'pgnn', 'robust', 'appnp')]
                         + [('tsgcn', 'lowrank')])
def test_compiled_layer_on_cuda_equals_eager(data, name, solver):
    # Inductor's CUDA kernels for the dense parts, the eager solvers between
    # them (a graph break), against the same layer run eagerly on the GPU.
    if (name, solver) in NON_QUADRATIC:
        layer = non_quadratic_layer(name, solver).cuda()
    else:
        layer = RegularizerConv(F_IN, F_OUT, name, solver=solver, tol=1e-12,
                                **coefficients(name, solver)).double().cuda()
        torch.nn.init.normal_(layer.bias)
    if solver == 'lowrank':
        x = data.x.cuda()
        inputs_ = {k: v.cuda() for k, v in inputs(data, name, solver).items()}
    else:
        x, inputs_ = _weighted(data, 'cuda')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        expected = forward_backward(layer, x, **inputs_)
        counter = CompileCounterWithBackend('inductor')
        got = forward_backward(torch.compile(layer, backend=counter), x, **inputs_)
    assert counter.frame_count >= 1
    assert all(g.is_cuda for g in got if g is not None)
    assert_same(got, expected)



def test_a_cached_layer_called_eagerly_and_compiled_keeps_its_graph(data):
    # The cache's fingerprints of the unchanged edge_index must agree however
    # the layer is called (a compiled reduction sums in another order).
    for order in ('eager first', 'compiled first'):
        torch._dynamo.reset()
        layer = RegularizerConv(F_IN, F_OUT, 'appnp', solver='cg', cached=True, K=3,
                                tol=1e-12).double()
        compiled = torch.compile(layer)
        calls = (layer, compiled) if order == 'eager first' else (compiled, layer)
        first, second = (call(data.x, data.edge_index) for call in calls)
        assert_same(second, first)
