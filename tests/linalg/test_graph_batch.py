r"""linalg.graph_batch: the graphs of a Batch as blocks of similar sizes
(every row in exactly one slot, padding below 2N), their per-graph Gram
matrices against a loop over the graphs, and the checks of a batch vector.
The Woodbury identity on them is tested in tests/linalg/test_woodbury.py."""
import pytest
import torch

from torch_geometric_regcn.linalg.blocks import GRAM_CHUNK, local_gram
from torch_geometric_regcn.linalg.graph_batch import (
    check_batch,
    gather_blocks,
    graph_blocks,
    graph_gram,
    scatter_blocks,
    slots_of,
)


def batch_of(sizes):
    return torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))


@pytest.mark.parametrize('sizes', [[1, 1, 1], [5, 0, 3, 8, 9, 16, 17, 0], [300, 2, 7, 1],
                                   [64] * 5])
def test_blocks_hold_every_row_once_with_less_than_twice_the_rows(sizes):
    batch, n = batch_of(sizes), sum(sizes)
    blocks = graph_blocks(batch, len(sizes))
    rows = torch.cat([b.rows[b.rows < n] for b in blocks])
    assert torch.equal(rows.sort().values, torch.arange(n))
    assert sum(b.rows.numel() for b in blocks) < 2 * n
    graphs = torch.cat([b.graphs for b in blocks]).sort().values
    assert torch.equal(graphs, torch.tensor([g for g, s in enumerate(sizes) if s > 0]))
    for b in blocks:  # each graph's rows in its own slots, in order
        starts = torch.tensor([0, *sizes]).cumsum(0)
        for graph, slots in zip(b.graphs.tolist(), b.rows):
            real = slots[slots < n]
            assert torch.equal(real, torch.arange(starts[graph], starts[graph + 1]))


def test_graph_gram_equals_a_loop_over_the_graphs():
    sizes = [5, 0, 3, 8, 9, 16, 17, 1]
    gen = torch.Generator().manual_seed(0)
    n = sum(sizes)
    a = torch.randn(n, 3, dtype=torch.float64, generator=gen)
    b = torch.randn(n, 4, dtype=torch.float64, generator=gen)
    batch = batch_of(sizes)
    blocks = graph_blocks(batch, len(sizes))
    gram = graph_gram(a, b, blocks, len(sizes))
    starts = torch.tensor([0, *sizes]).cumsum(0).tolist()
    eps = torch.finfo(torch.float64).eps
    for g in range(len(sizes)):
        lo, hi = starts[g], starts[g + 1]
        # Two orders of an n-term sum: each within n eps of the sum of |terms|.
        bound = 2 * sizes[g] * eps * (a[lo:hi].abs().T @ b[lo:hi].abs())
        assert ((gram[g] - a[lo:hi].T @ b[lo:hi]).abs() <= bound).all()


