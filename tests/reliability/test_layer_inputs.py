r"""What :class:`RegularizerConv` and :class:`RegularizerGNN` do with the inputs
of issue 27, classes 4 and 5: a :obj:`cached=True` layer whose graph was edited
where the version counter does not see it (a NumPy view, :obj:`.data`), cast
with :meth:`double` after a call; :obj:`x` in another dtype than the layer;
tensors on the :obj:`meta` device; :obj:`solver="closed"` where the
coefficients make the system singular (docs/reliability.md).

References: a fresh layer with the same weights on the same inputs (cache
cases; the same operations in the same order, hence equal to the bit), and
dense float64 solves (the closed solver)."""
import warnings

import pytest
import torch

from torch_geometric_regcn import RegularizerConv, RegularizerGNN
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.knn import knn_graph_cosine
from torch_geometric_regcn.regularizers.graph import build_graph

N, F_IN, F_OUT = 40, 6, 3
EXACT = {'rtol': 0, 'atol': 0}


def graph(seed=0):
    r"""A connected undirected graph (a ring and random chords, no isolated
    node), float64 features, symmetric edge weights and a semantic graph."""
    gen = torch.Generator().manual_seed(seed)
    ring = torch.arange(N)
    pairs = torch.cat([torch.stack([ring, (ring + 1) % N]),
                       torch.randint(0, N, (2, N), generator=gen)], dim=1)
    pairs = torch.unique(pairs[:, pairs[0] != pairs[1]].sort(dim=0).values, dim=1)
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
    w = torch.rand(pairs.size(1), dtype=torch.float64, generator=gen) + 0.5
    x = torch.randn(N, F_IN, dtype=torch.float64, generator=gen)
    semantic = knn_graph_cosine(x, 4, progress=False)
    return x, edge_index, torch.cat([w, w]), semantic


def make(regularizer='appnp', dtype=torch.float64, **kwargs):
    torch.manual_seed(0)
    return RegularizerConv(F_IN, F_OUT, regularizer, **kwargs).to(dtype)


def fresh_like(conv, dtype, **kwargs):
    r"""A layer without cache holding :obj:`conv`'s weights, in :obj:`dtype`."""
    other = make(conv.regularizer.name, dtype, solver=conv.solver, **kwargs)
    other.load_state_dict(conv.state_dict())
    return other


# -- class 4: a cached layer and writes its version counter misses -----------------------

@pytest.mark.parametrize('edit, regularizer, solver', [
    ('edge_index', 'appnp', 'series'),
    ('edge_index', 'gnn_hf', 'cg'),
    ('edge_weight', 'appnp', 'closed'),
    ('edge_weight.data', 'jknet', 'series'),
    ('adjacency', 'appnp', 'series'),
    ('semantic_edge_index', 'tsgcn', 'cg'),
])
def test_cached_layer_sees_an_edit_through_numpy_or_data(edit, regularizer, solver):
    # The issue measured 5-6 % stale results; now the edit is named, and
    # reset_cache() gives the fresh layer's result on the edited graph.
    x, edge_index, weight, semantic = graph()
    inputs = {'edge_index': edge_index, 'edge_weight': weight}
    if edit == 'adjacency':
        inputs = {'edge_index': torch.sparse_coo_tensor(edge_index, weight, (N, N))}
    if regularizer == 'tsgcn':
        inputs['semantic_edge_index'] = semantic
    conv = make(regularizer, solver=solver, cached=True)
    conv(x, **inputs)
    target = {'adjacency': inputs['edge_index'], 'edge_weight.data': weight}.get(
        edit, inputs.get(edit))
    version = target._version
    if edit == 'edge_index':
        target.numpy()[1, 0] = (target[1, 0] + 3) % N  # the first edge moves
    elif edit == 'edge_weight':
        target.numpy()[0] = 5.0
    elif edit == 'edge_weight.data':
        target.data[:4] = 3.0
    elif edit == 'adjacency':
        target._values().numpy()[:3] = 4.0
    else:
        target.numpy()[1, :2] = (target[1, :2] + 5) % N
    assert target._version == version  # unseen by the version counter
    name = {'edge_weight.data': 'edge_weight', 'adjacency': 'edge_index'}.get(edit, edit)
    with pytest.raises(ValueError, match=rf"cached=True\).*'{name}' was modified in place.*"
                                         r"reset_cache\(\)"):
        conv(x, **inputs)
    conv.reset_cache()
    torch.testing.assert_close(conv(x, **inputs), fresh_like(conv, torch.float64)(x, **inputs),
                               **EXACT)


