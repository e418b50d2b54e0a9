r"""Every public entry point rejects bad input before any work, with an error
that names the culprit (the fault classes of docs/reliability.md)."""
import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from torch_geometric_regcn import (
    TSGCN,
    LaplacianEigenPE,
    LowRankInverse,
    MiniBatchTSGCN,
    PropagateFeatures,
    RegularizerConv,
    RegularizerGNN,
    SemanticGraph,
    TSGCNConv,
    paper_rank,
    regularizers,
)
from torch_geometric_regcn.datasets import contextual_sbm
from torch_geometric_regcn.linalg import block_lanczos, subspace_iteration
from torch_geometric_regcn.linalg.cg import cg_solve

N, F = 60, 6


@pytest.fixture(scope='module')
def graph():
    data = contextual_sbm(num_nodes=N, num_classes=3, num_features=F, seed=0)
    data = SemanticGraph(4, progress=False)(data)
    return LowRankInverse(1.0, 0.2, rank=8, progress=False)(data)


def nan_at(x):
    x = x.clone()
    x[1, 2] = math.nan
    return x


def huge():
    a = torch.rand(4 * N, 4 * N, generator=torch.Generator().manual_seed(0))
    return ((a + a.T) * 1e37).to_sparse_csr()


def sliced64(d):
    # Float64 factors with 3 of 60 rows dropped: V^T W is off-diagonal by ~1e-2.
    data = LowRankInverse(1.0, 0.2, rank=8, progress=False)(
        Data(x=d.x.double(), edge_index=d.edge_index))
    keep = torch.ones(N, dtype=torch.bool)
    keep[[3, 17, 41]] = False
    return data.x[keep], data.lowrank_w[keep], data.lowrank_v[keep]


def sparse(d, size):
    return torch.sparse_coo_tensor(d.edge_index, torch.ones(d.edge_index.size(1)), size)


