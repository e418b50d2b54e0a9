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


def test_one_core_lookup_per_forward_same_output_and_gradients(monkeypatch):
    # The network fingerprints the factors once per pass (the first layer's
    # cache), not once per layer; outputs and gradients stay those of the
    # layers called one by one (bit for bit: the same core, the same products).
    import torch_geometric_regcn.linalg.woodbury as woodbury
    x = torch.randn(N, 6, dtype=torch.float64)
    w, v = eigen_factors(rank=4, dtype=torch.float64)
    model = TSGCN(6, 8, 3, num_layers=3, bias=True).double()
    calls = []
    original = woodbury.fingerprint
    monkeypatch.setattr(woodbury, 'fingerprint', lambda t: calls.append(t) or original(t))
    out = model(x, w, v)
    assert len(calls) == 2  # w and v, once
    model(x, w, v)
    assert len(calls) == 4 and model.convs[1]._woodbury._core is None
    monkeypatch.undo()

    def layer_by_layer(x, w, v):
        conv1, conv2, conv3 = model.convs
        return conv3(conv2(conv1(x, w, v).relu(), w, v).relu(), w, v)

    assert torch.equal(out, layer_by_layer(x, w, v))
    xs = x.clone().requires_grad_()
    grads = torch.autograd.grad(model(xs, w, v).sum(), [xs, *model.parameters()])
    expected = torch.autograd.grad(layer_by_layer(xs, w, v).sum(), [xs, *model.parameters()])
    for got, want in zip(grads, expected):
        assert torch.equal(got, want)
    # Learned factors are not kept by the cache: every layer factorises them,
    # as when the layers are called one by one.
    wl, vl = w.clone().requires_grad_(), v.clone().requires_grad_()
    got = torch.autograd.grad(model(x, wl, vl).square().sum(), [wl, vl])
    want = torch.autograd.grad(layer_by_layer(x, wl, vl).square().sum(), [wl, vl])
    for g, e in zip(got, want):
        assert torch.equal(g, e)


def test_forward_hooks_of_the_layers_fire():
    # Users read hidden representations through forward hooks on the layers.
    x = torch.randn(N, 6, dtype=torch.float64)
    w, v = eigen_factors(rank=4, dtype=torch.float64)
    model = TSGCN(6, 8, 3, num_layers=3).double()
    seen = []
    for conv in model.convs:
        conv.register_forward_hook(lambda module, args, out: seen.append(out))
    out = model(x, w, v)
    assert len(seen) == 3 and torch.equal(seen[-1], out)
