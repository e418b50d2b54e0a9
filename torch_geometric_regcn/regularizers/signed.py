r"""The signed Laplacian regulariser :math:`\mathbf{I} + \alpha\tilde{\mathbf{L}}`:
low-pass for :math:`\alpha > 0`, high-pass for :math:`-1/2 < \alpha < 0`."""
import math
from typing import Tuple

from torch import Tensor

from torch_geometric_regcn.regularizers.graph import GraphOperators
from torch_geometric_regcn.regularizers.registry import register
from torch_geometric_regcn.regularizers.spectral import AffineRegularizer, check_system_range
from torch_geometric_regcn.utils.validation import check_int, check_real
from torch_geometric_regcn.utils.warn_once import warn_once

#: The bound on the relative error of :obj:`"series"` above which it warns.
SERIES_TOLERANCE = 1e-3

#: The smallest :math:`\alpha` is excluded: :math:`\alpha > -1/2`.
ALPHA_MIN = -0.5


def check_signed_alpha(alpha: float) -> float:
    r"""Returns :obj:`alpha` as a :class:`float` if :math:`\mathbf{I} +
    \alpha\tilde{\mathbf{L}}` is positive definite on every graph with a
    margin, that is :math:`\alpha > -1/2`; raises :class:`ValueError`
    stating the rule and the fix otherwise (:class:`TypeError` for a
    non-number)."""
    alpha = check_real('alpha', alpha)
    if not alpha > ALPHA_MIN:
        raise ValueError(
            f"SignedLaplacianRegularizer needs alpha > -1/2 (got alpha={alpha}): "
            f"M = I + alpha * L~ has the eigenvalues 1 + alpha * mu for the eigenvalues mu of "
            f"L~ = I - A_hat, which lie in [0, 2) and come arbitrarily close to 2 (bipartite "
            f"graphs), so M is positive definite on every graph, with smallest eigenvalue at "
            f"least 1 + 2 * alpha > 0, only for alpha > -1/2. Use alpha in (-0.5, 0) for a "
            f"high-pass response (e.g. -0.3; the system grows ill-conditioned towards -0.5, "
            f"cond(M) < 1 / (1 + 2 * alpha)) or alpha > 0 for a low-pass one")
    return alpha


