"""block_lanczos on the row shards of 2 and 3 gloo ranks against the same call
in one process: the shards draw every random block by global row
(linalg.random_rows) from rank 0's generator and take the same decisions, so
they run the single-process iteration with sums in another order."""
import math

import pytest
import torch
import torch.distributed as dist

from tests.distributed.launch import requires_gloo, run_ranks
from tests.linalg.helpers import operator
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.linalg import ShardedMatrix, block_lanczos
from torch_geometric_regcn.linalg.random_rows import RandomRows

pytestmark = requires_gloo

N, K, TOL = 600, 12, 1e-4


def _solve(s, which, seed):
    return block_lanczos(s, K, which, tol=TOL, generator=torch.Generator().manual_seed(seed))


def _sharded(rank, world_size, which, other_lapack=False):
    if other_lapack in ('nearly dependent', 'ill conditioned') and rank == 1:
        # Rank 1's LAPACK reads every block as nearly dependent (its smallest singular
        # value 0), or every Gram matrix of tall_qr as singular: it would refill, or
        # take Householder's QR, where rank 0 does not, through collectives rank 0
        # never enters (a mismatch: a hang, or sums of other tensors).
        name = 'svdvals' if other_lapack == 'nearly dependent' else 'eigvalsh'
        own = getattr(torch.linalg, name)

        def other(matrix):
            return torch.zeros_like(own(matrix))
        setattr(torch.linalg, name, other)
    elif other_lapack and rank == 1:
        # Another thread count or machine returns other bits, and of a repeated
        # eigenvalue any basis: here the first two vectors rotated by 1e-6.
        eigh = torch.linalg.eigh

        def other(matrix):
            values, vectors = eigh(matrix)
            c, s = math.cos(1e-6), math.sin(1e-6)
            first, second = vectors[:, 0].clone(), vectors[:, 1].clone()
            vectors[:, 0], vectors[:, 1] = c * first + s * second, c * second - s * first
            return values, vectors
        torch.linalg.eigh = other
    s = operator(N).to_sparse_coo().coalesce()
    part = RowPartition.even(N, world_size, rank)
    index, values = s.indices(), s.values()
    mine = (index[0] >= part.start) & (index[0] < part.end)
    shard = ShardedMatrix(index[:, mine], values[mine], part, dist.group.WORLD)
    # each rank's generator differs: rank 0's seeds the one stream
    return _solve(shard, which, seed=rank), (part.start, part.end)


@pytest.mark.parametrize('world_size,which,other_lapack', [
    (2, 'LA', False), (3, 'LA', False), (2, 'LM', False), (3, 'LM', False), (2, 'LA', True),
    (2, 'LA', 'nearly dependent'), (3, 'LA', 'ill conditioned')])
def test_sharded_block_lanczos_is_the_single_process_iteration(world_size, which,
                                                              other_lapack):
    # other_lapack: rank 1's eigh returns other bits (off by 1e-6 here, so that a rank
    # using its own would be 1e-7 off or more); every rank takes rank 0's eigenpairs of
    # the projected matrices, so its rows still belong to the same vectors. Where rank
    # 1's LAPACK decides for a refill or for Householder's QR, every rank follows it
    # (any_rank): the same iteration but for the rounding of that route.
    results = run_ranks(_sharded, world_size, which, other_lapack)
    single = _solve(operator(N), which, seed=0)
    vectors = torch.cat([pairs.eigenvectors for pairs, _ in results])
    assert [bounds for _, bounds in results] == [
        (p.start, p.end) for p in (RowPartition.even(N, world_size, r)
                                   for r in range(world_size))]
    for pairs, _ in results:
        assert pairs.iterations == single.iterations
        # the same Ritz values to float64 rounding (|lambda| <= 1)
        torch.testing.assert_close(pairs.eigenvalues, single.eigenvalues, rtol=0, atol=1e-12)
    # The same vectors, signs included: sums in another order (~1e-16 relative
    # each), amplified by ||S|| / gap through the iteration (measured ~1e-13).
    # A start drawn per rank converges to another basis of the same pairs, which
    # agrees to the tolerance only (~1e-7 at tol 1e-4), and LAPACK's own signs
    # flip vectors: 1e-10 fails either.
    if other_lapack == 'ill conditioned':  # Householder's R: its own signs of the basis
        vectors = vectors * torch.sign((vectors * single.eigenvectors).sum(0))
    assert float((vectors - single.eigenvectors).abs().max()) < 1e-10


