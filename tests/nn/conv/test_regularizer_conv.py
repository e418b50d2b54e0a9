r"""RegularizerConv: each regulariser against its reference (PyG's layers, the
closed forms of Table 1, dense inverses), solvers, state and errors."""
import warnings

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn import APPNP, GCNConv, SGConv

from tests.conftest import CUDA, dense_normalized_adjacency, undirected_graph
from tests.nn.helpers import EYE, F_IN, F_OUT, N, conv, dense_adj, setup
from torch_geometric_regcn import (
    LowRankInverse,
    RegularizerConv,
    RegularizerGNN,
    SemanticGraph,
    TSGCNConv,
)
from torch_geometric_regcn import regularizers as R


def _float64_bound(K: int) -> float:
    # K propagations of unit-scale features (|XΘ| <= ~10 here), each entry a
    # sum of at most ~20 products rounded in float64: 64 K eps * 10 bounds
    # any order of summation with a wide margin, and still fails a float32
    # step (1e-7 relative) or a wrong coefficient.
    return 64 * K * torch.finfo(torch.float64).eps * 10


def test_gcn_equals_pyg_gcnconv():
    x, ei = setup()
    ours = conv('gcn')
    theirs = GCNConv(F_IN, F_OUT, bias=False).double()
    theirs.lin.weight.data.copy_(ours.lin.weight)
    # float64, the same products in another order: K * 64 eps of the outputs'
    # scale covers any summation order (the measured difference is ~2e-16).
    torch.testing.assert_close(ours(x, ei), theirs(x, ei), atol=_float64_bound(1), rtol=0)


@pytest.mark.parametrize('K', [1, 3])
def test_sgc_equals_pyg_sgconv(K):
    x, ei = setup()
    ours = conv('sgc', K=K)
    theirs = SGConv(F_IN, F_OUT, K=K, bias=False).double()
    theirs.lin.weight.data.copy_(ours.lin.weight)
    torch.testing.assert_close(ours(x, ei), theirs(x, ei), atol=_float64_bound(K), rtol=0)


@pytest.mark.parametrize('K, alpha', [(10, 0.1), (3, 0.5)])
def test_appnp_equals_pyg_appnp(K, alpha):
    x, ei = setup()
    ours = conv('appnp', K=K, alpha=alpha)
    expected = APPNP(K, alpha)(x @ ours.lin.weight.T, ei)
    torch.testing.assert_close(ours(x, ei), expected, atol=_float64_bound(K), rtol=0)