# (id, call(graph), exception type, regex that must name the argument)
LAYER_INPUTS = [
    ('conv-x-1d', lambda d: RegularizerConv(F, 3)(d.x[:, 0], d.edge_index), ValueError,
     r"'x' must be a node feature matrix"),
    ('conv-x-3d', lambda d: RegularizerConv(F, 3)(d.x[None], d.edge_index), ValueError,
     r"'x' must be a node feature matrix"),
    ('conv-x-int', lambda d: RegularizerConv(F, 3)(d.x.long(), d.edge_index), TypeError,
     r"'x' must be floating point"),
    ('conv-x-bool', lambda d: RegularizerConv(F, 3)(d.x > 0, d.edge_index), TypeError,
     r"'x' must be floating point"),
    ('conv-x-nan', lambda d: RegularizerConv(F, 3)(nan_at(d.x), d.edge_index), ValueError,
     r"'x' contains NaN"),
    ('conv-x-inf', lambda d: RegularizerConv(F, 3)(d.x / 0, d.edge_index), ValueError,
     r"'x' contains NaN or infinite"),
    ('conv-x-channels', lambda d: RegularizerConv(F + 1, 3)(d.x, d.edge_index), ValueError,
     r"6 channels but the layer was built for in_channels=7"),
    ('conv-ei-float', lambda d: RegularizerConv(F, 3)(d.x, d.edge_index.float()), TypeError,
     r"'edge_index' must hold integer"),
    ('conv-ei-bool', lambda d: RegularizerConv(F, 3)(d.x, d.edge_index.bool()), TypeError,
     r"'edge_index' must hold integer"),
    ('conv-ei-shape', lambda d: RegularizerConv(F, 3)(d.x, d.edge_index.T), ValueError,
     r"'edge_index' must have shape \[2, num_edges\]"),
    ('conv-ei-range', lambda d: RegularizerConv(F, 3)(d.x[:10], d.edge_index), ValueError,
     r"'edge_index' refers to nodes outside \[0, 9\]"),
    ('conv-ei-list', lambda d: RegularizerConv(F, 3)(d.x, d.edge_index.tolist()), TypeError,
     r"'edge_index' must be an edge index tensor"),
    ('conv-adj-shape', lambda d: RegularizerConv(F, 3)(d.x, sparse(d, (N + 1, N + 1))),
     ValueError, r"sparse adjacency 'edge_index' must have shape \[60, 60\]"),
    ('conv-adj-weight', lambda d: RegularizerConv(F, 3)(d.x, sparse(d, (N, N)),
                                                         torch.ones(3)),
     ValueError, r"'edge_weight' only with an 'edge_index' tensor"),
    ('conv-ew-shape', lambda d: RegularizerConv(F, 3)(d.x, d.edge_index, torch.ones(3)),
     ValueError, r"'edge_weight' must have shape"),
    ('conv-ew-negative', lambda d: RegularizerConv(F, 3)(
        d.x, d.edge_index, -torch.ones(d.edge_index.size(1))), ValueError,
     r"'edge_weight' must be non-negative"),
    ('conv-ew-nan', lambda d: RegularizerConv(F, 3)(
        d.x, d.edge_index, torch.full((d.edge_index.size(1),), math.nan)), ValueError,
     r"'edge_weight' contains NaN"),
    ('conv-sei-range', lambda d: RegularizerConv(F, 3, 'tsgcn', solver='cg')(
        d.x, d.edge_index, semantic_edge_index=d.semantic_edge_index + N), ValueError,
     r"'semantic_edge_index' refers to nodes outside"),
    ('conv-sei-float', lambda d: RegularizerConv(F, 3, 'tsgcn', solver='cg')(
        d.x, d.edge_index, semantic_edge_index=d.semantic_edge_index.float()), TypeError,
     r"'semantic_edge_index' must hold integer"),
    ('conv-factors-missing', lambda d: RegularizerConv(F, 3, 'tsgcn', solver='lowrank')(
        d.x, d.edge_index, lowrank_w=d.lowrank_w), ValueError,
     r"pass both 'lowrank_w=' and 'lowrank_v='"),
    ('conv-factors-rows', lambda d: RegularizerConv(F, 3, 'tsgcn', solver='lowrank')(
        d.x, d.edge_index, lowrank_w=d.lowrank_w[:-1], lowrank_v=d.lowrank_v[:-1]),
     ValueError, r"'lowrank_w' and 'lowrank_v' have 59 rows but 'x' has 60"),
    ('conv-factors-half', lambda d: RegularizerConv(F, 3, 'tsgcn', solver='lowrank')(
        d.x, d.edge_index, lowrank_w=d.lowrank_w.half(), lowrank_v=d.lowrank_v.half()),
     TypeError, r"'lowrank_w' and 'lowrank_v' must both be float32 or float64"),
    ('tsgcnconv-x-1d', lambda d: TSGCNConv(F, 3)(d.x[:, 0], d.lowrank_w, d.lowrank_v),
     ValueError, r"'x' must be a node feature matrix"),
    ('tsgcnconv-x-int', lambda d: TSGCNConv(F, 3)(d.x.long(), d.lowrank_w, d.lowrank_v),
     TypeError, r"'x' must be floating point"),
    ('tsgcnconv-x-nan', lambda d: TSGCNConv(F, 3)(nan_at(d.x), d.lowrank_w, d.lowrank_v),
     ValueError, r"'x' contains NaN"),
    ('tsgcnconv-rows', lambda d: TSGCNConv(F, 3)(d.x[:-1], d.lowrank_w, d.lowrank_v),
     ValueError, r"'w' and 'v' have 60 rows but 'x' has 59 nodes"),
    ('tsgcnconv-shapes', lambda d: TSGCNConv(F, 3)(d.x, d.lowrank_w, d.lowrank_v[:, :3]),
     ValueError, r"'w' and 'v' must both have shape"),
    ('tsgcnconv-half-factors', lambda d: TSGCNConv(F, 3)(d.x, d.lowrank_w.half(),
                                                          d.lowrank_v.half()),
     TypeError, r"must both be float32 or float64"),
    ('tsgcnconv-nan-factors', lambda d: TSGCNConv(F, 3)(d.x, nan_at(d.lowrank_w),
                                                         d.lowrank_v),
     ValueError, r"'w' and 'v' contain NaN"),
    ('tsgcnconv-sliced', lambda d: TSGCNConv(F, 3)(d.x[:40], d.lowrank_w[:40],
                                                    d.lowrank_v[:40]),
     ValueError, r"not those of one whole graph"),
    ('tsgcnconv-sliced-float64', lambda d: TSGCNConv(F, 3).double()(*sliced64(d)), ValueError,
     r"not those of one whole graph"),
    ('conv-ew-list', lambda d: RegularizerConv(F, 3)(d.x, d.edge_index, [1.0] * 3), TypeError,
     r"'edge_weight' must be a tensor"),
    ('conv-factors-list', lambda d: RegularizerConv(F, 3, 'tsgcn', solver='lowrank')(
        d.x, d.edge_index, lowrank_w=d.lowrank_w.tolist(), lowrank_v=d.lowrank_v),
     TypeError, r"'lowrank_w' and 'lowrank_v' must be tensors"),
    ('conv-adj-values-nan', lambda d: RegularizerConv(F, 3)(d.x, torch.sparse_coo_tensor(
        d.edge_index, torch.full((d.edge_index.size(1),), math.nan), (N, N))), ValueError,
     r"'edge_index.values\(\)' contains NaN"),
    ('tsgcn-x-1d', lambda d: TSGCN(F, 8, 3)(d.x[:, 0], d.lowrank_w, d.lowrank_v),
     ValueError, r"'x' must be a node feature matrix"),
    ('gnn-x-int', lambda d: RegularizerGNN(F, 8, 3)(d.x.long(), d.edge_index), TypeError,
     r"'x' must be floating point"),
    ('gnn-ei-range', lambda d: RegularizerGNN(F, 8, 3)(d.x, d.edge_index + N), ValueError,
     r"'edge_index' refers to nodes outside"),
    ('semantic-x-1d', lambda d: SemanticGraph(3)(Data(x=d.x[:, 0])), ValueError,
     r"'data.x' must be a node feature matrix"),
    ('semantic-x-nan', lambda d: SemanticGraph(3)(Data(x=nan_at(d.x))), ValueError,
     r"'data.x' contains NaN"),
    ('semantic-no-x', lambda d: SemanticGraph(3)(Data(edge_index=d.edge_index, num_nodes=N)),
     ValueError, r"needs node features 'data.x'"),
    ('semantic-k-too-large', lambda d: SemanticGraph(N)(Data(x=d.x)), ValueError,
     r"'k' must lie in \[1, 59\]"),
    ('lowrank-rank-too-large', lambda d: LowRankInverse(1.0, 0.2, rank=N + 1,
                                                        progress=False)(d.clone()),
     ValueError, r"'rank' must not exceed the number of nodes 60"),
    ('lowrank-x-nan', lambda d: LowRankInverse(1.0, 0.2, rank=4, progress=False)(
        Data(x=nan_at(d.x), edge_index=d.edge_index)), ValueError, r"'data.x' contains NaN"),
    ('lowrank-ei-range', lambda d: LowRankInverse(1.0, 0.2, rank=4, progress=False)(
        Data(x=d.x, edge_index=d.edge_index + N)), ValueError,
     r"'edge_index' refers to nodes outside"),
    ('lowrank-no-edges', lambda d: LowRankInverse(1.0, 0.2, rank=4, progress=False)(
        Data(x=d.x)), ValueError, r"'edge_index' has no edges"),
    ('pe-k-too-large', lambda d: LaplacianEigenPE(N)(Data(edge_index=d.edge_index,
                                                          num_nodes=N)),
     ValueError, r"'k'"),
    ('pe-ei-range', lambda d: LaplacianEigenPE(3)(Data(edge_index=d.edge_index + N,
                                                       num_nodes=N)),
     ValueError, r"'edge_index' refers to nodes outside"),
    ('propagate-no-factors', lambda d: PropagateFeatures()(Data(x=d.x, edge_index=d.edge_index)),
     ValueError, r"lowrank_w"),
    ('propagate-x-nan', lambda d: PropagateFeatures()(Data(
        x=nan_at(d.x), edge_index=d.edge_index, lowrank_w=d.lowrank_w, lowrank_v=d.lowrank_v)),
     ValueError, r"NaN"),
    ('minibatch-rows', lambda d: MiniBatchTSGCN(F, 8, 3).refresh(d.x[:-1], d.lowrank_w,
                                                                 d.lowrank_v),
     ValueError, r"rows"),
    ('cg-rhs-nan', lambda d: cg_solve(torch.eye(N).to_sparse_csr(), nan_at(d.x)), ValueError,
     r"'rhs' contains NaN"),
    ('cg-matrix-inf', lambda d: cg_solve(torch.eye(N) / 0, d.x), ValueError,
     r"'matrix' contains NaN or infinite"),
    ('cg-matrix-shape', lambda d: cg_solve(torch.eye(N + 1), d.x), ValueError,
     r"'matrix' must be square with as many rows as 'rhs'"),
    ('cg-diagonal', lambda d: cg_solve(-torch.eye(N), d.x), ValueError,
     r"'matrix' has a non-positive diagonal entry"),
    ('lanczos-nan', lambda d: block_lanczos(torch.full((N, N), math.nan), 3), ValueError,
     r"'operator' contains NaN"),
    ('subspace-nan', lambda d: subspace_iteration(torch.full((N, N), math.inf), 3),
     ValueError, r"'operator' contains NaN or infinite"),
    # Finite entries whose products overflow float32 (LAPACK's eigh used to fail).
    ('lanczos-overflow', lambda d: block_lanczos(huge(), 3, max_iter=3), ValueError,
     r"products with 'operator' overflowed torch.float32.*float64"),
    ('chebyshev-overflow', lambda d: subspace_iteration(huge(), 3, max_iter=3), ValueError,
     r"products with 'operator' overflowed"),
    ('power-overflow', lambda d: subspace_iteration(huge(), 3, max_iter=3, method='power'),
     ValueError, r"products with 'operator' overflowed"),
]