@pytest.mark.parametrize('sizes', [[5, 0, 3, 8, 9, 16, 17, 1], [1], [64] * 3])
def test_gather_and_scatter_blocks_are_inverse_and_each_the_others_adjoint(sizes):
    gen = torch.Generator().manual_seed(0)
    n = sum(sizes)
    blocks = graph_blocks(batch_of(sizes), len(sizes))
    slots = slots_of(blocks, n)
    t = torch.randn(n, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    parts = gather_blocks(t, blocks, slots)
    for part, block in zip(parts, blocks):  # each slot its row of t, padding zero
        padded = torch.cat([t, t.new_zeros(1, 3)])
        assert torch.equal(part, padded[block.rows])
    assert torch.equal(scatter_blocks(parts, slots), t)
    # <gather(t), p> = <t, scatter(p)> for any p, padding slots included: the
    # gradient of each is the other applied to the incoming gradient.
    p = [torch.randn(part.shape, dtype=torch.float64, generator=gen) for part in parts]
    grad, = torch.autograd.grad(sum((a * b).sum() for a, b in zip(parts, p)), t)
    q = [torch.where(block.rows[..., None] < n, x, 0) for x, block in zip(p, blocks)]
    assert torch.equal(grad, scatter_blocks(q, slots))
    u = [x.detach().requires_grad_() for x in p]
    grads = torch.autograd.grad((scatter_blocks(u, slots) * t.detach()).sum(), u)
    for g, expected in zip(grads, gather_blocks(t.detach(), blocks, slots)):
        assert torch.equal(g, expected)
    assert torch.autograd.gradcheck(lambda x: scatter_blocks(gather_blocks(x, blocks, slots),
                                                             slots), (t,))
    assert torch.autograd.gradgradcheck(lambda x: gather_blocks(x, blocks, slots)[0], (t,))


def test_a_graph_above_gram_chunk_gets_the_sums_of_local_gram_of_its_rows():
    # local_gram adds float32 products over more than GRAM_CHUNK rows in float64
    # chunks; one float32 product of a graph's 2^15 padded rows drifts by tens of
    # eps (hundreds at 2 * 10^5 rows). A batch's large graph gets local_gram of its
    # own rows, the sums of the graph alone: the same call, so bit for bit.
    sizes = [3, GRAM_CHUNK + 1, 7, 7 * GRAM_CHUNK + 5, 0]
    gen = torch.Generator().manual_seed(0)
    n = sum(sizes)
    a, b = torch.rand(n, 4, generator=gen), torch.rand(n, 3, generator=gen)
    gram = graph_gram(a, b, graph_blocks(batch_of(sizes), len(sizes)), len(sizes))
    starts = torch.tensor([0, *sizes]).cumsum(0).tolist()
    for g in (1, 3):
        lo, hi = starts[g], starts[g + 1]
        assert torch.equal(gram[g], local_gram(a[lo:hi], b[lo:hi]))


def test_check_batch():
    batch = batch_of([2, 3])
    assert check_batch(batch, 5) == 2 and check_batch(batch, 5, 4) == 4
    assert check_batch(torch.zeros(0, dtype=torch.long), 0) == 1
    with pytest.raises(ValueError, match='non-negative and non-decreasing'):
        check_batch(batch - 1, 5)
    with pytest.raises(ValueError, match='non-negative and non-decreasing'):
        check_batch(batch.flip(0), 5)
    with pytest.raises(TypeError, match=r"1-D int64 \(or int32\)"):
        check_batch(batch[None], 5)
    with pytest.raises(ValueError, match="'batch_size' must be"):
        check_batch(batch, 5, 0)


def test_graph_blocks_refuses_a_batch_vector_that_check_batch_would():
    # Under torch.compile check_batch does not run; graph_blocks (eager) used to
    # return blocks that left rows unpropagated or mixed graphs, silently.
    for batch, size in ((torch.tensor([0, 0, 1, 1, 2]), 2), (torch.tensor([0, 1, 0, 1]), 2),
                        (torch.tensor([-1, 0, 0]), 1)):
        with pytest.raises(ValueError, match='non-decreasing'):
            graph_blocks(batch, size)
    with pytest.raises(ValueError, match='one graph index per node'):
        graph_blocks(torch.tensor([0, 0, 1]), 2, 4)  # a batch vector one row short


def test_a_strided_batch_vector_is_fingerprinted():
    # A column of an [N, 2] index table: stride 2. WoodburyCache fingerprints the
    # batch vector; Tensor.view to 32-bit words raised on the strided view.
    from torch_geometric_regcn.utils.fingerprint import fingerprint
    batch = torch.tensor([0, 0, 1, 1, 1, 2])
    strided = torch.stack([batch, batch], 1)[:, 0]
    assert not strided.is_contiguous()
    assert fingerprint(strided) == fingerprint(batch)
    column = torch.randn(6, 2, dtype=torch.float64)[:, :1]
    assert fingerprint(column) == fingerprint(column.contiguous())
