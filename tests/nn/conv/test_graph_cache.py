r"""GraphCache: a layer with cached=True keeps its graph while the same graph
comes back, refuses another one and forgets it when asked, on loading and in
copies."""
import pytest
import torch

from tests.nn.helpers import conv, layer, setup, two_components
from torch_geometric_regcn import RegularizerConv
from torch_geometric_regcn.linalg.graph_operator import linear_combination
from torch_geometric_regcn.regularizers import Regularizer


def test_cached_reuses_graph_and_reset_clears_it():
    x, ei = setup()
    layer = conv('appnp', cached=True)
    first = layer(x, ei)
    graph = layer._graph_cache.graph
    assert graph is not None
    torch.testing.assert_close(layer(x, ei.clone()), first)  # an equal graph: the cache
    assert layer._graph_cache.graph is graph
    with pytest.raises(ValueError, match="another graph.*'edge_index' differs.*reset_cache"):
        layer(x, ei[:, :4])  # another graph is an error, not the cached result
    with pytest.raises(ValueError, match="'num_nodes' differs"):
        layer(x[:-1], ei[:, :4])
    ei.add_(0)  # an in-place write of the same values: the same graph
    torch.testing.assert_close(layer(x, ei), first, rtol=0, atol=0)
    ei[0, 0] = (ei[0, 0] + 1) % 30  # a real edit
    with pytest.raises(ValueError, match="'edge_index' was modified in place"):
        layer(x, ei)
    layer.reset_cache()
    fresh = conv('appnp', cached=False)
    fresh.load_state_dict(layer.state_dict())
    torch.testing.assert_close(layer(x, ei[:, :4]), fresh(x, ei[:, :4]))
    layer.reset_parameters()
    assert layer._graph_cache.graph is None


def test_cached_layer_builds_its_system_matrix_once():
    x, ei = setup()
    layer = conv('gnn_hf', cached=True)
    first = layer(x, ei)
    key = (layer.regularizer, 'operator')
    matrix = layer._graph_cache.graph.derived[key]
    torch.testing.assert_close(layer(x, ei), first)
    assert layer._graph_cache.graph.derived[key] is matrix


def test_cached_layer_forgets_its_graph_when_coefficients_are_loaded():
    x, ei = setup()
    layer = conv('appnp', K=3, alpha=0.5, cached=True)
    layer(x, ei)
    reference = conv('appnp', K=4, alpha=0.2)
    reference.lin.load_state_dict(layer.lin.state_dict())
    layer.load_state_dict(reference.state_dict())
    assert layer._graph_cache.graph is None
    torch.testing.assert_close(layer(x, ei), reference(x, ei))


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
    for other in (copy.copy(conv), copy.deepcopy(conv), torch.load(buffer, weights_only=False)):
        assert other._graph_cache is not conv._graph_cache  # a cache of its own
        assert other._graph_cache.graph is None
        torch.testing.assert_close(other(x, edge_index, **kwargs), expected)
    if cached:  # the copy's graph is its own business: the original keeps its graph
        shallow = copy.copy(conv)
        shallow(x, edge_index.flip(0)[:, :10], semantic_edge_index=edge_index[:, :10])
        torch.testing.assert_close(conv(x, edge_index, **kwargs), expected)


