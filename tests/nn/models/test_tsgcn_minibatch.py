"""MiniBatchTSGCN: exact rows of TSGCN given fresh summaries (float64), the
gradient it leaves out, both ways of keeping the summaries, loaders, devices
and the argument checks."""
import inspect
import re
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.loader import NodeLoader

from tests.conftest import CUDA, messy_graph
from torch_geometric_regcn import TSGCN, LowRankInverse, MiniBatchTSGCN
from torch_geometric_regcn.loader import SeedNodeSampler
from torch_geometric_regcn.utils.sparse import dense_rows, gather_rows

N, F_IN, HIDDEN, CLASSES, RANK = 60, 7, 6, 3, 10


def graph(seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    data = Data(x=torch.randn(N, F_IN, dtype=dtype, generator=gen),
                edge_index=messy_graph(N, num_edges=3 * N, seed=seed), num_nodes=N,
                semantic_edge_index=messy_graph(N, num_edges=2 * N, seed=seed + 100),
                y=torch.randint(0, CLASSES, (N,), generator=gen))
    return LowRankInverse(1.0, 0.3, rank=RANK, progress=False)(data)


def pair(num_layers=2, bias=False, scale=1.0, summary='refresh', dropout=0.0, seed=0):
    r"""A MiniBatchTSGCN and a TSGCN with the same random (non-zero bias) weights."""
    torch.manual_seed(seed)
    model = MiniBatchTSGCN(F_IN, HIDDEN, CLASSES, num_layers, dropout, bias, scale,
                           summary).double()
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.7)
    ref = TSGCN(F_IN, HIDDEN, CLASSES, num_layers, dropout, bias, scale).double()
    ref.load_state_dict(model.state_dict())
    return model, ref


@pytest.mark.parametrize('summary', ['refresh', 'history'])
@pytest.mark.parametrize('num_layers, bias, scale', [(1, False, 1.0), (2, False, 1.0),
                                                     (2, True, 1 / 2.3), (3, True, 0.8)])
def test_full_batch_with_fresh_summaries_equals_tsgcn(summary, num_layers, bias, scale):
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair(num_layers, bias, scale, summary)
    expected = ref(x, w, v)
    model.refresh(x, w, v, batch_size=17)  # chunks that do not divide N
    model.eval()
    torch.testing.assert_close(model(x, w, v), expected, rtol=0, atol=1e-10)
    torch.testing.assert_close(model.inference(x, w, v, batch_size=13), expected,
                               rtol=0, atol=1e-10)
    batch = torch.randperm(N)[:25]
    torch.testing.assert_close(model(x[batch], w[batch], v[batch], batch), expected[batch],
                               rtol=0, atol=1e-10)
    torch.testing.assert_close(model.inference(x, w, v, index=batch, batch_size=7),
                               expected[batch], rtol=0, atol=1e-10)
    model.train()  # training mode, dropout 0: the same rows (mode B writes them)
    torch.testing.assert_close(model(x[batch], w[batch], v[batch], batch), expected[batch],
                               rtol=0, atol=1e-10)


def test_state_dict_is_tsgcns_and_buffers_are_not_saved():
    model, ref = pair(bias=True, summary='history')
    assert model.state_dict().keys() == ref.state_dict().keys()
    data = graph()
    model.refresh(data.x, data.lowrank_w, data.lowrank_v)
    assert model.state_dict().keys() == ref.state_dict().keys()
    assert model.summary_1.shape == (RANK, HIDDEN) and model.history_1.shape == (N, HIDDEN)
    model.reset_parameters()
    assert model.summary_0 is None and model.history_1 is None and model.core_lu is None
    assert repr(model) == "MiniBatchTSGCN(7, 3, num_layers=2, summary='history')"


