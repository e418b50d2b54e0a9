import math

import pytest
import torch

import torch_geometric_regcn.linalg.cg as cg
from torch_geometric_regcn.linalg.cg import cg_solve, conjugate_gradient, implicit_cg_solve


def spd(n=40, seed=0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(n, n, dtype=torch.float64, generator=gen)
    a = torch.where(torch.rand(n, n, generator=gen, dtype=torch.float64) < 0.1, a, 0.0)
    return (a @ a.T + torch.diag(torch.rand(n, dtype=torch.float64, generator=gen) + 0.5))


def test_cg_matches_dense_solve():
    m = spd()
    b = torch.randn(40, 3, dtype=torch.float64)
    for matrix in (m, m.to_sparse_csr(), m.to_sparse()):
        y, residual, _ = conjugate_gradient(matrix, b, tol=1e-10, max_iter=500)
        assert residual <= 1e-10
        torch.testing.assert_close(y, torch.linalg.solve(m, b), rtol=1e-7, atol=1e-8)
    y, _, _ = conjugate_gradient(m, b[:, 0], tol=1e-10)
    assert y.shape == (40,)


def test_cg_zero_rhs_column():
    b = torch.zeros(40, 2, dtype=torch.float64)
    b[:, 1] = 1.0
    y, _, _ = conjugate_gradient(spd(), b, tol=1e-10)
    assert torch.equal(y[:, 0], torch.zeros(40, dtype=torch.float64))


@pytest.mark.parametrize('dtype,power', [(torch.float32, -60), (torch.float32, -100),
                                         (torch.float32, 60), (torch.float64, -200),
                                         (torch.float64, 200)])
def test_cg_is_exact_under_a_power_of_two_scale_of_a_column(dtype, power):
    # M Y = B and M Y' = 2^p B: in exact arithmetic Y' = 2^p Y, and scaling by a power
    # of two is exact in floating point, so the iterates must agree bit for bit (and
    # with the float64 solution to CG's tolerance) whatever the column's scale. In
    # float32 a column of entries near 2^-60 (1e-18) ran its products r^T z into
    # subnormal numbers and stalled far above tol (CiteSeer's implicit backward, a
    # nearly vanished gradient column: 1000 iterations instead of 20); near 2^-100 it
    # lost bits; 2^60 and float64's 2^+-200 check the scale in the other direction and
    # beyond float32's range.
    m = spd(60, seed=1)
    b = torch.randn(60, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    scaled = b.clone()
    scaled[:, 1] = b[:, 1] * 2.0 ** power  # exact in float64, and then in float32
    matrix = m.to(dtype).to_sparse_csr()
    y, residual, iterations = conjugate_gradient(matrix, b.to(dtype), tol=1e-5, max_iter=500)
    y2, residual2, iterations2 = conjugate_gradient(matrix, scaled.to(dtype), tol=1e-5,
                                                    max_iter=500)
    assert residual <= 1e-5 and residual2 <= 1e-5 and iterations2 == iterations < 500
    assert torch.equal(y2[:, 0], y[:, 0])
    assert torch.equal(y2[:, 1], y[:, 1] * 2.0 ** power)
    assert y.dtype == dtype
    exact = torch.linalg.solve(m, b)
    # relative error <= cond(M) * relative residual (<= tol), with the float32 rounding
    # of M and B (cond * 1e-7) well below it.
    error = (y.double() - exact).norm(dim=0) / exact.norm(dim=0)
    assert float(error.max()) <= float(torch.linalg.cond(m)) * 1e-5


def test_cg_of_an_empty_system():
    for rhs in (torch.zeros(0, 3), torch.zeros(0)):
        y, residual, iterations = conjugate_gradient(torch.zeros(0, 0), rhs)
        assert y.shape == rhs.shape and residual == 0.0 and iterations == 0


def test_cg_gradcheck_through_implicit_backward():
    m = spd(12).to_sparse_csr()
    b = torch.randn(12, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda rhs: cg_solve(m, rhs, 1e-12, 500), (b,))


def test_cg_warns_with_residual():
    with pytest.warns(UserWarning, match=r'after 2 iterations with relative residual'):
        cg_solve(spd(), torch.randn(40, 1, dtype=torch.float64), 1e-12, 2)


def test_cg_saved_memory_does_not_grow_with_iterations():
    m = spd(200).to_sparse_csr()
    saved = {}
    for tol in (1e-1, 1e-12):
        total = []

        def pack(t, total=total):
            total.append(t.numel())
            return t

        b = torch.randn(200, 4, dtype=torch.float64, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            y = cg_solve(m, b, tol, 1000)
        y.sum().backward()
        _, _, iterations = conjugate_gradient(m, b.detach(), tol, 1000)
        saved[iterations] = sum(total)
    assert len(saved) == 2 and len(set(saved.values())) == 1


def test_the_stopping_rule_is_checked_and_its_old_name_moved():
    from torch_geometric_regcn.linalg import cg
    from torch_geometric_regcn.utils.validation import check_stopping_rule
    with pytest.raises(ValueError, match="'tol' must be positive"):
        conjugate_gradient(spd(), torch.ones(40, 1, dtype=torch.float64), tol=0.0)
    with pytest.raises(ValueError, match="'max_iter' must be a positive integer"):
        cg_solve(spd(), torch.ones(40, 1, dtype=torch.float64), max_iter=0)
    with pytest.warns(DeprecationWarning, match=r"'torch_geometric_regcn\.linalg\.cg\."
                                                r"check_arguments' moved to"):
        assert cg.check_arguments is check_stopping_rule


@pytest.mark.parametrize('cond', [1e2, 1e3])
def test_the_residual_returned_is_that_of_the_solution(cond):
    # CG's recurrence drifts from B - MY in float32: at cond 1e3 it reported
    # 9.5e-7 <= tol, silently, where the solution's residual was 2.7e-5.
    # Reference: the residual of the returned Y in float64. The float32
    # evaluation of the restarts' residual agrees with it to about 10 % here;
    # its rounding (400-term products, about sqrt(400) eps32 |M||Y| per entry)
    # is of the residual's own order at cond 1e3, so the bound allows a
    # factor 4 (the defect was a factor 28).
    n = 400
    generator = torch.Generator().manual_seed(0)
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=generator))
    eigenvalues = torch.logspace(0, math.log10(cond), n, dtype=torch.float64)
    m = (q * eigenvalues) @ q.T
    m = (m + m.T) / 2
    b = torch.randn(n, 2, dtype=torch.float64, generator=generator)
    y, residual, iterations = conjugate_gradient(m.float(), b.float(), tol=1e-6, max_iter=5000)
    true = float(((b - m @ y.double()).norm(dim=0) / b.norm(dim=0)).max())
    assert true <= 4 * max(residual, 1e-6) and residual <= 4 * true
    assert iterations < 5000  # stopped at float32's floor, not at max_iter
    if residual > 1e-6:
        with pytest.warns(UserWarning, match='restarts no longer halve it'):
            cg_solve(m.float(), b.float(), 1e-6, 5000)


def test_a_second_derivative_in_b_is_right_and_in_params_raises():
    # Reference: the dense solve under autograd. In B the backward pass's
    # solve runs under autograd, so a Hessian-vector product through it is
    # right (to CG's tolerance); in theta the implicit formula holds Y
    # fixed, so it raises instead of returning -1.39 for +4.70.
    n = 6
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(n, n, dtype=torch.float64, generator=gen)
    dense = a @ a.T + n * torch.eye(n, dtype=torch.float64)
    b = torch.randn(n, 2, dtype=torch.float64, generator=gen, requires_grad=True)
    v = torch.randn(n, 2, dtype=torch.float64, generator=gen)

    def hvp(solve):
        (grad,) = torch.autograd.grad(solve(b).pow(3).sum(), b, create_graph=True)
        return torch.autograd.grad((grad * v).sum(), b)[0]

    torch.testing.assert_close(hvp(lambda rhs: cg_solve(dense.to_sparse_csr(), rhs, 1e-13)),
                               hvp(lambda rhs: torch.linalg.solve(dense, rhs)),
                               rtol=1e-9, atol=1e-11)
    theta = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    y = cg_solve(dense.to_sparse_csr(), b, 1e-12, 100, lambda m, z: theta * (m @ z), (theta,))
    (grad,) = torch.autograd.grad(y.square().sum(), theta, create_graph=True)
    for wrt in (theta, b):  # in theta, and the mixed derivative in b
        with pytest.raises(RuntimeError, match=r"holds the solution fixed.*second derivative "
                                               r"\(create_graph=True\)"):
            torch.autograd.grad(grad, wrt, allow_unused=True)
    # The Hessian-vector product in B alone stays right with theta learned.
    y = cg_solve(dense.to_sparse_csr(), b, 1e-13, 100, lambda m, z: theta * (m @ z), (theta,))
    (grad,) = torch.autograd.grad(y.pow(3).sum(), b, create_graph=True)
    got = torch.autograd.grad((grad * v).sum(), b)[0]
    expected = hvp(lambda rhs: torch.linalg.solve(theta.detach() * dense, rhs))
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-11)