def test_cached_layer_accepts_the_same_numbers_written_back():
    x, edge_index, weight, _ = graph()
    conv = make('appnp', cached=True)
    first = conv(x, edge_index, weight)
    saved = weight.clone()
    weight.numpy()[:] = 0.5
    with pytest.raises(ValueError, match="'edge_weight' was modified in place"):
        conv(x, edge_index, weight)
    weight.numpy()[:] = saved.numpy()
    torch.testing.assert_close(conv(x, edge_index, weight), first, **EXACT)


def test_cached_network_sees_an_edit_through_numpy():
    x, edge_index, _, _ = graph()
    model = RegularizerGNN(F_IN, 8, F_OUT, regularizer='gcn', cached=True).double()
    model(x, edge_index)
    edge_index.numpy()[0, 0] = (edge_index[0, 0] + 7) % N
    with pytest.raises(ValueError, match="'edge_index' was modified in place"):
        model(x, edge_index)


# -- class 5: .double() / .float() after a cached call -----------------------------------

@pytest.mark.parametrize('regularizer, solver, semantic', [
    ('appnp', 'series', False), ('gnn_hf', 'cg', False), ('jknet', 'closed', False),
    ('tsgcn', 'closed', True), ('tsgcn', 'cg', False)])
def test_cached_layer_cast_after_a_call_equals_a_fresh_layer(regularizer, solver, semantic):
    x, edge_index, weight, semantic_edge_index = graph()
    kwargs = {'semantic_edge_index': semantic_edge_index} if semantic else {}
    conv = make(regularizer, torch.float32, solver=solver, cached=True)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', UserWarning)  # no semantic graph: built from x
        first = conv(x.float(), edge_index, weight, **kwargs)
    conv.double()
    out = conv(x, edge_index, weight, **kwargs)  # raised 'expected scalar type Float'
    assert out.dtype == torch.float64
    reference = kwargs
    if regularizer == 'tsgcn' and not semantic:  # the cached layer keeps its first kNN graph
        reference = {'semantic_edge_index': knn_graph_cosine(x.float(), 10, progress=False)}
    torch.testing.assert_close(out, fresh_like(conv, torch.float64)(x, edge_index, weight,
                                                                    **reference), **EXACT)
    conv.float()
    torch.testing.assert_close(conv(x.float(), edge_index, weight, **kwargs), first, **EXACT)


def test_cached_network_cast_after_a_call_equals_a_fresh_network():
    x, edge_index, weight, _ = graph()
    torch.manual_seed(0)
    model = RegularizerGNN(F_IN, 8, F_OUT, regularizer='appnp', cached=True)
    model(x.float(), edge_index, edge_weight=weight)
    model.double()
    torch.manual_seed(1)
    reference = RegularizerGNN(F_IN, 8, F_OUT, regularizer='appnp').double()
    reference.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(x, edge_index, edge_weight=weight),
                               reference(x, edge_index, edge_weight=weight), **EXACT)


# -- class 5: the dtype of x against the layer's ------------------------------------------

@pytest.mark.parametrize('layer_dtype, x_dtype', [
    (torch.float32, torch.float64), (torch.float64, torch.float32),
    (torch.float32, torch.float16)], ids=['float64-x', 'float32-x', 'float16-x'])
@pytest.mark.parametrize('regularizer, solver', [('appnp', 'series'), ('tsgcn', 'cg'),
                                                 ('gnn_lf', 'closed')])
def test_x_in_another_dtype_than_the_layer_is_named(layer_dtype, x_dtype, regularizer, solver):
    x, edge_index, _, semantic = graph()
    conv = make(regularizer, layer_dtype, solver=solver)
    method = {torch.float32: 'float', torch.float64: 'double'}[layer_dtype]
    with pytest.raises(TypeError, match=rf"'x' is {x_dtype} but the parameters of "
                                        rf"RegularizerConv are {layer_dtype}; pass "
                                        rf"'x\.{method}\(\)'"):
        conv(x.to(x_dtype), edge_index, semantic_edge_index=semantic)


@pytest.mark.parametrize('make_model', [
    lambda: RegularizerConv(-1, F_OUT, 'appnp'),  # lazy: the weight's dtype is known
    lambda: RegularizerGNN(F_IN, 8, F_OUT, regularizer='appnp'),  # an MLP first
    lambda: RegularizerGNN(F_IN, 8, F_OUT, regularizer='gcn'),
], ids=['lazy-conv', 'decoupled-gnn', 'layered-gnn'])
def test_x_in_float64_into_a_float32_model_is_named(make_model):
    x, edge_index, _, _ = graph()
    with pytest.raises(TypeError, match=r"'x' is torch.float64 but the parameters of "
                                        r"Regularizer(Conv|GNN) are torch.float32.*"
                                        r"'\.double\(\)'"):
        make_model()(x, edge_index)


# -- class 5: tensors on the meta device ----------------------------------------------------

