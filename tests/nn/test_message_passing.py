r"""RegularizerConv as a PyG MessagePassing layer: Adj inputs, hooks, explainers."""
import pytest
import torch
from torch_geometric.explain import Explainer
from torch_geometric.explain.algorithm import GNNExplainer
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.typing import WITH_TORCH_SPARSE
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor, to_undirected

from torch_geometric_regcn import RegularizerConv, RegularizerGNN

N, F = 30, 5


def two_components(seed=0):
    # Nodes 0..19 and 20..29, each a random undirected graph plus a ring.
    gen = torch.Generator().manual_seed(seed)
    parts = []
    for start, size in ((0, 20), (20, 10)):
        ring = torch.arange(size)
        parts.append(torch.stack([ring, (ring + 1) % size]) + start)
        parts.append(torch.randint(0, size, (2, size), generator=gen) + start)
    edge_index = torch.cat(parts, dim=1)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    x = torch.randn(N, F, dtype=torch.float64, generator=gen)
    return x, to_undirected(edge_index, num_nodes=N)


SOLVERS = [('appnp', 'series'), ('appnp', 'cg'), ('tsgcn', 'cg'), ('gnn_hf', 'series'),
           ('dagnn', 'series'), ('sgc', 'series')]


def layer(regularizer, solver, **kwargs):
    torch.manual_seed(0)
    return RegularizerConv(F, 3, regularizer, solver=solver, **kwargs).double()


def test_is_a_message_passing_layer():
    conv = RegularizerConv(F, 3, 'appnp')
    assert isinstance(conv, MessagePassing)
    assert conv.aggr in ('add', 'sum')


@pytest.mark.parametrize('regularizer, solver', SOLVERS)
def test_equal_outputs_across_adjacency_layouts(regularizer, solver):
    x, edge_index = two_components()
    conv = layer(regularizer, solver)
    kwargs = {'semantic_edge_index': edge_index.flip(0)} if regularizer == 'tsgcn' else {}
    expected = conv(x, edge_index, **kwargs)
    weight = torch.ones(edge_index.size(1), dtype=torch.float64)
    layouts = {
        'coo': to_torch_coo_tensor(edge_index, weight, size=N),
        'csr': to_torch_csr_tensor(edge_index, weight, size=N),
        'adj_t': to_torch_coo_tensor(edge_index.flip(0), weight, size=N),  # PyG's convention
    }
    if WITH_TORCH_SPARSE:
        from torch_sparse import SparseTensor
        layouts['SparseTensor'] = SparseTensor.from_edge_index(edge_index, sparse_sizes=(N, N)).t()
    for name, adj in layouts.items():
        torch.testing.assert_close(conv(x, adj, **kwargs), expected, msg=name)


@pytest.mark.skipif(WITH_TORCH_SPARSE, reason='torch-sparse is installed')
def test_sparse_tensor_without_torch_sparse_is_named():
    x, edge_index = two_components()
    with pytest.raises(TypeError, match="'edge_index' must be an edge index tensor"):
        layer('appnp', 'series')(x, edge_index.tolist())


@pytest.mark.parametrize('regularizer, solver, calls', [
    ('appnp', 'series', 7), ('sgc', 'series', 2), ('appnp', 'cg', None)])
def test_every_sparse_product_goes_through_propagate(regularizer, solver, calls):
    x, edge_index = two_components()
    conv = layer(regularizer, solver, K=7) if regularizer == 'appnp' else layer(
        regularizer, solver)
    seen = {'pre': 0, 'post': 0, 'fused': 0}
    conv.register_propagate_forward_pre_hook(lambda *_: seen.__setitem__('pre', seen['pre'] + 1))
    conv.register_propagate_forward_hook(lambda *_: seen.__setitem__('post', seen['post'] + 1))
    conv.register_message_and_aggregate_forward_hook(
        lambda *_: seen.__setitem__('fused', seen['fused'] + 1))
    conv(x, edge_index)
    assert seen['pre'] == seen['post'] == seen['fused'] > 0
    if calls is not None:
        assert seen['post'] == calls
    if solver == 'cg':  # one product per CG iteration, and the backward solve's
        before = seen['post']
        conv(x, edge_index).sum().backward()
        assert seen['post'] > 2 * before - 1


