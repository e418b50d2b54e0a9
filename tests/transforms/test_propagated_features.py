"""PropagateFeatures against dense float64 propagations, mini-batch training on
its output through a DataLoader and SeedNodeLoader, and the mini-batch
example run as a script."""
import os.path as osp
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch_geometric.data import Data

from tests.conftest import dense_normalized_adjacency, messy_graph
from torch_geometric_regcn import LowRankInverse, PropagateFeatures
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.loader import SeedNodeLoader
from torch_geometric_regcn.regularizers import APPNPRegularizer
from torch_geometric_regcn.regularizers.graph import build_graph
from torch_geometric_regcn.transforms.propagated_features import _column_block

N = 40
REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def graph(seed=0, n=N, features=8):
    gen = torch.Generator().manual_seed(seed)
    return Data(x=torch.randn(n, features, dtype=torch.float64, generator=gen),
                edge_index=messy_graph(n, num_edges=3 * n, seed=seed), num_nodes=n,
                semantic_edge_index=messy_graph(n, num_edges=9 * n // 4, seed=seed + 100),
                y=torch.randint(0, 3, (n,), generator=gen))


def dense_lowrank(w, v):
    r"""The dense P = I - W (I_r + VᵀW)⁻¹ Vᵀ."""
    eye = torch.eye(w.size(0), dtype=w.dtype)
    return eye - w @ torch.linalg.solve(torch.eye(w.size(1), dtype=w.dtype) + v.T @ w, v.T)


def dense_tsgcn(data, alpha, beta):
    r"""The dense (I - S)⁻¹ = (1 + α + β)(I + α L̃_G + β L̃_X)⁻¹."""
    n = data.num_nodes
    eye = torch.eye(n, dtype=torch.float64)
    lap_g = eye - dense_normalized_adjacency(data.edge_index, n)
    lap_x = eye - dense_normalized_adjacency(data.semantic_edge_index, n)
    return (1 + alpha + beta) * torch.linalg.inv(eye + alpha * lap_g + beta * lap_x)


def relative(got, expected):
    return float((got - expected).norm() / expected.norm())


@pytest.mark.parametrize('hops', [1, 3])
@pytest.mark.parametrize('block_size', [1, 3, 64])
def test_lowrank_equals_dense_powers(hops, block_size):
    data = LowRankInverse(1.0, 0.3, rank=12, progress=False)(graph())
    out = PropagateFeatures(hops, block_size=block_size)(data.clone())
    p = dense_lowrank(data.lowrank_w, data.lowrank_v)
    expected = data.x
    for k in range(1, hops + 1):
        expected = p @ expected
        assert out[f'x{k}'].dtype == torch.float64
        torch.testing.assert_close(out[f'x{k}'], expected, rtol=1e-12, atol=1e-12)
    assert f'x{hops + 1}' not in out
    torch.testing.assert_close(out.x, data.x)  # x itself is left as it is


@pytest.mark.parametrize('alpha, beta', [(1.0, 0.3), (1.0, 0.0), (0.0, 0.7)])
def test_full_rank_and_cg_equal_the_exact_inverse(alpha, beta):
    data = graph()
    expected_p = dense_tsgcn(data, alpha, beta)
    expected = expected_p @ (expected_p @ data.x)
    full = LowRankInverse(alpha, beta, rank=N, tol=1e-12, progress=False)(data.clone())
    out = PropagateFeatures(2)(full)
    assert relative(out.x2, expected) <= 1e-6
    out = PropagateFeatures(2, solver='cg', alpha=alpha, beta=beta, tol=1e-12,
                            block_size=3)(data.clone())
    assert relative(out.x1, expected_p @ data.x) <= 1e-10
    assert relative(out.x2, expected) <= 1e-10
    assert 'lowrank_w' not in out  # CG needs no factors


def test_other_regularizers_and_solvers():
    data = graph()
    regularizer = APPNPRegularizer(K=10, alpha=0.1)
    ops = build_graph(regularizer, data.edge_index, N, dtype=torch.float64, solver='closed')
    expected = torch.linalg.solve(regularizer.regularizer_matrix(ops), data.x)
    for solver in ('cg', 'closed'):
        out = PropagateFeatures(solver=solver, regularizer='appnp', K=10, alpha=0.1,
                                tol=1e-12)(data.clone())
        assert relative(out.x1, expected) <= 1e-10
    # The authors' scaling R⁻¹ = P / (1 + α + β) with the same factors.
    data = LowRankInverse(1.0, 0.3, rank=12, progress=False)(data)
    plain = PropagateFeatures()(data.clone()).x1
    scaled = PropagateFeatures(regularizer='tsgcn', alpha=1.0, beta=0.3,
                               normalize=False)(data.clone()).x1
    torch.testing.assert_close(scaled, plain / 2.3)


@pytest.mark.parametrize('layout', ['csr', 'coo'])
def test_sparse_features_equal_dense(layout):
    data = LowRankInverse(1.0, 0.3, rank=12, progress=False)(graph(features=10))
    data.x[data.x.abs() < 0.8] = 0.0
    dense = PropagateFeatures(2, block_size=4)(data.clone())
    sparse = data.clone()
    sparse.x = data.x.to_sparse_csr() if layout == 'csr' else data.x.to_sparse()
    sparse = PropagateFeatures(2, block_size=4)(sparse)
    for key in ('x1', 'x2'):
        assert sparse[key].layout == torch.strided
        torch.testing.assert_close(sparse[key], dense[key], rtol=1e-12, atol=1e-12)
    csc = data.x.to_sparse_csc()
    torch.testing.assert_close(_column_block(csc, 3, 7, torch.float64), data.x[:, 3:7])


def test_float32_and_half_precision():
    data = LowRankInverse(1.0, 0.3, rank=12, progress=False)(graph())
    exact = PropagateFeatures()(data.clone()).x1
    single = data.clone()
    single.x, single.lowrank_w, single.lowrank_v = (t.float() for t in
                                                    (data.x, data.lowrank_w, data.lowrank_v))
    out = PropagateFeatures(block_size=5)(single).x1
    assert out.dtype == torch.float32
    assert relative(out.double(), exact) <= 1e-5
    half = single.clone()
    half.x = single.x.half()
    out = PropagateFeatures()(half).x1  # solved in float32, cast back
    assert out.dtype == torch.float16
    assert relative(out.double(), exact) <= 1e-2


def test_prefix_and_several_regularizers_compose():
    data = LowRankInverse(1.0, 0.3, rank=12, progress=False)(graph())
    data = PropagateFeatures(1, prefix='lowrank_x')(data)
    data = PropagateFeatures(1, solver='cg', alpha=1.0, beta=0.3, prefix='exact_x')(data)
    assert data.lowrank_x1.shape == data.exact_x1.shape == (N, 8)
    assert 'x1' not in data


def test_argument_checks_before_any_work():
    with pytest.raises(ValueError, match="'hops'"):
        PropagateFeatures(0)
    with pytest.raises(ValueError, match="'block_size'"):
        PropagateFeatures(block_size=0)
    with pytest.raises(ValueError, match="Unknown solver"):
        PropagateFeatures(solver='direct')
    with pytest.raises(ValueError, match="cannot use solver='lowrank'"):
        PropagateFeatures(regularizer='gcn')
    with pytest.raises(ValueError, match="'tol'"):
        PropagateFeatures(solver='cg', tol=0.0)
    with pytest.raises(ValueError, match="'max_iter'"):
        PropagateFeatures(solver='cg', max_iter=0)
    with pytest.raises(ValueError, match="'prefix'"):
        PropagateFeatures(prefix='1x')
    with pytest.raises(TypeError, match='no coefficient'):
        PropagateFeatures(solver='cg', gamma=1.0)
    # The factors hold their coefficients: these were accepted, shown in the
    # repr, and ignored (alpha=50 propagated as LowRankInverse's alpha=1).
    with pytest.raises(ValueError, match=r"^\['alpha', 'beta'\] would be ignored: "
                                         r"solver='lowrank' of TSGCNRegularizer does not "
                                         r"read them \(the factors of LowRankInverse"):
        PropagateFeatures(alpha=50.0, beta=0.0)
    with pytest.raises(ValueError, match=r"^\['K'\] would be ignored: solver='cg'"):
        PropagateFeatures(solver='cg', K=5)
    # Without normalize they set the gain 1 / (1 + alpha + beta): read.
    PropagateFeatures(alpha=1.0, beta=0.3, normalize=False)
    # DAGNN's gate would propagate with its random start (two transforms
    # differed by 1.9 on one graph): refused, its Neumann weights accepted.
    with pytest.raises(ValueError, match=r"has trainable parts \['gate.weight', 'gate.bias'\]"
                                         r".*adaptive=False"):
        PropagateFeatures(solver='series', regularizer='dagnn')
    PropagateFeatures(solver='series', regularizer='dagnn', adaptive=False)
    trained = R.get('appnp', alpha=0.2).learn('alpha')  # learned, then frozen: accepted
    PropagateFeatures(solver='cg', regularizer=trained.requires_grad_(False))
    data = graph()
    with pytest.raises(ValueError, match="needs the factors"):
        PropagateFeatures()(data.clone())
    data.x[0, 0] = float('nan')
    with pytest.raises(ValueError, match="'data.x' contains NaN"):
        PropagateFeatures(solver='cg')(data)
    # A NaN in the last column block is found before any block is propagated.
    data.x[0, 0] = 1.0
    data.x[0, -1] = float('inf')
    transform = PropagateFeatures(solver='cg', block_size=1)
    calls = []
    propagate = transform.regularizer.propagate
    transform.regularizer.propagate = lambda *args: calls.append(1) or propagate(*args)
    with pytest.raises(ValueError, match="'data.x' contains NaN or infinite"):
        transform(data)
    assert not calls
    del data.x
    with pytest.raises(ValueError, match="needs node features"):
        PropagateFeatures(solver='cg')(data)
    assert repr(PropagateFeatures(2)) == ("PropagateFeatures(hops=2, solver='lowrank', "
                                          "regularizer=TSGCNRegularizer(alpha=1.0, beta=0.2, "
                                          "k=10, K=10, normalize=True))")
    assert repr(PropagateFeatures(2, tol=1e-8, prefix='h')).endswith(", tol=1e-08, prefix='h')")


def test_a_prefix_of_ones_own_never_replaces_an_attribute():
    # x11 matched the default names x1, x2, ...: prefix='x1' overwrote a
    # user's x11 silently, where any other prefix of one's own raises.
    data = Data(x=torch.randn(20, 3, dtype=torch.float64),
                edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=20)
    data.x11 = torch.randn(20, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="would overwrite 'data.x11'"):
        PropagateFeatures(1, solver='cg', regularizer='appnp', prefix='x1')(data)


def mlp_inputs(data, keys):
    return torch.cat([data[key] for key in keys], dim=-1).float()


def test_mlp_trains_in_mini_batches_with_dataloader_and_seed_node_loader():
    data = LowRankInverse(1.0, 0.3, rank=12, progress=False)(graph(n=120))
    data = PropagateFeatures(2)(data)
    keys = ['x', 'x1', 'x2']
    train = torch.arange(0, 120, 2)
    # SeedNodeLoader slices the propagated features with x (shuffled, the last batch short).
    loader = SeedNodeLoader(data, input_nodes=train, batch_size=16, shuffle=True)
    seen = []
    for batch in loader:
        for key in keys:
            assert torch.equal(batch[key], data[key][batch.n_id]), key
        seen.append(batch.n_id)
    assert torch.equal(torch.cat(seen).sort().values, train)
    # Any MLP then trains with a plain DataLoader over node indices.
    torch.manual_seed(0)
    features = mlp_inputs(data, keys)
    mlp = torch.nn.Sequential(torch.nn.Linear(24, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    optimizer = torch.optim.Adam(mlp.parameters(), lr=0.01)
    first = F.cross_entropy(mlp(features[train]), data.y[train]).item()
    for _ in range(30):
        for index in DataLoader(train, batch_size=16, shuffle=True):
            optimizer.zero_grad()
            F.cross_entropy(mlp(features[index]), data.y[index]).backward()
            optimizer.step()
    assert F.cross_entropy(mlp(features[train]), data.y[train]).item() < first


def test_docstring_example_runs():
    import inspect
    import re
    import textwrap
    doc = inspect.getdoc(PropagateFeatures)
    blocks = re.findall(r'^( *)\.\. code-block:: python\n\n((?:\1 {4}.*\n|\n)+)', doc + '\n',
                        re.M)
    assert blocks
    for _, body in blocks:
        exec(compile(textwrap.dedent(body), '<PropagateFeatures example>', 'exec'), {})


@pytest.mark.slow
def test_minibatch_example_runs_offline():
    out = subprocess.run([sys.executable, 'examples/minibatch.py', '--nodes', '1500',
                          '--epochs', '10'], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    for name in ('full batch', 'mode A', 'mode B', 'MLP on'):
        assert name in out.stdout, out.stdout


def test_features_that_overflow_the_dtype_of_x_are_refused():
    # float16 x: propagated in float32, stored back in float16, where values
    # above 65504 turned into infinities without a word. tsGCN's P = (1 +
    # alpha)(I + alpha L~)^-1 doubles a constant at alpha = 1: 3e4, 6e4, 1.2e5.
    ei = torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]])
    data = Data(x=torch.full((3, 2), 3e4, dtype=torch.float16), edge_index=ei)
    transform = PropagateFeatures(hops=2, solver='cg', alpha=1.0, beta=0.0)
    with pytest.raises(ValueError, match="exceed the range of 'data.x' \\(torch.float16"):
        transform(data)


def test_a_batch_of_graphs_with_their_own_factors_is_refused():
    # Factors of each graph stacked by rows: V^T W stays diagonal (the layers'
    # check of sliced factors passes), but W V^T couples the graphs.
    from torch_geometric.data import Batch
    graphs = [LowRankInverse(1.0, 0.3, rank=5, progress=False)(graph(seed, n=n))
              for seed, n in ((0, 20), (1, 24))]
    batch = Batch.from_data_list(graphs)
    with pytest.raises(ValueError, match=r'^PropagateFeatures got a Batch of 2 graphs'):
        PropagateFeatures()(batch)
    with pytest.raises(ValueError, match=r'^PropagateFeatures got a Batch of 2 graphs'):
        PropagateFeatures(solver='cg', alpha=1.0, beta=0.3, k=3)(
            Batch.from_data_list([g.clone() for g in graphs]).clone().update(
                {'semantic_edge_index': None}))
    # with each graph's semantic graph, cg propagates the block-diagonal operator
    out = PropagateFeatures(solver='cg', alpha=1.0, beta=0.3, tol=1e-12)(batch).x1
    per_graph = torch.cat([PropagateFeatures(solver='cg', alpha=1.0, beta=0.3, tol=1e-12)(g).x1
                           for g in graphs])
    torch.testing.assert_close(out, per_graph, rtol=1e-9, atol=1e-10)


def test_factors_of_a_batch_as_a_whole_propagate_the_block_diagonal_operator():
    # LowRankInverse on the Batch (beta = 0: no kNN search) factorises the
    # block-diagonal operator of the union: the factors are the batch's own, not
    # collated from the graphs, and propagate it (dense reference, full rank).
    from torch_geometric.data import Batch

    from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator
    batch = Batch.from_data_list([graph(seed, n=n) for seed, n in ((0, 20), (1, 24))])
    batch = LowRankInverse(1.0, 0.0, rank=44, progress=False, tol=1e-12)(batch)
    out = PropagateFeatures()(batch).x1
    s = tsgcn_operator(batch, 1.0, 0.0).to_dense()
    expected = torch.linalg.solve(torch.eye(44, dtype=s.dtype) - s, batch.x.to(s.dtype))
    # eigenpairs to 1e-12 of ||S|| <= 1, gains 1 / (1 - lambda) <= 2: ~1e-11 off
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-9)


