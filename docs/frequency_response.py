"""Draws the frequency response g(λ) of every registered regulariser.

    python -m docs.frequency_response  # writes docs/frequency_response.png
"""
import os.path as osp

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from torch_geometric_regcn import regularizers as R  # noqa: E402


def main() -> None:
    lam = torch.linspace(-1, 1, 401, dtype=torch.float64)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, cls in R.REGISTRY.items():
        reg = cls()
        ax.plot(lam, reg.frequency_response(lam), label=f'{name}: {reg!r}')
    ax.axhline(0, color='grey', lw=0.5)
    ax.set_xlabel(r'eigenvalue $\lambda$ of $\hat{A}$')
    ax.set_ylabel(r'gain $g(\lambda)$')
    ax.set_title('Frequency response of each regulariser (default coefficients and solver)')
    ax.legend(fontsize=7, loc='upper left')
    fig.tight_layout()
    path = osp.join(osp.dirname(osp.abspath(__file__)), 'frequency_response.png')
    fig.savefig(path, dpi=120)
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