def test_the_cache_alone_accepts_the_same_or_an_equal_graph_and_names_a_change():
    from torch_geometric_regcn.nn.conv.graph_cache import GraphCache
    _, ei = setup()
    weight = torch.rand(ei.size(1), dtype=torch.float64)
    cache, graph = GraphCache(), object()
    cache.store(graph, 30, {'edge_index': ei, 'edge_weight': weight})
    cache.check('Layer', 30, {'edge_index': ei, 'edge_weight': weight})  # the same objects
    cache.check('Layer', 30, {'edge_index': ei.int(), 'edge_weight': weight.clone()})  # equal
    value = float(weight[3])
    weight.numpy()[3] = value + 1.0  # a write the version counter does not see
    assert weight._version == 0
    with pytest.raises(ValueError, match="'edge_weight' was modified in place"):
        cache.check('Layer', 30, {'edge_index': ei, 'edge_weight': weight})
    weight.numpy()[3] = value  # the same numbers again: the same graph
    cache.check('Layer', 30, {'edge_index': ei, 'edge_weight': weight})
    sparse = torch.sparse_coo_tensor(ei, weight, (30, 30))
    cache.store(graph, 30, {'edge_index': sparse, 'edge_weight': None})
    cache.check('Layer', 30, {'edge_index': sparse.coalesce(), 'edge_weight': None})
    with pytest.raises(ValueError, match=r"^Layer\(cached=True\).*'edge_index' differs"):
        cache.check('Layer', 30, {'edge_index': sparse.to_sparse_csr(), 'edge_weight': None})
    with pytest.raises(ValueError, match="'edge_weight' differs"):
        cache.check('Layer', 30, {'edge_index': sparse, 'edge_weight': weight})
    assert cache.graph is graph
    cache.clear()
    assert cache.graph is None


@pytest.mark.parametrize('solver', ['series', 'closed', 'cg'])
def test_a_cached_layer_refuses_edge_weights_that_want_a_gradient(solver):
    # The cached operators were built by the first call: under no_grad they
    # gave a later training call no edge-weight gradient at all (silently),
    # with autograd the second backward failed with PyTorch's own error.
    x, ei = setup()
    weight = torch.rand(ei.size(1), dtype=torch.float64) + 0.5
    cached = conv('appnp', solver=solver, cached=True)
    with pytest.raises(ValueError, match=r'cached=True.*use cached=False'):
        cached(x, ei, weight.clone().requires_grad_())
    with torch.no_grad():  # no gradient recorded: nothing to lose
        cached(x, ei, weight.clone().requires_grad_())
    plain = conv('appnp', solver=solver)
    plain.load_state_dict(cached.state_dict())
    torch.testing.assert_close(cached(x, ei, weight), plain(x, ei, weight))


def test_a_cached_layer_rebuilds_when_its_regulariser_reads_another_input():
    # tsGCN at beta = 0 reads the topology alone; after beta = 0.2 it reads
    # the semantic graph too. Reference: the same layer uncached.
    from torch_geometric_regcn import RegularizerConv
    x, ei = setup()
    semantic = ei.flip(0)[:, ::2].contiguous()
    for change in ('assign', 'set_coefficients'):
        torch.manual_seed(0)
        cached = RegularizerConv(x.size(1), 4, 'tsgcn', solver='closed', alpha=1.0, beta=0.0,
                                 cached=True).double()
        uncached = RegularizerConv(x.size(1), 4, 'tsgcn', solver='closed', alpha=1.0,
                                   beta=0.0).double()
        uncached.load_state_dict(cached.state_dict())
        cached(x, ei, semantic_edge_index=semantic)
        for module in (cached, uncached):
            if change == 'assign':
                module.regularizer.beta = 0.2
            else:
                module.regularizer.set_coefficients(beta=0.2)
        torch.testing.assert_close(cached(x, ei, semantic_edge_index=semantic),
                                   uncached(x, ei, semantic_edge_index=semantic),
                                   rtol=0, atol=1e-12)


@pytest.mark.parametrize('name, solver', [('appnp', 'cg'), ('appnp', 'series'),
                                          ('tsgcn', 'closed'), ('elastic', 'emp')])
def test_a_graph_cached_in_inference_mode_is_rebuilt_for_training(name, solver):
    # A first call in torch.inference_mode() (a sanity check before training)
    # built operators that a training step could not save for backward.
    # Reference: the gradient of a layer whose first call was under no_grad.
    x, ei = setup()
    grads = []
    for context in (torch.no_grad, torch.inference_mode):
        torch.manual_seed(0)
        model = layer(name, solver=solver, cached=True)
        with context():
            model(x, ei)
        model(x, ei).square().sum().backward()
        grads.append(model.lin.weight.grad)
        with torch.inference_mode():  # kept for inference, built for training
            model(x, ei)
        assert not model._graph_cache.inference
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


