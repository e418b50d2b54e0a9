r"""TSGCNConv against the dense (I + W Vᵀ)⁻¹ X Θ, its Woodbury cache and the
checks of its factors; woodbury_apply, woodbury_core and WoodburyCache
themselves are tested in tests/linalg/test_woodbury.py."""
import copy
import io
import pickle

import pytest
import torch
import torch.distributed as dist

from tests.conftest import CUDA
from tests.distributed.launch import requires_gloo, run_ranks
from tests.nn.helpers import eigen_factors
from torch_geometric_regcn import TSGCN, TSGCNConv
from torch_geometric_regcn.linalg import factors_from_eigenpairs


def dense_reference(conv, x, w, v):
    eye = torch.eye(x.size(0), dtype=torch.float64)
    p = torch.linalg.inv(eye + w.double() @ v.double().T)  # (I + W Vᵀ)⁻¹, the Woodbury identity
    out = p @ (x.double() @ conv.lin.weight.double().T)
    return out if conv.bias is None else out + conv.bias.double()


@pytest.mark.parametrize('bias', [True, False])
def test_matches_dense_formula(bias):
    w, v = eigen_factors()
    x = torch.randn(30, 7, dtype=torch.float64)
    conv = TSGCNConv(7, 4, bias=bias).double()
    if bias:
        torch.nn.init.normal_(conv.bias)
    torch.testing.assert_close(conv(x, w, v), dense_reference(conv, x, w, v))


def test_float32_and_lazy_in_channels():
    w, v = eigen_factors(dtype=torch.float32)
    x = torch.randn(30, 11)
    conv = TSGCNConv(-1, 3)
    out = conv(x, w, v)
    assert out.shape == (30, 3) and out.dtype == torch.float32
    assert conv.lin.weight.shape == (3, 11)
    # float32 against the float64 reference: 30 x 11 products of O(1) terms.
    torch.testing.assert_close(out.double(), dense_reference(conv, x, w, v), rtol=1e-4,
                               atol=1e-5)


def test_gradcheck():
    w, v = eigen_factors(n=12, rank=3)
    x = torch.randn(12, 4, dtype=torch.float64, requires_grad=True)
    w.requires_grad_()
    v.requires_grad_()
    conv = TSGCNConv(4, 2).double()
    assert torch.autograd.gradcheck(lambda *args: conv(*args), (x, w, v))
    params = (conv.lin.weight, conv.bias)
    assert torch.autograd.gradcheck(
        lambda weight, bias: torch.func.functional_call(
            conv, {'lin.weight': weight, 'bias': bias}, (x.detach(), w.detach(), v.detach())),
        params)


def test_core_is_kept_for_the_same_factors_and_rebuilt_for_changed_ones():
    w, v = eigen_factors()
    x = torch.randn(30, 7, dtype=torch.float64)
    conv = TSGCNConv(7, 4).double()
    conv(x, w, v)
    core = conv._woodbury._core
    torch.testing.assert_close(conv(x, w, v), dense_reference(conv, x, w, v))
    assert conv._woodbury._core is core  # same, unmodified factors: not refactorised
    w.mul_(0.5)  # in place: the stored core would now be wrong (eigenvalues halved)
    torch.testing.assert_close(conv(x, w, v), dense_reference(conv, x, w, v))
    assert conv._woodbury._core is not core
    w.data = 0.5 * w.data  # same object and version, new storage
    torch.testing.assert_close(conv(x, w, v), dense_reference(conv, x, w, v))
    w2, v2 = eigen_factors(seed=1)  # new tensors
    torch.testing.assert_close(conv(x, w2, v2), dense_reference(conv, x, w2, v2))


def test_inference_mode_bypasses_the_cache():
    w, v = eigen_factors()
    x = torch.randn(30, 7, dtype=torch.float64)
    conv = TSGCNConv(7, 4).double()
    with torch.inference_mode():
        torch.testing.assert_close(conv(x, w, v), dense_reference(conv, x, w, v))
        w_inf, v_inf = eigen_factors(seed=1)  # inference tensors: no version counter
        torch.testing.assert_close(conv(x, w_inf, v_inf), dense_reference(conv, x, w_inf, v_inf))
    assert conv._woodbury._core is None
    conv(x, w, v).sum().backward()  # no inference tensor was kept for training
    assert conv.lin.weight.grad is not None


