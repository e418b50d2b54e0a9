"""tsGCN that learns its coefficients alpha and beta: a synthetic graph, no download.

    python examples/learnable.py [--nodes 2000] [--epochs 40] [--alpha 1.0] [--beta 0.2]
                                 [--objective validation|training]

Each layer's alpha and beta start at the given values and are learned
(softplus of the parameters ``regularizer.raw_alpha`` and ``raw_beta``)
through the exact conjugate-gradient solve, by implicit differentiation.
With ``--objective validation`` (the default) they are learned on the
validation loss at its best temperature, the weights on the training loss,
and the weights restart from their initial values after 10 epochs without a
lower validation loss (``regularizers.BilevelStep``); with ``training``
they are trained with the weights on the training loss. The raw
coefficients are never weight-decayed, which would pull them towards
softplus(0) = 0.69. See docs/learnable.md.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

from torch_geometric_regcn import RegularizerGNN, SemanticGraph
from torch_geometric_regcn.datasets import contextual_sbm, paper_split
from torch_geometric_regcn.regularizers import (
    BilevelStep,
    calibrated_cross_entropy,
    coefficient_parameters,
    param_groups,
    weight_parameters,
)


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
    parser.add_argument('--objective', choices=['validation', 'training'], default='validation',
                        help='the loss the coefficients learn on (default: %(default)s)')
    args = parser.parse_args()
    for name in ('nodes', 'epochs'):  # before any work
        if not getattr(args, name) >= 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer (got "
                         f"{getattr(args, name)})")
    if args.nodes < 1600:  # the paper's split: 20 labelled nodes per class, 500 + 1000
        parser.error(f'--nodes must be at least 1600 (got {args.nodes})')
    for name in ('alpha', 'beta', 'lr'):
        if not 0 < getattr(args, name) < math.inf:
            parser.error(f'--{name} must be a finite positive number (got {getattr(args, name)})')
    torch.manual_seed(0)

    data = contextual_sbm(args.nodes, num_classes=5, num_features=64, avg_degree=5,
                          homophily=0.8, signal=0.5, seed=0)
    data = paper_split(SemanticGraph(k=10, progress=False)(data), seed=0)
    print(f'CSBM: {data.num_nodes} nodes, {data.num_edges} edges, 5 classes')

    model = RegularizerGNN(data.num_features, 32, 5, regularizer='tsgcn', solver='cg',
                           alpha=args.alpha, beta=args.beta, learn=('alpha', 'beta'),
                           cached=True, bias=False)
    if args.objective == 'validation':  # weights on the training loss, coefficients on val
        step = BilevelStep(
            model, torch.optim.Adam(weight_parameters(model), lr=args.lr, weight_decay=5e-4),
            torch.optim.Adam(coefficient_parameters(model), lr=args.lr), patience=10)
    else:  # weight decay on the weights, none on the coefficients (docs/learnable.md)
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
        loss = F.cross_entropy(forward()[data.train_mask], data.y[data.train_mask])
        if args.objective == 'validation':
            step.weight_step(loss)
            model.eval()
            out = forward()  # scores the epoch and trains the coefficients
            step.coefficient_step(calibrated_cross_entropy(out[data.val_mask],
                                                           data.y[data.val_mask]))
            out = out.detach()
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model.eval()
            with torch.no_grad():
                out = forward()
        correct = out.argmax(dim=-1) == data.y
        if epoch % 10 == 0 or epoch == args.epochs:
            print(f'epoch {epoch:3d}  {coefficients()}')
        val = float(correct[data.val_mask].float().mean())
        if val >= best_val:
            best_val, test = val, float(correct[data.test_mask].float().mean())
    print(f'test accuracy at the best validation epoch: {test:.3f} '
          f'({time.perf_counter() - start:.1f} s)')


if __name__ == '__main__':
    main()