@pytest.mark.parametrize('name', ['x', 'edge_index', 'edge_weight', 'semantic_edge_index',
                                  'lowrank_w', 'layer'])
def test_meta_tensors_are_named(name):
    x, edge_index, weight, semantic = graph()
    solver = 'lowrank' if name == 'lowrank_w' else 'cg'
    conv = make('tsgcn', solver=solver)
    kwargs = {'edge_weight': weight, 'semantic_edge_index': semantic}
    if solver == 'lowrank':
        w = torch.randn(N, 4, dtype=torch.float64)
        kwargs = {'lowrank_w': w, 'lowrank_v': w.clone()}
    inputs = {'x': x, 'edge_index': edge_index, **kwargs}
    if name == 'layer':
        conv = conv.to('meta')
        match = r"parameters of RegularizerConv are on the 'meta' device.*to_empty"
    else:
        inputs[name] = inputs[name].to('meta')
        match = rf"'{name}' is on the 'meta' device"
    with pytest.raises(ValueError, match=match):
        conv(**inputs)


@pytest.mark.parametrize('meta', ['x', 'model'])
def test_meta_tensors_are_named_by_the_network(meta):
    x, edge_index, _, _ = graph()
    model = RegularizerGNN(F_IN, 8, F_OUT, regularizer='appnp').double()
    if meta == 'model':
        model = model.to('meta')
    else:
        x = x.to('meta')
    with pytest.raises(ValueError, match="'meta' device"):
        model(x, edge_index)


# -- class 5: solver='closed' where the system is singular ------------------------------------

@pytest.mark.parametrize('dtype', [torch.float32, torch.float64], ids=['float32', 'float64'])
@pytest.mark.parametrize('regularizer, coefficients, learn', [
    ('tsgcn', {'alpha': 1e20, 'beta': 0.0}, ()),
    ('tsgcn', {'alpha': 1e20, 'beta': 0.5}, ()),
    ('tsgcn', {'alpha': 1e20, 'beta': 0.0}, ('alpha',)),
    ('appnp', {'alpha': 1e-20}, ()),
    ('gnn_hf', {'alpha': 1e-20}, ()),
], ids=['tsgcn-t', 'tsgcn', 'tsgcn-learned', 'appnp', 'gnn_hf'])
def test_closed_solver_on_a_singular_system_names_the_condition_and_the_fix(
        dtype, regularizer, coefficients, learn):
    # On a connected graph I - Â is singular; such coefficients reach it in
    # rounding. The issue: LAPACK's 'singular' (or a result of rounding noise).
    x, edge_index, _, semantic = graph()
    conv = make(regularizer, dtype, solver='closed', learn=learn, **coefficients)
    with pytest.raises(ValueError, match=r"solver='closed' cannot solve with .*singular "
                                         rf"to {dtype} precision.*smaller "
                                         r"coefficients.*solver='cg'") as error:
        conv(x.to(dtype), edge_index, semantic_edge_index=semantic)
    assert 'LAPACK' not in str(error.value) and 'linalg' not in str(error.value)


def test_closed_solver_judges_the_error_not_the_pivots():
    # At 3,000 nodes the LU pivots misled both ways: the smallest of the singular I - Â
    # (APPNP at alpha = 1e-20) lay about 4,000 machine epsilons from zero in float64, so
    # its rounding noise came back without a word, while a well-posed float32 system whose
    # isolated nodes put rows of 1 beside rows of 6,000 (signed alpha = 3000, error 2e-5)
    # was refused as singular. Reference: the dense float64 solve.
    n, gen = 3000, torch.Generator().manual_seed(0)
    ring = torch.arange(n)
    cycle = torch.cat([torch.stack([ring, (ring + 1) % n]), torch.stack([(ring + 1) % n, ring])],
                      dim=1)
    appnp = R.get('appnp', alpha=1e-20)
    with pytest.raises(ValueError, match=r"singular to torch.float64 precision"):
        appnp.propagate(torch.eye(n, 2, dtype=torch.float64),
                        build_graph(appnp, cycle, n, dtype=torch.float64), solver='closed')
    pairs = torch.randint(0, n, (2, 8000), generator=gen)
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
    x = torch.randn(n, 2, generator=gen)
    signed = R.get('signed', alpha=3000.0)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # accurate to 1e-3: no warning either
        got = signed.propagate(x, build_graph(signed, edge_index, n), solver='closed')
    m = signed.operator(build_graph(signed, edge_index, n, dtype=torch.float64)).to_dense()
    want = torch.linalg.solve(m, x.double())
    # The condition number of M is about 4e3: float32's error about 4e3 * 1.2e-7 = 5e-4.
    assert float((got.double() - want).norm() / want.norm()) < 2e-3