def test_gradients_leave_out_the_path_through_the_summary():
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair(bias=True)
    model.refresh(x, w, v)
    batch = torch.arange(0, N, 3)
    F.cross_entropy(model(x[batch], w[batch], v[batch]), data.y[batch]).backward()
    F.cross_entropy(ref(x, w, v)[batch], data.y[batch]).backward()
    first, last = model.convs
    # The last layer's gradients are exact given fresh summaries.
    torch.testing.assert_close(last.lin.weight.grad, ref.convs[1].lin.weight.grad)
    torch.testing.assert_close(last.bias.grad, ref.convs[1].bias.grad)
    # The first layer's differ by the path through Vᵀ H¹ of the other nodes:
    # they are those of the row formula with that summary held constant.
    core = torch.eye(RANK, dtype=torch.float64) + v.T @ w
    theta1 = first.lin.weight.detach().clone().requires_grad_()
    b1 = first.bias.detach().clone().requires_grad_()
    h = ((x - w @ torch.linalg.solve(core, v.T @ x)) @ theta1.T + b1).relu()
    summary = (v.T @ h).detach()
    z = h[batch] @ last.lin.weight.T.detach()
    out = z - w[batch] @ torch.linalg.solve(core, summary @ last.lin.weight.T.detach())
    F.cross_entropy(out + last.bias.detach(), data.y[batch]).backward()
    torch.testing.assert_close(first.lin.weight.grad, theta1.grad)
    torch.testing.assert_close(first.bias.grad, b1.grad)
    assert not torch.allclose(first.lin.weight.grad, ref.convs[0].lin.weight.grad)


def test_one_layer_trains_exactly():
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair(num_layers=1, bias=True)
    model.refresh(x, w, v)
    batch = torch.arange(5, 40)
    F.cross_entropy(model(x[batch], w[batch], v[batch]), data.y[batch]).backward()
    F.cross_entropy(ref(x, w, v)[batch], data.y[batch]).backward()
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad, b.grad)


def test_mode_a_keeps_its_summaries_until_refresh():
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair()
    model.refresh(x, w, v)
    stale = model.summary_1.clone()
    with torch.no_grad():
        model.convs[0].lin.weight.mul_(1.5)
    ref.load_state_dict(model.state_dict())
    batch = torch.arange(10)
    assert torch.equal(model.summary_1, stale)
    assert not torch.allclose(model(x[batch], w[batch], v[batch]), ref(x, w, v)[batch])
    model.refresh(x, w, v)
    torch.testing.assert_close(model(x[batch], w[batch], v[batch]), ref(x, w, v)[batch])


@pytest.mark.parametrize('num_layers', [2, 3])
def test_mode_b_history_stays_consistent(num_layers):
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair(num_layers, bias=True, summary='history')
    model.refresh(x, w, v)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.2)
    ref.load_state_dict(model.state_dict())
    # A batch with a repeated node: its rows become those of the new weights
    # in the first layer's history, and every summary stays Vᵀ (history).
    batch = torch.tensor([3, 7, 7, 20, 41])
    model.train()
    model(x[batch], w[batch], v[batch], batch)
    hidden = (ref.convs[0](x, w, v)).relu()
    torch.testing.assert_close(model.history_1[batch], hidden[batch])
    for layer in range(1, num_layers):
        torch.testing.assert_close(getattr(model, f'summary_{layer}'),
                                   v.T @ getattr(model, f'history_{layer}'))
    # Refreshing every node's rows gives the fresh summaries again.
    model.refresh(x, w, v, index=torch.randperm(N), batch_size=16)
    model.eval()
    torch.testing.assert_close(model(x, w, v), ref(x, w, v), rtol=0, atol=1e-10)


def test_mode_b_writes_the_rows_of_evaluation_mode_under_dropout():
    # A training pass with dropout wrote its perturbed rows: with the weights
    # unchanged, the exact evaluation output drifted (by 0.17 on a unit scale).
    # Reference: TSGCN's evaluation-mode hidden rows, and inference().
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair(3, bias=True, summary='history', dropout=0.5)
    model.refresh(x, w, v)
    batch = torch.arange(30)
    model.train()
    model(x[batch], w[batch], v[batch], batch)
    ref.eval()
    hidden = ref.convs[0](x, w, v).relu()
    # Two float64 routes to rows of order 1-10 (this file's 1e-10 elsewhere);
    # the dropout rows were off by 0.4.
    torch.testing.assert_close(model.history_1[batch], hidden[batch], rtol=0, atol=1e-10)
    model.eval()
    torch.testing.assert_close(model(x, w, v, torch.arange(N)), model.inference(x, w, v),
                               rtol=0, atol=1e-10)


