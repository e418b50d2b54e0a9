r"""RegularizerConv's ego/neighbour separation (root_weight) and directed
operators (directed) against dense float64 computations of their rules."""
import pytest
import torch
from torch_geometric.data import Data

from tests.linalg.test_directed_adjacency import EDGES, dense_reference
from torch_geometric_regcn import RegularizerConv, RegularizerGNN
from torch_geometric_regcn.linalg import directed_adjacency

N = 7


def appnp_series(p, h, K=10, alpha=0.1):
    z = h
    for _ in range(K):
        z = (1 - alpha) * p @ z + alpha * h
    return z


def test_root_weight_adds_the_transformed_ego_features():
    torch.manual_seed(0)
    x = torch.randn(N, 3, dtype=torch.float64)
    plain = RegularizerConv(3, 2, 'appnp', K=10, alpha=0.1).double()
    sep = RegularizerConv(3, 2, 'appnp', K=10, alpha=0.1, root_weight=True).double()
    sep.lin.weight.data.copy_(plain.lin.weight)
    sep.bias.data.copy_(torch.randn(2, dtype=torch.float64))
    plain.bias.data.copy_(sep.bias)
    expected = plain(x, EDGES) + x @ sep.lin_root.weight.T
    # The same series on the same numbers plus one matmul: float64 rounding only.
    torch.testing.assert_close(sep(x, EDGES), expected, atol=1e-12, rtol=0)
    assert set(sep.state_dict()) - set(plain.state_dict()) == {'lin_root.weight'}
    assert 'root_weight=True' in repr(sep)


def test_directed_equals_the_dense_rule():
    torch.manual_seed(1)
    x = torch.randn(N, 3, dtype=torch.float64)
    conv = RegularizerConv(3, 2, 'appnp', K=10, alpha=0.1, directed=True,
                           root_weight=True).double()
    conv.bias.data.normal_()
    p_in = dense_reference(EDGES, N)
    expected = (0.5 * (appnp_series(p_in, x @ conv.lin.weight.T)
                       + appnp_series(p_in.T, x @ conv.lin_out.weight.T))
                + x @ conv.lin_root.weight.T + conv.bias)
    # Ten steps of products with entries of at most one: float64 rounding.
    torch.testing.assert_close(conv(x, EDGES), expected, atol=1e-12, rtol=0)
    # The direction matters: reversing the edges swaps the two operators.
    assert not torch.allclose(conv(x, EDGES), conv(x, EDGES.flip(0)))


def test_directed_closed_solve_equals_the_dense_inverse():
    torch.manual_seed(2)
    x = torch.randn(N, 3, dtype=torch.float64)
    conv = RegularizerConv(3, 2, 'gnn_hf', solver='closed', alpha=0.2, beta=0.5,
                           directed=True, bias=False).double()
    p_in = dense_reference(EDGES, N)
    eye = torch.eye(N, dtype=torch.float64)

    def rule(p, h):  # GNN-HF's M^-1 B on the directed operator
        m = (0.5 + 1 / 0.2) * eye + (1 - 0.5 - 1 / 0.2) * p
        return torch.linalg.solve(m, (1 + 0.5) * h - 0.5 * p @ h)
    expected = 0.5 * (rule(p_in, x @ conv.lin.weight.T) + rule(p_in.T, x @ conv.lin_out.weight.T))
    torch.testing.assert_close(conv(x, EDGES), expected, atol=1e-12, rtol=0)


def test_directed_trains_in_a_network_and_caches():
    torch.manual_seed(3)
    data = Data(x=torch.randn(N, 3), edge_index=EDGES, y=torch.tensor([0, 1, 0, 1, 0, 1, 0]))
    model = RegularizerGNN(3, 8, 2, regularizer='appnp', directed=True, root_weight=True,
                           cached=True, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data.x, data.edge_index), data.y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]
    # The cached directed operators belong to the graph they were built from:
    # another edge_index (the same edges reversed) is refused, not served stale.
    with pytest.raises(ValueError):
        model(data.x, data.edge_index.flip(0))