def test_dtypes_are_checked_before_any_work():
    # They failed late (at the first product), with torch.finfo's TypeError
    # for integers, or, in float16, with a false "not positive definite"
    # after 280 iterations on a matrix of condition 1.7.
    m = (2 * torch.eye(5) + 0.1 * torch.ones(5, 5)).to_sparse_csr()
    b = torch.ones(5, 2)
    with pytest.raises(TypeError, match=r"'matrix' is torch.float32 but 'rhs' is torch.float64"):
        conjugate_gradient(m, b.double())
    with pytest.raises(TypeError, match=r"'rhs' must be float32 or float64 \(got torch.int64\)"):
        conjugate_gradient(m, b.long())
    with pytest.raises(TypeError, match=r"got torch.float16.*solve in float32"):
        cg_solve(m.to_dense().half().to_sparse_csr(), b.half())


def test_a_restart_from_the_true_residual_mends_a_drifted_recurrence():
    # The first three products are off by 1e-3 (a stand-in for the rounding
    # that makes CG's residual recurrence drift): the recurrence then reaches
    # tol while the solution's residual is about 1e-4, and only the restart
    # from B - MY brings the solution to tol. Reference: a dense float64 solve;
    # every product after the third is exact, so the bound is tol's.
    m, b = spd(), torch.randn(40, 2, dtype=torch.float64)
    calls = []

    def drifting(matrix, x):
        calls.append(None)
        return matrix @ x * (1 + 1e-3 if len(calls) <= 3 else 1.0)

    y, residual, iterations = conjugate_gradient(m, b, tol=1e-10, max_iter=500, matmul=drifting)
    true = float(((b - m @ y).norm(dim=0) / b.norm(dim=0)).max())
    # The two evaluations of B - MY may round differently (other kernels):
    # by at most about n eps cond(M) = 40 * 2.2e-16 * 42, below 1e-12.
    assert residual == pytest.approx(true, rel=1e-3, abs=1e-12) and true <= 1e-10
    torch.testing.assert_close(y, torch.linalg.solve(m, b), rtol=1e-7, atol=1e-8)
    _, _, plain = conjugate_gradient(m, b, tol=1e-10, max_iter=500)
    assert iterations > plain  # the restart's iterations came on top