def test_mode_b_gradient_step_after_history_write():
    # Summaries are replaced, not modified in place, so two forward passes
    # can share one backward pass.
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, _ = pair(summary='history')
    model.refresh(x, w, v)
    a, b = torch.arange(0, 10), torch.arange(10, 20)
    loss = model(x[a], w[a], v[a], a).sum() + model(x[b], w[b], v[b], b).sum()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_sparse_features_equal_dense():
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    x = torch.where(x.abs() > 0.7, x, torch.zeros_like(x))
    model, _ = pair(summary='history')
    expected = model.inference(x, w, v, batch_size=11)
    sparse = x.to_sparse_csr()
    torch.testing.assert_close(model.inference(sparse, w, v, batch_size=11), expected)
    index = torch.tensor([5, 0, 59, 5, 33])
    torch.testing.assert_close(model.inference(sparse, w, v, index=index, batch_size=2),
                               expected[index])
    torch.testing.assert_close(gather_rows(sparse, index), x[index])
    torch.testing.assert_close(dense_rows(sparse, 7, 19), x[7:19])
    model.refresh(sparse, w, v, batch_size=11)
    model.refresh(sparse, w, v, index=index, batch_size=2)
    model.eval()
    torch.testing.assert_close(model(x, w, v), expected)


def test_trains_with_pyg_nodeloader_in_both_modes():
    data = graph()
    for summary in ('refresh', 'history'):
        model, ref = pair(summary=summary)
        model.refresh(data.x, data.lowrank_w, data.lowrank_v)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        loader = NodeLoader(data, SeedNodeSampler(), input_nodes=torch.arange(N), batch_size=16,
                            shuffle=True)
        losses = []
        for _ in range(15):
            if summary == 'refresh':
                model.refresh(data.x, data.lowrank_w, data.lowrank_v)
            for batch in loader:
                optimizer.zero_grad()
                out = model(batch.x, batch.lowrank_w, batch.lowrank_v, batch.n_id)
                loss = F.cross_entropy(out, batch.y)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
        assert sum(losses[-4:]) < sum(losses[:4])
        ref.load_state_dict(model.state_dict())
        torch.testing.assert_close(model.inference(data.x, data.lowrank_w, data.lowrank_v),
                                   ref(data.x, data.lowrank_w, data.lowrank_v))


def test_lazy_in_channels_and_float32():
    data = graph(dtype=torch.float32)
    data.lowrank_w, data.lowrank_v = data.lowrank_w.float(), data.lowrank_v.float()
    model = MiniBatchTSGCN(-1, HIDDEN, CLASSES)
    model.refresh(data.x, data.lowrank_w, data.lowrank_v)
    out = model(data.x[:5], data.lowrank_w[:5], data.lowrank_v[:5])
    assert out.shape == (5, CLASSES) and out.dtype == torch.float32
    assert model.convs[0].lin.in_channels == F_IN


