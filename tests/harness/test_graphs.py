import numpy as np
import pytest
import scipy.sparse as sp
import torch

from harness.graphs import csr_to_scipy, scipy_to_csr, synthetic_graph


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
def test_scipy_to_csr_equals_the_dense_matrix(dtype):
    mat = sp.random(37, 23, density=0.15, random_state=np.random.default_rng(0),
                    dtype=dtype, format='lil')
    mat[3] = 0  # an empty row
    mat = mat.tocsr()
    assert mat.getrow(3).nnz == 0
    op = scipy_to_csr(mat)
    assert op.layout == torch.sparse_csr and op.shape == (37, 23)
    assert op.crow_indices().dtype == torch.int64 and op.col_indices().dtype == torch.int64
    assert op.dtype == torch.from_numpy(np.zeros(1, dtype)).dtype
    np.testing.assert_array_equal(op.to_dense().numpy(), mat.toarray())
    # ... and a product with it equals scipy's
    x = np.random.default_rng(1).standard_normal((23, 4)).astype(dtype)
    np.testing.assert_allclose((op @ torch.from_numpy(x)).numpy(), mat @ x, rtol=1e-5)


def test_csr_to_scipy_equals_the_dense_matrix_and_round_trips():
    gen = torch.Generator().manual_seed(0)
    dense = torch.rand(30, 30, generator=gen)
    dense[dense < 0.8] = 0
    op = dense.to_sparse_csr()
    mat = csr_to_scipy(op)
    assert isinstance(mat, sp.csr_matrix) and mat.dtype == np.float32
    np.testing.assert_array_equal(mat.toarray(), dense.numpy())
    np.testing.assert_array_equal(scipy_to_csr(mat).to_dense().numpy(), dense.numpy())


def test_synthetic_graph_sizes_and_seed():
    n, degree, classes, features = 1000, 10, 8, 16
    data = synthetic_graph(n, avg_degree=degree, features=features, classes=classes, seed=3)
    assert data.num_nodes == n and data.x.shape == (n, features)
    assert data.edge_index.shape == (2, n * degree // 2)
    assert int(data.edge_index.min()) >= 0 and int(data.edge_index.max()) < n
    assert set(data.y.tolist()) == set(range(classes))
    same = synthetic_graph(n, avg_degree=degree, features=features, classes=classes, seed=3)
    other = synthetic_graph(n, avg_degree=degree, features=features, classes=classes, seed=4)
    assert torch.equal(data.edge_index, same.edge_index) and torch.equal(data.x, same.x)
    assert not torch.equal(data.edge_index, other.edge_index)


def test_synthetic_graph_edges_mostly_inside_communities():
    # Features are a community centroid plus noise: nodes of one community
    # are nearer to each other than to the rest, so with p_in = 0.8 the
    # endpoints of most edges are more similar than random pairs of nodes.
    data = synthetic_graph(2000, blocks=16, p_in=0.8, features=32, seed=0)
    x = torch.nn.functional.normalize(data.x, dim=1)
    src, dst = data.edge_index
    along = (x[src] * x[dst]).sum(1)
    perm = torch.randperm(2000, generator=torch.Generator().manual_seed(1))
    random = (x[src] * x[perm[src]]).sum(1)
    assert float(along.mean()) > float(random.mean()) + 0.2
