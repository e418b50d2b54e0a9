r"""Penalties :math:`\rho(t)` of the norm :math:`t \geq 0` of an edge
difference (or of a residual), with the weights
:math:`w(t) = \rho'(t)/t` of iteratively reweighted least squares."""
import math
from typing import Dict, Type

import torch
from torch import Tensor

from torch_geometric_regcn.utils.validation import check_real


class Penalty:
    r"""A penalty :math:`\rho(t)` of a norm :math:`t \geq 0` whose weight
    :math:`w(t) = \rho'(t)/t` does not increase with :math:`t`, so that
    :math:`\rho(\sqrt{s})` is concave in :math:`s` and, at any :math:`t_0`,

    .. math::
        \rho(t) \leq \rho(t_0) + \tfrac{1}{2}w(t_0)(t^2 - t_0^2),

    with equality at :math:`t = t_0`: the quadratic that iteratively
    reweighted least squares minimises majorises the penalty, so every
    exact reweighted solve lowers the energy (majorise-minimise). A penalty
    that grows like :math:`|t|` or slower near zero is smoothed there by a
    quadratic of width :obj:`eps` (:math:`w` is capped at :math:`w(\epsilon)`,
    :math:`\rho` shifted to stay continuous), which changes it by at most a
    constant per edge."""
    name = ''

    def value(self, t: Tensor) -> Tensor:
        r""":math:`\rho(t)`, elementwise."""
        raise NotImplementedError

    def weight(self, t: Tensor) -> Tensor:
        r""":math:`w(t) = \rho'(t)/t`, elementwise, finite and non-negative."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ', '.join(f'{k}={v:g}' for k, v in vars(self).items())
        return f'{type(self).__name__}({args})'


class L1Penalty(Penalty):
    r""":math:`\rho(t) = t`, smoothed below :obj:`eps`: :math:`t^2/(2\epsilon)`
    for :math:`t \leq \epsilon` and :math:`t - \epsilon/2` above (Huber's
    function of width :math:`\epsilon`); :math:`w(t) = 1/\max(t, \epsilon)`.
    On an edge difference it is graph total variation (ElasticGNN's
    :math:`\ell_1`/:math:`\ell_{21}` terms), on a residual AirGNN's
    adaptive residual."""
    name = 'l1'

    def __init__(self, eps: float = 1e-4) -> None:
        self.eps = check_real('eps', eps, 0.0, math.inf, low_open=True)

    def value(self, t: Tensor) -> Tensor:
        return torch.where(t <= self.eps, t.square() / (2 * self.eps), t - self.eps / 2)

    def weight(self, t: Tensor) -> Tensor:
        return t.clamp_min(self.eps).reciprocal()


class HuberPenalty(Penalty):
    r"""Huber's penalty: :math:`\rho(t) = t^2/2` for :math:`t \leq \delta`,
    :math:`\delta t - \delta^2/2` above; :math:`w(t) = \min(1, \delta/t)`.
    Quadratic (Laplacian smoothing) for small differences, linear for large
    ones, which it therefore down-weights."""
    name = 'huber'

    def __init__(self, delta: float = 1.0) -> None:
        self.delta = check_real('delta', delta, 0.0, math.inf, low_open=True)

    def value(self, t: Tensor) -> Tensor:
        return torch.where(t <= self.delta, t.square() / 2, self.delta * t - self.delta**2 / 2)

    def weight(self, t: Tensor) -> Tensor:
        return (self.delta / t.clamp_min(self.delta)).clamp_max(1.0)


class MCPPenalty(Penalty):
    r"""The minimax concave penalty (Zhang, 2010): :math:`\rho(t) = \lambda t
    - t^2/(2\gamma)` for :math:`t \leq \gamma\lambda`, the constant
    :math:`\gamma\lambda^2/2` above; :math:`w(t) = \max(\lambda/t - 1/\gamma,
    0)`, zero for differences beyond :math:`\gamma\lambda`, whose edges it
    cuts (RUNG's penalty). Smoothed below :obj:`eps` as :class:`L1Penalty`
    (needs :math:`\epsilon < \gamma\lambda`)."""
    name = 'mcp'

    def __init__(self, lam: float = 1.0, gamma: float = 3.0, eps: float = 1e-4) -> None:
        self.lam = check_real('lam', lam, 0.0, math.inf, low_open=True)
        self.gamma = check_real('gamma', gamma, 0.0, math.inf, low_open=True)
        self.eps = check_real('eps', eps, 0.0, math.inf, low_open=True)
        if not self.eps < self.gamma * self.lam:
            raise ValueError(f"MCPPenalty needs eps < gamma * lam (got eps={self.eps}, "
                             f"gamma * lam={self.gamma * self.lam}); lower 'eps'")

    def value(self, t: Tensor) -> Tensor:
        lam, gamma, eps = self.lam, self.gamma, self.eps
        small = (lam / eps - 1 / gamma) * t.square() / 2
        middle = lam * t - t.square() / (2 * gamma) - lam * eps / 2
        flat = torch.full_like(t, gamma * lam**2 / 2 - lam * eps / 2)
        return torch.where(t <= eps, small, torch.where(t <= gamma * lam, middle, flat))

    def weight(self, t: Tensor) -> Tensor:
        return (self.lam / t.clamp_min(self.eps) - 1 / self.gamma).clamp_min(0.0)


class PowerPenalty(Penalty):
    r""":math:`\rho(t) = t^p` for :math:`1 \leq p \leq 2` (the :math:`p`-Laplacian
    energy of pGNN); :math:`w(t) = p\,\max(t, \epsilon)^{p-2}`, so below
    :obj:`eps` it is :math:`\tfrac{p}{2}\epsilon^{p-2}t^2` and above
    :math:`t^p - (1 - p/2)\epsilon^p`."""
    name = 'power'

    def __init__(self, p: float = 1.5, eps: float = 1e-4) -> None:
        self.p = check_real('p', p, 1.0, 2.0)
        self.eps = check_real('eps', eps, 0.0, math.inf, low_open=True)

    def value(self, t: Tensor) -> Tensor:
        p, eps = self.p, self.eps
        return torch.where(t <= eps, p / 2 * eps**(p - 2) * t.square(),
                           t.clamp_min(eps).pow(p) - (1 - p / 2) * eps**p)

    def weight(self, t: Tensor) -> Tensor:
        return self.p * t.clamp_min(self.eps).pow(self.p - 2)


#: The penalties of :class:`~torch_geometric_regcn.regularizers.RobustRegularizer`, by name.
PENALTIES: Dict[str, Type[Penalty]] = {'l1': L1Penalty, 'huber': HuberPenalty,
                                       'mcp': MCPPenalty}