def test_argument_and_state_checks():
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    with pytest.raises(ValueError, match="'summary' must be one of"):
        MiniBatchTSGCN(F_IN, HIDDEN, CLASSES, summary='fresh')
    with pytest.raises(ValueError, match="'num_layers'"):
        MiniBatchTSGCN(F_IN, HIDDEN, CLASSES, num_layers=0)
    with pytest.raises(ValueError, match="'dropout'"):
        MiniBatchTSGCN(F_IN, HIDDEN, CLASSES, dropout=1.0)
    model, _ = pair()
    with pytest.raises(RuntimeError, match='call .model.refresh'):
        model(x, w, v)
    with pytest.raises(ValueError, match="'batch_size'"):
        model.refresh(x, w, v, batch_size=0)
    with pytest.raises(ValueError, match='not those of one whole graph'):
        model.refresh(x[:30], w[:30], v[:30])  # rows of a larger graph's factors
    with pytest.raises(ValueError, match="'w' and 'v' have 59 rows"):
        model.refresh(x, w[:59], v[:59])
    model.refresh(x, w, v)
    with pytest.raises(ValueError, match="in mode 'refresh' there are no rows"):
        model.refresh(x, w, v, index=torch.arange(4))
    with pytest.raises(ValueError, match='rank 4'):
        model(x[:3], w[:3, :4], v[:3, :4])
    with pytest.raises(TypeError, match="'x' must be a tensor"):
        model([[1.0]], w, v)
    x_bad = x[:3].clone()
    x_bad[0, 0] = float('inf')
    with pytest.raises(ValueError, match="'x' contains NaN"):
        model(x_bad, w[:3], v[:3])
    model, _ = pair(summary='history')
    model.refresh(x, w, v)
    with pytest.raises(ValueError, match="needs their node indices: pass 'n_id'"):
        model(x[:3], w[:3], v[:3])
    with pytest.raises(ValueError, match='one node index per row'):
        model(x[:3], w[:3], v[:3], torch.arange(4))
    with pytest.raises(ValueError, match=r'outside \[0, 59\]'):
        model(x[:3], w[:3], v[:3], torch.tensor([0, 1, 60]))
    with pytest.raises(TypeError, match="'n_id' must be a 1-D tensor of integer"):
        model(x[:3], w[:3], v[:3], torch.zeros(3))
    with pytest.raises(TypeError, match="'index' must be a 1-D tensor"):
        model.refresh(x, w, v, index=[1, 2])
    with pytest.raises(ValueError, match=r"'index' refers to nodes outside \[0, 59\] of the "
                                         r"graph$"):
        model.inference(x, w, v, index=torch.tensor([3, -1]))
    with pytest.raises(TypeError, match=r"'index' must be .* for a boolean mask pass"):
        model.inference(x, w, v, index=torch.ones(N, dtype=torch.bool))
    model.eval()  # evaluation mode writes nothing and needs no n_id
    before = model.history_1.clone()
    model(x[:3] * 2, w[:3], v[:3])
    assert torch.equal(model.history_1, before)


@CUDA
def test_graph_on_cpu_model_on_cuda():
    data = graph()
    model, ref = pair(summary='history')
    model = model.cuda()
    model.refresh(data.x, data.lowrank_w, data.lowrank_v)  # chunks move to the GPU
    assert model.summary_1.is_cuda and model.history_1.is_cuda
    batch = torch.arange(10)
    model.train()
    out = model(data.x[batch].cuda(), data.lowrank_w[batch].cuda(),
                data.lowrank_v[batch].cuda(), batch.cuda())
    out.sum().backward()
    expected = ref(data.x, data.lowrank_w, data.lowrank_v)
    torch.testing.assert_close(out.detach().cpu(), expected[batch])
    torch.testing.assert_close(
        model.inference(data.x, data.lowrank_w, data.lowrank_v).cpu(), expected)


def test_docstring_example_runs():
    doc = inspect.getdoc(MiniBatchTSGCN)
    blocks = re.findall(r'^( *)\.\. code-block:: python\n\n((?:\1 {4}.*\n|\n)+)', doc + '\n',
                        re.M)
    assert blocks
    for _, body in blocks:
        exec(compile(textwrap.dedent(body), '<MiniBatchTSGCN example>', 'exec'), {})


