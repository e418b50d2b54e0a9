r"""pGNN's regulariser: :mod:`torch_geometric_regcn.regularizers.p_laplacian`.

The reference is the fixed-point iteration of the pGNN paper (Fu et al., ICML
2022, the message passing of its Eqs. for :math:`\alpha`, :math:`\beta` and
:math:`\mathbf{M}`), with the graph gradient of the official code
(``guoji-fu/pGNNs``, ``src/pgnn_conv.py``: ``calc_M`` on ``pgnn_norm``'s
degrees without self loops), written on dense float64 matrices."""
import pytest
import torch

from tests.regularizers.helpers import N, dense_weights, h_in, operators
from torch_geometric_regcn import regularizers as R


def paper_rule(x, w, K, mu, p):
    d = w.sum(1)
    inv = torch.where(d > 0, d.rsqrt(), torch.zeros_like(d))
    f = x
    for _ in range(K):
        scaled = inv[:, None] * f  # f_i / sqrt(d_i)
        grad = w.sqrt()[:, :, None] * (scaled[:, None, :] - scaled[None, :, :])
        m = torch.where(w > 0, w * grad.norm(dim=-1).pow(p - 2), torch.zeros_like(w))
        alpha = 1 / ((inv**2) * m.sum(1) + 2 * mu / p)
        beta = 2 * mu / p * alpha
        f = alpha[:, None] * ((inv[:, None] * m * inv[None, :]) @ f) + beta[:, None] * x
    return f


@pytest.mark.parametrize('weighted', [False, True])
@pytest.mark.parametrize('p', [1.0, 1.5, 2.0])
def test_fixed_point_reproduces_the_paper_rule(p, weighted):
    w, ei, weight = dense_weights(weighted=weighted)
    reg = R.PLaplacianRegularizer(p=p, mu=0.2, K=5, eps=1e-12)
    x = h_in(4)
    graph = operators(reg, weighted=weighted)
    # Random features: every edge difference is far above eps, so the
    # smoothing never acts and the rule is the paper's exactly.
    assert torch.allclose(reg.propagate(x, graph), paper_rule(x, w, 5, 0.2, p),
                          atol=1e-12, rtol=0)


def test_p2_is_laplacian_smoothing():
    # p = 2: the energy is 1/2 ||H - X||^2 + 1/(2 mu) Tr(H^T L H), with L the
    # normalised Laplacian of the graph without self loops: one linear solve.
    w, _, _ = dense_weights()
    d = w.sum(1)
    inv = torch.where(d > 0, d.rsqrt(), torch.zeros_like(d))
    lap = torch.diag((d > 0).double()) - inv[:, None] * w * inv[None, :]
    x = h_in(3)
    reg = R.PLaplacianRegularizer(p=2.0, mu=0.5, K=3, irls_tol=1e-6)
    exact = torch.linalg.solve(torch.eye(N, dtype=torch.float64) + lap / 0.5, x)
    irls = reg.solve(x, operators(reg), 'irls', tol=1e-13)
    assert irls.iterations == 2  # the weights never change: the second solve repeats the first
    assert torch.allclose(irls.out, exact, atol=1e-10)


def test_errors():
    with pytest.raises(ValueError, match="'p'"):
        R.PLaplacianRegularizer(p=2.5)
    with pytest.raises(ValueError, match="'mu'"):
        R.PLaplacianRegularizer(mu=0.0)
