r"""The robust regulariser: :mod:`torch_geometric_regcn.regularizers.robust`."""
import pytest
import torch

from tests.conftest import dense_normalized_adjacency
from tests.regularizers.helpers import N, h_in, operators
from torch_geometric_regcn import regularizers as R


def test_huber_below_its_threshold_is_laplacian_smoothing():
    # Every difference below delta: the energy is 1/2 ||H - X||^2 + lam/2 Tr(H^T L~ H).
    reg = R.RobustRegularizer(lam=2.0, penalty='huber', threshold=1e6, irls_tol=1e-9)
    graph, x = operators(reg), h_in(3)
    lap = torch.eye(N, dtype=torch.float64) - dense_normalized_adjacency(graph.edge_index, N)
    exact = torch.linalg.solve(torch.eye(N, dtype=torch.float64) + 2.0 * lap, x)
    out = reg.solve(x, graph, tol=1e-13)
    assert torch.allclose(out.out, exact, atol=1e-11)


def test_mcp_cuts_the_edges_beyond_its_threshold():
    reg = R.RobustRegularizer(lam=1.0, penalty='mcp', threshold=2.5)
    graph, x = operators(reg), 3 * h_in(4)
    h = reg.propagate(x, graph, tol=1e-10)
    edge_index, weight = reg.edge_weights(h, graph)
    t = reg.incidence(graph).gradient(h).norm(dim=-1)
    assert bool((weight[t >= 2.5] == 0).all()) and bool((weight[t < 2.5] > 0).all())
    assert torch.allclose(weight[t < 2.5], 1 / t[t < 2.5] - 1 / 2.5)
    assert bool((edge_index[0] < edge_index[1]).all())
    assert (t >= 2.5).any() and (t < 2.5).any()  # both kinds of edges occur


def test_errors():
    with pytest.raises(ValueError, match="'penalty'"):
        R.RobustRegularizer(penalty='tukey')
    with pytest.raises(ValueError, match='eps < threshold'):
        R.RobustRegularizer(threshold=1e-5)
    with pytest.raises(ValueError, match="'lam'"):
        R.RobustRegularizer(lam=0.0)


def test_edge_weights_carry_the_graphs_weights():
    # The reweighted problem's weight of an edge is lam * w_ij * rho'(t)/t: an
    # edge of weight 0 (or masked to 0) is no trusted edge, though its
    # difference t is 0, where rho'(t)/t is largest. Reference: the formula
    # with the graph's weights read from the dense weighted graph.
    from tests.regularizers.helpers import dense_weights
    from torch_geometric_regcn.regularizers.graph import build_graph
    reg = R.RobustRegularizer(lam=2.0, penalty='huber', threshold=0.5)
    w, ei, weight = dense_weights(weighted=True)
    weight = weight.clone()
    weight[(ei[0] == 3) | (ei[1] == 3)] = 0.0  # node 3's edges are absent
    graph = build_graph(reg, ei, N, weight, torch.float64)
    h = reg.propagate(3 * h_in(4), graph, tol=1e-10)
    edge_index, got = reg.edge_weights(h, graph)
    t = reg.incidence(graph).gradient(h).norm(dim=-1)
    w_ij = w.index_put((ei[0], ei[1]), weight)[edge_index[0], edge_index[1]]
    expected = 2.0 * w_ij * torch.where(t <= 0.5, torch.ones_like(t), 0.5 / t)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=0.0)
    absent = (edge_index == 3).any(dim=0)
    assert absent.any() and bool((got[absent] == 0).all())