def test_non_finite_features_raise_before_any_state_changes():
    data = graph()
    x, w, v = data.x.clone(), data.lowrank_w, data.lowrank_v
    model, _ = pair(summary='history')
    model.refresh(x, w, v)
    for value in (float('nan'), float('inf'), -float('inf')):
        summary, history = model.summary_1.clone(), model.history_1.clone()
        bad = x.clone()
        bad[17, 3] = value
        with pytest.raises(ValueError, match="'x' contains NaN or infinite values"):
            model.refresh(bad, w, v)
        with pytest.raises(ValueError, match="'x' contains NaN or infinite values"):
            model.inference(bad, w, v)
        assert torch.equal(model.summary_1, summary) and torch.equal(model.history_1, history)
        with pytest.raises(ValueError, match="'x' contains NaN or infinite values"):
            model.refresh(bad, w, v, index=torch.tensor([2, 17, 30]), batch_size=1)
        # the rows of index are checked before any chunk is written: nothing was
        assert torch.equal(model.summary_1, summary) and torch.equal(model.history_1, history)
    x[5, 0] = float('nan')  # written in place after a successful refresh: still seen
    with pytest.raises(ValueError, match="'x' contains NaN"):
        model.refresh(x, w, v)
    with pytest.raises(ValueError, match='overflows'):
        model.refresh(torch.full((N, F_IN), 1e308, dtype=torch.float64), w, v)
    bad_w = w.clone()
    bad_w[0, 0] = float('nan')
    with pytest.raises(ValueError, match='NaN or infinite'):
        model.refresh(data.x, bad_w, v)
    with pytest.raises(ValueError, match="'x' must be a node feature matrix"):
        model.refresh(data.x[:, 0], w, v)
    with pytest.raises(TypeError, match="'x' must be floating point"):
        model.refresh(data.x.long(), w, v)
    with pytest.raises(ValueError, match='refreshed with a graph of 60'):
        model.refresh(data.x[:50], w[:50], v[:50], index=torch.arange(3))


def test_reduced_precision_history():
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair(bias=True, summary='history')
    model.history_dtype = torch.bfloat16
    model.refresh(x, w, v)
    assert model.history_1.dtype == torch.bfloat16 and model.summary_1.dtype == torch.float64
    # The summary is that of the rows as stored, also after writes.
    torch.testing.assert_close(model.summary_1, v.T @ model.history_1.double())
    model.train()
    batch = torch.tensor([4, 9, 9, 50])
    model(x[batch], w[batch], v[batch], batch)
    model.refresh(x, w, v, index=torch.arange(0, N, 2), batch_size=8)
    torch.testing.assert_close(model.summary_1, v.T @ model.history_1.double())
    model.eval()
    expected = ref(x, w, v)
    assert (model(x, w, v) - expected).abs().max() <= 2e-2 * expected.abs().max()
    with pytest.raises(TypeError, match="'history_dtype' must be a floating-point"):
        MiniBatchTSGCN(F_IN, HIDDEN, CLASSES, summary='history', history_dtype=torch.int8)


def test_history_dtype_is_refused_where_no_rows_are_kept():
    # Mode 'refresh' keeps no rows: a history_dtype there would be ignored.
    with pytest.raises(ValueError, match="'history_dtype' .* mode 'refresh' keeps none"):
        MiniBatchTSGCN(F_IN, HIDDEN, CLASSES, history_dtype=torch.bfloat16)
    data = graph()
    model = MiniBatchTSGCN(F_IN, HIDDEN, CLASSES).double()
    model.history_dtype = torch.bfloat16  # assigned later: refused before any work
    with pytest.raises(ValueError, match="use summary='history' or drop 'history_dtype'"):
        model.refresh(data.x, data.lowrank_w, data.lowrank_v)
    assert model.summaries == [None, None]


def test_summaries_are_computed_in_the_factors_dtype_under_autocast():
    # VᵀX and VᵀH are sums over all N rows whose large gains need the factors'
    # precision: refreshed under autocast they must be the float32 ones, bit for
    # bit (in bfloat16 they are off by ~1e-2 relative), and stay so once cached.
    data = graph(dtype=torch.float32)
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, _ = pair(summary='refresh')
    model = model.float()
    model.refresh(x, w, v, batch_size=17)
    expected = [s.clone() for s in model.summaries]
    model.reset_summaries()
    with torch.autocast('cpu', dtype=torch.bfloat16):
        model.refresh(x, w, v, batch_size=17)
    assert torch.equal(model.summaries[0], expected[0])
    assert model.summaries[1].dtype == torch.float32


@pytest.mark.parametrize('replace', ['reset_parameters', 'load_state_dict'])
def test_weights_replaced_through_a_layer_are_not_summarised_by_old_ones(replace):
    # Only the model's own load_state_dict() and reset_parameters() forgot the
    # summaries: through model.convs[0] the forward ran with summaries of the
    # old weights, 15.5 away from TSGCN's output. After a refresh it is TSGCN's.
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair()
    model.refresh(x, w, v)
    model.eval()
    if replace == 'reset_parameters':
        model.convs[0].reset_parameters()
    else:
        other = MiniBatchTSGCN(F_IN, HIDDEN, CLASSES).double()
        model.convs[0].load_state_dict(other.convs[0].state_dict())
    with pytest.raises(RuntimeError, match=r"a layer's weights were replaced .*model\.refresh"):
        model(x, w, v)
    model.refresh(x, w, v)
    ref.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(x, w, v), ref(x, w, v), rtol=0, atol=1e-10)


