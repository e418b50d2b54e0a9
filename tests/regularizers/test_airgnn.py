r"""AirGNN's regulariser: :mod:`torch_geometric_regcn.regularizers.airgnn`.

The reference is the adaptive message passing of the official code
(``lxiaorui/AirGNN``, ``model.py``: ``amp_forward``, ``proximal_L21``,
``compute_LX`` with ``gcn_norm``'s self loops), written again on dense
float64 matrices."""
import pytest
import torch

from tests.conftest import dense_normalized_adjacency
from tests.regularizers.helpers import N, dense_weights, h_in, operators
from torch_geometric_regcn import RegularizerConv
from torch_geometric_regcn import regularizers as R


def official_amp(x, ei, K, lambda_amp):
    a_hat = dense_normalized_adjacency(ei, N)
    gamma = 1 / (2 * (1 - lambda_amp))
    hh = x
    for _ in range(K):
        y = x - gamma * 2 * (1 - lambda_amp) * (x - a_hat @ x)
        r = y - hh
        norm = r.norm(dim=1)
        score = (norm - gamma * lambda_amp).clamp(min=0)
        score[norm > 0] = score[norm > 0] / norm[norm > 0]
        x = hh + score.unsqueeze(1) * r
    return x


@pytest.mark.parametrize('lam', [0.1, 0.5, 0.9])
def test_amp_reproduces_the_official_iteration(lam):
    _, ei, _ = dense_weights()
    reg = R.AdaptiveResidualRegularizer(lam, K=10)
    x = h_in(4)
    expected = official_amp(x, ei, 10, lam)
    assert torch.allclose(reg.propagate(x, operators(reg)), expected, atol=1e-12, rtol=0)


def test_ends_of_lambda():
    x = h_in(2)
    graph = operators(R.get('gcn'))
    a_hat = dense_normalized_adjacency(graph.edge_index, N)
    smooth = R.AdaptiveResidualRegularizer(0.0, K=3).propagate(x, graph)
    assert torch.allclose(smooth, a_hat @ (a_hat @ (a_hat @ x)), atol=1e-13)
    assert torch.equal(R.AdaptiveResidualRegularizer(1.0, K=3).propagate(x, graph), x)
    with pytest.raises(ValueError, match='lam=0'):
        R.AdaptiveResidualRegularizer(0.0).propagate(x, graph, 'irls')


def test_irls_and_amp_reach_the_same_minimum():
    reg = R.AdaptiveResidualRegularizer(0.3, K=3000, eps=1e-8, irls_tol=1e-10)
    graph, x = operators(reg), h_in(3)
    amp = reg.solve(x, graph, 'amp')
    irls = reg.solve(x, graph, 'irls', tol=1e-12, max_iter=10000)
    e_amp, e_irls = reg.objective(amp.out, x, graph), reg.objective(irls.out, x, graph)
    assert abs(float(e_amp - e_irls)) <= 1e-5 * float(e_amp.abs())


def test_irls_with_the_default_tolerances_reaches_the_minimum():
    # From H0 = X every residual is zero and every weight capped at lam/eps:
    # the first reweighting moved H by 2e-4 (relative), below irls_tol, and
    # IRLS stopped there silently at 2.3x the minimum energy. Reference: AMP
    # run to convergence. IRLS minimises the energy with the residual norm
    # smoothed below eps, within N lam eps / 2 of the exact one.
    reg = R.AdaptiveResidualRegularizer(0.5, K=30)
    graph, x = operators(reg), h_in(3)
    irls = reg.solve(x, graph, 'irls', tol=1e-12, trace=True)
    assert irls.change <= reg.irls_tol and irls.iterations > 1
    assert bool((irls.energy[1:] <= irls.energy[:-1]).all())
    minimum = R.AdaptiveResidualRegularizer(0.5, K=3000).solve(x, graph, 'amp').out
    gap = float(reg.objective(irls.out, x, graph) - reg.objective(minimum, x, graph))
    assert gap <= N * reg.lam * reg.eps / 2


def test_errors():
    with pytest.raises(ValueError, match="'lam'"):
        R.AdaptiveResidualRegularizer(1.5)
    with pytest.raises(ValueError, match="cannot use solver='emp'"):
        RegularizerConv(4, 4, regularizer='airgnn', solver='emp')
