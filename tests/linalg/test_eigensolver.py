r"""One entry point to the eigensolvers:
:func:`~torch_geometric_regcn.linalg.eigensolver.extreme_eigenpairs`."""
import numpy as np
import pytest
import torch

from tests.linalg.helpers import operator, reference
from torch_geometric_regcn.linalg import extreme_eigenpairs


def test_extreme_eigenpairs_dispatches_every_method():
    s = operator()
    ref_val, _ = reference(s, 5, 'LA')
    for method in ['lanczos', 'chebyshev', 'power']:
        pairs = extreme_eigenpairs(s, 5, tol=1e-8, max_iter=20000, method=method,
                                   generator=torch.Generator().manual_seed(0))
        np.testing.assert_allclose(pairs.eigenvalues.numpy(), ref_val, atol=1e-7)
    with pytest.raises(ValueError, match="'method' must be one of"):
        extreme_eigenpairs(s, 5, method='arnoldi')


@pytest.mark.parametrize('method', ['lanczos', 'chebyshev', 'power'])
def test_finite_operators_near_the_dtype_limit_are_solved(method):
    # Entries of 1e30 are finite in float32, the squares of the residuals are
    # not: block Lanczos never kept a pair (an AttributeError after every
    # cycle), subspace iteration never locked one (residual inf, 'raise
    # max_iter'). The eigenvalues scale with the operator: reference, the
    # float64 ones of the unscaled operator; float32 at a relative residual of
    # 1e-5 bounds the error of each by 1e-5 of the spectral bound (<= 1.2).
    s = operator(300)
    ref_val, _ = reference(s, 4, 'LA')
    scaled = torch.sparse_csr_tensor(s.crow_indices(), s.col_indices(),
                                     (s.values() * 1e30).float(), s.shape)
    pairs = extreme_eigenpairs(scaled, 4, tol=1e-5, max_iter=20000, method=method,
                               generator=torch.Generator().manual_seed(0))
    assert pairs.converged
    np.testing.assert_allclose(pairs.eigenvalues.double().numpy() / 1e30, ref_val, atol=2e-5)


def test_an_integer_operator_is_named():
    # It failed in torch's random start ("normal_kernel_cpu" not implemented for 'Long').
    s = torch.eye(5, dtype=torch.long).to_sparse_csr()
    with pytest.raises(TypeError, match="'operator' must be a float32 or float64 matrix"):
        extreme_eigenpairs(s, 2)


@pytest.mark.parametrize('method', ['lanczos', 'chebyshev', 'power'])
def test_half_precision_and_scalar_operators_are_named(method):
    # float16 failed naming an internal 'block' or in torch's QR ("geqrf_cpu" not
    # implemented for 'Half'); a 0-d operator with an IndexError.
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(TypeError, match=r"'operator' must be a float32 or float64 matrix "
                                            r"\(got torch\.b?float16\); use 'operator.float"):
            extreme_eigenpairs(torch.eye(6, dtype=dtype), 2, method=method)
    with pytest.raises(ValueError, match=r"'operator' must be a square matrix \(got \[\]\)"):
        extreme_eigenpairs(torch.tensor(1.0), 1, method=method)
