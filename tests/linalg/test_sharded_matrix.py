r"""linalg.sharded_matrix on one part (group=None): a ShardedMatrix holding
every row against the dense float64 matrix it was built from (products,
addmm, dense_rows, gather_dense), its tensor-like properties and repr. Rows
split over 2 and 3 gloo ranks are tested in tests/distributed/test_pipeline.py."""
import pytest
import torch

from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.linalg import ShardedMatrix
from torch_geometric_regcn.linalg.sharded_matrix import gather_dense

N = 25
EPS = torch.finfo(torch.float64).eps


def symmetric_entries(seed=0, duplicates=True):
    r"""Random symmetric entries :obj:`(edge_index, values, dense)` with
    isolated rows, a diagonal entry, and (with :obj:`duplicates`) some entries
    given twice, which the matrix sums like the dense reference."""
    gen = torch.Generator().manual_seed(seed)
    index = torch.randint(3, N, (2, 40), generator=gen)
    values = torch.randn(40, dtype=torch.float64, generator=gen)
    index = torch.cat([index, index.flip(0), torch.tensor([[7], [7]])], dim=1)
    values = torch.cat([values, values, torch.tensor([2.5], dtype=torch.float64)])
    if duplicates:  # the first five entries (and their mirrors) once more
        index = torch.cat([index, index[:, :5], index[:, 40:45]], dim=1)
        values = torch.cat([values, values[:5], values[40:45]])
    dense = torch.zeros(N, N, dtype=torch.float64)
    dense.index_put_(tuple(index), values, accumulate=True)
    return index, values, dense


def matrix(seed=0, duplicates=True):
    index, values, dense = symmetric_entries(seed, duplicates)
    return ShardedMatrix(index, values, RowPartition.even(N, 1), None), dense


def product_bound(dense, x):
    r"""A float64 sparse product sums at most :math:`d` terms per entry (:math:`d`
    the most entries in a row), so each entry errs by at most :math:`d\epsilon
    (|\mathbf{S}||\mathbf{X}|)_{ij}`; the dense reference likewise with
    :math:`N` terms, of which only :math:`d` are non-zero."""
    per_row = int((dense != 0).sum(dim=1).max())
    return 2 * per_row * EPS * (dense.abs() @ x.abs())


def test_products_equal_the_dense_matrix():
    s, dense = matrix()
    x = torch.randn(N, 4, dtype=torch.float64)
    expected = dense @ x
    got = s @ x
    assert got.shape == (N, 4) and got.dtype == torch.float64
    assert bool(((got - expected).abs() <= product_bound(dense, x)).all())
    y = torch.randn(N, 4, dtype=torch.float64)
    # beta y + alpha S x: one more rounding of each of the two terms and their sum.
    out = s.addmm(y, x, beta=0.5, alpha=-2.0)
    bound = 2 * product_bound(dense, x) + 4 * EPS * (0.5 * y.abs() + 2 * (dense.abs() @ x.abs()))
    assert bool(((out - (0.5 * y - 2.0 * expected)).abs() <= bound).all())


def test_dense_rows_and_gather_dense_are_the_matrix():
    # Every entry is a single value or a pair summed (a + b, rounded the same in
    # either order): the dense rows are the reference bit for bit.
    index, _, _ = symmetric_entries()
    assert int(torch.unique(index, dim=1, return_counts=True)[1].max()) == 2
    s, dense = matrix()
    assert torch.equal(s.dense_rows(), dense)
    assert torch.equal(gather_dense(s), dense)
    assert (dense[:3] == 0).all()  # isolated rows stay zero


def test_tensor_like_properties():
    s, dense = matrix(duplicates=False)
    assert s.shape == torch.Size((N, N)) and s.size() == s.shape
    assert s.size(0) == s.size(1) == N and s.dim() == 2
    assert s.dtype == torch.float64 and s.device == torch.device('cpu')
    assert s.layout == torch.sparse_csr and not s.is_cuda
    # values(): one per stored (coalesced) entry, the non-zeros of the dense matrix.
    assert s.values().numel() == int((dense != 0).sum())
    assert torch.equal(s.values().sort().values, dense[dense != 0].sort().values)
    assert s.plan.halo.numel() == 0  # one part: nothing to fetch
    assert s.local.crow_indices().dtype == torch.int32  # compact CSR indices


def test_repr_names_the_rows_entries_and_halo():
    s, dense = matrix(duplicates=False)
    assert repr(s) == f'ShardedMatrix(rows=0:{N} of {N}, nnz={int((dense != 0).sum())}, halo=0)'


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_the_dtype_of_the_values_is_kept(dtype):
    index, values, dense = symmetric_entries(1)
    s = ShardedMatrix(index, values.to(dtype), RowPartition.even(N, 1), None)
    assert s.dtype == dtype
    x = torch.randn(N, 2, dtype=dtype)
    # float32: each of the at most d terms rounds to eps32 (the values too).
    eps = torch.finfo(dtype).eps
    per_row = int((dense != 0).sum(dim=1).max())
    bound = 4 * per_row * eps * (dense.abs() @ x.double().abs())
    assert bool((((s @ x).double() - dense @ x.double()).abs() <= bound).all())


@pytest.mark.parametrize('index, values, match', [
    ([[0, 1], [25, 1]], [1.0, 1.0], "'edge_index'"),  # a column beyond N: read out of bounds
    ([[0, 1], [2, 1]], [1.0, float('nan')], "'values' contains NaN"),
    ([[0, 1], [2, 1]], [1.0, 2.0, 3.0], "'values' must hold one entry per column"),
    ([[0, 1]], [1.0, 2.0], "'edge_index'"),  # no second row: read before the agreement
])
def test_entries_are_checked_before_the_matrix_is_built(index, values, match):
    with pytest.raises(ValueError, match=match):
        ShardedMatrix(torch.tensor(index), torch.tensor(values, dtype=torch.float64),
                      RowPartition.even(N, 1), None)
    with pytest.raises(ValueError, match="'partition' is part 0 of 2"):  # a shard, no group
        ShardedMatrix(torch.tensor([[0], [1]]), torch.ones(1, dtype=torch.float64),
                      RowPartition.even(N, 2), None)