def test_copies_and_pickles_drop_the_cached_core():
    w, v = eigen_factors()
    x = torch.randn(30, 7, dtype=torch.float64)
    conv = TSGCNConv(7, 4).double()
    expected = conv(x, w, v)
    buffer = io.BytesIO()
    torch.save(conv, buffer)
    buffer.seek(0)
    for other in (copy.deepcopy(conv), torch.load(buffer, weights_only=False)):
        assert other._woodbury._core is None and conv._woodbury._core is not None
        torch.testing.assert_close(other(x, w, v), expected, rtol=0, atol=0)


def test_rejects_a_singular_core():
    w, v = eigen_factors(n=30, rank=2)
    v = -w @ torch.linalg.inv(w.T @ w)  # V^T W = -I, so I + V^T W = 0
    with pytest.raises(ValueError, match='singular'):
        TSGCNConv(6, 4).double()(torch.randn(30, 6, dtype=torch.float64), w, v)


def test_rejects_w_passed_for_v():
    # conv(x, w, w) ran silently with gains 1 / (1 + |lambda|): W^T W = |Lambda| is diagonal,
    # so the whole-graph check passed. Eigenvalues all negative are no tsGCN operator's top.
    u, _ = torch.linalg.qr(torch.randn(30, 4, dtype=torch.float64,
                                       generator=torch.Generator().manual_seed(0)))
    w, v = factors_from_eigenpairs(torch.tensor([0.7, 0.3, -0.2, 0.1], dtype=torch.float64), u)
    conv = TSGCNConv(7, 4).double()
    x = torch.randn(30, 7, dtype=torch.float64)
    conv(x, w, v)
    with pytest.raises(ValueError, match=r"was 'w' passed for 'v'\? Pass v=data.lowrank_v"):
        conv(x, w, w)

def test_rejects_the_factors_of_a_batch_of_graphs_stacked_by_rows():
    # Each graph's own factors, collated by PyG's Batch: V^T W = -(Lambda_1 +
    # Lambda_2) stays diagonal, so the whole-graph check passes, but W V^T
    # couples the graphs (outputs were off by up to 42.6). Two tsGCN operators
    # with alpha = 1, beta = 0.2 each have a top eigenvalue near 1.2 / 2.2 = 0.545:
    # stacked, about 1.09 > 1, which no tsGCN operator has.
    from torch_geometric.data import Batch

    from torch_geometric_regcn import LowRankInverse
    from torch_geometric_regcn.datasets import contextual_sbm
    graphs = []
    for n in (30, 40):
        g = contextual_sbm(num_nodes=n, num_classes=2, num_features=5, seed=n)
        g.x = g.x.double()
        graphs.append(LowRankInverse(1.0, 0.2, 4, progress=False)(g))
    batch = Batch.from_data_list(graphs)
    conv = TSGCNConv(5, 3).double()
    for g in graphs:
        conv(g.x, g.lowrank_w, g.lowrank_v)  # each graph alone
    stacked = r'eigenvalue 1\.0[89]\d* > 1 of S'
    with pytest.raises(ValueError, match=stacked + '.*several graphs stacked'):
        conv(batch.x, batch.lowrank_w, batch.lowrank_v)
    with pytest.raises(ValueError, match=stacked):
        TSGCN(5, 4, 3).double()(batch.x, batch.lowrank_w, batch.lowrank_v)


def _graphs_with_their_own_factors(sizes, alpha):
    from torch_geometric.data import Batch

    from torch_geometric_regcn import LowRankInverse
    from torch_geometric_regcn.datasets import contextual_sbm
    graphs = []
    for n in sizes:
        g = contextual_sbm(num_nodes=n, num_classes=2, num_features=5, seed=n)
        g.x = g.x.double()
        graphs.append(LowRankInverse(alpha, 0.0, 4, progress=False)(g))
    return graphs, Batch.from_data_list(graphs)