def test_factors_recomputed_for_a_batch_of_graphs_with_their_own_are_not_taken_for_collated():
    # Each graph's factors collated, then LowRankInverse on the Batch (beta = 0):
    # the factors are the batch's own now, and propagate the block-diagonal operator.
    from torch_geometric.data import Batch

    from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator
    graphs = [LowRankInverse(1.0, 0.0, rank=5, progress=False)(graph(seed, n=n))
              for seed, n in ((0, 20), (1, 24))]
    batch = LowRankInverse(1.0, 0.0, rank=44, progress=False, tol=1e-12)(
        Batch.from_data_list(graphs))
    out = PropagateFeatures()(batch).x1
    s = tsgcn_operator(batch, 1.0, 0.0).to_dense()
    expected = torch.linalg.solve(torch.eye(44, dtype=s.dtype) - s, batch.x.to(s.dtype))
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-9)  # as the test above
    assert 'lowrank_w' not in batch.to_data_list()[0]  # not sliced into per-graph factors


def test_factors_recomputed_for_a_batch_leave_the_callers_batch_collated():
    # LowRankInverse gets a shallow copy of the Batch (BaseTransform.__call__), which
    # shares '_slice_dict' with the caller's: editing it in place made the caller's
    # Batch, still holding each graph's own factors, pass PropagateFeatures (2.4 off)
    # and lose them in to_data_list().
    from torch_geometric.data import Batch
    graphs = [LowRankInverse(0.4, 0.0, rank=5, progress=False)(graph(seed, n=n))
              for seed, n in ((0, 20), (1, 24))]
    batch = Batch.from_data_list(graphs)
    whole = LowRankInverse(0.4, 0.0, rank=44, progress=False, tol=1e-12)(batch)
    assert 'lowrank_w' not in whole.to_data_list()[0]
    assert torch.equal(batch.to_data_list()[1].lowrank_w, graphs[1].lowrank_w)
    with pytest.raises(ValueError, match="collated from each graph's own"):
        PropagateFeatures()(batch)