def test_in_direction_gathers_as_pyg_message_passing():
    # An independent orientation check: a PyG scatter from edge_index[0] to
    # edge_index[1] of x_j / sqrt(d_out(j) d_in(i)) is P_in x.
    from torch_geometric.utils import degree, scatter

    x = torch.randn(N, 3, dtype=torch.float64)
    source, target = EDGES
    d_out = degree(source, N, dtype=torch.float64)
    d_in = degree(target, N, dtype=torch.float64)
    messages = x[source] / (d_out[source] * d_in[target]).sqrt()[:, None]
    expected = scatter(messages, target, 0, dim_size=N, reduce='sum')
    p_in = directed_adjacency(EDGES, N, dtype=torch.float64, direction='in')
    torch.testing.assert_close(p_in @ x, expected, atol=1e-14, rtol=0)


def test_directed_refuses_a_sparse_adjacency():
    adj = torch.sparse_coo_tensor(EDGES, torch.ones(EDGES.size(1)), (N, N))
    conv = RegularizerConv(3, 2, 'appnp', directed=True)
    with pytest.raises(ValueError, match='orientation'):
        conv(torch.randn(N, 3), adj)


def test_a_module_pickled_before_the_options_loads():
    import pickle

    conv = RegularizerConv(3, 2, 'appnp')
    x = torch.randn(N, 3)
    expected = conv(x, EDGES)
    state = conv.__getstate__()
    for name in ('root_weight', 'directed', 'lin_out', 'lin_root'):  # as 0.1 pickled it
        state.pop(name, None)
    old = RegularizerConv.__new__(RegularizerConv)
    old.__setstate__(state)
    restored = pickle.loads(pickle.dumps(old))
    torch.testing.assert_close(restored(x, EDGES), expected)
    assert 'root_weight' not in repr(restored)


def test_directed_errors():
    with pytest.raises(ValueError, match="solver='series' or 'closed'"):
        RegularizerConv(3, 2, 'tsgcn', directed=True)
    with pytest.raises(ValueError, match='adjacency only'):
        RegularizerConv(3, 2, 'tsgcn', directed=True, solver='series')
    # A non-quadratic regulariser has neither: the advice to use them could not
    # be followed (review s55/models2).
    for name in ('elastic', 'robust'):
        with pytest.raises(ValueError, match=r"directed=True is not available for .*"
                                             r"use directed=False"):
            RegularizerGNN(3, 4, 2, regularizer=name, directed=True)


def test_a_coefficient_set_after_construction_is_checked_again():
    # The guard ran at construction only: tsGCN with beta = 0 was accepted, and
    # beta = 0.5 set later raised "beta > 0 needs node features ..." (the
    # directed operators carry no semantic graph), naming the wrong argument.
    conv = RegularizerConv(4, 2, 'tsgcn', alpha=1.0, beta=0.0, solver='series', directed=True)
    x = torch.randn(6, 4)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    conv(x, edge_index)
    conv.regularizer.beta = 0.5
    with pytest.raises(ValueError, match=r"directed=True needs a regulariser that reads the "
                                         r"adjacency only"):
        conv(x, edge_index, semantic_edge_index=edge_index)


@pytest.mark.parametrize('weights', ['lin_out', 'lin_root'])
def test_diverged_out_and_root_weights_are_named(weights):
    # Only the projection by 'lin' was checked: NaN weights of the out-neighbours
    # or of the ego path gave a NaN output without the "weights diverged" error.
    conv = RegularizerConv(4, 2, 'appnp', K=3, solver='series', directed=True,
                           root_weight=True)
    with torch.no_grad():
        getattr(conv, weights).weight.fill_(float('nan'))
    x = torch.randn(6, 4)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    with pytest.raises(ValueError, match=r"the weights diverged"):
        conv(x, edge_index)