def test_a_batch_of_graphs_with_their_own_factors_takes_its_batch_vector():
    # alpha = 0.4: each graph's top eigenvalue of S is about 0.4 / 1.4 = 0.29, so
    # three graphs stacked imply about 0.86 < 1, which the layer cannot tell from
    # one graph's factors; with 'batch' each graph is propagated with its own.
    # Reference: the dense (I + W_g V_g^T)^-1 X_g Theta of each graph alone.
    graphs, batch = _graphs_with_their_own_factors((30, 45, 21), alpha=0.4)
    conv = TSGCNConv(5, 3).double()
    torch.nn.init.normal_(conv.bias)
    x = batch.x.clone().requires_grad_()
    out = conv(x, batch.lowrank_w, batch.lowrank_v, batch=batch.batch)
    expected = torch.cat([dense_reference(conv, g.x, g.lowrank_w, g.lowrank_v)
                          for g in graphs])
    torch.testing.assert_close(out, expected)  # float64: rounding of r x r solves
    stacked = conv(batch.x, batch.lowrank_w, batch.lowrank_v)  # the same factors, no batch
    assert (stacked - expected).abs().max() > 0.1  # what the batch vector prevents
    torch.testing.assert_close(stacked, dense_reference(conv, batch.x, batch.lowrank_w,
                                                        batch.lowrank_v))
    # The gradient flows to each graph's own features only.
    out[:30].sum().backward()
    assert x.grad[30:].abs().max() == 0 and x.grad[:30].abs().max() > 0
    # The network, and a batch size beyond the last graph (an empty graph).
    model = TSGCN(5, 4, 3).double()
    expected = torch.cat([model(g.x, g.lowrank_w, g.lowrank_v) for g in graphs])
    torch.testing.assert_close(
        model(batch.x, batch.lowrank_w, batch.lowrank_v, batch=batch.batch, batch_size=4),
        expected)


def test_the_batch_vector_is_checked_before_any_work():
    _, batch = _graphs_with_their_own_factors((12, 9), alpha=0.4)
    conv = TSGCNConv(5, 3).double()
    args = (batch.x, batch.lowrank_w, batch.lowrank_v)
    with pytest.raises(TypeError, match="'batch' must be a 1-D int64"):
        conv(*args, batch=batch.batch.double())
    with pytest.raises(ValueError, match=r"one graph index per node \(21\), got 20"):
        conv(*args, batch=batch.batch[1:])
    with pytest.raises(ValueError, match='non-decreasing'):
        conv(*args, batch=batch.batch.flip(0))
    with pytest.raises(ValueError, match="refers to graph 1 but 'batch_size' is 1"):
        conv(*args, batch=batch.batch, batch_size=1)
    core = conv._core(*args)  # one graph's core, with a batch
    with pytest.raises(ValueError, match="'core' is the core of one graph, but 'batch' holds 2"):
        conv(*args, core=core, batch=batch.batch)
    batched = conv._core(*args, batch=batch.batch, batch_size=2)
    with pytest.raises(ValueError, match="holds 2 cores, one per graph of a batch"):
        conv(*args, core=batched)
    torch.testing.assert_close(conv(*args, core=batched, batch=batch.batch),
                               conv(*args, batch=batch.batch))


def test_a_batch_vector_of_another_dtype_or_device_or_a_lone_batch_size_is_refused():
    # Before the fix: int16/uint8 passed the check and failed in PyG's scatter after the
    # projection; a batch on another device failed inside the gather ('meta': "Cannot
    # copy out of meta tensor"); 'batch_size' without 'batch' was ignored (the graphs
    # coupled); no rows with 'batch' asked for a 'batch_size' nobody passed.
    _, batch = _graphs_with_their_own_factors((12, 9), alpha=0.4)
    conv = TSGCNConv(5, 3).double()
    args = (batch.x, batch.lowrank_w, batch.lowrank_v)
    for dtype in (torch.int16, torch.uint8):
        with pytest.raises(TypeError, match=r"'batch' must be a 1-D int64 \(or int32\)"):
            conv(*args, batch=batch.batch.to(dtype))
    torch.testing.assert_close(conv(*args, batch=batch.batch.int()),
                               conv(*args, batch=batch.batch))
    with pytest.raises(ValueError, match="'batch' is on meta but .* on cpu"):
        conv(*args, batch=batch.batch.to('meta'))
    with pytest.raises(ValueError, match="'batch_size' was given without 'batch'"):
        conv(*args, batch_size=2)
    empty = (torch.randn(0, 5, dtype=torch.float64), torch.randn(0, 4, dtype=torch.float64),
             torch.randn(0, 4, dtype=torch.float64))
    assert conv(*empty, batch=torch.zeros(0, dtype=torch.long)).shape == (0, 3)


