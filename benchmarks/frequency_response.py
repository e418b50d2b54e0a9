r"""Draws the frequency response g(λ) of every registered regulariser, at
its default coefficients and solver, on the eigenvalues λ in [-1, 1] of the
normalised adjacency.

Run from the repository root::

    python -m benchmarks.frequency_response

Writes the figure ``docs/frequency_response.png``.
"""
import argparse
import os.path as osp

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from harness.report import FIGURES  # noqa: E402
from torch_geometric_regcn import regularizers as R  # noqa: E402


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    lam = torch.linspace(-1, 1, 401, dtype=torch.float64)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    drawn = 0
    for name, cls in R.REGISTRY.items():
        if issubclass(cls, R.IterativeRegularizer):  # not linear filters: no response
            continue
        # DAGNN's learned gate has no response: its Neumann weights are drawn.
        reg = cls(adaptive=False) if issubclass(cls, R.DAGNNRegularizer) else cls()
        label = f'{name}: {reg!r}'
        label = label if len(label) <= 60 else label[:57] + '...'  # a long coefficient vector
        # Every other curve dashed, above the solid ones: equal responses (the
        # polynomial regulariser starts at APPNP's) stay visible.
        ax.plot(lam, reg.frequency_response(lam), label=label,
                **({'ls': '-'} if drawn % 2 else {'ls': '--', 'zorder': 3}))
        drawn += 1
    ax.axhline(0, color='grey', lw=0.5)
    ax.set_xlabel(r'eigenvalue $\lambda$ of $\hat{A}$')
    ax.set_ylabel(r'gain $g(\lambda)$')
    ax.set_title('Frequency response of each regulariser\n(default coefficients and solver)')
    ax.legend(fontsize=7, loc='upper left', bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    path = osp.join(FIGURES, 'frequency_response.png')
    fig.savefig(path, dpi=120)
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
