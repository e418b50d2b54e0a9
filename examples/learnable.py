"""tsGCN that learns its coefficients alpha and beta: a synthetic graph, no download.

    python examples/learnable.py [--nodes 2000] [--epochs 40] [--alpha 1.0] [--beta 0.2]

Each layer's alpha and beta start at the given values and are trained with
the weights (softplus of the parameters ``regularizer.raw_alpha`` and
``raw_beta``), through the exact conjugate-gradient solve by implicit
differentiation. The raw coefficients are an Adam group of their own without
weight decay, which would pull them towards softplus(0) = 0.69. See
docs/learnable.md.
"""
import argparse
import time

import torch
import torch.nn.functional as F

from torch_geometric_regcn import RegularizerGNN, SemanticGraph
from torch_geometric_regcn.datasets import contextual_sbm, paper_split
from torch_geometric_regcn.regularizers import param_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--nodes', type=int, default=2000, help='(default: %(default)s)')
    parser.add_argument('--epochs', type=int, default=40, help='(default: %(default)s)')
    parser.add_argument('--alpha', type=float, default=1.0,
                        help='the starting alpha (default: %(default)s)')
    parser.add_argument('--beta', type=float, default=0.2,
                        help='the starting beta (default: %(default)s)')
    parser.add_argument('--lr', type=float, default=0.05,
                        help="Adam's learning rate (default: %(default)s)")
    args = parser.parse_args()
    torch.manual_seed(0)

    data = contextual_sbm(args.nodes, num_classes=5, num_features=64, avg_degree=5,
                          homophily=0.8, signal=0.5, seed=0)
    data = paper_split(SemanticGraph(k=10, progress=False)(data), seed=0)
    print(f'CSBM: {data.num_nodes} nodes, {data.num_edges} edges, 5 classes')

    model = RegularizerGNN(data.num_features, 32, 5, regularizer='tsgcn', solver='cg',
                           alpha=args.alpha, beta=args.beta, learn=('alpha', 'beta'),
                           cached=True, bias=False)
    # Weight decay on the weights, none on the coefficients (docs/learnable.md):
    optimizer = torch.optim.Adam(param_groups(model, weight_decay=5e-4), lr=args.lr)

    def forward():
        return model(data.x, data.edge_index, semantic_edge_index=data.semantic_edge_index)

    def coefficients() -> str:
        return '; '.join(f'layer {i + 1}: alpha {float(conv.regularizer.alpha.detach()):.3f}, '
                         f'beta {float(conv.regularizer.beta.detach()):.3f}'
                         for i, conv in enumerate(model.convs))

    print(f'start      {coefficients()}')
    best_val = test = 0.0
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        optimizer.zero_grad()
        F.cross_entropy(forward()[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            correct = forward().argmax(dim=-1) == data.y
            if epoch % 10 == 0 or epoch == args.epochs:
                print(f'epoch {epoch:3d}  {coefficients()}')
        val = float(correct[data.val_mask].float().mean())
        if val >= best_val:
            best_val, test = val, float(correct[data.test_mask].float().mean())
    print(f'test accuracy at the best validation epoch: {test:.3f} '
          f'({time.perf_counter() - start:.1f} s)')


if __name__ == '__main__':
    main()