def test_a_hook_can_change_the_products():
    # Doubling each product of APPNP's one-step series: ((1-α)·2Â + α) X.
    x, edge_index = two_components()
    conv = layer('appnp', 'series', K=1, alpha=0.5, bias=False)
    plain = conv(x, edge_index)  # 0.5 Â H + 0.5 H
    conv.register_propagate_forward_hook(lambda module, inputs, out: 2 * out)
    doubled = conv(x, edge_index)  # Â H + 0.5 H
    torch.testing.assert_close(doubled - plain, plain - 0.5 * conv.lin(x))


def mask_gradient(conv, x, edge_index, mask):
    set_masks(conv, mask, edge_index, apply_sigmoid=True)
    try:
        out = conv(x, edge_index)
        (grad,) = torch.autograd.grad(out[0].sum() + out[5].square().sum(), mask)
    finally:
        clear_masks(conv)
    return out.detach(), grad


def test_implicit_mask_gradient_of_cg_equals_a_converged_series():
    # APPNP's K-step series converges to its CG solve ((1-α)^K = 0.5^60), so the
    # edge-mask gradients of both, one by autograd through 60 masked steps,
    # the other by CG's implicit backward, must agree.
    x, edge_index = two_components()
    mask = torch.randn(edge_index.size(1), dtype=torch.float64, requires_grad=True)
    series = layer('appnp', 'series', K=60, alpha=0.5)
    cg = layer('appnp', 'cg', K=60, alpha=0.5, tol=1e-13)
    cg.load_state_dict(series.state_dict())
    out_s, grad_s = mask_gradient(series, x, edge_index, mask)
    out_c, grad_c = mask_gradient(cg, x, edge_index, mask)
    torch.testing.assert_close(out_c, out_s, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(grad_c, grad_s, rtol=1e-7, atol=1e-11)
    assert grad_s[:edge_index.size(1) // 2].abs().max() > 0


def test_cg_mask_gradient_matches_finite_differences():
    x, edge_index = two_components()
    conv = layer('tsgcn', 'cg', alpha=1.0, beta=0.5, tol=1e-13)
    semantic = edge_index.flip(0)[:, ::3]

    def loss(mask):
        set_masks(conv, mask, edge_index, apply_sigmoid=False)
        try:
            return conv(x, edge_index, semantic_edge_index=semantic)[:3].square().sum()
        finally:
            clear_masks(conv)

    mask = torch.rand(edge_index.size(1), dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(loss(mask), mask)
    for e in (0, 7, edge_index.size(1) - 1):
        step = torch.zeros_like(mask)
        step[e] = 1e-6
        numeric = (loss(mask.detach() + step) - loss(mask.detach() - step)) / 2e-6
        assert float(grad[e]) == pytest.approx(float(numeric), rel=1e-5, abs=1e-9)


@pytest.mark.parametrize('regularizer, solver', [('appnp', 'series'), ('appnp', 'cg'),
                                                 ('gnn_lf', 'cg')])
def test_gnn_explainer_returns_an_edge_mask(regularizer, solver):
    x, edge_index = two_components()
    torch.manual_seed(0)
    model = RegularizerGNN(F, 8, 3, regularizer=regularizer, solver=solver).double()
    explainer = Explainer(model, algorithm=GNNExplainer(epochs=20),
                          explanation_type='model', node_mask_type='attributes',
                          edge_mask_type='object',
                          model_config=dict(mode='multiclass_classification', task_level='node',
                                            return_type='raw'))
    explanation = explainer(x, edge_index, index=0)
    mask = explanation.edge_mask
    assert mask.shape == (edge_index.size(1),)
    other = (edge_index[0] >= 20) & (edge_index[1] >= 20)  # node 0 cannot see them
    assert mask[~other].max() > 0
    assert mask[other].abs().max() == 0
    assert not model.convs[0].explain  # the explainer cleaned up


@pytest.mark.parametrize('cached', [False, True])
def test_copies_and_pickles_rebuild_the_cache(cached):
    import copy
    import io
    x, edge_index = two_components()
    conv = layer('tsgcn', 'cg', cached=cached, learn=('alpha',))
    kwargs = {'semantic_edge_index': edge_index.flip(0)}
    expected = conv(x, edge_index, **kwargs)
    buffer = io.BytesIO()
    torch.save(conv, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(conv), torch.load(buffer, weights_only=False)):
        assert other._cached_graph is None
        torch.testing.assert_close(other(x, edge_index, **kwargs), expected)
