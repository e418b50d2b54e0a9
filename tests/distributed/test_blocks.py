"""linalg.blocks.tall_qr on the row shards of 2 and 3 gloo ranks against the
factorisation of the whole block in one process: CholeskyQR2 for a
well-conditioned block (one all-reduced Gram matrix per pass), TSQR for one
beyond cholesky_qr_limit. Every rank must take the same route and hold the
same R."""
import math

import pytest
import torch
import torch.distributed as dist

from tests.distributed.launch import requires_gloo, run_ranks
from torch_geometric_regcn.linalg.blocks import cholesky_qr_limit, tall_qr

pytestmark = requires_gloo

EPS64 = torch.finfo(torch.float64).eps
COLS = 5


def whole_block(kappa):
    r"""A 90 x 5 float64 block of condition number :obj:`kappa`."""
    gen = torch.Generator().manual_seed(3)
    u = torch.linalg.qr(torch.randn(90, COLS, dtype=torch.float64, generator=gen)).Q
    v = torch.linalg.qr(torch.randn(COLS, COLS, dtype=torch.float64, generator=gen)).Q
    return (u * torch.logspace(0, -math.log10(kappa), COLS, dtype=torch.float64)) @ v.T


def _sharded_qr(rank, world_size, kappa):
    # Uneven shards; at P = 3 one holds fewer rows (3) than the block has columns.
    cuts = [0, 20, 90] if world_size == 2 else [0, 31, 34, 90]
    rows = whole_block(kappa)[cuts[rank]:cuts[rank + 1]]
    return tall_qr(rows, dist.group.WORLD)


@pytest.mark.parametrize('world_size', [2, 3])
@pytest.mark.parametrize('kappa', [10.0, 10 * cholesky_qr_limit(torch.float64)])
def test_sharded_tall_qr_is_the_factorisation_of_the_whole_block(world_size, kappa):
    results = run_ranks(_sharded_qr, world_size, kappa)
    r = results[0][1]
    assert all(torch.equal(rank_r, r) for _, rank_r in results)  # one R on every rank
    q = torch.cat([rank_q for rank_q, _ in results])
    b = whole_block(kappa)
    scale = float(torch.linalg.matrix_norm(b))
    assert torch.equal(r, r.triu())
    # QR properties to the rounding of N-term sums (constant 4, as in
    # tests/linalg/test_blocks.py): Q orthonormal, QR = B.
    torch.testing.assert_close(q.T @ q, torch.eye(COLS, dtype=torch.float64), rtol=0,
                               atol=4 * 90 * COLS * EPS64)
    torch.testing.assert_close(q @ r, b, rtol=0, atol=4 * 90 * COLS * EPS64 * scale)
    one = tall_qr(b, None)
    if kappa < cholesky_qr_limit(torch.float64):
        # CholeskyQR2 on both sides: the same factors, up to the order of the
        # Gram matrix's sums; R's diagonal positive.
        assert bool((r.diagonal() > 0).all())
        torch.testing.assert_close(r, one.R, rtol=0, atol=100 * 90 * EPS64 * scale)
        torch.testing.assert_close(q, one.Q, rtol=0, atol=100 * 90 * EPS64 * kappa)
    else:
        # TSQR against Householder: the same R up to its rows' signs, to the
        # rounding of a factorisation of condition kappa (the smallest pivot
        # carries an error of eps64 * ||B|| relative to ||B|| / kappa).
        signs = r.diagonal().sign() * one.R.diagonal().sign()
        torch.testing.assert_close(r, one.R * signs[:, None], rtol=0,
                                   atol=100 * 90 * EPS64 * scale)
