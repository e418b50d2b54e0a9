r"""The polynomial regulariser: a learned frequency response
:math:`g(\lambda) = \sum_k \gamma_k \lambda^k`, GPR-GNN's propagation."""
import math
from typing import Any, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from torch_geometric_regcn.regularizers.base import GraphOperators, Regularizer
from torch_geometric_regcn.regularizers.registry import register
from torch_geometric_regcn.utils.validation import (
    check_int,
    check_real,
    conversion,
    type_name,
)

#: How :class:`PolynomialRegularizer` may start its coefficients.
INITS = ('ppr', 'uniform')


def ppr_coefficients(K: int, alpha: float) -> Tuple[float, ...]:
    r"""APPNP's :obj:`K`-step response as polynomial coefficients:
    :math:`\gamma_k = \alpha(1-\alpha)^k` for :math:`k < K` and
    :math:`\gamma_K = (1-\alpha)^K`."""
    return tuple(alpha * (1.0 - alpha)**k for k in range(K)) + ((1.0 - alpha)**K,)


def check_gamma(gamma: Union[Sequence[float], Tensor]) -> Tuple[float, ...]:
    r"""The coefficients :obj:`gamma` (a 1-D tensor or a sequence of finite
    real numbers, at least one) as a tuple of :class:`float`."""
    if isinstance(gamma, Tensor):
        if gamma.dim() != 1 or gamma.is_complex():
            raise ValueError(f"'gamma' must be a 1-D real tensor of K + 1 coefficients (got "
                             f"shape {list(gamma.shape)}, {gamma.dtype})")
        gamma = gamma.detach().cpu().double().tolist()
    elif isinstance(gamma, (str, bytes)) or not isinstance(gamma, Sequence):
        raise TypeError(f"'gamma' must be a 1-D tensor or a sequence of K + 1 real numbers "
                        f"(got {type_name(gamma)}){conversion('gamma', gamma)}")
    values = tuple(check_real(f'gamma[{k}]', g) for k, g in enumerate(gamma))
    if not values:
        raise ValueError("'gamma' needs at least one coefficient (gamma_0)")
    return values


