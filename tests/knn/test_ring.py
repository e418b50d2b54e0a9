r"""knn.ring in one process: the ring of one part (group=None) yields this
rank's payload once, as it is; pack() and unpack() give back dense, COO and
CSR feature rows exactly; gather_shard_rows() of one part is an indexing;
owned_lookup() summed over the ranks of a partition is the lookup in the
whole tensor. The ring on 2 and 3 gloo ranks (each block sent once) is
tested in tests/knn/test_sharded.py."""
import pytest
import torch

from torch_geometric_regcn.distributed import RowPartition
from torch_geometric_regcn.knn.exact import normalize_rows
from torch_geometric_regcn.knn.ring import (
    gather_shard_rows,
    owned_lookup,
    pack,
    ring,
    unpack,
)


def features(n=20, d=9, seed=0):
    r"""Sparse-ish float64 rows, with an all-zero row 3."""
    x = torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    x[x.abs() < 0.8] = 0.0
    x[3] = 0.0
    return x


@pytest.mark.parametrize('payload', [(), (torch.randn(5, 3),),
                                     (torch.randn(5, 3), torch.arange(5))])
def test_the_ring_of_one_part_yields_this_ranks_payload_once(payload):
    steps = list(ring(payload, None))
    assert len(steps) == 1
    src, got = steps[0]
    assert src == 0 and len(got) == len(payload)
    assert all(a is b for a, b in zip(got, payload))  # nothing copied or moved


def test_dense_rows_travel_as_they_are():
    xn = normalize_rows(features())
    payload = pack(xn)
    assert len(payload) == 1 and payload[0] is xn
    assert unpack(payload, 20, 9) is xn


@pytest.mark.parametrize('layout', [torch.sparse_coo, torch.sparse_csr])
def test_sparse_rows_round_trip_as_csr(layout):
    x = features()
    sparse = x.to_sparse() if layout == torch.sparse_coo else x.to_sparse_csr()
    xn = normalize_rows(sparse)  # what the search packs: coalesced COO
    indices, values = pack(xn)
    assert indices.shape == (xn._nnz(), 2) and indices.is_contiguous()
    assert torch.equal(values, xn.values())
    out = unpack((indices, values), 20, 9)
    assert out.layout == torch.sparse_csr and out.shape == (20, 9)
    # No arithmetic on the way: the same entries, bit for bit.
    assert torch.equal(out.to_dense(), xn.to_dense())
    # And they are the rows of x over their norms (zero row 3 stays zero): the
    # sparse and dense norms sum the 9 squares in other orders, each within
    # 9 eps relative, so unit-norm entries agree within 2 * 9 eps.
    eps = torch.finfo(torch.float64).eps
    torch.testing.assert_close(out.to_dense(), normalize_rows(x), rtol=0, atol=2 * 9 * eps)
    assert not out.to_dense()[3].any()


def test_an_empty_sparse_block_round_trips():
    xn = normalize_rows(torch.zeros(4, 6, dtype=torch.float64).to_sparse())
    out = unpack(pack(xn), 4, 6)
    assert out._nnz() == 0 and torch.equal(out.to_dense(), torch.zeros(4, 6,
                                                                       dtype=torch.float64))


def test_gather_of_one_part_is_an_indexing():
    x = features()
    rows = torch.tensor([7, 0, 19, 7])
    assert torch.equal(gather_shard_rows(x, rows, RowPartition.even(20, 1), None), x[rows])


def test_owned_lookups_summed_over_the_ranks_are_the_whole_lookup():
    whole = torch.randint(0, 100, (20,), generator=torch.Generator().manual_seed(1))
    index = torch.randint(0, 20, (30,), generator=torch.Generator().manual_seed(2))
    bounds = (0, 7, 7, 13, 20)  # rank 1 owns nothing
    total = torch.zeros_like(index)
    for rank in range(4):
        part = RowPartition(bounds, rank)
        got = owned_lookup(whole[part.start:part.end], index, part)
        owned = part.owner(index) == rank
        assert not got[~owned].any()  # zero where another rank owns the node
        total += got
    assert torch.equal(total, whole[index])
    assert torch.equal(owned_lookup(whole, index, RowPartition.even(20, 1)), whole[index])