def test_a_scale_changed_after_refresh_is_not_summarised_by_the_old_one():
    # The hidden summaries hold the earlier layers' scale: after conv.scale was
    # set, the forward pass used them, 0.29 away from TSGCN's output (of size
    # 0.48), silently. Reference: TSGCN with the new scale, after a refresh.
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair()
    model.refresh(x, w, v)
    model.eval()
    for conv in model.convs:
        conv.scale = 1 / 2.3
    with pytest.raises(RuntimeError, match=r"'convs\[0\]\.scale' was 1 and is now 0\.434783: "
                                           r"call 'model\.refresh"):
        model(x, w, v)
    model.refresh(x, w, v)
    ref = TSGCN(F_IN, HIDDEN, CLASSES, scale=1 / 2.3).double()
    ref.load_state_dict(model.state_dict())
    ref.eval()
    torch.testing.assert_close(model(x, w, v), ref(x, w, v), rtol=0, atol=1e-10)


def test_an_edit_below_the_rounding_of_the_row_checksums_is_not_reused():
    # Two feature scales in float32: rewriting the small column changes no
    # row's weighted sum (1e-6 next to 1e4), but V^T x does change in that
    # column. Reference: TSGCN (full batch) on the edited data.
    data = graph(dtype=torch.float32)
    w, v = data.lowrank_w.float(), data.lowrank_v.float()
    gen = torch.Generator().manual_seed(3)
    x = torch.stack([1e4 * (1 + torch.rand(N, generator=gen)),
                     1e-6 * torch.rand(N, generator=gen)], 1)
    model = MiniBatchTSGCN(2, 4, 3, num_layers=1)
    with torch.no_grad():
        model.convs[0].lin.weight.copy_(torch.tensor([[1e-4, 1e6], [1e-4, -1e6], [0.0, 1e6]]))
    full = TSGCN(2, 4, 3, num_layers=1)
    full.load_state_dict(model.state_dict())
    model.refresh(x, w, v)
    x[:, 1] = 1e-6 * torch.rand(N, generator=gen)
    model.refresh(x, w, v)
    expected = full(x, w, v)
    # float32 rounding of a product through rank-10 factors: 1e-5 of |out| (~5).
    torch.testing.assert_close(model.inference(x, w, v), expected, rtol=0,
                               atol=1e-5 * expected.abs().max().item())
    # V^T x of the edited data, against float64: within float32's rounding of
    # a sum of N products, 2 N eps times the sum of their magnitudes.
    bound = 2 * N * torch.finfo(torch.float32).eps * (v.double().abs().T @ x.double().abs())
    assert ((model.summaries[0].double() - v.double().T @ x.double()).abs() <= bound).all()


def test_inference_mode_leaves_no_inference_tensors_for_training():
    # A validation pass under torch.inference_mode() (before the first
    # refresh(), or refresh() itself in it) must not keep tensors that a later
    # training step cannot save for backward. Reference: the same step after
    # a refresh outside inference mode.
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    batch = torch.arange(16)
    grads = []
    for where in ('inference', 'refresh', None):
        model, _ = pair()
        if where == 'inference':
            with torch.inference_mode():
                model.inference(x, w, v)
        elif where == 'refresh':
            with torch.inference_mode():
                model.refresh(x, w, v)
        if where != 'refresh':
            model.refresh(x, w, v)
        assert not model.summary_0.is_inference() and not model.core_lu.is_inference()
        model.train()
        model(x[batch], w[batch], v[batch], batch).square().sum().backward()
        grads.append(model.convs[0].lin.weight.grad)
    torch.testing.assert_close(grads[0], grads[2], rtol=0, atol=0)
    torch.testing.assert_close(grads[1], grads[2], rtol=0, atol=0)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16, torch.float32])
