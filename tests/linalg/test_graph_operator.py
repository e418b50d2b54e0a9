import pytest
import torch
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import coalesce, to_undirected

from tests.conftest import dense_normalized_adjacency, messy_graph
from torch_geometric_regcn.linalg import combine, normalized_adjacency


def to_dense(edge_index, edge_weight, n):
    return torch.sparse_coo_tensor(edge_index, edge_weight, (n, n)).to_dense()


def test_normalized_adjacency_matches_dense_reference():
    edge_index = messy_graph()
    ei, ew = normalized_adjacency(edge_index, 40, dtype=torch.float64)
    expected = dense_normalized_adjacency(edge_index, 40)
    torch.testing.assert_close(to_dense(ei, ew, 40), expected, rtol=1e-12, atol=1e-12)
    assert torch.allclose(to_dense(ei, ew, 40)[0, 0], torch.tensor(1.0, dtype=torch.float64))


def test_normalized_adjacency_weighted():
    edge_index = messy_graph(seed=1)
    weight = torch.rand(edge_index.size(1), generator=torch.Generator().manual_seed(1))
    ei, ew = normalized_adjacency(edge_index, 40, weight.double())
    expected = dense_normalized_adjacency(edge_index, 40, weight)
    torch.testing.assert_close(to_dense(ei, ew, 40), expected, rtol=1e-12, atol=1e-12)


def test_normalized_adjacency_equals_pyg_gcn_norm_on_clean_graphs():
    edge_index = coalesce(to_undirected(torch.randint(0, 30, (2, 80))))
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    ei, ew = normalized_adjacency(edge_index, 30, dtype=torch.float64)
    ref_ei, ref_ew = gcn_norm(edge_index, torch.ones(edge_index.size(1), dtype=torch.float64),
                              30, add_self_loops=True)
    torch.testing.assert_close(to_dense(ei, ew, 30), to_dense(ref_ei, ref_ew, 30))


def test_combine_scales_and_sums():
    a = normalized_adjacency(messy_graph(seed=2), 40, dtype=torch.float64)
    b = normalized_adjacency(messy_graph(seed=3), 40, dtype=torch.float64)
    out = combine([a, b], [0.25, 0.5], 40)
    assert out.layout == torch.sparse_csr
    expected = 0.25 * to_dense(*a, 40) + 0.5 * to_dense(*b, 40)
    torch.testing.assert_close(out.to_dense(), expected)
    with pytest.raises(ValueError, match='non-zero'):
        combine([a], [0.0], 40)


@pytest.mark.parametrize('bad, message', [
    (torch.tensor([[0, 1, 2]]), 'shape'),
    (torch.tensor([[0.0], [1.0]]), 'integer'),
    (torch.tensor([[0], [40]]), 'outside'),
])
def test_normalized_adjacency_rejects_bad_edge_index(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        normalized_adjacency(bad, 40)


def test_normalized_adjacency_rejects_bad_weights():
    edge_index = torch.tensor([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match='non-negative'):
        normalized_adjacency(edge_index, 3, torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match='NaN'):
        normalized_adjacency(edge_index, 3, torch.tensor([1.0, float('nan')]))
    with pytest.raises(ValueError, match='shape'):
        normalized_adjacency(edge_index, 3, torch.tensor([1.0]))
