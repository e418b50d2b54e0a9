import pytest
import torch
from torch_geometric.nn import GAT, GraphSAGE
from torch_geometric.nn.conv import ChebConv, SAGEConv
from torch_geometric.nn.models.basic_gnn import BasicGNN

from harness.baselines import (
    Chebyshev,
    ProjectFirstChebConv,
    ProjectFirstGraphSAGE,
    ProjectFirstSAGEConv,
)


def graph(n=30, f=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, f, generator=gen, dtype=torch.float64)
    x[x < 0.7] = 0  # sparse-like bag of words
    ei = torch.randint(0, n - 3, (2, 60), generator=gen)  # the last 3 nodes are isolated
    ei = torch.cat([ei, ei.flip(0)], 1)
    return x, ei[:, ei[0] != ei[1]]


@pytest.mark.parametrize('K', [1, 2, 3, 4])
@pytest.mark.parametrize('normalization', ['sym', 'rw', None])
def test_cheb_equals_pyg(K, normalization):
    # PyG's ChebConv is the reference: the same parameters give the same
    # output to float64 rounding. K steps of sums of at most deg + 1 terms err
    # by about K (deg + 1) eps max|out| ~ 1e-14 max|out|; 1e-12 max|out| leaves
    # 100x (without normalisation T_3 reaches ~3e3, where 1e-12 would be 2 ulps).
    torch.manual_seed(0)
    x, ei = graph()
    ours = ProjectFirstChebConv(12, 5, K=K, normalization=normalization).double()
    pyg = ChebConv(12, 5, K=K, normalization=normalization).double()
    torch.nn.init.normal_(pyg.bias)
    ours.load_state_dict(pyg.state_dict())
    lam = None if normalization == 'sym' else 2.0
    with torch.no_grad():
        expected, got = pyg(x, ei, lambda_max=lam), ours(x, ei, lambda_max=lam)
    torch.testing.assert_close(got, expected, rtol=0,
                               atol=1e-12 * max(1.0, float(expected.abs().max())))


@pytest.mark.parametrize('aggr', ['mean', 'sum', 'max'])
@pytest.mark.parametrize('root_weight', [True, False])
@pytest.mark.parametrize('normalize', [False, True])
def test_sage_equals_pyg(aggr, root_weight, normalize):
    x, ei = graph(seed=1)
    pyg = SAGEConv(12, 5, aggr=aggr, root_weight=root_weight, normalize=normalize).double()
    torch.nn.init.normal_(pyg.lin_l.bias)
    ours = ProjectFirstSAGEConv(12, 5, aggr=aggr, root_weight=root_weight,
                                normalize=normalize).double()
    ours.load_state_dict(pyg.state_dict())
    torch.testing.assert_close(ours(x, ei), pyg(x, ei), rtol=0, atol=1e-12)


class PyGCheb(BasicGNN):  # the same network on PyG's own ChebConv: the reference
    supports_edge_weight, supports_edge_attr = True, False

    def init_conv(self, in_channels, out_channels, **kwargs):
        return ChebConv(in_channels, out_channels, K=3, **kwargs)


def test_networks_equal_pyg_and_take_sparse_features():
    x, ei = graph(seed=2)
    pairs = [
        (ProjectFirstGraphSAGE(12, 8, 2, 3), GraphSAGE(12, 8, 2, 3)),
        (Chebyshev(12, 8, 2, 3, K=3), PyGCheb(12, 8, 2, 3)),
        (GAT(12, 8, 2, 3, heads=2), None),
    ]
    for ours, pyg in pairs:
        ours = ours.double().eval()
        out = ours(x, ei)
        if pyg is not None:
            pyg = pyg.double().eval()
            pyg.load_state_dict(ours.state_dict())
            torch.testing.assert_close(out, pyg(x, ei), rtol=0, atol=1e-12)
        for sparse in (x.to_sparse(), x.to_sparse_csr()):
            torch.testing.assert_close(ours(sparse, ei), out, rtol=0, atol=1e-12)
    cheb = pairs[1][0]
    layer = cheb.convs[0]
    assert isinstance(layer, ProjectFirstChebConv) and len(layer.lins) == 3


@pytest.mark.parametrize('layer', [
    lambda: ProjectFirstChebConv(12, 5, K=3),
    lambda: ProjectFirstSAGEConv(12, 5),
    lambda: ProjectFirstSAGEConv(12, 5, root_weight=False),
])
def test_sparse_features_give_the_dense_gradients(layer):
    # All weights project sparse CSR features in one product with its own
    # backward pass; the dense input through the same layer is the reference.
    x, ei = graph(seed=3)
    conv = layer().double()
    dense_out = conv(x, ei)
    dense_grads = torch.autograd.grad(dense_out.square().sum(), list(conv.parameters()))
    sparse_out = conv(x.to_sparse_csr(), ei)
    sparse_grads = torch.autograd.grad(sparse_out.square().sum(), list(conv.parameters()))
    torch.testing.assert_close(sparse_out, dense_out, rtol=0, atol=1e-12)
    for got, expected in zip(sparse_grads, dense_grads):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    assert conv._matmul._pattern is not None  # the sparse path was taken


@pytest.mark.parametrize('layer, pyg_layer', [
    (lambda: ProjectFirstChebConv(-1, 5, K=3), lambda: ChebConv(12, 5, K=3)),
    (lambda: ProjectFirstSAGEConv(-1, 5), lambda: SAGEConv(12, 5)),
])
def test_lazy_in_channels(layer, pyg_layer):
    x, ei = graph(seed=4)
    conv = layer().double()
    out = conv(x, ei)
    pyg = pyg_layer().double()
    torch.nn.init.normal_(pyg.bias if hasattr(pyg, 'lins') else pyg.lin_l.bias)
    conv.load_state_dict(pyg.state_dict())
    torch.testing.assert_close(conv(x, ei), pyg(x, ei), rtol=0, atol=1e-12)
    assert out.shape == (30, 5)
