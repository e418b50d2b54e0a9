r"""RegularizerConv as a PyG MessagePassing layer: adjacency layouts, hooks."""
import pytest
import torch
from torch_geometric.nn.conv import MessagePassing
from torch_geometric.typing import WITH_TORCH_SPARSE
from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

from tests.nn.helpers import N, layer, two_components
from torch_geometric_regcn import RegularizerConv

F = 5

SOLVERS = [('appnp', 'series'), ('appnp', 'cg'), ('tsgcn', 'cg'), ('gnn_hf', 'series'),
           ('dagnn', 'series'), ('sgc', 'series')]


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
