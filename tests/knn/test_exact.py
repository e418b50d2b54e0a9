import pytest
import torch

from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.knn import exact_knn_cosine, normalize_rows


def brute_force_neighbours(x, k):
    """Dense float64 cosine kNN, ties to the lower index, ascending rows."""
    x = x.double()
    sim = (x @ x.T) / (x.norm(dim=1, keepdim=True) * x.norm(dim=1)).clamp_min(1e-300)
    sim.fill_diagonal_(-float('inf'))
    return torch.tensor([sorted(sorted(range(len(row)), key=lambda j: (-row[j], j))[:k])
                         for row in sim.tolist()])


def ties(n, seed):
    """+-1 rows in 16 dimensions, some scaled, duplicated or zero: every
    similarity is a multiple of 1/8, computed exactly in any order, and most
    k-th places are ties."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 2, (n, 16), generator=gen, dtype=torch.float64) * 2 - 1
    x[1::4] = x[0::4][:len(x[1::4])]
    x[2::9] *= 3.0
    x[3::7] = 0.0
    return x


@pytest.mark.parametrize('features', ['gaussian', 'ties', 'sparse'])
@pytest.mark.parametrize('block_size', [None, 1, 7])
def test_one_part_is_the_dense_brute_force(features, block_size):
    # Gaussian float64 scores differ by far more than their rounding
    # (~1e-16), tie scores are exact: the neighbours are the reference's.
    gen = torch.Generator().manual_seed(3)
    x = ties(90, 1) if features == 'ties' else torch.randn(90, 12, generator=gen,
                                                         dtype=torch.float64)
    if features == 'sparse':
        x[x.abs() < 1.0] = 0.0
    expected = brute_force_neighbours(x, 5)
    layouts = [x] + ([x.to_sparse(), x.to_sparse_csr()] if features == 'sparse' else [])
    for features_in_layout in layouts:
        got = exact_knn_cosine(features_in_layout, 5, block_size, progress=False)
        assert torch.equal(got, expected)
        assert torch.equal(exact_knn_cosine(features_in_layout, 5, block_size, progress=False,
                                            partition=RowPartition.even(90, 1)), expected)


def test_integer_features_are_searched_as_floats():
    counts = torch.randint(0, 3, (50, 6), generator=torch.Generator().manual_seed(4))
    assert torch.equal(exact_knn_cosine(counts, 3, progress=False),
                       exact_knn_cosine(counts.float(), 3, progress=False))


def test_normalize_rows_dense_and_sparse():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0], [0.0, 2.0]])
    expected = torch.tensor([[0.6, 0.8], [0.0, 0.0], [0.0, 1.0]])
    torch.testing.assert_close(normalize_rows(x), expected)
    for sparse in (x.to_sparse(), x.to_sparse_csr()):
        torch.testing.assert_close(normalize_rows(sparse).to_dense(), expected)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_half_precision_features_are_searched_in_the_default_dtype(dtype):
    # Scored in half precision (3 significant digits) the neighbours differed
    # from the float32 search LowRankInverse makes on the same data.
    x = torch.rand(300, 64, generator=torch.Generator().manual_seed(0)).to(dtype)
    assert torch.equal(exact_knn_cosine(x, 10, progress=False),
                       exact_knn_cosine(x.float(), 10, progress=False))


@pytest.mark.parametrize('scale, dtype', [(1e20, torch.float32), (1e-200, torch.float64),
                                          (1e4, torch.float16)])
def test_normalize_rows_of_finite_rows_whose_norm_overflows_or_underflows(scale, dtype):
    # The norm in the input dtype overflowed (a zero row) or underflowed (a row
    # divided by the smallest normal number). Reference: the same rows at
    # scale 1, where nothing rounds but the entries themselves.
    x = torch.tensor([[3.0, 4.0, 0.0], [1.0, 0.0, 1.0], [0.0, 0.0, 0.0]], dtype=torch.float64)
    expected = normalize_rows(x)
    scaled = (scale * x).to(dtype)
    for layout in ('dense', 'sparse'):
        got = normalize_rows(scaled if layout == 'dense' else scaled.to_sparse())
        got = got if layout == 'dense' else got.to_dense()
        # One rounding of the scaled entries, a division and a norm in dtype.
        tol = 4 * torch.finfo(dtype).eps
        torch.testing.assert_close(got.double(), expected, atol=tol, rtol=0)


def test_sparse_features_are_scored_in_blocks_bounded_by_their_width(monkeypatch):
    # The default block_size ignored F: a sparse x of 2,000 rows and 100,000 columns took
    # 1.5 GB of dense query rows. Now rows x (N + F) stay within BLOCK per block.
    import torch_geometric_regcn.knn.exact as exact
    gen = torch.Generator().manual_seed(0)
    n, f = 60, 500
    dense = torch.rand(n, f, generator=gen) * (torch.rand(n, f, generator=gen) < 0.05)
    dense[:, 0] += 0.1  # no zero row
    seen = []
    original = exact.dense_rows

    def recording(x, start, end):
        seen.append(end - start)
        return original(x, start, end)

    monkeypatch.setattr(exact, 'BLOCK', 5 * (n + f))
    monkeypatch.setattr(exact, 'dense_rows', recording)
    got = exact_knn_cosine(dense.to_sparse_csr(), 4, progress=False)
    assert max(seen) == 5  # BLOCK / (widest + F) rows per block
    assert torch.equal(got, brute_force_neighbours(dense, 4))


@pytest.mark.parametrize('block_size', [None, 7])
@pytest.mark.parametrize('sparse', [False, True])
def test_node_id_breaks_ties_as_the_original_numbering_does(block_size, sparse):
    # Rows renumbered (as METIS shards renumber the nodes) with their original
    # indices as node_id: the neighbours, read back in the original numbering, are
    # those of the rows in their original order. The features tie exactly (similarities
    # in multiples of 1/8), so without node_id the renumbering changes the graph.
    x = ties(300, 4)
    perm = torch.randperm(300, generator=torch.Generator().manual_seed(5))
    k = 5
    expected = exact_knn_cosine(x, k, progress=False)[perm]  # of original node perm[i]
    moved = x[perm].to_sparse() if sparse else x[perm]
    found = exact_knn_cosine(moved, k, block_size, progress=False, node_id=perm)
    assert torch.equal(perm[found].sort(dim=1).values, expected)
    plain = exact_knn_cosine(moved, k, block_size, progress=False)
    assert not torch.equal(perm[plain].sort(dim=1).values, expected)


def test_node_id_is_checked():
    x = ties(20, 0)
    for node_id, error, match in [
            (torch.arange(20, dtype=torch.int32), TypeError, "'node_id' must be a 1-D int64"),
            (torch.arange(19), ValueError, r"one index per row of 'x' \(20"),
            (torch.arange(20) + 1, ValueError, r"distinct indices in \[0, 19\]"),
            (torch.zeros(20, dtype=torch.long), ValueError, 'distinct indices')]:
        with pytest.raises(error, match=match):
            exact_knn_cosine(x, 3, progress=False, node_id=node_id)
