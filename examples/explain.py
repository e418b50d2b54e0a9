"""Which edges does a prediction rest on? GNNExplainer on a RegularizerGNN, with
the series and conjugate-gradient solvers, on a synthetic graph (no download).
APPNP's series of K = 3 steps sees the 3-hop neighbourhood only; its exact
solve by conjugate gradient sees the whole connected component, so the
explainer may credit any edge of it.

    python examples/explain.py [--nodes 400] [--node 0] [--solver cg] [--epochs 100]
"""
import argparse

import torch
import torch.nn.functional as F
from torch_geometric.explain import Explainer
from torch_geometric.explain.algorithm import GNNExplainer

from torch_geometric_regcn import RegularizerGNN
from torch_geometric_regcn.datasets import contextual_sbm, paper_split


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('--nodes', type=int, default=400, help='nodes of the synthetic graph')
    parser.add_argument('--node', type=int, default=0, help='the node whose prediction to explain')
    parser.add_argument('--solver', choices=['series', 'cg'], default='cg',
                        help="APPNP's propagation: K steps, or the exact solve")
    parser.add_argument('--epochs', type=int, default=100, help='training epochs')
    parser.add_argument('--explainer-epochs', type=int, default=100,
                        help="GNNExplainer's optimisation steps")
    args = parser.parse_args()
    for name in ('nodes', 'epochs', 'explainer_epochs'):  # before any work
        if not getattr(args, name) >= 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer (got "
                         f"{getattr(args, name)})")
    if args.nodes < 100:  # 10 labelled nodes per class, a fifth for validation, a third for test
        parser.error(f'--nodes must be at least 100 (got {args.nodes})')
    if not 0 <= args.node < args.nodes:
        parser.error(f'--node must lie in [0, --nodes) = [0, {args.nodes}) (got {args.node})')

    torch.manual_seed(0)
    data = paper_split(contextual_sbm(num_nodes=args.nodes, num_classes=4, num_features=16,
                                      signal=0.5),
                       num_train_per_class=10, num_val=args.nodes // 5,
                       num_test=args.nodes // 3)
    model = RegularizerGNN(16, 32, 4, regularizer='appnp', solver=args.solver, K=3,
                           alpha=0.1, dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(args.epochs):
        model.train()
        optimizer.zero_grad()
        out = model(data.x, data.edge_index)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    model.eval()
    accuracy = float((model(data.x, data.edge_index).argmax(-1) == data.y)[data.test_mask]
                     .float().mean())
    print(f'APPNP ({args.solver}) test accuracy {accuracy:.3f}')

    explainer = Explainer(model, algorithm=GNNExplainer(epochs=args.explainer_epochs),
                          explanation_type='model', node_mask_type='attributes',
                          edge_mask_type='object',
                          model_config=dict(mode='multiclass_classification', task_level='node',
                                            return_type='raw'))
    explanation = explainer(data.x, data.edge_index, index=args.node)
    mask = explanation.edge_mask
    print(f'node {args.node}: {int((mask > 0).sum())} of {mask.numel()} edges can change its '
          f'prediction; the most important:')
    for e in mask.argsort(descending=True)[:5].tolist():
        src, dst = data.edge_index[:, e].tolist()
        print(f'  {src:4d} -> {dst:4d}  mask {float(mask[e]):.3f}  '
              f'(labels {int(data.y[src])} -> {int(data.y[dst])})')


if __name__ == '__main__':
    main()
