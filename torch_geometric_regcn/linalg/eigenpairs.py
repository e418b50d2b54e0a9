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
