r"""How the eigensolver benchmarks compare eigenpairs: in a fixed order, with
the error of a computed subspace against a reference one, and passed between
processes through files."""
import math
from typing import Tuple

import numpy as np


def sort_eigenpairs(vals: np.ndarray, vecs: np.ndarray,
                    which: str = 'LA') -> Tuple[np.ndarray, np.ndarray]:
    r"""The eigenvalues in decreasing order (:obj:`which` = ``'LA'``) or of
    decreasing magnitude (``'LM'``), ties in their given order, and the
    eigenvectors (columns of :obj:`vecs`) in the same order."""
    key = vals if which == 'LA' else np.abs(vals)
    order = np.argsort(-key, kind='stable')
    return vals[order], vecs[:, order]


def subspace_errors(ref_vecs: np.ndarray, vecs: np.ndarray) -> Tuple[float, float]:
    r"""The sine of the largest principal angle between the column spaces of
    :obj:`ref_vecs` (orthonormal, :math:`N \times r`) and :obj:`vecs`, and
    :math:`\|UU^\top - U_rU_r^\top\|_F = \sqrt{2r - 2\|U^\top U_r\|_F^2}`,
    from the :math:`r \times r` matrix :math:`U_r^\top U` only (no
    :math:`N \times N` matrix is formed). :math:`U` is re-orthonormalised
    first (QR), so that rounding in float32 vectors does not show up as a
    subspace error."""
    q = np.linalg.qr(vecs.astype(np.float64))[0]
    s = np.linalg.svd(ref_vecs.T @ q, compute_uv=False).clip(0.0, 1.0)
    r = ref_vecs.shape[1]
    return (math.sqrt(max(0.0, 1.0 - s.min() ** 2)),
            math.sqrt(max(0.0, 2 * r - 2 * float(np.sum(s ** 2)))))


def save_eigenpairs(path: str, vals: np.ndarray, vecs: np.ndarray) -> None:
    r"""Writes the eigenpairs to ``{path}.vals.npy`` and ``{path}.vecs.npy``."""
    np.save(path + '.vals.npy', vals)
    np.save(path + '.vecs.npy', vecs)


def load_eigenpairs(path: str) -> Tuple[np.ndarray, np.ndarray]:
    r"""The eigenpairs that :func:`save_eigenpairs` wrote to :obj:`path`."""
    return np.load(path + '.vals.npy'), np.load(path + '.vecs.npy')