def test_cg_stops_at_the_floor_of_its_products_and_says_so():
    # Every product carries an error of 1e-8 relative (a stand-in for a
    # dtype's rounding), so no solution's residual goes far below 1e-8:
    # CG must stop where a restart no longer halves it, long before
    # max_iter, and warn with the residual reached (reported and true within a
    # factor 10 of the 1e-8 floor: the noise's own spread, not rounding).
    m, b = spd(), torch.randn(40, 2, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)

    def noisy(matrix, x):
        noise = torch.randn(x.shape, dtype=x.dtype, generator=generator)
        return matrix @ x + 1e-8 * x.norm(dim=0) * noise / noise.norm(dim=0)

    y, residual, iterations = conjugate_gradient(m, b, tol=1e-14, max_iter=5000, matmul=noisy)
    assert iterations < 1000 and 1e-9 < residual < 1e-7
    true = float(((b - m @ y).norm(dim=0) / b.norm(dim=0)).max())
    assert 1e-9 < true < 1e-7
    with pytest.warns(UserWarning, match='restarts no longer halve it'):
        cg_solve(m, b, 1e-14, 5000, matmul=noisy)


def test_a_solution_beyond_the_dtype_raises():
    # M = 0.01 I, B = 1e38 in float32: M⁻¹B = 1e40 overflows. The column scaling
    # solved the scaled system to tol and unscaled it to inf, silently.
    matrix = (0.01 * torch.eye(4)).to_sparse_csr()
    rhs = torch.full((4, 2), 1e38)
    rhs[:, 1] = 1.0
    with pytest.raises(ValueError, match='overflows torch.float32'):
        cg_solve(matrix, rhs)
    torch.testing.assert_close(cg_solve(matrix, rhs[:, 1:]), torch.full((4, 1), 100.0))