def test_a_dtype_round_trip_forgets_the_summaries_it_rounded(dtype):
    # .to(dtype) and back casts the kept core and summaries; the parameters
    # are float64 again, but the summaries would hold dtype's rounding.
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair(num_layers=1)
    model.refresh(x, w, v)
    model.to(dtype).double()
    with pytest.raises(RuntimeError, match=r'no summaries since a dtype conversion'):
        model(x, w, v)
    model.refresh(x, w, v)
    ref.load_state_dict(model.state_dict())  # the weights, rounded by the round trip
    torch.testing.assert_close(model.eval()(x, w, v), ref(x, w, v), rtol=0, atol=1e-10)
    model.cpu()  # a move to the same (or another) device keeps them
    assert model.summary_0 is not None


def test_summary_mode_assigned_after_refresh_is_checked():
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, _ = pair()
    model.refresh(x, w, v)
    model.summary = 'history'  # mode 'refresh' kept no rows to write into
    with pytest.raises(RuntimeError, match=r"refreshed in mode 'refresh'.*call "
                                           r"'model.refresh\(x, w, v\)' again"):
        model(x[:4], w[:4], v[:4], torch.arange(4))
    model.summary = 'bogus'
    with pytest.raises(ValueError, match=r"'summary' must be one of \('refresh', 'history'\)"):
        model(x[:4], w[:4], v[:4])
    model.summary = 'history'
    model.refresh(x, w, v)
    model.train()(x[:4], w[:4], v[:4], torch.arange(4))  # rows kept: it writes them


def test_to_empty_forgets_the_summaries():
    # to_empty() keeps the dtype, so the summaries were kept as uninitialised
    # memory and used by the next forward pass.
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, _ = pair(num_layers=1)
    model.refresh(x, w, v)
    model.to_empty(device='cpu')
    with pytest.raises(RuntimeError, match=r'no summaries since to_empty\(\)'):
        model(x, w, v)


#: A kept summary against V^T of the kept history, both float64 sums of N = 60
#: products whose magnitudes sum to about 16 here (max of |V|^T |H|): each
#: sum rounds by at most N * eps64 * 16 = 2e-13 in any order, the summary by the
#: refresh's sum plus a batch's update, so 1e-12 bounds any CPU and thread count.
SUMMARY_TOL = 1e-12


def test_an_interrupted_refresh_of_mode_b_leaves_no_summaries_of_other_rows():
    # refresh() writes the rows into the kept history in place; interrupted after
    # a chunk (Ctrl-C, an out-of-memory error), it left the old summaries with a
    # half-new history (|summary_1 - Vᵀ history_1| = 0.66), which later batches
    # updated as if consistent.
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, _ = pair(summary='history')
    model.refresh(x, w, v, batch_size=20)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    calls = []

    def interrupt(module, args):
        calls.append(None)
        if len(calls) == 3:  # in the second chunk, after the first was written
            raise KeyboardInterrupt
    handle = model.convs[0].lin.register_forward_pre_hook(interrupt)
    with pytest.raises(KeyboardInterrupt):
        model.refresh(x, w, v, batch_size=20)
    handle.remove()
    with pytest.raises(RuntimeError, match=r'no summaries since an interrupted refresh\(\)'):
        model(x[:3], w[:3], v[:3], torch.arange(3))
    model.refresh(x, w, v, batch_size=20)
    torch.testing.assert_close(model.summary_1, v.T @ model.history_1, rtol=0,
                               atol=SUMMARY_TOL)


def test_a_mode_b_pass_under_inference_mode_keeps_normal_summaries():
    # A training-mode pass under torch.inference_mode() (a metric computed without
    # model.eval()) kept an inference tensor as summary_1; a later pass with
    # gradients then raised "Inference tensors cannot be saved for backward".
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, _ = pair(summary='history')
    model.refresh(x, w, v)
    batch = torch.arange(32)
    with torch.inference_mode():
        model(x[batch], w[batch], v[batch], batch)
    assert not model.summary_1.is_inference() and not model.history_1.is_inference()
    torch.testing.assert_close(model.summary_1, v.T @ model.history_1, rtol=0,
                               atol=SUMMARY_TOL)
    model.eval()
    model(x[batch], w[batch], v[batch], batch).sum().backward()
    assert all(p.grad is not None for p in model.convs[-1].parameters())