@pytest.mark.parametrize('call, error, match', [case[1:] for case in LAYER_INPUTS],
                         ids=[case[0] for case in LAYER_INPUTS])
def test_bad_input_is_named(graph, call, error, match):
    with pytest.raises(error, match=match):
        call(graph)


# (id, constructor, exception type, regex)
BAD_ARGUMENTS = [
    ('conv-tol-zero', lambda: RegularizerConv(F, 3, tol=0), ValueError, r"'tol' must be"),
    ('conv-tol-nan', lambda: RegularizerConv(F, 3, tol=math.nan), ValueError, r"'tol' must"),
    ('conv-tol-str', lambda: RegularizerConv(F, 3, tol='1e-6'), TypeError,
     r"'tol' must be a real number"),
    ('lowrank-cache-dir-int', lambda: LowRankInverse(1.0, 0.2, rank=4, cache_dir=123), TypeError,
     r"'cache_dir' must be a folder path"),
    ('lowrank-cache-dir-bytes', lambda: LowRankInverse(1.0, 0.2, rank=4, cache_dir=b'/tmp'),
     TypeError, r"'cache_dir' must be a folder path"),
    ('conv-max-iter-zero', lambda: RegularizerConv(F, 3, max_iter=0), ValueError,
     r"'max_iter' must be a positive integer"),
    ('conv-max-iter-float', lambda: RegularizerConv(F, 3, max_iter=2.5), ValueError,
     r"'max_iter' must be a positive integer"),
    ('conv-out-zero', lambda: RegularizerConv(F, 0), ValueError, r"'out_channels' must be"),
    ('conv-in-negative', lambda: RegularizerConv(-3, 2), ValueError, r"'in_channels' must"),
    ('conv-channels-str', lambda: RegularizerConv('6', 2), TypeError,
     r"'in_channels' must be an integer"),
    ('conv-solver', lambda: RegularizerConv(F, 3, solver='lu'), ValueError,
     r"Unknown solver 'lu'"),
    ('conv-solver-unsupported', lambda: RegularizerConv(F, 3, 'gcn', solver='cg'), ValueError,
     r"cannot use solver='cg'"),
    ('conv-regularizer-type', lambda: RegularizerConv(F, 3, regularizer=3), TypeError,
     r"'regularizer' must be a name"),
    ('conv-regularizer-name', lambda: RegularizerConv(F, 3, regularizer='gin'), ValueError,
     r"Unknown regularizer 'gin'"),
    ('conv-coefficient-name', lambda: RegularizerConv(F, 3, 'appnp', gamma=0.1), TypeError,
     r"no coefficient\(s\) \['gamma'\]; it accepts \['K', 'alpha'\]"),
    ('tsgcn-alpha-inf', lambda: RegularizerConv(F, 3, 'tsgcn', alpha=math.inf), ValueError,
     r"'alpha' must be finite"),
    ('tsgcn-beta-nan', lambda: RegularizerConv(F, 3, 'tsgcn', beta=math.nan), ValueError,
     r"'beta' must be finite"),
    ('tsgcn-alpha-negative', lambda: RegularizerConv(F, 3, 'tsgcn', alpha=-1.0), ValueError,
     r"'alpha' must be non-negative"),
    ('tsgcn-alpha-str', lambda: RegularizerConv(F, 3, 'tsgcn', alpha='1'), TypeError,
     r"'alpha' must be a real number"),
    ('tsgcn-both-zero', lambda: RegularizerConv(F, 3, 'tsgcn', alpha=0.0, beta=0.0),
     ValueError, r"cannot both be zero"),
    ('tsgcn-k-zero', lambda: RegularizerConv(F, 3, 'tsgcn', k=0), ValueError,
     r"'k' must be a positive integer"),
    ('appnp-alpha-inf', lambda: RegularizerConv(F, 3, 'appnp', alpha=math.inf), ValueError,
     r"'alpha' must be finite"),
    ('appnp-K-bool', lambda: RegularizerConv(F, 3, 'appnp', K=True), ValueError,
     r"'K' must be a positive integer"),
    ('jknet-beta-inf', lambda: RegularizerConv(F, 3, 'jknet', beta=math.inf), ValueError,
     r"'beta' must be finite"),
    ('dagnn-beta-nan', lambda: RegularizerConv(F, 3, 'dagnn', beta=math.nan), ValueError,
     r"'beta' must be finite"),
    ('gnn-lf-mu', lambda: RegularizerConv(F, 3, 'gnn_lf', mu=1.5), ValueError,
     r"'mu' must lie in"),
    ('gnn-hf-beta-inf', lambda: RegularizerConv(F, 3, 'gnn_hf', beta=math.inf), ValueError,
     r"'beta' must be finite"),
    ('gnn-layers-zero', lambda: RegularizerGNN(F, 8, 3, num_layers=0), ValueError,
     r"'num_layers' must be a positive integer"),
    ('gnn-dropout', lambda: RegularizerGNN(F, 8, 3, dropout=1.0), ValueError,
     r"'dropout' must lie in \[0.0, 1.0\)"),
    ('gnn-hidden-negative', lambda: RegularizerGNN(F, -8, 3), ValueError,
     r"'hidden_channels' must be a positive integer"),
    ('gnn-tol', lambda: RegularizerGNN(F, 8, 3, regularizer='tsgcn', solver='cg',
                                      tol=-1.0), ValueError,
     r"'tol' must be"),
    ('tsgcn-model-dropout', lambda: TSGCN(F, 8, 3, dropout=-0.5), ValueError,
     r"'dropout' must lie in"),
    ('tsgcn-model-layers', lambda: TSGCN(F, 8, 3, num_layers=1.0), ValueError,
     r"'num_layers' must be a positive integer"),
    ('tsgcnconv-scale', lambda: TSGCNConv(F, 3, scale=math.inf), ValueError,
     r"'scale' must be finite"),
    ('semantic-k', lambda: SemanticGraph(0), ValueError, r"'k' must be a positive integer"),
    ('semantic-k-float', lambda: SemanticGraph(2.0), ValueError,
     r"'k' must be a positive integer"),
    ('semantic-block-size', lambda: SemanticGraph(3, block_size=0), ValueError,
     r"'block_size' must be a positive integer"),
    ('semantic-method', lambda: SemanticGraph(3, method='annoy'), ValueError,
     r"'method' must be one of"),
    ('lowrank-rank', lambda: LowRankInverse(1.0, 0.2, rank=0), ValueError, r"'rank' must be"),
    ('lowrank-tol', lambda: LowRankInverse(1.0, 0.2, rank=4, tol=0.0), ValueError,
     r"'tol' must be"),
    ('lowrank-max-iter', lambda: LowRankInverse(1.0, 0.2, rank=4, max_iter=0), ValueError,
     r"'max_iter' must be"),
    ('lowrank-alpha-inf', lambda: LowRankInverse(math.inf, 0.2, rank=4), ValueError,
     r"'alpha' must be finite"),
    ('lowrank-which', lambda: LowRankInverse(1.0, 0.2, rank=4, which='SA'), ValueError,
     r"'which' must be one of"),
    ('lowrank-method', lambda: LowRankInverse(1.0, 0.2, rank=4, method='arpack'), ValueError,
     r"'method' must be one of"),
    ('paper-rank-p', lambda: paper_rank(100, 0), ValueError, r"'p' must be a positive"),
    ('pe-k-zero', lambda: LaplacianEigenPE(0), ValueError, r"'k' must be a positive integer"),
    ('propagate-hops', lambda: PropagateFeatures(hops=0), ValueError,
     r"'hops' must be a positive integer"),
    ('propagate-solver', lambda: PropagateFeatures(solver='lu'), ValueError,
     r"Unknown solver 'lu'"),
    ('propagate-unread', lambda: PropagateFeatures(alpha=5.0), ValueError,
     r"\['alpha'\] would be ignored: solver='lowrank'"),
    ('dagnn-gate-exact', lambda: RegularizerConv(F, 3, 'dagnn', solver='cg'), ValueError,
     r"never reads DAGNN's learned gate"),
    ('minibatch-summary', lambda: MiniBatchTSGCN(F, 8, 3, summary='stale'), ValueError,
     r"'summary'"),
    ('minibatch-dropout', lambda: MiniBatchTSGCN(F, 8, 3, dropout=1.5), ValueError,
     r"'dropout'"),
    ('paper-rank-zero', lambda: paper_rank(10, 16), ValueError, r"choose p <= 10"),
    ('get-instance-coefficients', lambda: regularizers.get(
        regularizers.APPNPRegularizer(), K=3), ValueError, r"were given with a regularizer"),
    ('cg-tol', lambda: cg_solve(torch.eye(3), torch.ones(3), tol=-1.0), ValueError,
     r"'tol' must be positive"),
    ('cg-max-iter', lambda: cg_solve(torch.eye(3), torch.ones(3), max_iter=0), ValueError,
     r"'max_iter' must be a positive integer"),
    ('lanczos-k', lambda: block_lanczos(torch.eye(5), 6), ValueError, r"'k' must lie in"),
    ('lanczos-tol', lambda: block_lanczos(torch.eye(5), 2, tol=0.0), ValueError,
     r"'tol' must be positive"),
    ('subspace-max-iter', lambda: subspace_iteration(torch.eye(5), 2, max_iter=0), ValueError,
     r"'max_iter' must be a positive integer"),
]