def test_a_sparse_adjacency_with_int32_indices_is_the_same_graph():
    # Equal integers in another integer dtype are the same graph, for the
    # indices of a CSR adjacency too (refused after the exact fingerprint).
    x, ei = setup()
    adj = torch.sparse_coo_tensor(ei, torch.ones(ei.size(1), dtype=torch.float64),
                                  (30, 30)).coalesce().to_sparse_csr()
    narrow = torch.sparse_csr_tensor(adj.crow_indices().int(), adj.col_indices().int(),
                                     adj.values(), adj.shape)
    layer = conv('appnp', cached=True)
    first = layer(x, adj)
    torch.testing.assert_close(layer(x, narrow), first, rtol=0, atol=0)


def test_swapped_edge_weights_written_past_the_version_counter_are_refused():
    # Two edge weights swapped through NumPy at the positions whose
    # fingerprint weights are closest: a float32 weighted sum rounded the
    # change away, and the cached layer returned the old graph's output
    # (0.02 off a fresh layer's, on outputs of 0.6).
    from torch_geometric_regcn.utils import fingerprint as fingerprint_module
    gen = torch.Generator().manual_seed(0)
    n, e = 40, 1024
    src = torch.randint(0, n, (e,), generator=gen)
    ei = torch.stack([src, (src + 1 + torch.randint(0, n - 1, (e,), generator=gen)) % n])
    ew = torch.rand(e, generator=gen)
    x = torch.randn(n, 4, generator=gen)
    inner = fingerprint_module._weights(1024, ew.device).float()
    order = inner.argsort()
    k = int((inner[order[1:]] - inner[order[:-1]]).argmin())
    i, j = order[k].item(), order[k + 1].item()
    layer = RegularizerConv(4, 3, 'appnp', cached=True)  # float32, as the weights
    layer(x, ei, ew)
    values = ew.numpy()
    values[[i, j]] = values[[j, i]]
    with pytest.raises(ValueError, match="'edge_weight' was modified in place"):
        layer(x, ei, ew)


class _Scaled(Regularizer):
    r"""A user's regulariser whose operator :math:`(1 + s)\mathbf{I} -
    s\hat{\mathbf{A}}` reads a submodule's parameter :math:`s` as a number
    (without its gradient)."""
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(0.5, dtype=torch.float64))

    def operator(self, graph):
        s = float(self.scale.detach())
        return linear_combination([graph.identity(), graph.adj], [1 + s, -s])


def _scaled_layers():
    r"""A cached layer on :class:`_Scaled` and an uncached one, the reference."""
    return (RegularizerConv(5, 4, _Scaled(), solver='closed', bias=False, cached=True).double(),
            RegularizerConv(5, 4, _Scaled(), solver='closed', bias=False).double())


def test_a_cached_operator_sees_a_write_through_data_into_a_parameter_it_reads():
    # The operator of a user's regulariser that reads a submodule's parameter
    # was keyed by the parameter's version counter, which a write through
    # .data (or NumPy) leaves as it was: a cached layer kept the old operator.
    # Reference: an uncached layer with the same state.
    x, ei = setup()
    cached, fresh = _scaled_layers()
    with torch.no_grad():
        first = cached(x, ei)
        cached.regularizer.scale.data.fill_(3.0)
        fresh.load_state_dict(cached.state_dict())
        out = cached(x, ei)
        assert not torch.equal(out, first)
        torch.testing.assert_close(out, fresh(x, ei), rtol=0, atol=0)


def test_a_cached_operator_sees_an_in_place_step_after_a_call_with_gradients():
    # An operator that reads a parameter without its gradient (float(p)) looks,
    # to a call with gradients, like one that does not read it: keyed by the
    # coefficients alone, an in-place update (an optimizer step, fill_ under
    # no_grad) kept the old operator. Reference: an uncached layer.
    x, ei = setup()
    cached, fresh = _scaled_layers()
    cached(x, ei)  # with gradients
    with torch.no_grad():
        cached.regularizer.scale.fill_(3.0)
    fresh.load_state_dict(cached.state_dict())
    torch.testing.assert_close(cached(x, ei), fresh(x, ei), rtol=0, atol=0)
