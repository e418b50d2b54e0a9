import pytest
import torch

from tests.conftest import undirected_graph
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.regularizers.graph import build_graph

N = 30  # the node count of conftest.undirected_graph
EXACT = ['appnp', 'jknet', 'dagnn', 'gnn_lf', 'gnn_hf', 'tsgcn']


def operators(reg, seed=0, weighted=False):
    ei, weight = undirected_graph(seed, weighted=weighted)
    return build_graph(reg, ei, N, weight, torch.float64, semantic_edge_index=undirected_graph(
        seed + 1)[0])


def neumann(name, **coefficients):
    """The regulariser alone: DAGNN without its learned gate (the Neumann weights)."""
    return R.get(name, **coefficients, **({'adaptive': False} if name == 'dagnn' else {}))


def h_in(channels=3, seed=0):
    return torch.randn(N, channels, dtype=torch.float64,
                       generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize('name', EXACT)
def test_output_is_a_stationary_point_of_the_energy(name):
    reg = R.get(name)
    graph = operators(reg)
    x = h_in()
    h = reg.propagate(x, graph, 'closed').requires_grad_()
    (grad,) = torch.autograd.grad(reg.energy(h, x, graph), h)
    assert grad.abs().max() < 1e-9


@pytest.mark.parametrize('name', EXACT)
def test_output_is_the_minimum_of_the_energy(name):
    reg = R.get(name)
    # JKNet's R = Â⁻¹(I + βL̃) is positive definite only where Â is: use small weights.
    graph = operators(reg, weighted=name == 'jknet')
    if name == 'jknet':
        assert torch.linalg.eigvalsh(graph.adj.to_dense()).min() > 0
    x = h_in()
    h = reg.propagate(x, graph, 'closed')
    best = reg.energy(h, x, graph)
    gen = torch.Generator().manual_seed(1)
    for _ in range(20):
        delta = 1e-3 * torch.randn(h.shape, dtype=h.dtype, generator=gen)
        assert reg.energy(h + delta, x, graph) > best


def test_jknet_is_a_saddle_point_where_adjacency_is_indefinite():
    reg = R.get('jknet')
    graph = operators(reg)
    lam, vec = torch.linalg.eigh(graph.adj.to_dense())
    assert lam.min() < 0
    x = h_in()
    h = reg.propagate(x, graph, 'closed')
    down = vec[:, :1].expand(-1, 3)  # the eigenvector of the most negative eigenvalue
    assert reg.energy(h + 1e-2 * down, x, graph) < reg.energy(h, x, graph)


@pytest.mark.parametrize('name', ['gcn', 'sgc'])
def test_gcn_energy_is_unbounded_below(name):
    """R = L̃ is singular (L̃ D̂^{1/2} 1 = 0 per component): no exact minimiser."""
    reg = R.get(name)
    graph = operators(reg)
    x = h_in()
    null = torch.zeros(N, dtype=torch.float64)
    null[1] = 1.0  # an isolated node: its row of L̃ is zero
    direction = null[:, None] * x[1:2]
    energies = [float(reg.energy(t * direction, x, graph)) for t in (1.0, 10.0, 100.0)]
    assert energies[0] > energies[1] > energies[2]
    assert energies[2] == pytest.approx(-100.0 * float(x[1].square().sum()))


@pytest.mark.parametrize('name', ['appnp', 'jknet', 'dagnn', 'gnn_lf', 'gnn_hf', 'tsgcn'])
def test_series_converges_geometrically_to_closed(name):
    x = h_in()
    errors = []
    for K in (10, 20, 40, 80):  # the slowest default rate is 0.9 per term
        reg = neumann(name, K=K)
        graph = operators(reg)
        exact = reg.propagate(x, graph, 'closed')
        errors.append(float((reg.propagate(x, graph, 'series') - exact).norm() / exact.norm()))
    assert errors[-1] < 1e-3
    for coarse, fine in zip(errors, errors[1:]):  # doubling K at least halves the error
        assert fine < 0.5 * coarse


@pytest.mark.parametrize('name', ['gcn', 'sgc', 'appnp', 'jknet', 'dagnn', 'gnn_lf', 'gnn_hf',
                                  'tsgcn'])
def test_frequency_response_matches_propagation(name):
    reg = neumann(name)
    ei, _ = undirected_graph()
    graph = build_graph(reg, ei, N, None, torch.float64, semantic_edge_index=ei)
    lam, vec = torch.linalg.eigh(graph.adj.to_dense())
    out = reg.propagate(vec, graph)  # the default solver, column by column
    gains = (vec * out).sum(0)  # Rayleigh quotients
    torch.testing.assert_close(out, vec * gains, atol=1e-5, rtol=0)  # eigenvectors stay put
    torch.testing.assert_close(gains, reg.frequency_response(lam), atol=1e-5, rtol=0)


def test_registry_and_errors():
    assert sorted(R.REGISTRY) == sorted(['gcn', 'sgc', 'appnp', 'jknet', 'dagnn', 'gnn_lf',
                                         'gnn_hf', 'tsgcn'])
    with pytest.raises(ValueError, match="Unknown regularizer 'gat'.*'appnp'"):
        R.get('gat')
    assert isinstance(R.get(R.APPNPRegularizer, K=3), R.APPNPRegularizer)
    reg = R.APPNPRegularizer()
    assert R.get(reg) is reg
    with pytest.raises(ValueError, match='instance'):
        R.get(reg, K=3)


def test_built_ins_register_themselves_as_users_do():
    # The registry module knows no regulariser; each built-in class carries the
    # same @register a user's class does.
    import ast
    import inspect

    from torch_geometric_regcn.regularizers import registry, spectral, tsgcn
    imported = {node.module for node in ast.walk(ast.parse(inspect.getsource(registry)))
                if isinstance(node, ast.ImportFrom)}
    assert imported == {'typing', 'torch_geometric_regcn.regularizers.base'}
    for module in (spectral, tsgcn):
        tree = ast.parse(inspect.getsource(module))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and getattr(module, node.name).name:
                assert [ast.unparse(d) for d in node.decorator_list] == ['register']
                assert R.REGISTRY[getattr(module, node.name).name] is getattr(module, node.name)

    class Nameless(R.Regularizer):
        pass

    with pytest.raises(ValueError, match="Nameless needs a class attribute 'name'"):
        R.register(Nameless)

    @R.register
    class Tikhonov(R.Regularizer):
        name = 'test_tikhonov'

    try:
        assert isinstance(R.get('test_tikhonov'), Tikhonov)
    finally:
        del R.REGISTRY['test_tikhonov']


@pytest.mark.parametrize('name, coefficients, message', [
    ('appnp', dict(alpha=0.0), "'alpha' must lie in \\(0.0, 1.0\\]"),
    ('appnp', dict(alpha=1.5), "'alpha'"),
    ('appnp', dict(K=0), "'K' must be a positive integer"),
    ('sgc', dict(K=1.5), "'K'"),
    ('jknet', dict(beta=-1.0), "'beta'"),
    ('dagnn', dict(beta=-0.1), "'beta'"),
    ('gnn_lf', dict(alpha=1.0, mu=0.5), '2 \\* mu \\+ 2 / alpha > 3'),
    ('gnn_lf', dict(mu=1.5), "'mu'"),
    ('gnn_hf', dict(alpha=2.0), "'alpha'"),
    ('tsgcn', dict(alpha=0.0, beta=0.0), 'cannot both be zero'),
    ('tsgcn', dict(alpha=-1.0), "'alpha'"),
    ('tsgcn', dict(k=0), "'k'"),
])
def test_coefficients_out_of_range(name, coefficients, message):
    with pytest.raises(ValueError, match=message):
        R.get(name, **coefficients)


def test_unknown_coefficient_is_a_type_error():
    with pytest.raises(TypeError):
        R.get('gcn', alpha=0.1)
    with pytest.raises(TypeError):
        R.get('appnp', beta=0.1)


def test_solver_a_regularizer_cannot_use():
    with pytest.raises(ValueError, match="'gcn' cannot use solver='cg'.*'series'"):
        R.get('gcn').check_solver('cg')
    with pytest.raises(ValueError, match="cannot use solver='lowrank'"):
        R.get('appnp').check_solver('lowrank')
    with pytest.raises(ValueError, match="Unknown solver 'lu'"):
        R.get('appnp').check_solver('lu')
    reg = R.get('tsgcn')
    with pytest.raises(ValueError, match="needs the factors"):
        reg.propagate(h_in(), operators(reg), 'lowrank')
