r"""regularizers.tsgcn against dense float64 references: tsgcn_adjacency is
S = (α Â_G + β Â_X) / (1 + α + β) from conftest's dense_normalized_adjacency
(given, weighted, or a semantic graph built from the features) and the one
operator of the transform and the solvers; its errors; TSGCNRegularizer's
propagation (I - S)⁻¹ X, or R⁻¹ X = (I + α L̃_G + β L̃_X)⁻¹ X without
normalize, by the closed, series and low-rank solvers; its coefficients' ranges.
What every regulariser shares (energy, frequency response) is tested in test_base.py,
the registry in test_registry.py."""
import math

import pytest
import torch
from torch_geometric.data import Data

from tests.conftest import dense_normalized_adjacency, undirected_graph
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.distributed import RowPartition
from torch_geometric_regcn.knn import knn_graph_cosine
from torch_geometric_regcn.linalg import ShardedMatrix, factors_from_eigenpairs
from torch_geometric_regcn.regularizers import GraphOperators, TSGCNRegularizer, tsgcn_adjacency
from torch_geometric_regcn.regularizers.graph import build_graph
from torch_geometric_regcn.regularizers.tsgcn import (
    check_tsgcn_coefficients,
    sharded_tsgcn_adjacency,
)
from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator

N = 30  # the node count of conftest.undirected_graph
EPS = torch.finfo(torch.float64).eps
EYE = torch.eye(N, dtype=torch.float64)


def dense_s(alpha, beta, edge_index, semantic_edge_index, edge_weight=None):
    r"""The reference :math:`(\alpha \hat{\mathbf{A}}_G + \beta
    \hat{\mathbf{A}}_X) / (1 + \alpha + \beta)`, densely in float64."""
    return (alpha * dense_normalized_adjacency(edge_index, N, edge_weight)
            + beta * dense_normalized_adjacency(semantic_edge_index, N)) / (1 + alpha + beta)


