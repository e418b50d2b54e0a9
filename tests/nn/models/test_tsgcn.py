r"""TSGCN: the paper's network, two TSGCNConv layers with ReLU between."""
import torch

from tests.nn.helpers import eigen_factors
from torch_geometric_regcn import TSGCN, TSGCNConv

N = 30


def test_tsgcn_network():
    x = torch.randn(N, 6)
    w, v = eigen_factors(rank=4, dtype=torch.float32)
    model = TSGCN(6, 8, 3)
    conv1, conv2 = model.convs
    expected = conv2(conv1(x, w, v).relu(), w, v)
    torch.testing.assert_close(model(x, w, v), expected)
    assert isinstance(conv1, TSGCNConv) and conv1.bias is None
    assert repr(model) == 'TSGCN(6, 3, num_layers=2)'


def test_sparse_node_features_give_the_dense_output():
    # Bag-of-words features as PyG's AttributedGraphDataset stores them (CSR).
    x = torch.randn(N, 6, dtype=torch.float64)
    x[x < 0.5] = 0
    w, v = eigen_factors(rank=4, dtype=torch.float64)
    tsgcn = TSGCN(6, 8, 3, dropout=0.5).double().eval()
    torch.testing.assert_close(tsgcn(x.to_sparse_csr(), w, v), tsgcn(x, w, v),
                               rtol=0, atol=1e-12)
