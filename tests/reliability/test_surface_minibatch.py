r"""``MiniBatchTSGCN`` as a hostile PyG user drives it: batches from PyG's
loaders, duplicate, unsorted, empty and out-of-range ``n_id``, the history of
mode B (float64 and bfloat16), partial refreshes, gradients and inference
(``docs/minibatch.md``). Every case is checked against a dense float64
network written here from the formulas of the documentation, from the same
``state_dict``: nothing of the library computes the reference."""
import pytest
import torch
import torch.nn.functional as F
import torch_geometric.typing
from torch_geometric.loader import NodeLoader, RandomNodeLoader

from torch_geometric_regcn import LowRankInverse, MiniBatchTSGCN
from torch_geometric_regcn.datasets import contextual_sbm
from torch_geometric_regcn.loader import SeedNodeSampler

N, F_IN, HIDDEN, C, RANK = 48, 5, 7, 3, 12
# Float64 throughout: the library's rows and the dense reference are the same sums
# in another order, ~1e-15 relative; 1e-10 leaves room and a stale summary errs by
# O(1e-2) (issue 27: 14-54 %).
TOL = dict(rtol=1e-10, atol=1e-10)


@pytest.fixture(scope='module')
def graph():
    data = contextual_sbm(num_nodes=N, num_classes=C, num_features=F_IN, seed=0)
    data.x = data.x.double()
    return LowRankInverse(1.0, 0.3, rank=RANK, tol=1e-8, progress=False)(data)


def dense_propagation(w, v):
    r"""The dense P = I - W (I_r + VᵀW)⁻¹ Vᵀ of the documentation."""
    eye_r = torch.eye(w.size(1), dtype=w.dtype)
    return torch.eye(w.size(0), dtype=w.dtype) - w @ torch.linalg.solve(eye_r + v.T @ w, v.T)


def dense_layers(model, x, w, v):
    r"""Every layer's output of the full-graph network, H¹ (after ReLU), ...,
    the logits, from the model's parameters and the dense P (scale 1)."""
    p = dense_propagation(w, v)
    convs = [(model.get_parameter(f'convs.{i}.lin.weight'),
              dict(model.named_parameters()).get(f'convs.{i}.bias'))
             for i in range(len(model.convs))]
    outs, h = [], x
    for i, (weight, bias) in enumerate(convs):
        h = p @ (h @ weight.T)
        if bias is not None:
            h = h + bias
        if i < len(convs) - 1:
            h = h.relu()
        outs.append(h)
    return outs


def make_model(summary='refresh', num_layers=2, bias=True, **kwargs):
    torch.manual_seed(1)
    return MiniBatchTSGCN(F_IN, HIDDEN, C, num_layers=num_layers, bias=bias,
                          summary=summary, **kwargs).double()