def test_rejects_non_finite_factors():
    w, v = eigen_factors()
    w[3, 1] = float('nan')
    with pytest.raises(ValueError, match='NaN or infinite'):
        TSGCNConv(6, 4).double()(torch.randn(30, 6, dtype=torch.float64), w, v)


def test_reset_parameters_and_repr():
    conv = TSGCNConv(5, 3)
    torch.nn.init.ones_(conv.bias)
    before = conv.lin.weight.clone()
    conv.reset_parameters()
    assert torch.equal(conv.bias, torch.zeros(3))
    assert not torch.equal(before, conv.lin.weight)
    assert repr(conv) == 'TSGCNConv(5, 3)'
    assert repr(TSGCNConv(-1, 3)) == 'TSGCNConv(-1, 3)'


def test_torch_compile():
    w, v = eigen_factors(dtype=torch.float32)
    x = torch.randn(30, 6)
    conv = TSGCNConv(6, 4)
    compiled = torch.compile(conv, fullgraph=True)
    torch.testing.assert_close(compiled(x, w, v), conv(x, w, v), rtol=1e-5, atol=1e-5)


def test_torch_compile_with_batches_of_two_sizes():
    # A DataLoader's last batch holds fewer graphs: the compiled layer must not
    # keep the first batch's number of graphs or block sizes. The blocks follow
    # the graphs' sizes, read on the host: a graph break (no fullgraph=True).
    from torch_geometric.data import Batch
    graphs, batch = _graphs_with_their_own_factors((12, 9, 15), alpha=0.4)
    conv = TSGCNConv(5, 3).double()
    compiled = torch.compile(conv)
    for b in (batch, Batch.from_data_list(graphs[:2])):
        args = (b.x, b.lowrank_w, b.lowrank_v)
        torch.testing.assert_close(
            compiled(*args, batch=b.batch, batch_size=b.num_graphs),
            conv(*args, batch=b.batch))
    # fullgraph=True is refused by a message that says why (not dynamo's guard on
    # a data-dependent size deep inside graph_blocks).
    with pytest.raises(torch._dynamo.exc.Unsupported, match='grouped by size on the host'):
        torch.compile(conv, fullgraph=True, backend='eager')(*args, batch=b.batch,
                                                             batch_size=b.num_graphs)


@pytest.mark.parametrize('shapes, message', [
    (((30,), (30, 5), (30, 5)), "'x' must be a node feature matrix"),
    (((30, 6), (30, 5), (30, 4)), "'w' and 'v' must both have shape"),
    (((30, 6), (30,), (30,)), "'w' and 'v' must both have shape"),
    (((29, 6), (30, 5), (30, 5)), 'recompute the factors'),
])
def test_rejects_bad_shapes(shapes, message):
    conv = TSGCNConv(6, 4)
    with pytest.raises(ValueError, match=message):
        conv(*(torch.randn(*s) for s in shapes))


@CUDA
def test_rejects_tensors_on_different_devices():
    conv = TSGCNConv(6, 4)
    w = torch.randn(30, 5, device='cuda')
    with pytest.raises(ValueError, match="one device.*'w' on cuda"):
        conv(torch.randn(30, 6), w, torch.randn(30, 5))


def test_rejects_meta_tensors_before_comparing_devices():
    # A meta tensor is named as such (tests/reliability/test_tsgcn_factors.py
    # has the other cases), not as a tensor on another device.
    conv = TSGCNConv(6, 4)
    w = torch.randn(30, 5, device='meta')
    with pytest.raises(ValueError, match="'w' is on the 'meta' device"):
        conv(torch.randn(30, 6), w, torch.randn(30, 5))