@register
class PolynomialRegularizer(Regularizer):
    r"""A learned frequency response: the layer propagates with

    .. math::
        g(\hat{\mathbf{A}})\mathbf{X} = \sum_{k=0}^{K}\gamma_k
        \hat{\mathbf{A}}^k\mathbf{X},
        \qquad g(\lambda) = \sum_{k=0}^{K}\gamma_k\lambda^k

    on an eigenvalue :math:`\lambda \in (-1, 1]` of :math:`\hat{\mathbf{A}}`,
    the propagation of GPR-GNN (Chien et al., `"Adaptive Universal
    Generalized PageRank Graph Neural Network"
    <https://arxiv.org/abs/2006.07988>`_, ICLR 2021) written as a regulariser:
    :math:`\mathbf{R} = g(\hat{\mathbf{A}})^{-1}`, that is :math:`\mathbf{M} =
    \mathbf{I}` and :math:`\mathbf{B} = g(\hat{\mathbf{A}})` in the framework's
    :math:`\mathbf{R} = \mathbf{B}^{-1}\mathbf{M}`. The coefficients are
    signed, and learned with :obj:`learn=("gamma",)` as a vector on
    :math:`(-\infty, \infty)` (the parameter :obj:`raw_gamma` is
    :math:`\gamma` itself), so low-, high- and band-pass responses are all
    reachable.

    **Positive definiteness.** :math:`\mathbf{R} \succ 0` iff
    :math:`g(\lambda) > 0` on every eigenvalue of :math:`\hat{\mathbf{A}}`
    (on every graph if :math:`g > 0` on :math:`[-1, 1]`); then the output is
    the minimum of the energy, which :meth:`energy` and
    :meth:`regularizer_matrix` compute. No coefficient is refused: where
    :math:`g` changes sign on the spectrum, :math:`\mathbf{R}` is indefinite
    and the layer still computes :math:`g(\hat{\mathbf{A}})\mathbf{X}`, a
    stationary point (a saddle) of the energy, as for JKNet's indefinite
    :math:`\mathbf{R}`; where :math:`g` vanishes on an eigenvalue,
    :math:`\mathbf{R}` does not exist (:meth:`regularizer_matrix` raises
    :class:`ValueError`) and the propagation is still defined. The default
    (PPR, :math:`K = 10`) is positive on :math:`[-1, 1]`; with
    :math:`\alpha = 0.1` and an odd :math:`K < 28` the PPR response is
    negative near :math:`\lambda = -1` (APPNP's own :math:`K`-step rule is
    then a saddle point).

    **Solvers.** :obj:`"series"` (default) is exact: :math:`K` sparse
    products with :math:`\hat{\mathbf{A}}`, summed with the weights
    :math:`\gamma_k` (its autograd keeps the :math:`K + 1` terms);
    :obj:`"closed"` is the framework's dense route, :math:`\mathbf{M}^{-1}
    \mathbf{B}\mathbf{X}` with :math:`\mathbf{M} = \mathbf{I}`
    (:math:`O(N^3)`, for tests). There is no :obj:`"cg"`: there is nothing to
    solve.

    **Projection: identity, decoupled**, as GPR-GNN: a network transforms
    the features first (an MLP) and propagates once,
    :math:`g(\hat{\mathbf{A}})\,\mathrm{MLP}(\mathbf{X})` (see
    :class:`~torch_geometric_regcn.RegularizerGNN`).

    With the default coefficients (:obj:`init="ppr"`) the response is
    APPNP's :math:`K`-step one, and the output equals
    :class:`~torch_geometric_regcn.regularizers.APPNPRegularizer`'s
    :obj:`"series"` with the same :obj:`K` and :obj:`alpha`; :obj:`alpha=1`
    starts from :math:`g \equiv 1` (no propagation, an MLP).

    Args:
        K (int, optional): The degree, :math:`K \geq 0` (the number of
            products). (default: :obj:`10`, or :obj:`len(gamma) - 1`)
        gamma (Sequence[float] or torch.Tensor, optional): The
            coefficients :math:`\gamma_0, \ldots, \gamma_K`; if given,
            :obj:`init` and :obj:`alpha` are not. (default: :obj:`None`)
        init (str, optional): Where :math:`\gamma` starts when not given:
            :obj:`"ppr"`, :math:`\gamma_k = \alpha(1-\alpha)^k` for
            :math:`k < K` and :math:`\gamma_K = (1-\alpha)^K` (APPNP's
            :math:`K`-step response, GPR-GNN's PPR start), or
            :obj:`"uniform"`, :math:`\gamma_k = 1/(K+1)` (the mean of the
            hops). Both have :math:`g(1) = 1`. (default: :obj:`"ppr"`)
        alpha (float, optional): The teleport :math:`\alpha \in (0, 1]` of
            :obj:`init="ppr"`. (default: :obj:`0.1`)
    """
    name = 'polynomial'
    projection = 'identity'
    decoupled = True
    solvers = ('closed', 'series')
    default_solver = 'series'
    learnable = {'gamma': (-math.inf, math.inf)}

    def __init__(self, K: Optional[int] = None, gamma: Optional[Union[Sequence[float],
                                                                     Tensor]] = None,
                 init: Optional[str] = None, alpha: Optional[float] = None) -> None:
        if K is not None:
            K = check_int('K', K, minimum=0)
        if gamma is not None:
            if init is not None or alpha is not None:
                raise ValueError("Pass either 'gamma' (the coefficients) or 'init' and "
                                 "'alpha' (how to start them), not both")
            gamma = check_gamma(gamma)
            if K is not None and K != len(gamma) - 1:
                raise ValueError(f"'gamma' has {len(gamma)} coefficients, a polynomial of "
                                 f"degree {len(gamma) - 1}, but K={K}; pass K={len(gamma) - 1} "
                                 f"or leave K out")
        else:
            K = 10 if K is None else K
            init = 'ppr' if init is None else init
            if init not in INITS:
                raise ValueError(f"Unknown init {init!r}; choose one of {INITS} or pass "
                                 f"'gamma' (the coefficients)")
            if init == 'ppr':
                alpha = check_real('alpha', 0.1 if alpha is None else alpha, 0.0, 1.0,
                                   low_open=True)
                gamma = ppr_coefficients(K, alpha)
            elif alpha is not None:
                raise ValueError(f"'alpha' is the teleport of init='ppr'; init={init!r} takes "
                                 f"none")
            else:
                gamma = (1.0 / (K + 1),) * (K + 1)
        self.K = len(gamma) - 1
        self.gamma = gamma

    def coefficients_tensor(self, like: Tensor) -> Tensor:
        r""":math:`\gamma` as a tensor in the dtype and on the device of
        :obj:`like` (the learned parameter itself, cast where needed, so its
        gradient flows)."""
        gamma = self.gamma
        if isinstance(gamma, Tensor):
            return gamma.to(dtype=like.dtype, device=like.device)
        self.check_range(like.dtype)
        return torch.tensor(gamma, dtype=like.dtype, device=like.device)

    def check_range(self, dtype: torch.dtype) -> None:
        r"""Raises :class:`ValueError` where a fixed coefficient lies beyond
        the range of the floating-point :obj:`dtype` (e.g. :math:`10^{39}` in
        float32), where the propagation would turn it into an infinity and
        return infinities or NaN."""
        gamma = self.gamma
        if isinstance(gamma, Tensor) or not dtype.is_floating_point:
            return
        largest = torch.finfo(dtype).max
        beyond = [k for k, g in enumerate(gamma) if abs(g) > largest]
        if beyond:
            raise ValueError(f"{self!r}: the coefficients gamma{beyond} lie beyond the range of "
                             f"{dtype} (largest {largest:.3g}); choose smaller coefficients or "
                             f"solve in float64")

    def operator(self, graph: GraphOperators) -> Tensor:
        r""":math:`\mathbf{M} = \mathbf{I}`."""
        return graph.identity()

    def operator_terms(self, graph: GraphOperators) -> List[Tuple[Any, Optional[Tensor]]]:
        return [(1.0, None)]

    def numerator(self, x: Tensor, graph: GraphOperators) -> Tensor:
        r""":math:`\mathbf{B}\mathbf{X} = g(\hat{\mathbf{A}})\mathbf{X} =
        \sum_{k=0}^{K}\gamma_k\hat{\mathbf{A}}^k\mathbf{X}`: :math:`K` sparse
        products."""
        self.check_range(graph.dtype)
        gamma = self.gamma
        out, term = gamma[0] * x, x
        for k in range(1, self.K + 1):
            term = graph.matmul(graph.adj, term, symmetric=True)
            out = out + gamma[k] * term
        return out

    def series(self, x: Tensor, graph: GraphOperators) -> Tensor:
        r"""The exact propagation :math:`g(\hat{\mathbf{A}})\mathbf{X}`."""
        return self.numerator(x, graph)

    def frequency_response(self, lam: Tensor) -> Tensor:
        r""":math:`g(\lambda) = \sum_{k=0}^{K}\gamma_k\lambda^k`."""
        if not (lam.is_floating_point() or lam.is_complex()):  # gamma cast to integers
            lam = lam.to(torch.get_default_dtype())
        powers = lam.unsqueeze(-1) ** torch.arange(self.K + 1, dtype=lam.dtype,
                                                   device=lam.device)
        return powers @ self.coefficients_tensor(lam)

    def __repr__(self) -> str:
        if 'gamma' in self.learned:
            return super().__repr__()
        gamma = ', '.join(repr(g) for g in self.gamma)  # exact: PyG compares reprs
        return f'{type(self).__name__}(K={self.K}, gamma=({gamma}))'
