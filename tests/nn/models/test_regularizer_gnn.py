r"""RegularizerGNN: stacked layers against PyG's networks, the projection of
each regulariser, sparse features."""
import pytest
import torch
from torch_geometric.nn import APPNP, GCNConv

from tests.conftest import undirected_graph
from torch_geometric_regcn import RegularizerGNN

N = 30


def inputs():
    ei, _ = undirected_graph()
    return torch.randn(N, 6, dtype=torch.float64), ei


def test_gcn_network_equals_stacked_pyg_gcnconv():
    x, ei = inputs()
    model = RegularizerGNN(6, 8, 3, num_layers=3, regularizer='gcn').double()
    expected = x
    for i, conv in enumerate(model.convs):
        ref = GCNConv(conv.in_channels, conv.out_channels).double()
        ref.lin.weight.data.copy_(conv.lin.weight)
        ref.bias.data.copy_(conv.bias)
        expected = ref(expected, ei)
        expected = expected.relu() if i < 2 else expected
    torch.testing.assert_close(model(x, ei), expected)


def test_appnp_network_is_mlp_then_one_propagation():
    x, ei = inputs()
    model = RegularizerGNN(6, 8, 3, num_layers=2, regularizer='appnp', K=5, alpha=0.2).double()
    assert len(model.lins) == 1 and len(model.convs) == 1
    conv = model.convs[0]
    hidden = model.lins[0](x).relu()
    expected = APPNP(5, 0.2)(hidden @ conv.lin.weight.T, ei) + conv.bias
    torch.testing.assert_close(model(x, ei), expected)


def test_projection_follows_the_regularizer():
    x, ei = inputs()
    model = RegularizerGNN(6, 8, 3, regularizer='jknet').double()  # identity projection
    h = model.convs[0](x, ei)
    torch.testing.assert_close(model(x, ei), model.convs[1](h, ei))
    assert repr(model) == ('RegularizerGNN(6, 3, num_layers=2, '
                           "regularizer=JKNetRegularizer(K=4, beta=1.0), solver='series')")
    assert repr(RegularizerGNN(6, 8, 3, regularizer='appnp', root_weight=True)).endswith(
        "regularizer=APPNPRegularizer(K=10, alpha=0.1), solver='series', root_weight=True)")
    with pytest.raises(ValueError, match="'num_layers'"):
        RegularizerGNN(6, 8, 3, num_layers=0)


@pytest.mark.parametrize('regularizer', ['gcn', 'appnp', 'gnn_hf'])
def test_sparse_node_features_give_the_dense_output(regularizer):
    # Bag-of-words features as PyG's AttributedGraphDataset stores them (CSR).
    x, ei = inputs()
    x[x < 0.5] = 0
    model = RegularizerGNN(6, 8, 3, regularizer=regularizer, dropout=0.5).double().eval()
    for sparse in (x.to_sparse(), x.to_sparse_csr()):
        torch.testing.assert_close(model(sparse, ei), model(x, ei), rtol=0, atol=1e-12)
    model.train()
    model(x.to_sparse_csr(), ei).sum().backward()  # trains on sparse input
    assert all(p.grad is not None for p in model.parameters())
