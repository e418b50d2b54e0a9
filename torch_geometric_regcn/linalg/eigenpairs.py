r"""The result type and the selection rule shared by the eigensolvers."""
from typing import NamedTuple

from torch import Tensor

WHICH = ('LA', 'LM')


class EigenPairs(NamedTuple):
    r"""The result of an eigensolver."""
    eigenvalues: Tensor  #: shape :obj:`[k]`, ordered by the selection rule
    eigenvectors: Tensor  #: shape :obj:`[N, k]`, orthonormal columns
    residual: float  #: the largest relative residual of a returned pair
    iterations: int  #: outer iterations (restarts) run
    converged: bool  #: whether :obj:`residual <= tol`


def select(theta: Tensor, vectors: Tensor, count: int, which: str) -> tuple[Tensor, Tensor]:
    r"""The :obj:`count` pairs first under :obj:`which` (:obj:`"LA"`: largest
    algebraic, :obj:`"LM"`: largest magnitude), in that order."""
    key = theta if which == 'LA' else theta.abs()
    order = key.argsort(descending=True)[:count]
    return theta[order], vectors[:, order]


def check_problem(operator: Tensor, k: int, which: str, max_iter: int, degree: int) -> int:
    r"""Validates the arguments shared by the eigensolvers; returns :math:`N`."""
    n = operator.size(0)
    if operator.dim() != 2 or operator.size(1) != n:
        raise ValueError(f"'operator' must be a square matrix (got {list(operator.shape)})")
    if not 0 < k <= n:
        raise ValueError(f"'k' must lie in [1, {n}] (got {k})")
    if which not in WHICH:
        raise ValueError(f"'which' must be one of {WHICH} (got {which!r})")
    if max_iter < 1:
        raise ValueError(f"'max_iter' must be a positive integer (got {max_iter})")
    if degree < 1:
        raise ValueError(f"'degree' must be a positive integer (got {degree})")
    return n
