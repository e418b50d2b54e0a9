r"""The attribute policy of the transforms (transforms/attributes.py); the
transforms' own cases are in tests/reliability/test_transform_attributes.py."""
import pytest
import torch
from torch_geometric.data import Data

from torch_geometric_regcn.transforms.attributes import (
    EDGE_INDEX,
    NODE_MATRIX,
    check_attr_name,
    check_outputs,
    form_of,
    owner_of,
)


def test_owner_of():
    assert owner_of('semantic_edge_index')[0] == 'SemanticGraph'
    assert owner_of('lowrank_v')[0] == 'LowRankInverse'
    assert owner_of('x1')[0] == owner_of('x12')[0] == 'PropagateFeatures'
    for name in ('x0', 'x', 'x1a', 'pe', 'exact1'):
        assert owner_of(name) is None


def test_forms_read_no_data():
    assert NODE_MATRIX.holds(torch.zeros(3, 2)) and NODE_MATRIX.holds(torch.zeros(3, 2,
                                                                                  device='meta'))
    assert not NODE_MATRIX.holds(torch.zeros(3, dtype=torch.float64))
    assert not NODE_MATRIX.holds(torch.zeros(3, 2, dtype=torch.long))
    assert EDGE_INDEX.holds(torch.zeros(2, 5, dtype=torch.int32))
    assert not EDGE_INDEX.holds(torch.zeros(2, 5, dtype=torch.bool))
    assert not EDGE_INDEX.holds(torch.zeros(5, 2, dtype=torch.long))
    assert form_of(torch.zeros(2, 3)) == 'a torch.float32 tensor of shape [2, 3]'
    assert form_of([1]) == 'a list'


def test_check_attr_name_accepts_free_and_own_names():
    assert check_attr_name('pe', 'attr_name', 'LaplacianEigenPE') == 'pe'
    assert check_attr_name('laplacian_eigenvector_pe', 'attr_name', 'LaplacianEigenPE')
    assert check_attr_name('x3', 'prefix', 'PropagateFeatures') == 'x3'
    with pytest.raises(ValueError, match=r"where PropagateFeatures stores"):
        check_attr_name('x3', 'attr_name', 'LaplacianEigenPE')


def test_check_outputs():
    data = Data(x=torch.zeros(4, 2), pe=None, mine=torch.ones(4, 2),
                lowrank_w=torch.ones(4, 1))
    check_outputs(data, ['pe', 'free'], 'LaplacianEigenPE', NODE_MATRIX, 'attr_name')
    check_outputs(data, ['lowrank_w', 'lowrank_v'], 'LowRankInverse', NODE_MATRIX)
    with pytest.raises(ValueError, match=r"pass another 'attr_name', or delete"):
        check_outputs(data, ['mine'], 'LaplacianEigenPE', NODE_MATRIX, 'attr_name')
    with pytest.raises(ValueError, match=r"'data.mine' \(a torch.float32 tensor of shape "
                                         r"\[4, 2\]\).*; rename or delete"):
        check_outputs(data, ['mine'], 'SomeTransform', NODE_MATRIX)
    with pytest.raises(ValueError, match=r"^'data.lowrank_w' holds a torch.float32 tensor of "
                                         r"shape \[4, 1\], not an integer edge index"):
        check_outputs(data, ['lowrank_w'], 'LowRankInverse', EDGE_INDEX)


def test_a_graph_stored_as_adj_t_is_read_or_refused_never_taken_for_no_edges():
    # PyG's ToSparseTensor leaves 'adj_t' and no 'edge_index': LaplacianEigenPE
    # encoded an edgeless graph (unit vectors, eigenvalue 1) and LowRankInverse
    # said the graph had no edges. Reference: the same graph as edge_index.
    import torch_geometric.transforms as T

    from torch_geometric_regcn import LaplacianEigenPE, LowRankInverse, PropagateFeatures
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 0, 5], [1, 0, 2, 1, 3, 2, 4, 3, 5, 4, 5, 0]])
    data = Data(x=torch.randn(6, 3), edge_index=ei)
    expected = LaplacianEigenPE(2).eigenpairs(data)
    sparse = T.ToSparseTensor()(data.clone())
    assert 'edge_index' not in sparse
    got = LaplacianEigenPE(2).eigenpairs(sparse)
    torch.testing.assert_close(got.eigenvalues, expected.eigenvalues, rtol=0, atol=1e-12)
    torch.testing.assert_close(got.eigenvectors, expected.eigenvectors, rtol=0, atol=1e-12)
    for transform, name in ((LowRankInverse(1.0, 0.0, rank=2, progress=False), 'LowRankInverse'),
                            (PropagateFeatures(solver='cg'), 'PropagateFeatures')):
        with pytest.raises(ValueError, match=rf"{name} reads the graph from 'data.edge_index', "
                                             rf"but this graph stores it as 'data.adj_t'"):
            transform(sparse.clone())
    # What reads no edges takes such a graph as before: the semantic-only
    # tsGCN (alpha = 0), and the propagation by precomputed factors.
    semantic_only = LowRankInverse(0.0, 1.0, rank=2, k=2, progress=False)
    torch.testing.assert_close(semantic_only(sparse.clone()).lowrank_w,
                               semantic_only(data.clone()).lowrank_w, rtol=0, atol=0)
    factors = LowRankInverse(1.0, 0.0, rank=2, progress=False)(data.clone())
    del factors.edge_index
    factors.adj_t = sparse.adj_t
    PropagateFeatures()(factors)


def test_heterogeneous_graphs_are_refused_by_name_with_the_conversion():
    # Each transform read 'data.x' first: AttributeError "'HeteroData' has no attribute 'x'".
    from torch_geometric.data import HeteroData

    from torch_geometric_regcn import (
        LaplacianEigenPE,
        LowRankInverse,
        PropagateFeatures,
        SemanticGraph,
    )
    data = HeteroData()
    data['paper'].x = torch.randn(4, 3)
    data['paper', 'cites', 'paper'].edge_index = torch.tensor([[0, 1], [1, 2]])
    for name, transform in (('LaplacianEigenPE', LaplacianEigenPE(2)),
                            ('SemanticGraph', SemanticGraph(2, progress=False)),
                            ('LowRankInverse', LowRankInverse(1.0, 0.2, 2, progress=False)),
                            ('PropagateFeatures', PropagateFeatures())):
        with pytest.raises(TypeError, match=rf"^{name} takes a homogeneous graph.*got "
                                            rf"HeteroData.*to_homogeneous\(\)"):
            transform(data)