@CUDA
def test_cuda_matches_cpu():
    w, v = eigen_factors(dtype=torch.float32)
    x = torch.randn(30, 6)
    conv = TSGCNConv(6, 4)
    expected = conv(x, w, v)
    got = conv.cuda()(x.cuda(), w.cuda(), v.cuda())
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)


# -- a process group is shared by copies, never pickled --------------------------------

class _Handle:
    r"""Stands for a :class:`torch.distributed.ProcessGroup`: a handle that refuses
    to be copied or pickled, as the real one does."""
    def __deepcopy__(self, memo):
        raise TypeError("cannot pickle 'torch._C._distributed_c10d.ProcessGroup' object")

    def __reduce__(self):
        raise TypeError("cannot pickle 'torch._C._distributed_c10d.ProcessGroup' object")


def _layers(model):
    return list(model.convs) if isinstance(model, TSGCN) else [model]


PICKLE_ERROR = (r"^TSGCNConv holds a torch.distributed process group in 'group', which cannot "
                r"be pickled .* save 'state_dict\(\)' instead and build the module with group= "
                r"in the process that loads it, or copy it within this process with "
                r"copy.deepcopy, which shares the group$")


@pytest.mark.parametrize('make', [lambda: TSGCNConv(7, 4), lambda: TSGCN(7, 8, 4)],
                         ids=['TSGCNConv', 'TSGCN'])
def test_a_deepcopy_shares_the_group_and_pickling_names_it(make):
    # Was: copy.deepcopy raised "cannot pickle 'ProcessGroup' object" (EMA and best-model
    # copies in DDP). The group is set after construction: check_group wants a real one.
    w, v = eigen_factors()
    x = torch.randn(30, 7, dtype=torch.float64)
    model = make().double()
    expected = model(x, w, v).detach()
    handle = _Handle()
    for conv in _layers(model):
        conv.group = handle
    copied = copy.deepcopy(model)
    assert all(conv.group is handle for conv in _layers(copied))
    assert all(conv.group is handle for conv in _layers(copy.copy(model)))
    for mine, theirs in zip(model.parameters(), copied.parameters()):  # copied, not shared
        assert torch.equal(mine, theirs) and mine.data_ptr() != theirs.data_ptr()
    for target in (model, copied):
        with pytest.raises(TypeError, match=PICKLE_ERROR):
            pickle.dumps(target)
        with pytest.raises(TypeError, match=PICKLE_ERROR):
            torch.save(target, io.BytesIO())
    # Without the (fake) group both compute what the original computed, to the bit.
    for conv in _layers(model) + _layers(copied):
        conv.group = None
    assert torch.equal(copied(x, w, v), expected)
    with torch.no_grad():  # and a step on the copy leaves the original as it was
        next(copied.parameters()).mul_(2)
    assert torch.equal(model(x, w, v), expected)
    assert torch.equal(pickle.loads(pickle.dumps(model))(x, w, v), expected)  # no group


