r"""Learned coefficients: gradients through the exact solve by implicit
differentiation, against the dense inverse and finite differences."""
import pytest
import torch
from torch_geometric.utils import to_undirected

from torch_geometric_regcn import RegularizerConv, RegularizerGNN
from torch_geometric_regcn.knn import knn_graph_cosine
from torch_geometric_regcn.regularizers import TSGCNRegularizer
from torch_geometric_regcn.regularizers.graph import GraphOperators

N, F = 24, 4


def graph(seed=0):
    gen = torch.Generator().manual_seed(seed)
    ring = torch.arange(N)
    edge_index = torch.cat([torch.stack([ring, (ring + 1) % N]),
                            torch.randint(0, N, (2, N), generator=gen)], dim=1)
    edge_index = to_undirected(edge_index[:, edge_index[0] != edge_index[1]], num_nodes=N)
    x = torch.randn(N, F, dtype=torch.float64, generator=gen)
    return x, edge_index, knn_graph_cosine(x, 3)


def dense_tsgcn(x, edge_index, semantic, alpha, beta):
    # (I - S)^-1 X from the dense renormalised adjacencies.
    ops = GraphOperators(N, edge_index, dtype=torch.float64, semantic_edge_index=semantic)
    a_g, a_x = ops.adj.to_dense(), ops.semantic_adjacency().to_dense()
    s = (alpha * a_g + beta * a_x) / (1 + alpha + beta)
    return torch.linalg.solve(torch.eye(N, dtype=torch.float64) - s, x)


@pytest.mark.parametrize('solver', ['cg', 'closed'])
def test_tsgcn_gradient_matches_the_dense_inverse(solver):
    x, edge_index, semantic = graph()
    conv = RegularizerConv(F, 3, 'tsgcn', solver=solver, alpha=1.0, beta=0.4, tol=1e-13,
                           learn=('alpha', 'beta'), bias=False).double()
    reg = conv.regularizer
    out = conv(x, edge_index, semantic_edge_index=semantic)
    h = conv.lin(x).detach()
    raw = [reg.raw_alpha.detach().clone().requires_grad_(),
           reg.raw_beta.detach().clone().requires_grad_()]
    alpha, beta = (torch.nn.functional.softplus(r) for r in raw)
    expected = dense_tsgcn(h, edge_index, semantic, alpha, beta)
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-11)
    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum(), [reg.raw_alpha, reg.raw_beta])
    expected_grads = torch.autograd.grad((expected * weights).sum(), raw)
    for got, want in zip(grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize('regularizer, learn, solver', [
    ('tsgcn', ('alpha', 'beta'), 'cg'), ('tsgcn', ('beta',), 'series'),
    ('appnp', ('alpha',), 'cg'), ('appnp', ('alpha',), 'series'),
    ('jknet', ('beta',), 'cg'), ('jknet', ('beta',), 'closed')])
def test_gradcheck(regularizer, learn, solver):
    x, edge_index, semantic = graph(1)
    kwargs = {'semantic_edge_index': semantic} if regularizer == 'tsgcn' else {}
    conv = RegularizerConv(F, 2, regularizer, solver=solver, tol=1e-13, learn=learn).double()
    names = [f'raw_{name}' for name in learn]
    weights = torch.randn(N, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def f(*raws):  # two weighted sums of the output: two backward passes per check
        for name, value in zip(names, raws):
            conv.regularizer._parameters[name] = value
        return (conv(x, edge_index, **kwargs) * weights).sum(dim=0)

    raws = tuple(conv.regularizer._parameters[name].detach().clone().requires_grad_()
                 for name in names)
    assert torch.autograd.gradcheck(f, raws, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_learned_coefficients_stay_in_range_and_train():
    x, edge_index, semantic = graph(2)
    y = torch.randint(0, 3, (N,), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = RegularizerGNN(F, 8, 3, regularizer='tsgcn', solver='cg', alpha=1.0, beta=0.2,
                           learn=('alpha', 'beta')).double()
    regs = [conv.regularizer for conv in model.convs]
    assert len({id(r.raw_alpha) for r in regs}) == len(regs)  # one per layer
    start = [float(r.alpha.detach()) for r in regs]
    optimizer = torch.optim.SGD(model.parameters(), lr=20.0)  # large steps
    for _ in range(5):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            model(x, edge_index, semantic_edge_index=semantic), y)
        loss.backward()
        optimizer.step()
    for reg, first in zip(regs, start):
        alpha, beta = float(reg.alpha.detach()), float(reg.beta.detach())
        assert alpha >= 0 and beta >= 0  # softplus may underflow to 0
        assert alpha != first


def test_state_dict_round_trip_and_repr():
    x, edge_index, semantic = graph(3)
    conv = RegularizerConv(F, 3, 'tsgcn', solver='cg', alpha=2.0, beta=0.5,
                           learn=('alpha', 'beta')).double()
    with torch.no_grad():
        conv.regularizer.raw_alpha.add_(0.3)
    state = conv.state_dict()
    assert {'regularizer.raw_alpha', 'regularizer.raw_beta'} <= set(state)
    fresh = RegularizerConv(F, 3, 'tsgcn', solver='cg', learn=('alpha', 'beta')).double()
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh(x, edge_index, semantic_edge_index=semantic),
                               conv(x, edge_index, semantic_edge_index=semantic))
    assert 'alpha=learned(' in repr(conv.regularizer)
    assert float(fresh.regularizer.alpha.detach()) == pytest.approx(
        float(conv.regularizer.alpha.detach()))


def test_learn_errors():
    with pytest.raises(ValueError, match="cannot learn 'K'"):
        RegularizerConv(F, 3, 'appnp', learn=('K',))
    with pytest.raises(ValueError, match="'beta' = 0.0 cannot be learned"):
        RegularizerConv(F, 3, 'tsgcn', solver='cg', beta=0.0, learn=('beta',))
    with pytest.raises(ValueError, match="'learn' needs solver 'cg'"):
        RegularizerConv(F, 3, 'tsgcn', solver='lowrank', learn=('alpha',))
    with pytest.raises(ValueError, match="cannot learn"):
        RegularizerConv(F, 3, 'gcn', learn=('alpha',))
    reg = TSGCNRegularizer(alpha=1.0).learn('alpha')
    assert reg.learned == ('alpha',) and 'alpha' not in reg.coefficients()