def perturb(model, seed=5):
    """A weight change, as an optimizer step would make, without the optimizer."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen, dtype=p.dtype))


# -- PyG loaders ------------------------------------------------------------------------


def test_node_loader_batches_match_the_full_graph(graph):
    # A user feeds NodeLoader batches (shuffled, the last one short) to the model in
    # evaluation mode after a refresh: each batch's rows are the full network's rows
    # of batch.n_id (the docs: exactly TSGCN's output on those rows).
    model = make_model().refresh(graph.x, graph.lowrank_w, graph.lowrank_v).eval()
    reference = dense_layers(model, graph.x, graph.lowrank_w, graph.lowrank_v)[-1]
    loader = NodeLoader(graph, SeedNodeSampler(), input_nodes=torch.arange(N), batch_size=10,
                        shuffle=True)
    seen = []
    with torch.no_grad():
        for batch in loader:
            out = model(batch.x, batch.lowrank_w, batch.lowrank_v, batch.n_id)
            torch.testing.assert_close(out, reference[batch.n_id], **TOL)
            seen.append(batch.n_id)
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(N))


@pytest.mark.skipif(not (torch_geometric.typing.WITH_PYG_LIB
                         or torch_geometric.typing.WITH_TORCH_SPARSE),
                    reason="NeighborLoader needs pyg-lib or torch-sparse, neither installed")
def test_neighbor_loader_seed_rows_match_the_full_graph(graph):
    # NeighborLoader puts the seed nodes first and their sampled neighbours after:
    # every row, seeds and neighbours alike, is the full network's row of its n_id.
    from torch_geometric.loader import NeighborLoader
    model = make_model().refresh(graph.x, graph.lowrank_w, graph.lowrank_v).eval()
    reference = dense_layers(model, graph.x, graph.lowrank_w, graph.lowrank_v)[-1]
    loader = NeighborLoader(graph, num_neighbors=[3], batch_size=8, shuffle=True)
    with torch.no_grad():
        for batch in loader:
            out = model(batch.x, batch.lowrank_w, batch.lowrank_v, batch.n_id)
            torch.testing.assert_close(out, reference[batch.n_id], **TOL)


def test_random_node_loader_subgraph_batches_match_the_full_graph(graph):
    # RandomNodeLoader slices every node-level attribute through Data.subgraph
    # (x, lowrank_w, lowrank_v and an n_id the user added): the rows are the full
    # network's rows of n_id.
    data = graph.clone()
    data.n_id = torch.arange(N)
    model = make_model().refresh(data.x, data.lowrank_w, data.lowrank_v).eval()
    reference = dense_layers(model, data.x, data.lowrank_w, data.lowrank_v)[-1]
    seen = []
    with torch.no_grad():
        for batch in RandomNodeLoader(data, num_parts=4, shuffle=True):
            out = model(batch.x, batch.lowrank_w, batch.lowrank_v, batch.n_id)
            torch.testing.assert_close(out, reference[batch.n_id], **TOL)
            seen.append(batch.n_id)
    assert torch.equal(torch.cat(seen).sort().values, torch.arange(N))


def test_refresh_refuses_rows_sliced_by_a_loader(graph):
    # refresh() needs the whole graph's x, w, v ("checked to be that of one whole
    # graph's factors"): a user who passes a loader batch's rows by mistake gets an
    # error, not summaries of a 10-node graph used for a 48-node one.
    batch = next(iter(NodeLoader(graph, SeedNodeSampler(), input_nodes=torch.arange(N),
                                 batch_size=10, shuffle=True)))
    model = make_model()
    with pytest.raises(ValueError, match=r"the factors 'w' and 'v' .* are not those of one "
                                         r"whole graph"):
        model.refresh(batch.x, batch.lowrank_w, batch.lowrank_v)


# -- n_id: duplicate, unsorted, empty, wrong -------------------------------------------


@pytest.mark.parametrize('summary', ['refresh', 'history'])
def test_duplicate_and_unsorted_n_id_in_evaluation(graph, summary):
    # A batch may list a node twice and in any order (a sampler with replacement):
    # in evaluation mode each row is the full network's row of its node.
    model = make_model(summary).refresh(graph.x, graph.lowrank_w, graph.lowrank_v).eval()
    reference = dense_layers(model, graph.x, graph.lowrank_w, graph.lowrank_v)[-1]
    index = torch.tensor([5, 2, 5, 40, 2, 2, 0])
    with torch.no_grad():
        out = model(graph.x[index], graph.lowrank_w[index], graph.lowrank_v[index], index)
    torch.testing.assert_close(out, reference[index], **TOL)


@pytest.mark.parametrize('index', [[3, 9, 20, 31], [31, 3, 20, 9], [9, 3, 9, 31, 3, 20, 9]],
                         ids=['sorted', 'unsorted', 'duplicates'])
def test_history_write_keeps_the_summary_equal_to_vt_of_the_rows(graph, index):
    # Mode B, training: the forward pass writes the batch's fresh hidden rows and
    # adds V_Bᵀ(H_B - H̄_B) to the summary "so the summary always holds the latest
    # rows" -- it must be Vᵀ of the stored rows, whatever the order of n_id and
    # however often a node appears in it (a node listed twice is written once).
    x, w, v = graph.x, graph.lowrank_w, graph.lowrank_v
    model = make_model('history').refresh(x, w, v)
    old_hidden = dense_layers(model, x, w, v)[0]
    perturb(model)
    new_hidden = dense_layers(model, x, w, v)[0]
    index = torch.tensor(index)
    model.train()
    out = model(x[index], w[index], v[index], index)

    stored = old_hidden.clone()
    stored[index] = new_hidden[index]
    torch.testing.assert_close(model.summaries[1], v.T @ stored, **TOL)
    # ... and the last layer read that summary: s (H¹_B Θ² - W_B C⁻¹ (VᵀH̄) Θ²) + b²
    weight, bias = model.get_parameter('convs.1.lin.weight'), model.get_parameter('convs.1.bias')
    core = torch.eye(RANK, dtype=torch.float64) + v.T @ w
    expected = (new_hidden[index] @ weight.T
                - w[index] @ torch.linalg.solve(core, v.T @ stored) @ weight.T + bias)
    torch.testing.assert_close(out, expected, **TOL)


@pytest.mark.parametrize('summary, training', [('history', True), ('refresh', False)])
def test_empty_batch(graph, summary, training):
    # An empty batch (a loader's last, a filtered mask): an empty [0, C] output that
    # backpropagates, and the summaries untouched -- or a clear ValueError.
    x, w, v = graph.x, graph.lowrank_w, graph.lowrank_v
    model = make_model(summary).refresh(x, w, v).train(training)
    before = [s.clone() for s in model.summaries]
    empty = torch.empty(0, dtype=torch.long)
    try:
        out = model(x[empty], w[empty], v[empty], empty)
    except ValueError:
        return
    assert out.shape == (0, C)
    out.sum().backward()
    for a, b in zip(model.summaries, before):
        assert torch.equal(a, b)


def test_forward_before_refresh_is_named(graph):
    # A user who forgets refresh(): an error that says to call it, not a TypeError
    # from None or an AttributeError.
    model = make_model()
    index = torch.arange(4)
    with pytest.raises((RuntimeError, ValueError), match='refresh'):
        model(graph.x[index], graph.lowrank_w[index], graph.lowrank_v[index], index)


def test_history_training_without_n_id_is_named(graph):
    # Mode B in training needs n_id ("needed in mode history during training").
    model = make_model('history').refresh(graph.x, graph.lowrank_w, graph.lowrank_v).train()
    index = torch.arange(4)
    with pytest.raises(ValueError, match='n_id'):
        model(graph.x[index], graph.lowrank_w[index], graph.lowrank_v[index])


def test_out_of_range_n_id_is_named(graph):
    # n_id of another graph (a node N): a ValueError naming n_id before anything is
    # written, not an IndexError from the history and not a corrupted summary.
    model = make_model('history').refresh(graph.x, graph.lowrank_w, graph.lowrank_v).train()
    before = [s.clone() for s in model.summaries]
    rows = torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match='n_id'):
        model(graph.x[rows], graph.lowrank_w[rows], graph.lowrank_v[rows],
              torch.tensor([1, 2, N]))
    for a, b in zip(model.summaries, before):
        assert torch.equal(a, b)


def test_n_id_of_another_length_is_named(graph):
    # n_id with one entry fewer than the batch's rows: a ValueError naming n_id.
    model = make_model('history').refresh(graph.x, graph.lowrank_w, graph.lowrank_v).train()
    rows = torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match='n_id'):
        model(graph.x[rows], graph.lowrank_w[rows], graph.lowrank_v[rows], rows[:2])


# -- history and refresh ----------------------------------------------------------------


def test_bfloat16_history_is_within_its_rounding(graph):
    # history_dtype=bfloat16: each stored entry carries a relative rounding error of
    # at most 2^-9 (8 significant bits, round to nearest), and the summary is Vᵀ of the
    # rows as stored, so |summary - VᵀH¹| <= 2^-9 |V|ᵀ|H¹| entrywise (plus float64
    # rounding); the logits of a batch then differ from the exact ones by at most
    # |W_B C⁻¹| that bound |Θ²|ᵀ. The output stays in the factors' dtype.
    x, w, v = graph.x, graph.lowrank_w, graph.lowrank_v
    model = make_model('history', history_dtype=torch.bfloat16).refresh(x, w, v).eval()
    hidden, logits = dense_layers(model, x, w, v)
    bound = 2.0 ** -9 * (v.abs().T @ hidden.abs()) + 1e-12
    summary = model.summaries[1]
    assert summary.dtype == torch.float64
    assert bool(((summary - v.T @ hidden).abs() <= bound).all())
    index = torch.tensor([0, 7, 19, 33, 47])
    with torch.no_grad():
        out = model(x[index], w[index], v[index], index)
    assert out.dtype == torch.float64
    core_inv = torch.linalg.inv(torch.eye(RANK, dtype=torch.float64) + v.T @ w)
    weight = model.get_parameter('convs.1.lin.weight')
    out_bound = (w[index] @ core_inv).abs() @ bound @ weight.abs().T + 1e-12
    assert bool(((out - logits[index]).abs() <= out_bound).all())


def test_partial_refresh_of_every_node_equals_a_full_refresh(graph):
    # Mode B: refresh(index=all nodes) after the weights changed recomputes every row
    # and updates the summary by their change: the same summaries as a full refresh.
    x, w, v = graph.x, graph.lowrank_w, graph.lowrank_v
    model = make_model('history').refresh(x, w, v)
    perturb(model)
    model.refresh(x, w, v, index=torch.randperm(N), batch_size=7)
    partial = [s.clone() for s in model.summaries]
    model.refresh(x, w, v)
    for a, b in zip(partial, model.summaries):
        torch.testing.assert_close(a, b, **TOL)
    hidden = dense_layers(model, x, w, v)[0]
    torch.testing.assert_close(partial[1], v.T @ hidden, **TOL)


@pytest.mark.parametrize('summary', ['refresh', 'history'])
def test_last_layer_gradient_is_exact(graph, summary):
    # "Given summaries of the current weights, the forward pass is exactly TSGCN's on
    # those rows, and so is the gradient of the last layer": right after a refresh, a
    # training step's gradient of Θ² and b² is that of the dense full-graph loss on
    # the batch's rows.
    x, w, v, y = graph.x, graph.lowrank_w, graph.lowrank_v, graph.y
    model = make_model(summary).refresh(x, w, v).train()
    index = torch.tensor([4, 11, 30, 2, 45])
    F.cross_entropy(model(x[index], w[index], v[index], index), y[index]).backward()
    grads = {k: model.get_parameter(k).grad.clone() for k in ('convs.1.lin.weight',
                                                                'convs.1.bias')}
    model.zero_grad()
    F.cross_entropy(dense_layers(model, x, w, v)[-1][index], y[index]).backward()
    for k, g in grads.items():
        torch.testing.assert_close(g, model.get_parameter(k).grad, **TOL)


def test_one_layer_network_trains_exactly(graph):
    # "The first layer's summary VᵀX is exact, so a one-layer network trains exactly
    # as in full batch": its gradient equals the dense full-graph one.
    x, w, v, y = graph.x, graph.lowrank_w, graph.lowrank_v, graph.y
    model = make_model(num_layers=1).refresh(x, w, v).train()
    index = torch.tensor([40, 1, 17, 8])
    F.cross_entropy(model(x[index], w[index], v[index], index), y[index]).backward()
    grad = model.get_parameter('convs.0.lin.weight').grad.clone()
    model.zero_grad()
    F.cross_entropy(dense_layers(model, x, w, v)[-1][index], y[index]).backward()
    torch.testing.assert_close(grad, model.get_parameter('convs.0.lin.weight').grad, **TOL)


def test_inference_with_unsorted_duplicate_index_and_small_chunks(graph):
    # inference(index=...) is exact for the current weights, in any order, with
    # repeated nodes and chunks smaller than the index, and leaves the stored
    # summaries as they were.
    x, w, v = graph.x, graph.lowrank_w, graph.lowrank_v
    model = make_model('history').refresh(x, w, v)
    perturb(model)  # the stored summaries are now stale, inference must not use them
    before = [s.clone() for s in model.summaries]
    index = torch.tensor([7, 3, 3, 47, 0, 21, 7])
    out = model.inference(x, w, v, index=index, batch_size=5)
    torch.testing.assert_close(out, dense_layers(model, x, w, v)[-1][index], **TOL)
    for a, b in zip(model.summaries, before):
        assert torch.equal(a, b)