def features(seed=1):
    return torch.randn(N, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize('alpha, beta', [(1.0, 0.4), (0.0, 0.7), (2.0, 0.0)])
def test_one_tsgcn_operator_for_the_transform_and_the_regularizer(alpha, beta):
    # LowRankInverse (through tsgcn_operator) and the regulariser's solvers read
    # the very same S = (α Â_G + β Â_X) / (1 + α + β), bit for bit.
    ei, _ = undirected_graph(0)
    sei, _ = undirected_graph(5)
    x = torch.randn(N, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    data = Data(x=x, edge_index=ei, semantic_edge_index=sei)
    reg = R.get('tsgcn', alpha=alpha, beta=beta)
    from_transform = tsgcn_operator(data, alpha, beta)
    from_layer = reg.adjacency(build_graph(reg, ei, N, dtype=torch.float64,
                                           semantic_edge_index=sei))
    assert torch.equal(from_transform.to_dense(), from_layer.to_dense())
    expected = (alpha * dense_normalized_adjacency(ei, N)
                + beta * dense_normalized_adjacency(sei, N)) / (1 + alpha + beta)
    # S_ij is a sum of a few positive rounded terms: |error| <= ~3 eps |S_ij|.
    torch.testing.assert_close(from_layer.to_dense(), expected,
                               rtol=16 * torch.finfo(torch.float64).eps, atol=0)


# tsgcn_adjacency ---------------------------------------------------------------

@pytest.mark.parametrize('alpha, beta', [(1.0, 0.4), (0.3, 2.0)])
def test_tsgcn_adjacency_of_a_weighted_graph(alpha, beta):
    ei, weight = undirected_graph(0, weighted=True)
    sei, _ = undirected_graph(5)
    graph = GraphOperators(N, ei, weight, torch.float64, semantic_edge_index=sei)
    s = tsgcn_adjacency(graph, alpha, beta)
    assert s.layout == torch.sparse_csr and s.shape == (N, N) and s.dtype == torch.float64
    # Each entry: a weight over two rounded square roots of degrees (sums of at
    # most N positive terms, N eps relative), times a coefficient, and a sum of
    # two such positive terms: within (N + 8) eps relative.
    torch.testing.assert_close(s.to_dense(), dense_s(alpha, beta, ei, sei, weight),
                               rtol=(N + 8) * EPS, atol=0)


def test_tsgcn_adjacency_builds_the_semantic_graph_from_the_features():
    ei, _ = undirected_graph(0)
    x = features()
    graph = GraphOperators(N, ei, dtype=torch.float64, x=x, progress=False)
    expected = dense_s(1.0, 0.4, ei, knn_graph_cosine(x, 3))
    torch.testing.assert_close(tsgcn_adjacency(graph, 1.0, 0.4, k=3).to_dense(), expected,
                               rtol=16 * EPS, atol=0)  # a few positive rounded terms
    assert not torch.equal(tsgcn_adjacency(graph, 1.0, 0.4, k=5).to_dense(),
                           tsgcn_adjacency(graph, 1.0, 0.4, k=3).to_dense())


def test_a_term_with_a_zero_coefficient_is_never_built():
    ei, _ = undirected_graph(0)
    # beta = 0 needs neither features nor a semantic graph; alpha = 0 no edges.
    only_graph = tsgcn_adjacency(GraphOperators(N, ei, dtype=torch.float64), 2.0, 0.0)
    torch.testing.assert_close(only_graph.to_dense(),
                               2.0 / 3.0 * dense_normalized_adjacency(ei, N),
                               rtol=16 * EPS, atol=0)
    sei, _ = undirected_graph(5)
    no_edges = torch.zeros(2, 0, dtype=torch.long)
    only_semantic = tsgcn_adjacency(GraphOperators(N, no_edges, dtype=torch.float64,
                                                   semantic_edge_index=sei), 0.0, 0.5)
    torch.testing.assert_close(only_semantic.to_dense(),
                               0.5 / 1.5 * dense_normalized_adjacency(sei, N),
                               rtol=16 * EPS, atol=0)


def test_tsgcn_adjacency_errors_name_the_input_and_the_fix():
    sei, _ = undirected_graph(5)
    no_edges = GraphOperators(N, torch.zeros(2, 0, dtype=torch.long), dtype=torch.float64,
                              semantic_edge_index=sei)
    with pytest.raises(ValueError, match=r"'edge_index' has no edges, so the topological "
                                         r"regulariser vanishes; use alpha=0 .*tsGCN-s"):
        tsgcn_adjacency(no_edges, 1.0, 0.5)
    # A learned alpha is refused alike, by every solver (it was accepted).
    for solver in ('closed', 'series', 'cg'):
        reg = R.get('tsgcn', alpha=1.0, beta=0.5).learn('alpha')
        with pytest.raises(ValueError, match=r"'edge_index' has no edges"):
            reg.propagate(torch.ones(N, 2, dtype=torch.float64), no_edges, solver)
    ei, _ = undirected_graph(0)
    with pytest.raises(ValueError, match=r"beta > 0 needs node features 'data\.x' or a "
                                         r"precomputed 'data\.semantic_edge_index'.*beta=0"):
        tsgcn_adjacency(GraphOperators(N, ei, dtype=torch.float64), 1.0, 0.5)


def test_coefficients_are_checked_once_for_the_regulariser_and_the_transform():
    for call in (lambda: check_tsgcn_coefficients(0, 0.0, 10),
                 lambda: TSGCNRegularizer(alpha=0.0, beta=0.0)):
        with pytest.raises(ValueError, match="'alpha' and 'beta' cannot both be zero: the "
                                             "propagation would be the identity; use a plain "
                                             "MLP"):
            call()
    with pytest.raises(ValueError, match="'beta'"):
        check_tsgcn_coefficients(1.0, -0.5, 10)
    with pytest.raises(ValueError, match="'k'"):
        check_tsgcn_coefficients(1.0, 0.5, 0)
    alpha, beta, k = check_tsgcn_coefficients(1, 0, 4)
    assert (alpha, beta, k) == (1.0, 0.0, 4)
    assert type(alpha) is float and type(beta) is float and type(k) is int


def test_the_deprecated_sharded_adjacency_is_tsgcn_adjacency_on_one_part():
    ei, _ = undirected_graph(0)
    sei, _ = undirected_graph(5)
    with pytest.warns(DeprecationWarning, match="'sharded_tsgcn_adjacency' is deprecated"):
        old = sharded_tsgcn_adjacency(RowPartition.even(N, 1), None, 1.0, 0.4, ei, sei,
                                      dtype=torch.float64)
    assert isinstance(old, ShardedMatrix)  # of one part, as it always returned
    dense = old.dense_rows()
    graph = GraphOperators(N, ei, dtype=torch.float64, semantic_edge_index=sei)
    assert torch.equal(dense, tsgcn_adjacency(graph, 1.0, 0.4).to_dense())


# TSGCNRegularizer --------------------------------------------------------------

def graph_and_references(alpha=1.0, beta=0.4):
    ei, _ = undirected_graph(0)
    sei, _ = undirected_graph(5)
    s = dense_s(alpha, beta, ei, sei)
    r = (EYE + alpha * (EYE - dense_normalized_adjacency(ei, N))
         + beta * (EYE - dense_normalized_adjacency(sei, N)))  # I + α L̃_G + β L̃_X
    return GraphOperators(N, ei, dtype=torch.float64, semantic_edge_index=sei), s, r


def solve_tolerance(matrix, x):
    r"""A backward-stable solve's forward error: the :math:`N`-term rounding of
    the operator's products, :math:`N\epsilon`, times its condition number and
    a safety factor of 16, relative to the size of the solution."""
    cond = float(torch.linalg.cond(matrix))
    return 16 * N * cond * EPS * float(torch.linalg.solve(matrix, x).abs().max())


@pytest.mark.parametrize('normalize', [True, False])
def test_closed_propagation_is_the_dense_inverse(normalize):
    graph, s, r = graph_and_references()
    reg = TSGCNRegularizer(1.0, 0.4, normalize=normalize)
    x = features()
    # (I - S)⁻¹ X with gain one, or R⁻¹ X = (I - S)⁻¹ X / (1 + α + β), the paper's.
    matrix = EYE - s if normalize else r
    assert reg.gain == (1.0 if normalize else 1.0 / 2.4)
    torch.testing.assert_close(reg.propagate(x, graph, 'closed'), torch.linalg.solve(matrix, x),
                               rtol=0, atol=solve_tolerance(matrix, x))
    # The operator M, whose inverse is the propagation, and its terms.
    torch.testing.assert_close(reg.operator(graph).to_dense(), matrix, rtol=0,
                               atol=16 * EPS * float(matrix.abs().max()))
    terms = sum(c * (EYE if m is None else m.to_dense()) for c, m in reg.operator_terms(graph))
    torch.testing.assert_close(terms, matrix, rtol=0, atol=16 * EPS * float(matrix.abs().max()))


@pytest.mark.parametrize('normalize', [True, False])
def test_series_is_the_truncated_neumann_sum(normalize):
    graph, s, _ = graph_and_references()
    reg = TSGCNRegularizer(1.0, 0.4, K=7, normalize=normalize)
    x = features()
    expected, term = torch.zeros_like(x), x.clone()
    for _ in range(7):  # Σ_{k<7} S^k X
        expected, term = expected + term, s @ term
    expected = reg.gain * expected
    # 7 products by S (|S| rows sum to at most 1): each adds N eps |S|^k |X|.
    bound = 16 * 7 * N * EPS * float(x.abs().max())
    torch.testing.assert_close(reg.propagate(x, graph, 'series'), expected, rtol=0, atol=bound)


@pytest.mark.parametrize('normalize', [True, False])
def test_lowrank_with_the_factors_of_every_eigenpair_is_the_closed_form(normalize):
    graph, s, r = graph_and_references()
    lam, u = torch.linalg.eigh(s)  # rank N: I + W Vᵀ = I - S up to eigh's rounding
    w, v = factors_from_eigenpairs(lam, u)
    graph.lowrank = (w, v)
    reg = TSGCNRegularizer(1.0, 0.4, normalize=normalize)
    x = features()
    matrix = EYE - s if normalize else r
    torch.testing.assert_close(reg.propagate(x, graph, 'lowrank'), torch.linalg.solve(matrix, x),
                               rtol=0, atol=solve_tolerance(matrix, x))


def test_lowrank_refuses_learned_coefficients():
    graph, _, _ = graph_and_references()
    reg = TSGCNRegularizer(1.0, 0.4).learn('alpha')
    with pytest.raises(ValueError, match=r"solver='lowrank' cannot learn \['alpha'\].*"
                                         r"solver='cg'"):
        reg.propagate(features(), graph, 'lowrank')


def test_the_operator_is_built_once_per_graph_unless_learned():
    graph, s, _ = graph_and_references()
    reg = TSGCNRegularizer(1.0, 0.4)
    first = reg.adjacency(graph)
    assert reg.adjacency(graph) is first
    other, _, _ = graph_and_references()
    assert reg.adjacency(other) is not first  # another graph, another operator
    learned = TSGCNRegularizer(1.0, 0.4).learn('beta')
    assert learned.adjacency(graph) is not learned.adjacency(graph)


@pytest.mark.parametrize('name, coefficients, message', [
    ('tsgcn', dict(alpha=0.0, beta=0.0), 'cannot both be zero'),
    ('tsgcn', dict(alpha=-1.0), "'alpha'"),
    ('tsgcn', dict(k=0), "'k'"),
])
def test_coefficients_out_of_range(name, coefficients, message):
    with pytest.raises(ValueError, match=message):
        R.get(name, **coefficients)


@pytest.mark.parametrize('value', ['False', 0, None])
def test_normalize_is_a_flag(value):
    # The string 'False' (bool('False') is True) normalised silently.
    with pytest.raises(TypeError, match="'normalize' must be True or False"):
        R.get('tsgcn', normalize=value)
    assert R.get('tsgcn', normalize=False).gain == pytest.approx(1 / 2.2)


def test_frequency_response_of_two_graphs_is_the_propagation():
    # Two circulant graphs (a ring and its distance-2 graph) share their
    # eigenvectors, on which lam and lam_x differ: the response of tsGCN's two
    # terms, against the closed solve's gain on each (float64, exact to 1e-12).
    n = 24
    i = torch.arange(n)
    ring = torch.cat([torch.stack([i, (i + 1) % n]), torch.stack([(i + 1) % n, i])], 1)
    skip = torch.cat([torch.stack([i, (i + 2) % n]), torch.stack([(i + 2) % n, i])], 1)
    reg = R.get('tsgcn', alpha=1.0, beta=0.7)
    graph = build_graph(reg, ring, n, None, torch.float64, semantic_edge_index=skip)
    a_g, a_x = graph.adj.to_dense(), graph.semantic_adjacency().to_dense()
    for f in range(1, 6):
        v = torch.cos(2 * math.pi * f * i.double() / n)[:, None]
        lam, lam_x = (v.T @ a_g @ v) / (v.T @ v), (v.T @ a_x @ v) / (v.T @ v)
        assert abs(float(lam - lam_x)) > 0.05  # the two terms are told apart
        out = reg.propagate(v, graph, 'closed')
        gain = (v.T @ out) / (v.T @ v)
        torch.testing.assert_close(out, gain * v, rtol=0, atol=1e-12)  # an eigenvector
        torch.testing.assert_close(reg.frequency_response(lam.view(()), lam_x.view(())),
                                   gain.view(()), rtol=0, atol=1e-12)