def test_a_matrix_that_requires_a_gradient_needs_params():
    # Without 'params' the matrix's gradient was dropped: an edge weight built
    # into it kept grad None, silently (review s45/numeric).
    w = torch.tensor([0.5, 2.0], dtype=torch.float64, requires_grad=True)
    matrix = torch.diag(torch.cat([w, w.new_ones(1)]) + 1.0).to_sparse_csr()
    with pytest.raises(ValueError, match="'matrix' requires a gradient.*'params'"):
        cg_solve(matrix, torch.ones(3, 1, dtype=torch.float64))
    with torch.no_grad():
        cg_solve(matrix, torch.ones(3, 1, dtype=torch.float64))
    cg_solve(matrix.detach(), torch.ones(3, 1, dtype=torch.float64))


def test_a_start_near_the_solution_takes_fewer_iterations_to_the_same_test():
    # Reference: the dense solve, float64; both runs stop at the same test
    # (relative residual 1e-10), so both are within cond * 1e-10 of it.
    m = spd(seed=3)
    b = torch.randn(40, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    exact = torch.linalg.solve(m, b)
    sparse = m.to_sparse_csr()
    cold = conjugate_gradient(sparse, b, tol=1e-10)
    near = exact + 1e-6 * torch.randn(40, 2, dtype=torch.float64,
                                      generator=torch.Generator().manual_seed(5))
    warm = conjugate_gradient(sparse, b, tol=1e-10, start=near)
    bound = float(torch.linalg.cond(m)) * 1e-10 * float(exact.abs().max())
    for result in (cold, warm):
        assert result.residual <= 1e-10
        assert torch.allclose(result.solution, exact, atol=bound, rtol=0)
    assert warm.iterations < cold.iterations
    with pytest.raises(ValueError, match=r"'start' must be shaped and typed as 'rhs'"):
        conjugate_gradient(sparse, b, start=near[:, :1])
    with pytest.raises(ValueError, match=r"'start'"):
        conjugate_gradient(sparse, b, start=torch.full_like(near, math.nan))


def test_implicit_cg_solve_differentiates_the_product_and_the_rhs_by_one_solve(monkeypatch):
    # M(theta) = D + theta * L (L a graph Laplacian, D a positive diagonal),
    # differentiable in theta and in D through the product alone. Reference:
    # autograd through the dense solve, float64; CG to 1e-12 at a condition
    # below 1e3: 1e-8.
    gen = torch.Generator().manual_seed(6)
    a = (torch.rand(30, 30, dtype=torch.float64, generator=gen) < 0.2).double()
    a = torch.triu(a, 1)
    laplacian = torch.diag((a + a.T).sum(1)) - (a + a.T)
    theta = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
    d = (torch.rand(30, dtype=torch.float64, generator=gen) + 1.0).requires_grad_(True)
    b = torch.randn(30, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    c = torch.randn(30, 3, dtype=torch.float64, generator=gen)
    sparse = laplacian.to_sparse_csr()

    def product(y):
        return d[:, None] * y + theta * (sparse @ y)

    diag = (d + theta * laplacian.diagonal()).detach()
    pre = torch.diag(diag).to_sparse_csr()
    solves = []
    original = cg._solve
    monkeypatch.setattr(cg, '_solve', lambda *args, **kw: solves.append(1) or original(*args,
                                                                                     **kw))
    y = implicit_cg_solve(product, pre, b, tol=1e-12)
    grads = torch.autograd.grad((y * c).sum(), (b, theta, d))
    assert len(solves) == 2  # the forward solve and one in the backward pass
    expected_y = torch.linalg.solve(torch.diag(d) + theta * laplacian, b)
    expected = torch.autograd.grad((expected_y * c).sum(), (b, theta, d))
    assert torch.allclose(y, expected_y, atol=1e-8)
    for ours, reference in zip(grads, expected):
        assert torch.allclose(ours, reference, atol=1e-8)
    y = implicit_cg_solve(product, pre, b, tol=1e-12)
    with pytest.raises(RuntimeError, match=r'second derivative'):
        torch.autograd.grad((y * c).sum(), b, create_graph=True)


def test_a_zero_rhs_column_is_solved_at_once_from_any_start():
    # Its solution is exactly zero; from a non-zero start the test
    # ||r|| <= tol ||b|| = 0 could not be met: 1000 iterations for every
    # column and a residual of 4e292 (or 'diverged' for a larger start).
    m = spd(20, seed=7)
    b = torch.randn(20, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    b[:, 1] = 0
    start = torch.linalg.solve(m, torch.randn(20, 3, dtype=torch.float64,
                                              generator=torch.Generator().manual_seed(9)))
    sparse = m.to_sparse_csr()
    cold = conjugate_gradient(sparse, b, tol=1e-10)
    for scale in (1.0, 100.0):
        warm = conjugate_gradient(sparse, b, tol=1e-10, start=scale * start)
        assert warm.residual <= 1e-10 and warm.iterations <= cold.iterations + 5
        assert bool((warm.solution[:, 1] == 0).all())


def test_implicit_cg_solve_of_a_1d_rhs_gives_the_product_one_column():
    # Reference: the dense float64 solve and its autograd gradient. CG called
    # product() with [N, 1] and the backward's product with [N]: a product
    # written for blocks failed in the backward pass, one written for vectors
    # broadcast to [N, N] and returned it, silently.
    gen = torch.Generator().manual_seed(10)
    m = spd(12, seed=11)
    d = (torch.rand(12, dtype=torch.float64, generator=gen) + 1).requires_grad_()
    b = torch.randn(12, dtype=torch.float64, generator=gen)
    sparse = m.to_sparse_csr()
    pre = torch.diag((d + m.diagonal()).detach()).to_sparse_csr()
    y = implicit_cg_solve(lambda v: d[:, None] * v + sparse @ v, pre, b, tol=1e-13)
    (grad,) = torch.autograd.grad(y.sum(), d)
    exact = torch.linalg.solve(torch.diag(d) + m, b)
    (expected,) = torch.autograd.grad(exact.sum(), d)
    assert y.shape == (12,)
    torch.testing.assert_close(y, exact.detach(), rtol=0, atol=1e-10)
    torch.testing.assert_close(grad, expected, rtol=0, atol=1e-10)
    with pytest.raises(ValueError, match=r"'matmul' must return M @ x shaped as x"):
        implicit_cg_solve(lambda v: d * v + sparse @ v, pre, b)


def block_system(scales=(1.0, 1e-6), sizes=(40, 30), seed=3):
    r"""A block-diagonal SPD matrix of graphs with their own right-hand sides
    at the given scales, the rows of each graph numbered as a Batch does."""
    blocks = [spd(n, seed + i) for i, n in enumerate(sizes)]
    gen = torch.Generator().manual_seed(seed)
    rhs = torch.cat([s * torch.randn(n, 3, dtype=torch.float64, generator=gen)
                     for s, n in zip(scales, sizes)])
    batch = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    return blocks, torch.block_diag(*blocks), rhs, batch


def test_each_graph_of_a_batch_meets_its_own_tolerance():
    # A test over the whole column let a graph whose features are 1e-6 of
    # another's stop at ~1e-1 of its own solution. With batch=, each graph is
    # its own system. Reference: each block's dense solve; CG's relative
    # residual tol bounds the relative error by tol * cond (cond < 1e3 here).
    blocks, m, rhs, batch = block_system()
    exact = [torch.linalg.solve(blocks[0], rhs[:40]), torch.linalg.solve(blocks[1], rhs[40:])]
    cond = max(float(torch.linalg.cond(b)) for b in blocks)
    assert cond < 1e3

    def errors(y):
        return [float((y[:40] - exact[0]).norm() / exact[0].norm()),
                float((y[40:] - exact[1]).norm() / exact[1].norm())]

    y, residual, _ = conjugate_gradient(m.to_sparse_csr(), rhs, tol=1e-8, batch=batch)
    assert residual <= 1e-8 and max(errors(y)) <= 1e-8 * cond
    y, _, _ = conjugate_gradient(m.to_sparse_csr(), rhs, tol=1e-8)  # one test per column
    # the small graph far from its tolerance: 4.5e-4, 13 times this
    assert errors(y)[1] > 1e2 * 1e-8 * cond
    # Any numbering of the blocks, e.g. connected components, not only a Batch's.
    order = torch.randperm(70, generator=torch.Generator().manual_seed(0))
    shuffled = m[order][:, order]
    y2, _, _ = conjugate_gradient(shuffled.to_sparse_csr(), rhs[order], tol=1e-8,
                                  batch=1 - batch[order], batch_size=2)
    assert max(errors(y2[order.argsort()])) <= 1e-8 * cond


def test_the_gradient_of_each_graph_of_a_batch_is_its_own():
    # The backward solve uses the blocks too: reference, the dense gradient of
    # sum(w * M^-1 B) per block, w a random weight at the small graph's scale.
    blocks, m, rhs, batch = block_system(scales=(1.0, 1.0))
    rhs.requires_grad_(True)
    weight = torch.ones(70, 3, dtype=torch.float64)
    weight[40:] *= 1e-6
    y = cg_solve(m.to_sparse_csr(), rhs, tol=1e-10, batch=batch)
    grad, = torch.autograd.grad((weight * y).sum(), rhs)
    expected = torch.cat([torch.linalg.solve(blocks[0], weight[:40]),
                          torch.linalg.solve(blocks[1], weight[40:])])
    torch.testing.assert_close(grad, expected, rtol=1e-7, atol=0)


def test_a_bad_batch_is_named():
    _, m, rhs, batch = block_system()
    with pytest.raises(ValueError, match="'batch' must be non-negative"):
        conjugate_gradient(m, rhs, batch=batch - 1)
    with pytest.raises(ValueError, match="'batch'"):
        conjugate_gradient(m, rhs, batch=batch[:-1])
    with pytest.raises(ValueError, match="'batch' refers to graph 1 but 'batch_size' is 1"):
        conjugate_gradient(m, rhs, batch=batch, batch_size=1)
