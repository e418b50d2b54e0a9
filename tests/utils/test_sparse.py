import pytest
import torch

from torch_geometric_regcn.utils import (
    compact_csr,
    diagonal,
    sparse_identity,
    spectral_bound,
    to_csr,
)
from torch_geometric_regcn.utils.sparse import dense_rows, gather_rows


def random_sparse(n=20, seed=0):
    gen = torch.Generator().manual_seed(seed)
    dense = torch.randn(n, n, dtype=torch.float64, generator=gen)
    dense[torch.rand(n, n, generator=gen) < 0.7] = 0
    return dense


@pytest.mark.parametrize('layout', ['dense', 'coo', 'csr'])
def test_diagonal_and_spectral_bound_match_dense(layout):
    dense = random_sparse()
    matrix = {'dense': dense, 'coo': dense.to_sparse(), 'csr': dense.to_sparse_csr()}[layout]
    torch.testing.assert_close(diagonal(matrix), dense.diagonal(), rtol=0, atol=0)
    assert spectral_bound(matrix) == pytest.approx(float(dense.abs().sum(1).max()), rel=1e-15)
    assert spectral_bound(matrix) >= float(torch.linalg.eigvals(dense).abs().max())


def test_diagonal_of_csr_with_duplicates_and_empty_rows():
    # CSR read in place: duplicate entries are summed as the dense matrix
    # they stand for, and rows without a diagonal (or any) entry give 0.
    crow = torch.tensor([0, 3, 3, 4, 6])
    col = torch.tensor([0, 2, 0, 1, 3, 3])
    values = torch.tensor([1.0, 2.0, 0.5, 4.0, -1.0, 7.0], dtype=torch.float64)
    matrix = torch.sparse_csr_tensor(crow, col, values, (4, 4))
    expected = torch.tensor([1.5, 0.0, 0.0, 6.0], dtype=torch.float64)
    torch.testing.assert_close(diagonal(matrix), expected, rtol=0, atol=0)
    empty = torch.sparse_csr_tensor(torch.zeros(1, dtype=torch.int64),
                                    torch.zeros(0, dtype=torch.int64), torch.zeros(0), (0, 0))
    assert diagonal(empty).shape == (0,)


def test_csr_conversions_keep_the_matrix():
    dense = random_sparse(seed=1)
    uncoalesced = torch.sparse_coo_tensor(  # a duplicate entry: coalescing sums it
        torch.cat([dense.to_sparse().indices(), torch.tensor([[0], [0]])], dim=1),
        torch.cat([dense.to_sparse().values(), torch.tensor([1.5], dtype=torch.float64)]),
        dense.shape)
    expected = dense.clone()
    expected[0, 0] += 1.5
    csr = to_csr(uncoalesced)
    assert csr.layout == torch.sparse_csr and to_csr(csr) is csr
    torch.testing.assert_close(csr.to_dense(), expected, rtol=0, atol=0)
    compact = compact_csr(uncoalesced)
    assert compact.crow_indices().dtype == torch.int32
    torch.testing.assert_close(compact.to_dense(), expected, rtol=0, atol=0)
    assert compact_csr(dense) is dense


def test_sparse_identity():
    eye = sparse_identity(5, torch.float64)
    assert eye.is_coalesced() and eye.dtype == torch.float64
    torch.testing.assert_close(eye.to_dense(), torch.eye(5, dtype=torch.float64))


@pytest.mark.parametrize('layout', ['dense', 'coo', 'uncoalesced', 'csr', 'csr32'])
def test_dense_rows_and_gather_rows_copy_the_rows(layout):
    dense = random_sparse(seed=2)[:, :7].contiguous()
    dense[3] = 0  # an empty row
    matrix = {'dense': dense, 'coo': dense.to_sparse(), 'csr': dense.to_sparse_csr(),
              'csr32': compact_csr(dense.to_sparse_csr()),
              'uncoalesced': torch.sparse_coo_tensor(  # reversed entries, not coalesced
                  dense.to_sparse().indices().flip(1), dense.to_sparse().values().flip(0),
                  dense.shape)}[layout]
    for start, end in ((0, 20), (2, 9), (3, 4), (5, 5), (19, 20)):
        assert torch.equal(dense_rows(matrix, start, end), dense[start:end])
    for index in ([4, 3, 3, 19, 0], [3], []):
        index = torch.tensor(index, dtype=torch.long)
        assert torch.equal(gather_rows(matrix, index), dense[index])
    assert dense_rows(dense, 2, 9).data_ptr() == dense[2:].data_ptr()  # a view


def test_compact_csr_keeps_64_bit_columns_of_a_wide_matrix():
    # One entry in column 2,999,999,995 of a 1 x 3e9 matrix: narrowing by the
    # entry count alone wrapped it to -1,294,967,301 (review s55/utils).
    # Reference: the column as given, and index_dtype of the shape.
    wide = torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([2_999_999_995]),
                                   torch.ones(1), (1, 3_000_000_000))
    compact = compact_csr(wide)
    assert compact.col_indices().tolist() == [2_999_999_995]
    assert compact.col_indices().dtype == torch.int64
    tall = torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]),
                                   torch.ones(2), (2, 5))
    assert compact_csr(tall).col_indices().dtype == torch.int32


def test_divided_by_largest_keeps_the_ratios_and_leaves_bad_weights_to_the_checks():
    # The one scaling of directed_adjacency and LaplacianEigenPE. Reference: the
    # ratios in float64; a weight set without a finite positive largest is
    # returned as it is (in float64) for the callers' checks to name.
    from torch_geometric_regcn.utils.sparse import divided_by_largest
    weight = torch.tensor([2.0, 8.0, 0.0, 1.0], dtype=torch.float16)
    assert divided_by_largest(weight).tolist() == [0.25, 1.0, 0.0, 0.125]
    assert divided_by_largest(weight).dtype == torch.float64
    for bad in ([1.0, float('inf')], [1.0, float('nan')], [0.0, 0.0], [-2.0, -1.0]):
        given = torch.tensor(bad, dtype=torch.float64)
        torch.testing.assert_close(divided_by_largest(given), given, equal_nan=True)
    assert divided_by_largest(torch.ones(0)).numel() == 0