def test_random_rows_do_not_depend_on_the_rows_held():
    whole = RandomRows(7, 70_000, 0, 70_000, torch.float64, torch.device('cpu'))
    expected = [whole.draw(3), whole.draw(2)]
    # shards that cut the chunks of ROW_CHUNK rows anywhere, an empty one included
    for bounds in ([0, 10, 65_536, 65_537, 70_000, 70_000], [0, 35_000, 70_000]):
        parts = [RandomRows(7, 70_000, a, b, torch.float64, torch.device('cpu'))
                 for a, b in zip(bounds[:-1], bounds[1:])]
        for columns, reference in zip((3, 2), expected):
            assert torch.equal(torch.cat([p.draw(columns) for p in parts]), reference)
    assert not torch.equal(expected[0][:, :2], expected[1])  # draws differ
    assert abs(float(expected[0].mean())) < 0.02  # standard normal: 210,000 draws,
    assert abs(float(expected[0].std()) - 1) < 0.02  # sd of the mean ~0.002
    # Rows held by global index (a METIS shard's node_id): the rows of one process.
    perm = torch.randperm(70_000, generator=torch.Generator().manual_seed(0))
    for a, b in ((0, 40_000), (40_000, 70_000), (5, 5)):
        held = RandomRows(7, 70_000, a, b, torch.float64, torch.device('cpu'), perm[a:b])
        for columns, reference in zip((3, 2), expected):
            assert torch.equal(held.draw(columns), reference[perm[a:b]])


def _block_with_basis(n, b, dependent):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(n, b, dtype=torch.float64, generator=gen)
    if dependent:
        x[:, 2] = x[:, 1]  # R[2, 2] ~ eps: the direction of Q's column 2 is rounding
    basis = torch.linalg.qr(torch.randn(n, 4, dtype=torch.float64, generator=gen)).Q
    return x - basis @ (basis.T @ x), basis


def _verdicts(rank, world_size, case):
    from torch_geometric_regcn.linalg import blocks, lanczos
    from torch_geometric_regcn.linalg.blocks import QR
    part = RowPartition.even(120, world_size, rank)
    x, basis = _block_with_basis(120, 6, case == 'other rounding')
    x, basis = x[part.start:part.end].clone(), basis[part.start:part.end]
    group = dist.group.WORLD
    if rank == 1 and case == 'second cholesky':  # rank 1's second Cholesky fails
        own, calls = torch.linalg.cholesky_ex, []

        def cholesky_ex(matrix, **kwargs):
            factor, info = own(matrix, **kwargs)
            calls.append(1)
            return factor, (info + 1 if len(calls) == 2 else info)
        torch.linalg.cholesky_ex = cholesky_ex
    if case == 'second cholesky':
        return tuple(blocks.tall_qr(x, group)) + (None,)
    if rank == 1 and case == 'other rounding':  # rank 1's QR rounds at the last bit
        own_qr, gen = torch.linalg.qr, torch.Generator().manual_seed(1)

        def qr(a, *args, **kwargs):
            noise = 1e-16 * torch.randn(a.shape, dtype=a.dtype, generator=gen)
            return own_qr(a * (1 + noise), *args, **kwargs)
        torch.linalg.qr = qr
    if case in ('dependent', 'left in the basis'):
        # 'dependent': rank 1 alone reads column 2 of the first R as zero;
        # 'left in the basis': every rank reads it so (the block nearly
        # dependent), and rank 1 alone reads column 3 of the re-orthogonalised
        # block as left inside the basis
        own_tall_qr, calls = lanczos.tall_qr, []

        def tall_qr(block, group):
            q, r = own_tall_qr(block, group)
            calls.append(1)
            r = r.clone()
            if len(calls) == 1 and (rank == 1 or case == 'left in the basis'):
                r[2, 2] = 0.0
            if len(calls) == 2 and rank == 1 and case == 'left in the basis':
                r[3, 3] = 0.1
            return QR(q, r)
        lanczos.tall_qr = tall_qr
    if case == 'other rounding':
        return tuple(blocks.tall_qr(x, group)) + (basis,)
    random = RandomRows(5, 120, part.start, part.end, torch.float64, torch.device('cpu'))
    q, r = lanczos._orthonormal_block(x, basis, 1.0, random, group)
    return q, r, basis


@pytest.mark.parametrize('case', ['second cholesky', 'dependent', 'left in the basis',
                                  'other rounding'])
def test_every_rank_takes_the_verdict_of_any(case):
    # Each verdict from a local LAPACK call, taken by one rank alone, would send it
    # through collectives the others skip (a hang until pg_timeout); followed by
    # all, the ranks return one orthonormal extension of the basis, one R.
    results = run_ranks(_verdicts, 2, case, pg_timeout=15.0)
    q = torch.cat([part[0] for part in results])
    assert torch.equal(results[0][1], results[1][1])
    if results[0][2] is not None:
        basis = torch.cat([part[2] for part in results])
        if case == 'other rounding':  # TSQR: the kept columns (column 2 is dependent)
            q = q[:, results[0][1].diagonal().abs() > 1e-10]
        else:
            q = torch.cat([basis, q], dim=1)
    torch.testing.assert_close(q.T @ q, torch.eye(q.size(1), dtype=q.dtype), rtol=0,
                               atol=1e-13)
