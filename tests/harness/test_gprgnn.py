import pytest
import torch
from torch_geometric.utils import to_undirected

from harness.gprgnn import GPRGNN, ppr_weights

# Every reference below is a dense float64 computation of the paper's
# formula; the model runs in float64 too. K = 10 products by a matrix of
# norm <= 1 (symmetric case) or a few (directed case), each entry a sum of at
# most N = 30 terms: rounding stays within a few hundred ulps of numbers of
# order one (~1e-13), far below 1e-10.
TOL = {'rtol': 1e-10, 'atol': 1e-10}


def random_graph(num_nodes=30, num_edges=70, seed=0, undirected=True):
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes - 2, (2, num_edges), generator=gen)  # 2 isolated
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    if undirected:
        edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    else:
        edge_index = torch.unique(edge_index, dim=1)
    return edge_index


def dense_operator(edge_index, num_nodes):
    r"""\tilde{D}^{-1/2} (A + I) \tilde{D}^{-1/2} with A[i, j] = 1 for an
    edge j -> i (messages to edge_index[1]) and \tilde{D} the row sums."""
    a = torch.eye(num_nodes, dtype=torch.float64)
    a[edge_index[1], edge_index[0]] = 1.0
    d = a.sum(dim=1).rsqrt()
    return d[:, None] * a * d[None, :]


def dense_gprgnn(model, x, edge_index):
    z = model.lin2(torch.relu(model.lin1(x)))
    a_hat = dense_operator(edge_index, x.size(0))
    out, power = torch.zeros_like(z), torch.eye(x.size(0), dtype=torch.float64)
    for k in range(model.K + 1):
        out = out + model.gamma[k] * (power @ z)
        power = power @ a_hat
    return out


def test_ppr_weights_are_the_papers():
    for K, alpha in ((10, 0.1), (3, 0.5), (0, 0.2), (5, 1.0), (4, 0.0)):
        gamma = ppr_weights(K, alpha)
        expected = [alpha * (1 - alpha) ** k for k in range(K)] + [(1 - alpha) ** K]
        assert gamma.dtype == torch.float64 and gamma.tolist() == pytest.approx(expected,
                                                                                 abs=1e-15)
        assert float(gamma.sum()) == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize('undirected', [True, False])
def test_forward_is_the_dense_formula(undirected):
    torch.manual_seed(0)
    edge_index = random_graph(undirected=undirected)
    x = torch.randn(30, 8, dtype=torch.float64)
    model = GPRGNN(8, 16, 3, K=10, alpha=0.1).double().eval()
    # At initialisation gamma is the PPR weights (rounded to float32, the
    # parameter's dtype before .double()); then signed, learned-looking ones.
    assert torch.equal(model.gamma.detach(), ppr_weights(10, 0.1).float().double())
    torch.testing.assert_close(model(x, edge_index), dense_gprgnn(model, x, edge_index), **TOL)
    with torch.no_grad():
        model.gamma.copy_(torch.randn(11, dtype=torch.float64))
    torch.testing.assert_close(model(x, edge_index), dense_gprgnn(model, x, edge_index), **TOL)


def test_gradient_of_gamma_is_the_dense_one():
    # d <H, R> / d gamma_k = <A^k Z, R>: the weights are learned through the same sums.
    torch.manual_seed(1)
    edge_index = random_graph(seed=1)
    x, r = torch.randn(30, 5, dtype=torch.float64), torch.randn(30, 4, dtype=torch.float64)
    model = GPRGNN(5, 12, 4, K=6, alpha=0.3).double().eval()
    (model(x, edge_index) * r).sum().backward()
    with torch.no_grad():
        z = model.lin2(torch.relu(model.lin1(x)))
        a_hat = dense_operator(edge_index, 30)
        expected = torch.stack([(torch.linalg.matrix_power(a_hat, k) @ z * r).sum()
                                for k in range(7)])
    torch.testing.assert_close(model.gamma.grad, expected, **TOL)


def test_dropout_on_the_propagation_input():
    torch.manual_seed(2)
    edge_index = random_graph(seed=2)
    x = torch.randn(30, 8, dtype=torch.float64)
    # dprate = 1 drops all of Z, so the propagation gets zeros: the output is zero.
    model = GPRGNN(8, 16, 3, dropout=0.0, dprate=1.0).double().train()
    assert torch.count_nonzero(model(x, edge_index)) == 0
    # Without dropout, training mode is the dense formula.
    model = GPRGNN(8, 16, 3, dropout=0.0, dprate=0.0).double().train()
    torch.testing.assert_close(model(x, edge_index), dense_gprgnn(model, x, edge_index), **TOL)
    # dprate = 0.5 drops entries of Z before the sum over hops, so the term
    # gamma_0 Z of the output is zero where Z was dropped: the output differs.
    model = GPRGNN(8, 16, 3, dropout=0.0, dprate=0.5).double().train()
    assert not torch.allclose(model(x, edge_index), dense_gprgnn(model, x, edge_index))


def test_another_graph_builds_its_own_operator():
    torch.manual_seed(3)
    first, second = random_graph(seed=3), random_graph(seed=4)
    x = torch.randn(30, 8, dtype=torch.float64)
    model = GPRGNN(8, 16, 3).double().eval()
    model(x, first)
    torch.testing.assert_close(model(x, second), dense_gprgnn(model, x, second), **TOL)
    second[0, 0] = 29  # in place (a new version of the same tensor): an edge from node 29
    torch.testing.assert_close(model(x, second), dense_gprgnn(model, x, second), **TOL)


def test_arguments_are_checked():
    with pytest.raises(ValueError, match=r"'alpha' must be a teleport probability.*1.5"):
        GPRGNN(4, 8, 2, alpha=1.5)
    with pytest.raises(ValueError, match="'K'"):
        GPRGNN(4, 8, 2, K=-1)
    with pytest.raises(ValueError, match=r"'dprate' must be a probability.*-0.1"):
        GPRGNN(4, 8, 2, dprate=-0.1)