@pytest.mark.parametrize('name, solver', [('elastic', 'emp'), ('pgnn', 'irls'),
                                          ('robust', 'irls'), ('airgnn', 'amp')])
def test_a_non_quadratic_regularizer_propagates_all_columns_at_once(name, solver):
    # Their reweighting reads whole rows of X: propagated 64 (here 3) columns at
    # a time, each block got its own weights, 0.1-0.3 off the regulariser on X
    # and a higher energy (review s55/transforms2). Reference: the regulariser's
    # own propagation of the whole X on the same graph.
    data = graph(features=8)
    reg = R.get(name)
    out = PropagateFeatures(solver=solver, regularizer=reg, block_size=3)(data.clone()).x1
    expected = reg.propagate(data.x, build_graph(reg, data.edge_index, N, None, torch.float64),
                             solver)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_block_size_is_in_the_repr():
    # CG stops per block, so the output depends on it: PyG's pre_transform check
    # compares reprs (review s55/transforms2).
    assert 'block_size=3' in repr(PropagateFeatures(solver='cg', alpha=1.0, beta=0.2,
                                                    block_size=3))
    assert 'block_size' not in repr(PropagateFeatures(solver='cg', alpha=1.0, beta=0.2))


def test_lowrank_without_normalize_needs_the_factors_coefficients():
    # normalize=False scales by 1 / (1 + alpha + beta): without them the defaults
    # (1, 0.2) were used for factors of (1.5, 0), 0.23 off (review s55/transforms2).
    with pytest.raises(ValueError, match=r"pass \['alpha', 'beta'\] \(those given to "
                                         r"LowRankInverse\)"):
        PropagateFeatures(normalize=False)
    data = LowRankInverse(1.5, 0.0, N)(graph())
    out = PropagateFeatures(normalize=False, alpha=1.5, beta=0.0)(data.clone()).x1
    expected = dense_tsgcn(data, 1.5, 0.0) / 2.5 @ data.x
    assert relative(out, expected) < 1e-10