def test_appnp_gradients_equal_pyg_appnps():
    # The layer's products differentiate by the same (symmetric) matrix
    # rather than torch's transpose of it: the gradients in the input and the
    # weights must be PyG's (gather/scatter message passing), to the same
    # float64 bound as the outputs (the backward pass is K more propagations).
    x, ei = setup()
    ours = conv('appnp', K=10, alpha=0.1)
    seed = torch.randn(N, F_OUT, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    grads = []
    for forward in (lambda inp: ours(inp, ei),
                    lambda inp: APPNP(10, 0.1)(inp @ ours.lin.weight.T, ei)):
        inp = x.clone().requires_grad_(True)
        grads.append(torch.autograd.grad((forward(inp) * seed).sum(), (inp, ours.lin.weight)))
    for mine, theirs in zip(*grads):
        torch.testing.assert_close(mine, theirs, atol=_float64_bound(10), rtol=0)


def test_sparse_adjacency_input_equals_edge_index():
    x, ei = setup()
    layer = conv('appnp')
    adj = torch.sparse_coo_tensor(ei, torch.ones(ei.size(1), dtype=torch.float64), (N, N))
    for sparse in (adj, adj.to_sparse_csr()):
        torch.testing.assert_close(layer(x, sparse), layer(x, ei))


def test_jknet_follows_table_1():
    x, ei = setup()
    K, beta = 4, 0.5
    layer = conv('jknet', K=K, beta=beta)
    a, h = dense_adj(ei), x @ layer.lin.weight.T
    expected = sum(beta**(k - 1) / (1 + beta)**k * torch.matrix_power(a, k) @ h
                   for k in range(1, K + 1))
    torch.testing.assert_close(layer(x, ei), expected)


def test_dagnn_learns_per_node_retainment_scores():
    x, ei = setup()
    K = 3
    layer = conv('dagnn', K=K)
    out = layer(x, ei)  # the gate's input size is inferred on the first call
    gate = layer.regularizer.gate
    assert isinstance(gate, torch.nn.Module) and gate.weight.shape == (1, F_OUT)
    a, h = dense_adj(ei), x @ layer.lin.weight.T
    hops = torch.stack([torch.matrix_power(a, k) @ h for k in range(K + 1)], dim=1)
    scores = torch.sigmoid(hops @ gate.weight.T + gate.bias)  # [N, K+1, 1]
    torch.testing.assert_close(out, (scores * hops).sum(1))
    layer(x, ei).sum().backward()
    assert gate.weight.grad is not None
    # The exact solvers give the regulariser's closed form (I + βL̃)⁻¹, without
    # the gate; with it they refuse (it was built, trained never, and ignored).
    exact = conv('dagnn', beta=0.5, solver='closed', adaptive=False)
    expected = torch.linalg.solve(EYE + 0.5 * (EYE - a), x @ exact.lin.weight.T)
    torch.testing.assert_close(exact(x, ei), expected)
    for solver in ('closed', 'cg'):
        with pytest.raises(ValueError, match=f"solver='{solver}' solves with R = I \\+ beta L "
                                             f"and never reads DAGNN's learned gate"):
            conv('dagnn', beta=0.5, solver=solver)


@pytest.mark.parametrize('solver', ['closed', 'cg'])
def test_gnn_lf_equals_zhu_closed_form(solver):
    x, ei = setup()
    alpha, mu = 0.3, 0.6
    layer = conv('gnn_lf', alpha=alpha, mu=mu, solver=solver, tol=1e-12)
    a = dense_adj(ei)
    low = mu * EYE + (1 - mu) * a
    expected = torch.linalg.solve(low + (1 / alpha - 1) * (EYE - a), low @ x @ layer.lin.weight.T)
    torch.testing.assert_close(layer(x, ei), expected, atol=1e-8, rtol=1e-8)


@pytest.mark.parametrize('solver', ['closed', 'cg'])
def test_gnn_hf_equals_zhu_closed_form(solver):
    x, ei = setup()
    alpha, beta = 0.4, 0.8
    layer = conv('gnn_hf', alpha=alpha, beta=beta, solver=solver, tol=1e-12)
    a = dense_adj(ei)
    system = (beta + 1 / alpha) * EYE + (1 - beta - 1 / alpha) * a
    expected = torch.linalg.solve(system, (EYE + beta * (EYE - a)) @ x @ layer.lin.weight.T)
    torch.testing.assert_close(layer(x, ei), expected, atol=1e-8, rtol=1e-8)


def dense_tsgcn(x, ei, sei, alpha, beta, weight):
    system = EYE + alpha * (EYE - dense_adj(ei)) + beta * (EYE - dense_adj(sei))
    return torch.linalg.solve(system, x @ weight.T)


@pytest.mark.parametrize('solver', ['closed', 'cg'])
def test_tsgcn_equals_dense_inverse(solver):
    x, ei = setup()
    sei, _ = undirected_graph(seed=5)
    layer = conv('tsgcn', alpha=1.0, beta=0.4, solver=solver, tol=1e-12, normalize=False)
    expected = dense_tsgcn(x, ei, sei, 1.0, 0.4, layer.lin.weight)
    torch.testing.assert_close(layer(x, ei, semantic_edge_index=sei), expected, atol=1e-8,
                               rtol=1e-8)


def test_tsgcn_builds_semantic_graph_from_features():
    x, ei = setup()
    layer = conv('tsgcn', alpha=1.0, beta=0.4, k=3, solver='closed')
    sei = SemanticGraph(3)(Data(x=x)).semantic_edge_index
    with pytest.warns(UserWarning, match="builds the semantic kNN graph"):
        built = layer(x, ei)
    torch.testing.assert_close(built, layer(x, ei, semantic_edge_index=sei))


def test_tsgcn_lowrank_solver_at_full_rank_is_exact():
    x, ei = setup()
    sei, _ = undirected_graph(seed=5)
    data = LowRankInverse(1.0, 0.4, rank=N, tol=1e-12)(
        Data(x=x, edge_index=ei, semantic_edge_index=sei))
    layer = conv('tsgcn', alpha=1.0, beta=0.4, solver='lowrank', normalize=False)
    out = layer(x, ei, semantic_edge_index=sei, lowrank_w=data.lowrank_w,
                lowrank_v=data.lowrank_v)
    torch.testing.assert_close(out, dense_tsgcn(x, ei, sei, 1.0, 0.4, layer.lin.weight))


def test_tsgcn_lowrank_cached_layer_keeps_the_core_until_the_factors_change():
    x, ei = setup()
    sei, _ = undirected_graph(seed=5)
    data = LowRankInverse(1.0, 0.4, rank=10)(Data(x=x, edge_index=ei, semantic_edge_index=sei))
    w, v = data.lowrank_w, data.lowrank_v
    layer = conv('tsgcn', alpha=1.0, beta=0.4, solver='lowrank', cached=True, normalize=False)

    def expected():  # (I + W Vᵀ)⁻¹ X Θ / (1 + α + β), dense
        return torch.linalg.solve(EYE + w @ v.T, x @ layer.lin.weight.T) / 2.4

    def run():
        return layer(x, ei, semantic_edge_index=sei, lowrank_w=w, lowrank_v=v)

    torch.testing.assert_close(run(), expected())
    cache = layer._graph_cache.graph.derived['woodbury']
    core = cache._core
    torch.testing.assert_close(run(), expected())
    assert cache._core is core
    w.mul_(0.5)  # in place: refactorised, not stale
    torch.testing.assert_close(run(), expected())
    assert cache._core is not core
    w.requires_grad_()  # factors that learn: a fresh core, so backward works twice
    grads = [torch.autograd.grad(run().sum(), w)[0] for _ in range(2)]
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


def test_a_cached_layer_compares_only_the_inputs_its_solver_reads():
    # The low-rank solver reads no edges: a cached layer refused a second call
    # without 'edge_index' ("called on another graph"), which the uncached one
    # runs. Reference: the first call's output. A graph it does read still counts.
    x, ei = setup()
    sei, _ = undirected_graph(seed=5)
    data = LowRankInverse(1.0, 0.4, rank=10)(Data(x=x, edge_index=ei, semantic_edge_index=sei))
    w, v = data.lowrank_w, data.lowrank_v
    layer = conv('tsgcn', alpha=1.0, beta=0.4, solver='lowrank', cached=True)
    first = layer(x, ei, lowrank_w=w, lowrank_v=v)
    assert torch.equal(layer(x, None, lowrank_w=w, lowrank_v=v), first)
    cg = conv('gcn', cached=True)
    cg(x, ei)
    with pytest.raises(ValueError, match=r"'edge_index' differs from the cached one"):
        cg(x, ei.flip(0)[:, :-2])


def test_cg_layer_gradcheck():
    x, ei = setup()
    x = x[:, :2].clone().requires_grad_()
    layer = RegularizerConv(2, 2, 'gnn_hf', tol=1e-12, cached=True).double()
    assert torch.autograd.gradcheck(lambda inp: layer(inp, ei), (x,))


@pytest.mark.parametrize('name, kwargs', [('appnp', {}), ('gnn_hf', {}),
                                          ('signed', dict(alpha=-0.25, learn=('alpha',)))])
def test_cg_differentiates_the_edge_weights(name, kwargs):
    # CG's backward gave the system no gradient: edge_weight.grad was None
    # under solver='cg' where 'closed' (a dense exact solve, the reference)
    # gives one. Both to CG's tol of 1e-12 at a condition below 1e3: 1e-8.
    x, ei = setup()
    weight = torch.rand(ei.size(1), dtype=torch.float64,
                        generator=torch.Generator().manual_seed(1)) + 0.5
    weight = (weight + weight[_reverse(ei)]) / 2  # symmetric
    grads = {}
    for solver in ('closed', 'cg'):
        torch.manual_seed(0)
        layer = conv(name, solver=solver, tol=1e-12, **kwargs)
        for adjacency in ('edge_index', 'sparse'):
            w = weight.clone().requires_grad_()
            if adjacency == 'sparse':
                out = layer(x, torch.sparse_coo_tensor(ei, w, (N, N)))
            else:
                out = layer(x, ei, w)
            out.square().sum().backward()
            grads[solver, adjacency] = w.grad
    for adjacency in ('edge_index', 'sparse'):
        assert grads['cg', adjacency] is not None
        torch.testing.assert_close(grads['cg', adjacency], grads['closed', adjacency],
                                   rtol=1e-8, atol=1e-8)


def _reverse(edge_index):
    r"""The position of each edge's reverse in :obj:`edge_index` (undirected)."""
    key = {(int(i), int(j)): k for k, (i, j) in enumerate(edge_index.T.tolist())}
    return torch.tensor([key[int(j), int(i)] for i, j in edge_index.T.tolist()])


class Tikhonov(R.Regularizer):
    """A user's regulariser: R = I + γ L̃, solved by the shared solvers."""
    name = 'tikhonov'
    K = 80  # Neumann terms for solver='series': its rate is at most 0.8 here

    def __init__(self, gamma: float = 2.0) -> None:
        self.gamma = gamma

    def operator(self, graph):
        return (1 + self.gamma) * graph.identity().to_dense() - self.gamma * graph.adj.to_dense()


@pytest.mark.parametrize('solver', ['closed', 'cg', 'series'])
def test_user_defined_regularizer_trains(solver):
    x, ei = setup()
    layer = RegularizerConv(F_IN, 3, Tikhonov, solver=solver, gamma=2.0).double()
    y = torch.arange(N) % 3
    expected = torch.linalg.solve(3 * EYE - 2 * dense_adj(ei), x @ layer.lin.weight.T)
    # CG to its default relative residual 1e-6; 80 Neumann terms leave 0.8**80 ~ 2e-8.
    torch.testing.assert_close(layer(x, ei) - layer.bias, expected, atol=1e-5, rtol=0)
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.1)
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(layer(x, ei), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.9 * losses[0]
    assert 'regularizer=Tikhonov(gamma=2.0)' in repr(layer)


def test_lazy_repr_and_errors():
    layer = RegularizerConv(-1, 3, 'appnp', K=5, alpha=0.2)
    out = layer(torch.randn(N, 7), setup()[1])
    assert out.shape == (N, 3) and layer.lin.weight.shape == (3, 7)
    assert repr(layer) == ("RegularizerConv(-1, 3, regularizer=APPNPRegularizer(K=5, alpha=0.2), "
                           "solver='series')")
    with pytest.raises(ValueError, match='Unknown regularizer'):
        RegularizerConv(3, 3, 'gin')
    with pytest.raises(ValueError, match="cannot use solver='cg'"):
        RegularizerConv(3, 3, 'sgc', solver='cg')
    with pytest.raises(ValueError, match="'alpha' must lie in"):
        RegularizerConv(3, 3, 'appnp', alpha=2.0)


def test_torch_compile():
    x, ei = setup()
    layer = conv('appnp', K=2)
    compiled = torch.compile(layer)
    torch.testing.assert_close(compiled(x, ei), layer(x, ei))


@CUDA
@pytest.mark.parametrize('name', ['appnp', 'gnn_hf', 'tsgcn'])
def test_cuda_matches_cpu(name):
    x, ei = setup()
    layer = conv(name)
    expected = layer(x, ei)
    torch.testing.assert_close(layer.cuda()(x.cuda(), ei.cuda()).cpu(), expected)


@pytest.mark.parametrize('normalize', [True, False])
def test_tsgcnconv_equals_the_lowrank_solver_for_the_same_weights(normalize):
    # One convention: RegularizerConv('tsgcn', solver='lowrank') is TSGCNConv with
    # scale 1 (normalize=True, the default) or 1 / (1 + α + β) (the authors').
    x, ei = setup()
    sei, _ = undirected_graph(seed=5)
    data = LowRankInverse(1.0, 0.4, rank=12)(Data(x=x, edge_index=ei, semantic_edge_index=sei))
    w, v = data.lowrank_w, data.lowrank_v
    layer = conv('tsgcn', alpha=1.0, beta=0.4, solver='lowrank', normalize=normalize)
    tsgcn = TSGCNConv(F_IN, F_OUT, bias=False, scale=1.0 if normalize else 1 / 2.4).double()
    tsgcn.lin.weight.data.copy_(layer.lin.weight)
    torch.testing.assert_close(layer(x, ei, lowrank_w=w, lowrank_v=v), tsgcn(x, w, v),
                               rtol=0, atol=1e-12)
    # Both conventions against the dense (I + W Vᵀ)⁻¹ X Θ, scaled.
    expected = torch.linalg.solve(EYE + w @ v.T, x @ layer.lin.weight.T)
    torch.testing.assert_close(tsgcn(x, w, v), expected * (1.0 if normalize else 1 / 2.4))


@pytest.mark.parametrize('solver', ['closed', 'cg', 'series'])
def test_tsgcn_default_propagation_is_the_inverse_of_i_minus_s(solver):
    # S = (α Â_G + β Â_X) / (1 + α + β): the default propagation (I - S)⁻¹ X Θ.
    x, ei = setup()
    sei, _ = undirected_graph(seed=5)
    K = 200 if solver == 'series' else 10  # ||S|| <= 1.4 / 2.4: 200 terms leave ~1e-47
    layer = conv('tsgcn', alpha=1.0, beta=0.4, solver=solver, tol=1e-12, K=K)
    s = (dense_adj(ei) + 0.4 * dense_normalized_adjacency(sei, N)) / 2.4
    expected = torch.linalg.solve(EYE - s, x @ layer.lin.weight.T)
    torch.testing.assert_close(layer(x, ei, semantic_edge_index=sei), expected, atol=1e-8,
                               rtol=1e-8)


def test_lowrank_solver_builds_no_graph_and_gcn_ignores_the_semantic_graph(monkeypatch):
    import torch_geometric_regcn.regularizers.graph as graph_module

    def no_knn(*args, **kwargs):
        raise AssertionError('a kNN graph was built')

    monkeypatch.setattr(graph_module, 'knn_graph_cosine', no_knn)
    x, ei = setup()
    data = LowRankInverse(1.0, 0.4, rank=8)(Data(x=x, edge_index=ei,
                                                 semantic_edge_index=undirected_graph(5)[0]))
    layer = conv('tsgcn', solver='lowrank', cached=True)
    for _ in range(3):  # no semantic_edge_index: the kNN fallback must not run
        layer(x, ei, lowrank_w=data.lowrank_w, lowrank_v=data.lowrank_v)
    graph = layer._graph_cache.graph
    assert graph.x is None and 'adj' not in graph.derived and set(graph.derived) == {'woodbury'}
    with pytest.raises(ValueError, match="needs the factors: pass both 'lowrank_w=' and"):
        conv('tsgcn', solver='lowrank')(x, ei)  # before any work
    gcn = conv('gcn', cached=True)
    gcn(x, ei, semantic_edge_index=ei)
    assert gcn._graph_cache.graph.semantic_edge_index is None and gcn._graph_cache.graph.x is None


def test_tsgcn_without_semantic_graph_warns_once_per_call_site():
    x, ei = setup()
    layer = conv('tsgcn', k=3, solver='closed')
    with pytest.warns(UserWarning, match="pass 'semantic_edge_index='"):
        layer(x, ei)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        conv('tsgcn', k=3, solver='closed', cached=True)(x, ei)  # cached: built once, quiet
        conv('tsgcn', beta=0.0, solver='closed')(x, ei)  # no semantic term: nothing built


def test_regularizer_state_travels_with_the_layer():
    x, ei = setup()
    layer = conv('dagnn', K=3, beta=0.5)
    state = layer.state_dict()  # the gate is built at the layer's width
    assert state['regularizer._extra_state'] == {
        'K': 3, 'beta': 0.5, 'adaptive': True,
        '_regularizer': 'DAGNNRegularizer'}
    assert {'regularizer.gate.weight', 'regularizer.gate.bias'} <= set(state)
    other = conv('dagnn', K=5, beta=2.0)
    other(x, ei)
    other.load_state_dict(state)
    assert (other.regularizer.K, other.regularizer.beta) == (3, 0.5)
    torch.testing.assert_close(other(x, ei), layer(x, ei))
    assert layer.float().regularizer.gate.weight.dtype == torch.float32  # moves with .to()
    with pytest.raises(ValueError, match="'alpha' must lie in"):  # loaded ones are checked
        conv('appnp').load_state_dict({**conv('appnp').state_dict(),
                                       'regularizer._extra_state': {'K': 2, 'alpha': 7.0}})


def test_each_layer_of_a_network_owns_its_regularizer():
    from torch_geometric_regcn import RegularizerGNN
    model = RegularizerGNN(F_IN, 8, 3, num_layers=3, regularizer='jknet', K=2)
    regs = [conv.regularizer for conv in model.convs]
    assert len({id(r) for r in regs}) == 3 and model.regularizer is regs[0]
    assert all(r.coefficients() == {'K': 2, 'beta': 1.0} for r in regs)
    # An instance passed in is copied for the first layer too: two models
    # built from one instance shared its learned coefficients.
    passed = R.get('signed', alpha=-0.2).learn('alpha')
    a, b = (RegularizerGNN(F_IN, 8, 3, regularizer=passed) for _ in range(2))
    assert a.regularizer is not passed and a.regularizer is not b.regularizer
    with torch.no_grad():
        b.regularizer.alpha = 0.3
    assert float(a.regularizer.alpha.detach()) == pytest.approx(-0.2)
    assert float(passed.alpha.detach()) == pytest.approx(-0.2)


def test_extra_is_a_deprecated_name_of_the_gate():
    layer = conv('dagnn', K=2)
    with pytest.warns(DeprecationWarning, match="'RegularizerConv.extra' is deprecated"):
        assert layer.extra is layer.regularizer.gate


@pytest.mark.parametrize('flag', ['bias', 'cached', 'root_weight', 'directed'])
def test_flags_must_be_booleans(flag):
    # bool('False') is True: a flag read from a config file as a string
    # built the opposite layer, silently.
    with pytest.raises(TypeError, match=f"'{flag}' must be True or False .*'False'"):
        RegularizerConv(F_IN, 3, 'appnp', solver='series', **{flag: 'False'})
    import numpy as np
    layer = RegularizerConv(F_IN, 3, 'appnp', solver='series', **{flag: np.bool_(False)})
    assert (layer.bias is not None if flag == 'bias' else getattr(layer, flag)) is False


@pytest.mark.parametrize('solver', ['closed', 'cg', 'series'])
@pytest.mark.parametrize('name, before, after', [('appnp', 0.1, 0.5), ('tsgcn', 1.0, 3.0)])
def test_a_cached_layer_follows_an_assigned_coefficient(name, before, after, solver):
    # The cached graph kept the operator built at the first coefficients
    # (tsGCN keeps its own memo of S, versioned by its assignments).
    x, ei = setup()
    graph = {'semantic_edge_index': ei.flip(0)[:, ::2]} if name == 'tsgcn' else {}
    options = dict(solver=solver, K=200, alpha=before, tol=1e-12)
    if name == 'tsgcn':
        options['beta'] = 0.2
    layer = RegularizerConv(F_IN, 3, name, cached=True, **options).double()
    layer(x, ei, **graph)
    layer.regularizer.alpha = after
    fresh = RegularizerConv(F_IN, 3, name, **{**options, 'alpha': after}).double()
    fresh.load_state_dict(layer.state_dict())
    # Both solve one system to CG's 1e-12, exactly, or by the same 200
    # series terms: 1e-9 leaves margin.
    torch.testing.assert_close(layer(x, ei, **graph), fresh(x, ei, **graph), rtol=0,
                               atol=1e-9)


def _graphs_with_their_own_factors(sizes, alpha):
    from torch_geometric.data import Batch

    from torch_geometric_regcn.datasets import contextual_sbm
    graphs = []
    for n in sizes:
        g = contextual_sbm(num_nodes=n, num_classes=2, num_features=F_IN, seed=n)
        g.x = g.x.double()
        graphs.append(LowRankInverse(alpha, 0.0, 4, progress=False)(g))
    return graphs, Batch.from_data_list(graphs)


@pytest.mark.parametrize('normalize', [True, False])
def test_the_lowrank_solver_takes_a_batch_of_graphs_with_their_own_factors(normalize):
    # Before: RegularizerConv(solver='lowrank') took no batch vector, and the factors
    # of graphs batched with their own (LowRankInverse per graph, then a DataLoader)
    # coupled the graphs without an error (2.4 off the per-graph output). Reference:
    # each graph alone, densely: gain (I + W_g V_g^T)^-1 X_g Theta, gain 1 or 1 / 1.4.
    graphs, batch = _graphs_with_their_own_factors((30, 45, 21), alpha=0.4)
    layer = conv('tsgcn', alpha=0.4, beta=0.0, solver='lowrank', normalize=normalize)
    gain = 1.0 if normalize else 1 / 1.4
    expected = torch.cat([
        gain * torch.linalg.solve(torch.eye(g.num_nodes, dtype=torch.float64)
                                  + g.lowrank_w @ g.lowrank_v.T, g.x @ layer.lin.weight.T)
        for g in graphs])
    args = (batch.x, batch.edge_index)
    factors = {'lowrank_w': batch.lowrank_w, 'lowrank_v': batch.lowrank_v}
    # float64: the r x r solves and O(n r) sums round to ~1e-15 of the entries (~1).
    torch.testing.assert_close(layer(*args, **factors, batch=batch.batch), expected)
    assert (layer(*args, **factors) - expected).abs().max() > 0.1  # what 'batch' prevents
    # The network passes it to every layer; an empty fourth graph changes nothing.
    torch.manual_seed(0)
    model = RegularizerGNN(F_IN, 8, 3, regularizer='tsgcn', alpha=0.4, beta=0.0,
                             solver='lowrank').double()
    alone = torch.cat([model(g.x, g.edge_index, lowrank_w=g.lowrank_w, lowrank_v=g.lowrank_v)
                       for g in graphs])
    torch.testing.assert_close(model(*args, **factors, batch=batch.batch, batch_size=4), alone)


def test_a_batch_vector_is_checked_first_and_needs_each_graphs_semantic_graph():
    graphs, batch = _graphs_with_their_own_factors((12, 9), alpha=0.4)
    args = (batch.x, batch.edge_index)
    lowrank = conv('tsgcn', alpha=0.4, beta=0.0, solver='lowrank')
    factors = {'lowrank_w': batch.lowrank_w, 'lowrank_v': batch.lowrank_v}
    with pytest.raises(ValueError, match='non-decreasing'):
        lowrank(*args, **factors, batch=batch.batch.flip(0))
    with pytest.raises(ValueError, match="'batch_size' was given without 'batch'"):
        lowrank(*args, **factors, batch_size=2)
    # The other solvers read the edges, which stay within each graph: the batch vector
    # changes nothing for the series, but a semantic graph built from x would join
    # the graphs.
    gcn = conv('gcn')
    torch.testing.assert_close(gcn(*args, batch=batch.batch), gcn(*args), rtol=0, atol=0)
    tsgcn = conv('tsgcn', alpha=1.0, beta=0.5, solver='cg')
    with pytest.raises(ValueError, match="pass each graph's 'semantic_edge_index'"):
        tsgcn(*args, batch=batch.batch)
    from torch_geometric.data import Batch
    semantic = Batch.from_data_list([SemanticGraph(k=3)(g) for g in graphs])
    exact = conv('tsgcn', alpha=1.0, beta=0.5, solver='closed')
    exact.load_state_dict(tsgcn.state_dict())
    # CG to tol 1e-6 of each graph's columns, on a system of condition < 4.
    torch.testing.assert_close(
        tsgcn(*args, semantic_edge_index=semantic.semantic_edge_index, batch=batch.batch),
        exact(*args, semantic_edge_index=semantic.semantic_edge_index), rtol=0, atol=1e-5)


@pytest.mark.parametrize('regularizer', ['appnp', 'signed'])
def test_cg_solves_each_graph_of_a_batch_to_its_own_tolerance(regularizer):
    # One stopping test per column of the whole batch let a graph whose features
    # are 1e-4 of another's stop at 3e-6 of its own output, against tol = 1e-8
    # (with these seeded weights).
    # With batch=, each graph is its own system. Reference:
    # the closed-form solve of each graph alone; the bound is tol times the
    # systems' condition (< 10 for APPNP's I + (1/alpha - 1) L, < 100 here for
    # the signed regulariser's at its default alpha).
    graphs, batch = _graphs_with_their_own_factors((40, 25), alpha=0.4)
    x = torch.cat([graphs[0].x, 1e-4 * graphs[1].x])
    torch.manual_seed(0)  # the weights: the unbatched error below depends on them
    layer = conv(regularizer, solver='cg', tol=1e-8)
    exact = conv(regularizer, solver='closed')
    exact.load_state_dict(layer.state_dict())
    out = layer(x, batch.edge_index, batch=batch.batch)
    small = slice(40, 65)
    expected = exact(x[small], graphs[1].edge_index)
    error = float((out[small] - expected).norm() / expected.norm())
    assert error <= 100 * 1e-8, error
    if regularizer == 'appnp':  # without batch= (the signed system converges first)
        unbatched = layer(x, batch.edge_index)[small]
        # 3.2e-6 here: more than ten times the tolerance (a margin of 30 for rounding)
        assert float((unbatched - expected).norm() / expected.norm()) > 10 * 1e-8


def test_a_compiled_layer_refuses_a_semantic_graph_across_the_graphs_of_a_batch():
    # Before: the refusal sat with the checks skipped under torch.compile, and the
    # (eager) kNN search linked the graphs of the batch silently (0.38 off the output
    # with each graph's own semantic graph). It reads no tensor data.
    graphs, batch = _graphs_with_their_own_factors((12, 9), alpha=0.4)
    tsgcn = conv('tsgcn', alpha=1.0, beta=0.5, solver='cg')
    torch._dynamo.reset()
    with pytest.raises(ValueError, match="pass each graph's 'semantic_edge_index'"):
        torch.compile(tsgcn)(batch.x, batch.edge_index, batch=batch.batch)