@pytest.mark.parametrize('build, error, match', [case[1:] for case in BAD_ARGUMENTS],
                         ids=[case[0] for case in BAD_ARGUMENTS])
def test_bad_argument_is_rejected_at_construction(build, error, match):
    with pytest.raises(error, match=match):
        build()


# NumPy integer scalars (as from np.arange or a config array) work wherever
# a Python int does, and give the same result.
NUMPY_INTEGERS = [
    ('conv-channels', lambda i: RegularizerConv(i(F), i(3)), ()),
    ('conv-K', lambda i: RegularizerConv(F, 3, 'appnp', K=i(4)), ()),
    ('conv-max-iter', lambda i: RegularizerConv(F, 3, 'tsgcn', solver='cg', max_iter=i(50),
                                                k=i(4)), ('semantic',)),
    ('gnn', lambda i: RegularizerGNN(i(F), i(8), i(3), num_layers=i(2)), ()),
    ('tsgcn', lambda i: TSGCN(i(F), i(8), i(3), num_layers=i(2)), ('lowrank',)),
    ('tsgcn-scale', lambda i: TSGCN(F, 8, 3, scale=np.float32(0.5) if i is not int else 0.5),
     ('lowrank',)),
]


def run_model(model, data, needs):
    torch.manual_seed(0)
    model.reset_parameters()
    if 'lowrank' in needs:
        return model(data.x, data.lowrank_w, data.lowrank_v)
    kwargs = {'semantic_edge_index': data.semantic_edge_index} if needs else {}
    return model(data.x, data.edge_index, **kwargs)


