import numpy as np
import pytest
import torch

from torch_geometric_regcn.utils import fingerprint as fingerprint_module
from torch_geometric_regcn.utils.fingerprint import Fingerprint, fingerprint, row_checksums


def test_equal_for_equal_tensors_and_records_identity():
    x = torch.randn(40, 7, dtype=torch.float64)
    f = fingerprint(x)
    assert isinstance(f, Fingerprint)
    assert f == fingerprint(x.clone())
    assert (f.layout, f.shape, f.dtype, f.device) == (torch.strided, (40, 7), torch.float64,
                                                      x.device)
    assert f != fingerprint(x.float())
    assert f != fingerprint(x.view(7, 40))
    assert fingerprint(3) == 3  # non-tensors pass through


@pytest.mark.parametrize('row,col', [(0, 0), (23, 4), (39, 6)])
def test_sees_a_write_that_bypasses_the_version_counter(row, col):
    x = torch.randn(40, 7)
    f, version = fingerprint(x), x._version
    x.numpy()[row, col] += 1e-3  # an edit PyTorch does not count
    assert x._version == version
    assert fingerprint(x) != f


def test_sees_a_swap_of_two_entries_and_an_index_edit():
    e = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    swapped = e[:, [1, 0, 2, 3]]
    assert fingerprint(e) != fingerprint(swapped)  # same multiset, other order
    edited = e.clone()
    edited.numpy()[1, 2] = 1
    assert fingerprint(e) != fingerprint(edited)


def test_sees_a_move_between_blocks_and_a_change_of_the_high_word():
    # Entries swapped 1024 apart (the same place of adjacent blocks of the
    # weights), and an entry whose change lies in the high 32-bit word of a
    # float64 (its sign, its exponent) next to much larger ones.
    x = torch.arange(4096, dtype=torch.float64)
    swapped = x.clone()
    swapped[[5, 5 + 1024]] = swapped[[5 + 1024, 5]]
    assert fingerprint(x) != fingerprint(swapped)
    edges = torch.arange(4096).view(2, -1)
    moved = edges.clone()
    moved[0, [7, 7 + 1024]] = moved[0, [7 + 1024, 7]]
    assert fingerprint(edges) != fingerprint(moved)
    x = torch.full((3000,), 1e30, dtype=torch.float64)
    x[17] = 1.0
    for value in (-1.0, 2.0):
        edited = x.clone()
        edited[17] = value
        assert fingerprint(x) != fingerprint(edited)


def test_sparse_layouts_cover_indices_and_values():
    i = torch.tensor([[0, 1, 1], [1, 0, 2]])
    a = torch.sparse_coo_tensor(i, torch.tensor([1., 2., 3.]), (3, 3))
    b = torch.sparse_coo_tensor(i, torch.tensor([1., 2., 4.]), (3, 3))
    assert fingerprint(a) == fingerprint(a.clone())
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a.to_sparse_csr()) != fingerprint(b.to_sparse_csr())
    assert fingerprint(a) != fingerprint(a.to_sparse_csr())  # layouts differ
    # CSC (which the layers accept as an adjacency) raised in is_contiguous.
    assert fingerprint(a.to_sparse_csc()) == fingerprint(a.to_sparse_csc())
    assert fingerprint(a.to_sparse_csc()) != fingerprint(b.to_sparse_csc())
    c = a.to_sparse_csc()
    c.row_indices()[0] = 2  # an index edit, in place
    assert fingerprint(c) != fingerprint(a.to_sparse_csc())


def test_nan_is_never_taken_for_a_cached_tensor():
    x = torch.tensor([[1., np.nan]])
    assert fingerprint(x) != fingerprint(x)


def test_empty_and_scalar_tensors():
    assert fingerprint(torch.empty(0, 3)) == fingerprint(torch.empty(0, 3))
    assert fingerprint(torch.tensor(2.)) != fingerprint(torch.tensor(3.))


def test_row_checksums_tell_which_rows_changed_within_their_rounding_bound():
    x = torch.randn(40, 7)
    sums = row_checksums(x)
    assert sums.shape == (40,) and sums.dtype == torch.float64
    torch.testing.assert_close(sums, x.double() @ row_checksums(torch.eye(7)), rtol=1e-15,
                               atol=1e-15)  # a weighted sum per row: weights of 7 columns
    edited = x.clone()
    edited.numpy()[23, 4] += 1e-6  # one row, past the version counter
    changed = row_checksums(edited) != sums
    assert changed.nonzero().view(-1).tolist() == [23]
    # Rows gathered in another order agree within 2 (F + 1) eps of the magnitudes.
    index = torch.randperm(40)
    both = row_checksums(x[index], magnitudes=True)
    bound = 2 * 8 * torch.finfo(torch.float64).eps * both[:, 1]
    assert ((both[:, 0] - sums[index]).abs() <= bound).all()
    assert torch.equal(both[:, 1], row_checksums(x[index].abs()))
    assert row_checksums(torch.tensor([[1., np.nan]])).isnan().all()


@pytest.mark.parametrize('shape', [(8000, 64), (2, 300000), (5000,)])
def test_fingerprint_does_not_depend_on_the_number_of_threads(shape):
    # A cached layer compares fingerprints across calls; a user may change
    # torch.set_num_threads between them, which must not look like an edit.
    x = torch.randn(*shape)
    threads = torch.get_num_threads()
    try:
        prints = []
        for count in (1, 2, 3):
            torch.set_num_threads(count)
            prints.append(fingerprint(x))
    finally:
        torch.set_num_threads(threads)
    assert prints[0] == prints[1] == prints[2]