@register
class SignedLaplacianRegularizer(AffineRegularizer):
    r"""The signed Laplacian regulariser :math:`\mathbf{R} = \mathbf{M} =
    \mathbf{I} + \alpha\tilde{\mathbf{L}} = (1 + \alpha)\mathbf{I} -
    \alpha\hat{\mathbf{A}}`, with :math:`\tilde{\mathbf{L}} = \mathbf{I} -
    \hat{\mathbf{A}}`: the layer propagates with :math:`\mathbf{M}^{-1}`, whose
    frequency response on an eigenvalue :math:`\lambda \in (-1, 1]` of
    :math:`\hat{\mathbf{A}}` is

    .. math::
        g(\lambda) = \frac{1}{1 + \alpha (1 - \lambda)}.

    :math:`\alpha > 0` is low-pass, Laplacian smoothing (tsGCN's topological
    regulariser; :math:`\mathbf{M}^{-1}` is APPNP's limit, personalised
    PageRank :math:`a(\mathbf{I} - (1-a)\hat{\mathbf{A}})^{-1}` with teleport
    :math:`a = 1/(1 + \alpha)`). :math:`\alpha < 0` is high-pass: the
    energy rewards differences between neighbours, and the response grows
    from 1 at :math:`\lambda = 1` to :math:`1 / (1 + 2\alpha)` as
    :math:`\lambda \to -1`, which suits heterophilous graphs.
    :math:`\alpha = 0` is the identity (an MLP).

    **Positive definiteness.** The eigenvalues of :math:`\mathbf{M}` are
    :math:`1 + \alpha\mu` for the eigenvalues :math:`\mu \in [0, 2)` of
    :math:`\tilde{\mathbf{L}}` (:math:`\mu = 0` on every graph, :math:`\mu`
    close to 2 on near-bipartite ones), so :math:`\mathbf{M} \succ 0` on every
    graph iff :math:`\alpha \geq -1/2`, with smallest eigenvalue at least
    :math:`\min(1, 1 + 2\alpha)`, a bound above 0 for every graph alike only
    for :math:`\alpha > -1/2` (at :math:`-1/2` the smallest eigenvalue tends
    to 0 on ever larger near-bipartite graphs). The constructor refuses
    :math:`\alpha \leq -1/2` (:class:`ValueError` stating the rule), and a
    learned :math:`\alpha` lives in :math:`(-1/2, \infty)` (:math:`-1/2 +
    \mathrm{softplus}`; a value that float32 rounding puts on :math:`-1/2` is
    refused before any solve).

    **Conditioning.** :math:`\mathrm{cond}(\mathbf{M}) = \max_\mu (1 +
    \alpha\mu) / \min_\mu (1 + \alpha\mu) = 1 + \alpha\mu_{\max}` for
    :math:`\alpha \geq 0` and :math:`1 / (1 + \alpha\mu_{\max})` for
    :math:`\alpha < 0`, with :math:`\mu_{\max} < 2` the largest eigenvalue of
    :math:`\tilde{\mathbf{L}}`: below :math:`\max(1 + 2\alpha, 1 / (1 +
    2\alpha))` on every graph, and close to it on near-bipartite ones.
    Conjugate gradient needs about :math:`\tfrac{1}{2}\sqrt{\mathrm{cond}}
    \ln(2/\text{tol})` iterations, so they grow without bound as
    :math:`\alpha \to -1/2` (cond :math:`< 10` for :math:`\alpha \geq -0.45`,
    :math:`< 100` for :math:`\alpha \geq -0.495`).

    **Solvers.** :obj:`"cg"` (default) and :obj:`"closed"` solve exactly;
    :obj:`"series"` is the :obj:`K`-term Neumann series of
    :math:`\mathbf{M}^{-1} = \frac{1}{1+\alpha}\sum_k \big(\frac{\alpha}{1 +
    \alpha}\hat{\mathbf{A}}\big)^k`, which converges for the whole range: on
    each eigenvector it is a geometric series of ratio :math:`r = \alpha\lambda
    / (1 + \alpha)`, :math:`|r| \leq q = |\alpha| / (1 + \alpha) < 1` exactly
    when :math:`\alpha > -1/2`, so its relative error is :math:`|r|^K \leq
    q^K` per eigencomponent, and :math:`\|\mathbf{Y}_K - \mathbf{M}^{-1}
    \mathbf{X}\|_F \leq q^K \|\mathbf{M}^{-1}\mathbf{X}\|_F`. :math:`q = 1/3`
    at :math:`\alpha = -0.25` and :math:`\alpha = 0.5`, :math:`q = 0.82` at
    :math:`\alpha = -0.45`: a relative error :math:`\epsilon` needs
    :math:`K \geq \ln\epsilon / \ln q`. This series converges faster than
    the base class's :math:`\omega`-scaled one (ratio :math:`2|\alpha| /
    \max(1, 1 + 2\alpha)` at best). :meth:`frequency_response` reports the
    exact response of the default solver.

    **Projection: ReLU, layer-wise** (:obj:`decoupled=False`), as GCN and
    tsGCN: every layer propagates its own features with
    :math:`\mathbf{M}^{-1}`, so the regulariser is a drop-in replacement of
    tsGCN's or GCN's in the same network, and a high-pass response acts on
    hidden features, where the ReLU between layers mixes the frequency bands.
    A learned response propagated once after an MLP is
    :class:`~torch_geometric_regcn.regularizers.PolynomialRegularizer`.

    Args:
        alpha (float, optional): :math:`\alpha > -1/2`; negative for high-pass.
            (default: :obj:`-0.25`)
        K (int, optional): Terms of the :obj:`"series"` solver.
            (default: :obj:`10`)
    """
    name = 'signed'
    projection = 'relu'
    default_solver = 'cg'
    decoupled = False
    learnable = {'alpha': (ALPHA_MIN, math.inf)}
    open_ends = {'alpha': frozenset({'low'})}  # at -1/2, M has no bound above 0 over graphs

    def __init__(self, alpha: float = -0.25, K: int = 10) -> None:
        self.alpha = check_signed_alpha(alpha)
        self.K = check_int('K', K)

    @property
    def m(self) -> Tuple[float, float]:
        return (1.0 + self.alpha, -self.alpha)

    def series(self, x: Tensor, graph: GraphOperators) -> Tensor:
        r"""The :obj:`K`-term Neumann series; warns (once per regulariser)
        when its error bound :math:`q^K` exceeds :obj:`SERIES_TOLERANCE`, as
        an :math:`\alpha` near :math:`-1/2` (fixed or learned) makes it."""
        check_system_range(self, graph.dtype)
        alpha = self.alpha  # one synchronisation where alpha is learned:
        alpha = float(alpha.detach() if isinstance(alpha, Tensor) else alpha)
        q = abs(alpha) / (1.0 + alpha) if alpha > -0.5 else 1.0  # 1: the series diverges
        bound = q ** self.K
        if bound > SERIES_TOLERANCE:
            fix = (f"raise K to at least {math.ceil(math.log(SERIES_TOLERANCE) / math.log(q))} "
                   f"or use solver='cg'" if q < 1 else
                   "keep alpha above -1/2" if alpha <= -0.5 else
                   "use solver='cg' (q rounds to 1 at so large an alpha)")
            warn_once(self, 'series_bound', (
                f"{type(self).__name__} with alpha={alpha:.4g}: its K={self.K}-term series "
                f"has a relative error of up to {bound:.2g} (q^K, q = |alpha| / (1 + alpha) "
                f"= {q:.3g}); {fix} (this regulariser warns once)"))
        return super().series(x, graph)
