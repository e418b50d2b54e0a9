"""GraphOperators and build_graph: each operator built on first use and kept,
and only what a regulariser's solver reads. tsGCN's operator is tested in
test_tsgcn.py."""
import pytest
import torch

from tests.conftest import dense_normalized_adjacency, undirected_graph
from torch_geometric_regcn import regularizers as R
from torch_geometric_regcn.knn import knn_graph_cosine
from torch_geometric_regcn.regularizers.graph import GraphOperators, build_graph

N = 30


def test_operators_are_built_on_first_use_and_kept():
    ei, _ = undirected_graph()
    graph = GraphOperators(N, ei, dtype=torch.float64)
    assert graph.derived == {}
    adj = graph.adj
    assert graph.adj is adj and set(graph.derived) == {'adj'}
    torch.testing.assert_close(adj.to_dense(), dense_normalized_adjacency(ei, N))
    eye = graph.identity()
    assert graph.identity() is eye and eye.dtype == torch.float64
    torch.testing.assert_close(eye.to_dense(), torch.eye(N, dtype=torch.float64))


def test_semantic_graph_from_features_once_per_k():
    x = torch.randn(N, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    graph = GraphOperators(N, x=x, dtype=torch.float64)
    first = graph.semantic_adjacency(3)
    assert graph.semantic_adjacency(3) is first
    expected = dense_normalized_adjacency(knn_graph_cosine(x, 3), N)
    torch.testing.assert_close(first.to_dense(), expected)
    assert not torch.equal(graph.semantic_adjacency(5).to_dense(), first.to_dense())
    with pytest.raises(ValueError, match="needs node features 'x' or a precomputed"):
        GraphOperators(N).semantic_adjacency(3)


def test_requirements_per_solver():
    tsgcn = R.get('tsgcn', alpha=1.0, beta=0.5)
    assert tsgcn.requires('lowrank') == {'lowrank'}
    assert tsgcn.requires('cg') == tsgcn.requires('series') == {'adj', 'semantic'}
    assert R.get('tsgcn', beta=0.0).requires('cg') == {'adj'}
    assert R.get('tsgcn', alpha=0.0, beta=1.0).requires('closed') == {'semantic'}
    for name in ('gcn', 'sgc', 'appnp', 'jknet', 'dagnn', 'gnn_lf', 'gnn_hf'):
        reg = R.get(name)
        assert all(reg.requires(s) == {'adj'} for s in reg.solvers)


def test_build_graph_keeps_only_what_the_solver_reads():
    ei, _ = undirected_graph()
    x = torch.randn(N, 3)
    kwargs = dict(semantic_edge_index=ei, x=x, lowrank_w=x, lowrank_v=x)
    lowrank = build_graph(R.get('tsgcn'), ei, N, solver='lowrank', **kwargs)
    assert lowrank.lowrank == (x, x) and lowrank.x is None and lowrank.semantic_edge_index is None
    exact = build_graph(R.get('tsgcn'), ei, N, solver='cg', **kwargs)
    assert exact.lowrank is None and exact.x is x and exact.semantic_edge_index is ei
    gcn = build_graph(R.get('gcn'), ei, N, **kwargs)
    assert gcn.lowrank is None and gcn.x is None and gcn.semantic_edge_index is None


def test_a_missing_graph_is_refused_by_build_graph():
    # It was refused only when the solver first read the adjacency, after the
    # layer's linear map had run.
    with pytest.raises(ValueError, match="'appnp' needs the graph: pass 'edge_index'"):
        build_graph(R.get('appnp'), None, N)
    semantic_only = R.get('tsgcn', alpha=0.0, beta=1.0)
    if 'adj' not in semantic_only.requires(semantic_only.default_solver):
        ei, _ = undirected_graph()
        build_graph(semantic_only, None, N, semantic_edge_index=ei)


def test_requirements_outside_the_known_inputs_are_refused():
    class Odd(R.GCNRegularizer):
        def requires(self, solver):
            return frozenset({'adj', 'hypergraph'})

    ei, _ = undirected_graph()
    with pytest.raises(ValueError, match=r"names \['hypergraph'\], which no graph input"):
        build_graph(Odd(), ei, N)


def test_an_empty_edge_index_of_any_shape_is_named():
    # torch.tensor([]) is 1-D: counted as no edges, so tsGCN names the problem
    # (a topological term without edges) instead of an IndexError.
    from torch_geometric_regcn.regularizers import tsgcn_adjacency
    x = torch.randn(6, 3)
    for empty in (torch.empty(2, 0, dtype=torch.long), torch.tensor([], dtype=torch.long)):
        graph = GraphOperators(6, empty, x=x)
        assert graph.num_edges() == 0
        with pytest.raises(ValueError, match="'edge_index' has no edges"):
            tsgcn_adjacency(graph, 1.0, 0.5, k=2)


def test_finite_weights_beyond_the_layers_dtype_are_named_as_such():
    # They were cast first and then reported as "NaN or infinite" (with
    # torch.nan_to_num as the fix) though finite; a float64 layer takes them.
    from torch_geometric_regcn import RegularizerConv
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    w = torch.tensor([1e200, 1e200, 1.0, 1.0], dtype=torch.float64)
    out = RegularizerConv(2, 2).double()(torch.randn(3, 2, dtype=torch.float64), ei, w)
    assert out.isfinite().all()
    with pytest.raises(ValueError, match=r"'edge_weight' holds finite torch.float64 weights "
                                         r"beyond the range of the layer's torch.float32"):
        RegularizerConv(2, 2)(torch.randn(3, 2), ei, w)


def test_complex_edge_weights_are_refused_before_a_cast_drops_their_imaginary_part():
    from torch_geometric.data import Data

    from torch_geometric_regcn import LaplacianEigenPE, RegularizerConv
    ei = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    weight = torch.ones(4, dtype=torch.complex64)
    with pytest.raises(TypeError, match=r"'edge_weight' must hold real numbers"):
        RegularizerConv(2, 2)(torch.randn(3, 2), ei, weight)
    with pytest.raises(TypeError, match=r"'edge_weight' must hold real numbers"):
        LaplacianEigenPE(1)(Data(edge_index=ei, edge_weight=weight, num_nodes=3))


def test_missing_semantic_inputs_and_cg_on_a_directed_graph_are_refused_up_front():
    # tsGCN with beta > 0 and neither a semantic graph nor features: build_graph
    # accepted it and propagate failed later (after the adjacency, when beta is
    # learned). CG on a directed operator (not symmetric) ran 1000 iterations
    # and returned a result further from M^-1 X than zero, with a warning.
    ei, _ = undirected_graph(0)
    reg = R.get('tsgcn', alpha=1.0, beta=0.5)
    with pytest.raises(ValueError, match="needs the semantic graph: pass 'semantic_edge_index'"):
        build_graph(reg, ei, 30, solver='cg')
    build_graph(R.get('tsgcn', alpha=1.0, beta=0.0), ei, 30, solver='cg')  # tsGCN-t: no need
    reg = R.get('appnp', alpha=0.2)
    directed = torch.tensor([[0, 1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 0, 3]])
    x = torch.randn(6, 2, dtype=torch.float64)
    graph = GraphOperators(6, directed, dtype=torch.float64, direction='in')
    with pytest.raises(ValueError, match="solver='cg' needs a symmetric.*directed"):
        reg.propagate(x, graph, 'cg')
    reg.propagate(x, graph, 'series')  # what a directed graph takes


def test_matmul_differentiates_a_matrix_by_its_transpose_unless_told_it_is_symmetric():
    # A user's regulariser may multiply by its own operator, e.g. the random
    # walk D~^-1 (A + I), which is not symmetric: its gradient needs the
    # transpose. Reference: autograd through the dense matrices, float64 (a
    # few O(1) terms per entry: 1e-13).
    ei, weight = undirected_graph(0, 30, weighted=True)
    graph = GraphOperators(30, ei, weight, torch.float64)
    a_hat = dense_normalized_adjacency(ei, 30, weight)
    walk = a_hat * a_hat.diagonal().sqrt()[:, None] / a_hat.diagonal().sqrt()[None, :]
    assert not torch.allclose(walk, walk.T)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(30, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    seed = torch.randn(30, 2, dtype=torch.float64, generator=gen)
    for matrix, dense, symmetric in ((walk.to_sparse_csr(), walk, False),
                                     (graph.adj, a_hat, True)):
        out = graph.matmul(matrix, x, symmetric=symmetric)
        grad, = torch.autograd.grad(out, x, seed)
        assert torch.allclose(out, dense @ x, atol=1e-13)
        assert torch.allclose(grad, dense.T @ seed, atol=1e-13)