def test_an_entry_next_to_much_larger_ones_is_seen():
    # float32 numbers are summed in float64: an entry 1e8 times smaller than
    # its block's largest is still seen (float32 sums would lose it).
    w = torch.ones(1000)
    w[0] = 1e8
    before = fingerprint(w)
    w.numpy()[5] = 1.5
    assert fingerprint(w) != before


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                   torch.int64, torch.uint8, torch.bool])
def test_a_change_of_one_entry_below_the_rounding_of_the_sums_is_seen(dtype):
    # The weighted sums round at eps times the largest numbers (1e30 here, or
    # the dtype's largest); the smallest change of an entry next to them (one
    # unit in its last place) is far below that, and the exact sums of the
    # words that store the numbers still see it, in every dtype.
    if dtype.is_floating_point:
        big = min(1e30, torch.finfo(dtype).max / 4)
        x = torch.full((3000,), big, dtype=dtype)
        x[17] = 1.0
        edited = x.clone()
        edited[17] = 1 + torch.finfo(dtype).eps  # the next number after 1
        assert edited[17] != x[17]
    elif dtype == torch.bool:
        x = torch.zeros(3000, dtype=dtype)
        edited = x.clone()
        edited[17] = True
    else:
        x = torch.full((3000,), 2 ** 62 if dtype == torch.int64 else 200, dtype=dtype)
        edited = x.clone()
        edited[17] += 1  # int64: 2^62 + 1 rounds to 2^62 in float64
    assert fingerprint(edited) != fingerprint(x)
    assert fingerprint(x) == fingerprint(x.clone())


def test_a_compiled_caller_prints_a_tensor_as_an_eager_one_does():
    # Inductor reduces in another order than eager: a fingerprint traced into
    # a compiled region differed in the last bit, and a cached layer called
    # eagerly and compiled took its own graph for another.
    x = torch.randn(5000, 7, dtype=torch.float64)

    def caller(t):
        return fingerprint(t)

    torch._dynamo.reset()
    assert torch.compile(caller)(x) == fingerprint(x)


def test_a_swap_of_two_entries_is_seen_where_the_float_sums_round_it_away():
    # Edge weights swapped at the two positions of a block whose float
    # weights are closest: the float32 weighted sums moved by less than their
    # rounding and took the swapped weights for the cached ones (61 of 200
    # such swaps on uniform weights); the exact sums weighted by position see
    # every one.
    gen = torch.Generator().manual_seed(0)
    w = torch.rand(1024, generator=gen)
    inner = fingerprint_module._weights(1024, w.device).float()
    order = inner.argsort()
    closest = (inner[order[1:]] - inner[order[:-1]]).argsort()[:200]
    before = fingerprint(w)
    for k in closest.tolist():
        i, j = order[k].item(), order[k + 1].item()
        swapped = w.clone()
        swapped[[i, j]] = w[[j, i]]
        assert fingerprint(swapped) != before, (i, j)


@pytest.mark.parametrize('dtype', [torch.float64, torch.int64, torch.float32, torch.int32,
                                   torch.float16, torch.uint8])
def test_swaps_across_chunks_and_of_the_sign_word_are_seen(dtype):
    # Two entries swapped a chunk (2^20 numbers) apart, where the position
    # multipliers repeat, and two float64 numbers that differ in the sign bit
    # only (a difference of 2^63 in the 64-bit word: a product modulo 2^64
    # would not see it; the 32-bit words do).
    n = fingerprint_module._CHUNK
    x = torch.zeros(n + 8, dtype=dtype)
    x[3], x[n + 3] = 1, 2
    swapped = x.clone()
    swapped[[3, n + 3]] = x[[n + 3, 3]]
    assert fingerprint(swapped) != fingerprint(x)
    if dtype == torch.float64:
        y = torch.tensor([1.0, -1.0, 0.5], dtype=dtype)
        assert fingerprint(y) != fingerprint(y[[1, 0, 2]])


def test_the_weighted_word_sums_are_exact_modulo_two_to_the_64():
    # The sums wrap around in int64; compared with Python's exact integers,
    # for words with the top bit set and random 64-bit multipliers.
    x = torch.tensor([-1, 2 ** 31 - 1, -2 ** 31, 12345, 7], dtype=torch.int32)
    index = 3
    got = int(fingerprint_module._words(x, index)[0])
    m = fingerprint_module._multipliers(x.device)[:5].tolist()
    exact = sum(a * b for a, b in zip(x.tolist(), m)) \
        * fingerprint_module._chunk_multiplier(index) % 2 ** 64
    assert got % 2 ** 64 == exact


@pytest.mark.parametrize('dtype', [torch.complex64, torch.complex128])
def test_complex_tensors_are_fingerprinted(dtype):
    # 16-byte complex128 numbers had no word type: KeyError 16 (also from a
    # cached layer given complex edge weights, before their check).
    from torch_geometric_regcn.utils.fingerprint import fingerprint
    a = torch.randn(7, dtype=dtype, generator=torch.Generator().manual_seed(0))
    assert fingerprint(a) == fingerprint(a.clone())
    b = a.clone()
    b[3] = b[3] + 0.5j
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a.conj()) == fingerprint(a.conj().resolve_conj())
    assert fingerprint(a.conj()) != fingerprint(a)
