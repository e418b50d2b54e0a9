r"""t-SNE of the learned node embeddings of several Table 3 methods on
BlogCatalog, as in the paper's t-SNE figure.

Run from the repository root::

    python -m benchmarks.tsne [--dataset BlogCatalog] [--methods GCN APPNP ...] [--epochs 200]

Each method is trained once (seed 0, its paper's hyperparameters, at most
--epochs epochs, model selected on validation accuracy); the embedding of a
node is its output row (the last layer's logits) at the best validation epoch,
mapped to 2-D by scikit-learn's t-SNE and coloured by the true class. The
title of each panel gives the test accuracy. Writes the figure
``docs/tsne_<dataset>.png``.
"""
import argparse
import copy
import os.path as osp

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from sklearn.manifold import TSNE  # noqa: E402

from harness.cli import check_writable, positive_int  # noqa: E402
from harness.data import load_paper_dataset  # noqa: E402
from harness.methods import TABLE3 as METHODS  # noqa: E402
from harness.report import FIGURES  # noqa: E402
from harness.training import fit  # noqa: E402
from torch_geometric_regcn import LowRankInverse, SemanticGraph, paper_rank  # noqa: E402
from torch_geometric_regcn.datasets import PAPER_SETTINGS, paper_split  # noqa: E402

DEFAULT = ['GCN', 'GAT', 'APPNP', 'GNN-HF', 'tsGCN (inv)', 'tsGCN']


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dataset', default='BlogCatalog', choices=sorted(PAPER_SETTINGS))
    parser.add_argument('--methods', nargs='+', default=DEFAULT, choices=list(METHODS))
    parser.add_argument('--epochs', type=positive_int, default=200)
    args = parser.parse_args()
    path = osp.join(FIGURES, f'tsne_{args.dataset.lower()}.png')
    check_writable(parser, 'the figure', path)  # drawn after the training
    setting = PAPER_SETTINGS[args.dataset]
    data = paper_split(load_paper_dataset(args.dataset), seed=0)
    data = SemanticGraph(10)(data)
    data = LowRankInverse(setting.alpha, setting.beta,
                          paper_rank(data.num_nodes, setting.p), k=10)(data)
    num_classes = int(data.y.max()) + 1
    cols = min(3, len(args.methods))
    rows = -(-len(args.methods) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 4 * rows), squeeze=False)
    for ax, name in zip(axes.flat, args.methods):
        spec = METHODS[name]
        torch.manual_seed(0)
        model = spec.build(data, num_classes, setting)
        best = {'val': -1.0}

        def keep_best(epoch, model=model, best=best):
            model.eval()
            with torch.no_grad():
                out = spec.run(model, data)  # noqa: B023
            val = float((out.argmax(-1)[data.val_mask] == data.y[data.val_mask]).float().mean())
            if val >= best['val']:
                best.update(val=val, out=copy.deepcopy(out))

        result = fit(model, lambda: spec.run(model, data), data,  # noqa: B023
                     min(args.epochs, spec.epochs), spec.lr, spec.weight_decay,
                     on_epoch=keep_best)
        points = TSNE(2, init='pca', random_state=0).fit_transform(best['out'].numpy())
        ax.scatter(points[:, 0], points[:, 1], c=data.y.numpy(), cmap='tab10', s=2)
        ax.set_title(f'{name}: test ACC {100 * result.accuracy:.1f}%', fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
        print(f'{name}: ACC {100 * result.accuracy:.1f}', flush=True)
    for ax in list(axes.flat)[len(args.methods):]:
        ax.axis('off')
    fig.suptitle(f't-SNE of the output embeddings on {args.dataset}')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