def _copies_on_two_ranks(rank, world_size):
    r"""TSGCN on this rank's rows, its deepcopy (an EMA or best-model copy) and a
    pickle attempt, on a real gloo group."""
    from torch.nn.parallel import DistributedDataParallel
    group = dist.group.WORLD
    w, v = eigen_factors(n=40, rank=6)
    x = torch.randn(40, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    rows = slice(rank * 20, (rank + 1) * 20)
    torch.manual_seed(0)
    model = TSGCN(7, 8, 4, group=group).double()
    ema = copy.deepcopy(model)
    out = {'shared': all(a.group is b.group is group
                         for a, b in zip(ema.convs, model.convs))}
    out['model'] = model(x[rows], w[rows], v[rows]).detach()
    out['copy'] = ema(x[rows], w[rows], v[rows]).detach()
    ddp = DistributedDataParallel(model)  # a training step of the original only
    ddp(x[rows], w[rows], v[rows]).square().sum().backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    out['copy_after_step'] = ema(x[rows], w[rows], v[rows]).detach()
    out['best'] = copy.deepcopy(model)(x[rows], w[rows], v[rows]).detach()
    out['trained'] = model(x[rows], w[rows], v[rows]).detach()
    try:
        pickle.dumps(ema)
        out['pickle'] = 'pickled'
    except TypeError as error:
        out['pickle'] = str(error)
    return out


@pytest.mark.slow
@requires_gloo
def test_a_deepcopy_on_a_process_group_computes_what_the_original_computes():
    results = run_ranks(_copies_on_two_ranks, 2, timeout=120.0)
    w, v = eigen_factors(n=40, rank=6)
    x = torch.randn(40, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    expected = TSGCN(7, 8, 4).double()(x, w, v).detach()  # one process, the same weights
    for r in results:
        assert r['shared']
        assert torch.equal(r['copy'], r['model'])  # the same collectives, the same bits
        assert torch.equal(r['copy_after_step'], r['model'])  # the copy did not train
        assert torch.equal(r['best'], r['trained'])
        assert not torch.equal(r['trained'], r['model'])
        assert 'cannot be pickled' in r['pickle'] and "'group'" in r['pickle']
    # V^T X summed over two ranks instead of one: float64 rounding of 40-term sums.
    torch.testing.assert_close(torch.cat([r['model'] for r in results]), expected,
                               rtol=1e-12, atol=1e-14)


def test_the_scale_travels_with_the_state_dict():
    # The authors' scale 1 / (1 + alpha + beta) changes the output; a state of
    # TSGCN(scale=1/2.2) loaded into TSGCN() reported every key matched and gave
    # outputs 3.73 apart. Now the state holds it; a state saved before it did
    # (no '_extra_state') loads with strict=True and keeps the layer's own.
    w, v = eigen_factors()
    x = torch.randn(30, 7, dtype=torch.float64)
    saved = TSGCN(7, 8, 3, scale=1 / 2.2).double()
    loaded = TSGCN(7, 8, 3).double()
    loaded.load_state_dict(saved.state_dict())
    assert [conv.scale for conv in loaded.convs] == [1 / 2.2] * 2
    torch.testing.assert_close(loaded(x, w, v), saved(x, w, v), rtol=0, atol=0)
    old = {k: t for k, t in saved.state_dict().items() if not k.endswith('_extra_state')}
    again = TSGCN(7, 8, 3).double()
    again.load_state_dict(old)
    assert [conv.scale for conv in again.convs] == [1.0] * 2
    with pytest.raises(ValueError, match=r"extra state of TSGCNConv must hold its 'scale'"):
        again.load_state_dict({**old, 'convs.0._extra_state': {'scale': -1.0}})


def test_a_refused_scale_changes_nothing_of_the_layer():
    # The extra state is loaded after the layer's own parameters: a refused scale
    # left a new bias behind without counting a replacement, so MiniBatchTSGCN
    # reused summaries of the old one (4.6 off).
    conv = TSGCNConv(7, 3).double()
    bias, replaced = conv.bias.detach().clone(), conv._replaced
    bad = {**conv.state_dict(), 'bias': torch.ones(3, dtype=torch.float64),
           '_extra_state': {'scale': -1.0}}
    with pytest.raises(ValueError, match=r"extra state of TSGCNConv must hold its 'scale'"):
        conv.load_state_dict(bad)
    assert torch.equal(conv.bias, bias) and conv._replaced == replaced and conv.scale == 1.0


def test_a_refused_scale_of_a_later_layer_loads_no_layer_of_the_model():
    # torch loads the layers in order: the first was replaced before the second refused.
    from torch_geometric_regcn import MiniBatchTSGCN
    for cls in (TSGCN, MiniBatchTSGCN):
        torch.manual_seed(0)
        model = cls(7, 16, 3)
        before = {k: t.clone() for k, t in model.state_dict().items() if torch.is_tensor(t)}
        other = {**cls(7, 16, 3).state_dict(), 'convs.1._extra_state': {'scale': -1.0}}
        with pytest.raises(ValueError, match=r"extra state of TSGCNConv must hold its 'scale'"):
            model.load_state_dict(other)
        assert all(torch.equal(t, model.state_dict()[k]) for k, t in before.items())