def test_a_mode_b_write_interrupted_in_its_summary_update_writes_no_rows():
    # _write wrote the rows into the history, then computed the summary's update
    # (a product that can run out of memory): interrupted there, the history held
    # the new rows and the summary the old ones (|summary_1 - V^T history_1| = 5.3),
    # which later batches used without an error.
    from torch.overrides import TorchFunctionMode

    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, _ = pair(summary='history')
    model.refresh(x, w, v)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)

    class FailingUpdate(TorchFunctionMode):  # fails V_B^T (H_B - old rows): [r, B] @ [B, F]
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, '__name__', '') in ('matmul', '__matmul__') \
                    and args[0].shape == (RANK, 32) and args[1].shape == (32, HIDDEN):
                raise MemoryError('out of memory in the summary update')
            return func(*args, **(kwargs or {}))

    batch = torch.arange(32)
    with pytest.raises(MemoryError), FailingUpdate():
        model(x[batch], w[batch], v[batch], batch)
    torch.testing.assert_close(model.summary_1, v.T @ model.history_1, rtol=0,
                               atol=SUMMARY_TOL)


def test_a_write_into_the_kept_buffers_does_not_reach_the_cache_of_inference():
    # The core and V^T X that refresh() keeps as buffers were the tensors of the
    # verified cache inference() reuses: an in-place write into them (a wrapper's
    # broadcast of rank 0's buffers) made inference() 7.5 off without an error.
    data = graph()
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    model, ref = pair()
    model.refresh(x, w, v)
    with torch.no_grad():
        model.summary_0.add_(1.0)
        model.core_lu.mul_(2.0)
    torch.testing.assert_close(model.inference(x, w, v), ref(x, w, v), rtol=0, atol=1e-10)


def test_a_batch_of_another_width_is_named_before_its_rows_are_checked():
    # With n_id (or refresh's index), the rows' check ran first and advised
    # refresh(), which cannot fix a wrong width (review s55/minibatch2).
    data = graph()
    model, _ = pair(summary='history')
    model.refresh(data.x, data.lowrank_w, data.lowrank_v)
    n_id = torch.arange(5)
    wide = torch.cat([data.x, data.x[:, :2]], dim=1)
    message = rf"The input has {F_IN + 2} channels but the layer was built for in_channels"
    with pytest.raises(ValueError, match=message):
        model(wide[:5], data.lowrank_w[:5], data.lowrank_v[:5], n_id=n_id)
    with pytest.raises(ValueError, match=message):
        model.refresh(wide, data.lowrank_w, data.lowrank_v, index=n_id)


def test_a_csr_row_that_stores_a_column_twice_is_summed_as_by_tsgcn():
    # dense_rows/gather_rows kept one of the repeated entries where torch's
    # products sum them: MiniBatchTSGCN's inference was 1.41 off TSGCN's on the
    # same tensor (review s55/minibatch2). Reference: TSGCN on to_dense(), which sums.
    data = graph()
    dense = data.x
    n = dense.size(0)
    crow = torch.arange(0, 2 * F_IN * n + 1, 2 * F_IN)
    col = torch.arange(F_IN).repeat_interleave(2).repeat(n)
    values = (dense / 2).repeat_interleave(2, dim=1).reshape(-1)
    x = torch.sparse_csr_tensor(crow, col, values, (n, F_IN), check_invariants=False)
    torch.testing.assert_close(x.to_dense(), dense)
    model, ref = pair()
    model.refresh(x, data.lowrank_w, data.lowrank_v)
    torch.testing.assert_close(model.inference(x, data.lowrank_w, data.lowrank_v),
                               ref(dense, data.lowrank_w, data.lowrank_v))
    assert torch.equal(gather_rows(x, torch.tensor([3, 1])), dense[[3, 1]])
    assert torch.equal(dense_rows(x, 2, 7), dense[2:7])
