r"""distributed.halo in one process: the plan of a single part (group=None)
has an empty halo, compact() is the identity on global indices and
extended() returns the rows it is given; compact() of a plan seen from one
rank of three maps own and halo columns as a dictionary does; reversed_edges()
of one part flips the edges. The all-to-all on 2 and 3 gloo ranks is tested
in tests/distributed/test_pipeline.py."""
import pytest
import torch

from torch_geometric_regcn.distributed import RowPartition
from torch_geometric_regcn.distributed.halo import HaloPlan, reversed_edges


def columns(n=12, count=40, seed=0):
    return torch.randint(0, n, (count,), generator=torch.Generator().manual_seed(seed))


def test_one_part_has_no_halo():
    plan = HaloPlan.build(columns(), RowPartition.even(12, 1), None)
    assert plan.halo.numel() == 0 and plan.halo.dtype == torch.long
    assert plan.recv_counts == [0] and plan.send_counts == [0]
    assert plan.send_index.numel() == 0
    assert plan.group is None and plan.partition == RowPartition.even(12, 1)


def test_one_part_compacts_to_the_global_indices_and_extends_by_nothing():
    cols = columns()
    plan = HaloPlan.build(cols, RowPartition.even(12, 1), None)
    assert torch.equal(plan.compact(cols), cols)
    x = torch.randn(12, 3, dtype=torch.float64)
    assert plan.extended(x) is x
    halo = plan.exchange(x)
    assert halo.shape == (0, 3) and halo.dtype == torch.float64


@pytest.mark.parametrize('rank', [0, 1, 2])
def test_compact_maps_own_rows_first_then_the_halo(rank):
    # A plan as rank `rank` of three holds it (the all-to-all's counts are not
    # read by compact()): its own columns map to 0..n-1, the halo's to n + position.
    part = RowPartition((0, 4, 7, 12), rank)
    cols = columns()
    halo = cols[part.owner(cols) != rank].unique()
    plan = HaloPlan(part, None, halo, [], torch.empty(0, dtype=torch.long), [])
    where = {g: g - part.start for g in range(part.start, part.end)}
    where.update({g: part.num_local + i for i, g in enumerate(halo.tolist())})
    assert plan.compact(cols).tolist() == [where[g] for g in cols.tolist()]
    # compact() indexes the rows that extended() would stack: own rows, then the halo's.
    x = torch.arange(12.0)[:, None]
    stacked = torch.cat([x[part.start:part.end], x[halo]])
    assert torch.equal(stacked[plan.compact(cols)], x[cols])


@pytest.mark.parametrize('weighted', [False, True])
def test_reversed_edges_of_one_part_are_the_flipped_edges(weighted):
    edge_index = torch.stack([columns(seed=1), columns(seed=2)])
    weight = torch.rand(40, dtype=torch.float64) if weighted else None
    index, out_weight = reversed_edges(edge_index, RowPartition.even(12, 1), None, weight)
    assert torch.equal(index, edge_index.flip(0))
    if weighted:
        assert torch.equal(out_weight, weight)
    else:
        assert out_weight is None


def test_halo_budget_is_checked_and_unused_without_a_halo():
    from torch_geometric_regcn.linalg import ShardedMatrix
    index = torch.stack([columns(seed=1), columns(seed=2)])
    values = torch.rand(40, dtype=torch.float64)
    with pytest.raises(ValueError, match="'halo_budget'"):
        ShardedMatrix(index, values, RowPartition.even(12, 1), None, halo_budget=0)
    matrix = ShardedMatrix(index, values, RowPartition.even(12, 1), None, halo_budget=1)
    x = torch.randn(12, 5, dtype=torch.float64)
    assert matrix.max_halo == 0 and matrix.chunk_columns(x) == 5  # one part: no exchange
    dense = torch.zeros(12, 12, dtype=torch.float64).index_put_(tuple(index), values,
                                                                  accumulate=True)
    assert torch.allclose(matrix @ x, dense @ x, atol=1e-14, rtol=0)
