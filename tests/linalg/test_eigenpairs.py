r"""The result type, selection rule and numerical setting shared by the
eigensolvers: :mod:`torch_geometric_regcn.linalg.eigenpairs`."""
import pytest
import torch

from tests.linalg.helpers import operator
from torch_geometric_regcn.linalg import extreme_eigenpairs
from torch_geometric_regcn.linalg.eigenpairs import select, small_eigh


@pytest.mark.filterwarnings('ignore:.*relative residual')  # 3 iterations: not the point
@pytest.mark.parametrize('method', ['lanczos', 'chebyshev', 'power'])
def test_solvers_multiply_in_full_float32_precision_and_restore_the_setting(method):
    # TF32 products ("high") cap residuals near 3e-4; every solver must run at
    # "highest" whatever the caller chose, and give the caller's choice back.
    s = operator().float()
    seen = []
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision('high')
    try:
        extreme_eigenpairs(s, 4, tol=1e-3, max_iter=3, method=method,
                           callback=lambda *_: seen.append(torch.get_float32_matmul_precision()))
        assert seen and set(seen) == {'highest'}
        assert torch.get_float32_matmul_precision() == 'high'
        with pytest.raises(ValueError, match="'k' must lie"):  # restored on errors too
            extreme_eigenpairs(s, 0, method=method)
        assert torch.get_float32_matmul_precision() == 'high'
    finally:
        torch.set_float32_matmul_precision(previous)


def test_precision_hint_names_the_tf32_override_only_where_it_applies(monkeypatch):
    from torch_geometric_regcn.linalg.eigenpairs import precision_hint

    class CudaLike:  # the hint reads only these two attributes
        is_cuda, dtype = True, torch.float32

    monkeypatch.setenv('TORCH_ALLOW_TF32_CUBLAS_OVERRIDE', '1')
    monkeypatch.delenv('NVIDIA_TF32_OVERRIDE', raising=False)
    assert 'NVIDIA_TF32_OVERRIDE=0' in precision_hint(CudaLike())
    assert precision_hint(torch.zeros(2, dtype=torch.float32)) == ''  # CPU: no TF32
    monkeypatch.setenv('NVIDIA_TF32_OVERRIDE', '0')  # the libraries' own switch wins
    assert precision_hint(CudaLike()) == ''


@pytest.mark.parametrize('which', ['LA', 'LM'])
def test_select_keeps_the_first_pairs_under_the_rule(which):
    theta = torch.tensor([0.5, -2.0, 1.5, -0.1, 1.0], dtype=torch.float64)
    vectors = torch.eye(5, dtype=torch.float64)[:, [4, 3, 2, 1, 0]]  # column j tags theta[j]
    key = theta.tolist() if which == 'LA' else theta.abs().tolist()
    expected = sorted(range(5), key=lambda j: -key[j])[:3]  # a plain sort, the reference
    values, picked = select(theta, vectors, 3, which)
    assert values.tolist() == [theta[j].item() for j in expected]
    assert torch.equal(picked, vectors[:, expected])


def test_small_eigh_is_eigh_and_names_an_overflow():
    matrix = torch.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=torch.float64)
    (values, vectors), (ref_values, ref_vectors) = small_eigh(matrix), torch.linalg.eigh(matrix)
    assert torch.equal(values, ref_values)
    # LAPACK's vectors, each signed so that its largest entry is positive
    assert torch.equal(vectors.abs(), ref_vectors.abs())
    largest = vectors.gather(0, vectors.abs().argmax(dim=0, keepdim=True))
    assert bool((largest > 0).all())
    with pytest.raises(ValueError, match="overflowed torch.float32.*solve in float64"):
        small_eigh(torch.tensor([[float('inf'), 0.0], [0.0, 1.0]]))


def test_small_eigh_signs_follow_the_matrix_not_its_rounding():
    # A nearly diagonal matrix (the Rayleigh-Ritz of converged pairs) perturbed
    # at the rounding level, as row shards perturb it by summing in another
    # order: LAPACK's signs follow the perturbation's (every one of 20 pairs
    # of draws flips some vector); the sign rule keeps every vector within
    # the perturbation (1e-15 off a gap of 1/11, so ~1e-14) of its partner.
    gen = torch.Generator().manual_seed(0)
    diagonal = torch.diag(torch.linspace(1.0, 2.0, 12, dtype=torch.float64))
    for _ in range(20):
        a, b = (torch.randn(12, 12, generator=gen, dtype=torch.float64) * 1e-15
                for _ in range(2))
        first, second = small_eigh(diagonal + a + a.T)[1], small_eigh(diagonal + b + b.T)[1]
        assert float((first - second).abs().max()) < 1e-12
        assert torch.equal(first.diagonal().sign(), torch.ones(12, dtype=torch.float64))