def test_closed_solver_refuses_singular_systems_of_more_nodes_and_spares_hubs():
    # A first condition estimate (inf-norm, unscaled) accepted the singular APPNP system of
    # a 4,000-node path with random chords (eps * kappa estimated at 0.45, rounding noise
    # returned with a warning), and warned on a well-posed float32 system with a hub
    # joined to every node (inf-norm sqrt(2000) times the 2-norm; true error 3e-6).
    n, gen = 4000, torch.Generator().manual_seed(3)
    path = torch.arange(n - 1)
    pairs = torch.cat([torch.stack([path, path + 1]),
                       torch.randint(0, n, (2, 2 * n), generator=gen)], dim=1)
    pairs = pairs[:, pairs[0] != pairs[1]]
    appnp = R.get('appnp', alpha=1e-20)
    graph = build_graph(appnp, torch.cat([pairs, pairs.flip(0)], dim=1), n, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"singular to torch.float64 precision"):
        appnp.propagate(torch.ones(n, 1, dtype=torch.float64), graph, solver='closed')
    n = 2000
    hub = torch.stack([torch.zeros(n - 1, dtype=torch.long), torch.arange(1, n)])
    chords = torch.randint(1, n, (2, 2000), generator=torch.Generator().manual_seed(0))
    pairs = torch.cat([hub, chords[:, chords[0] != chords[1]]], dim=1)
    edge_index = torch.cat([pairs, pairs.flip(0)], dim=1)
    signed = R.get('signed', alpha=1000.0)
    x = torch.randn(n, 2, generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        got = signed.propagate(x, build_graph(signed, edge_index, n), solver='closed')
    want = signed.propagate(x.double(), build_graph(signed, edge_index, n, dtype=torch.float64),
                            solver='closed')
    # cond(M) about 2e3 (1 + 1000 * lambda_max(L) over 1): float32 error near 2e3 eps.
    assert float((got.double() - want).norm() / want.norm()) < 1e-3


def dense_tsgcn(x, edge_index, alpha):
    a = torch.zeros(N, N, dtype=torch.float64)
    a[edge_index[0], edge_index[1]] = 1.0
    a += torch.eye(N, dtype=torch.float64)
    d = a.sum(1).rsqrt()
    s = alpha / (1 + alpha) * d[:, None] * a * d[None, :]
    return torch.linalg.solve(torch.eye(N, dtype=torch.float64) - s, x)


def test_closed_solver_warns_where_float32_loses_accuracy_and_float64_holds():
    # alpha = 1e6: the smallest eigenvalue of I - S is about 1e-6, so float32
    # (eps 1.2e-7) keeps about one digit, float64 about ten.
    x, edge_index, _, _ = graph()
    conv = make('tsgcn', torch.float32, solver='closed', alpha=1e6, beta=0.0, bias=False)
    with pytest.warns(UserWarning, match=r"solver='closed'.*ill-conditioned in torch.float32.*"
                                         r"off by up to about .*float64"):
        conv(x.float(), edge_index)
    conv.double()
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        out = conv(x, edge_index)
    expected = dense_tsgcn(x @ conv.lin.weight.detach().T, edge_index, 1e6)
    # The gain reaches 1e6: float64 keeps about 1e-10 of it, in both solves.
    torch.testing.assert_close(out, expected, rtol=1e-7, atol=1e-7 * float(expected.abs().max()))


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64], ids=['float32', 'float64'])
def test_closed_solver_at_ordinary_coefficients_is_silent_and_exact(dtype):
    x, edge_index, _, _ = graph()
    conv = make('tsgcn', dtype, solver='closed', alpha=1.0, beta=0.0, bias=False)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        out = conv(x.to(dtype), edge_index)
    expected = dense_tsgcn(x @ conv.lin.weight.detach().double().T, edge_index, 1.0)
    # Condition number below 10: float32 keeps 6 digits, float64 13.
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol)


def test_cached_layer_sees_a_small_weight_next_to_large_ones():
    # A float32 weight edited next to weights 1e8 times larger in the same
    # block of the fingerprint changes node 10's normalisation by half: the
    # cached layer must see it (a float32 fingerprint would not).
    n = 600
    row = torch.arange(n - 1)
    edge_index = torch.stack([torch.cat([row, row + 1]), torch.cat([row + 1, row])])
    weight = torch.ones(edge_index.size(1))
    weight[[0, n - 1]] = 1e8
    x = torch.randn(n, 4)
    conv = RegularizerConv(4, 4, 'gcn', cached=True)
    conv(x, edge_index, weight)
    weight.numpy()[[10, n - 1 + 10]] = 3.0  # past the version counter
    with pytest.raises(ValueError, match="'edge_weight' was modified in place"):
        conv(x, edge_index, weight)
