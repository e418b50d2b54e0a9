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