@pytest.mark.parametrize('build, needs', [case[1:] for case in NUMPY_INTEGERS],
                         ids=[case[0] for case in NUMPY_INTEGERS])
def test_numpy_integers_are_accepted(graph, build, needs):
    expected = run_model(build(int), graph, needs)
    for kind in (np.int64, np.int32):
        model = build(kind)
        assert repr(model) == repr(build(int))
        torch.testing.assert_close(run_model(model, graph, needs), expected, rtol=0, atol=0)


def test_numpy_integers_in_transforms(graph):
    data = Data(x=graph.x, edge_index=graph.edge_index)
    ref = SemanticGraph(4, progress=False)(data.clone()).semantic_edge_index
    got = SemanticGraph(np.int64(4), progress=False)(data.clone()).semantic_edge_index
    assert torch.equal(ref, got)
    ref = LowRankInverse(1.0, 0.2, rank=5, k=4, progress=False)(data.clone())
    got = LowRankInverse(np.float64(1.0), np.float32(0.2), rank=np.int64(5), k=np.int32(4),
                         max_iter=np.int64(100), progress=False)(data.clone())
    torch.testing.assert_close(got.lowrank_w, ref.lowrank_w, rtol=0, atol=0)
    assert paper_rank(np.int64(100), np.int64(16)) == 6
