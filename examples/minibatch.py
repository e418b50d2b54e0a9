"""tsGCN in mini-batches on a synthetic contextual SBM: no download needed.

    python examples/minibatch.py [--nodes 3000] [--epochs 100] [--batch-size 32]

Trains the paper's 2-layer tsGCN four ways on the same split: full batch
(``TSGCN``), in mini-batches of labelled nodes from a ``SeedNodeLoader`` with
the summary VᵀH¹ refreshed once per epoch (``MiniBatchTSGCN``, mode A) or kept
from a history of hidden rows (mode B), and an MLP on features propagated once
(``PropagateFeatures``).
"""
import argparse
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from torch_geometric_regcn import (
    TSGCN,
    LowRankInverse,
    MiniBatchTSGCN,
    PropagateFeatures,
    paper_rank,
)
from torch_geometric_regcn.datasets import contextual_sbm, paper_split
from torch_geometric_regcn.loader import SeedNodeLoader


def accuracy(logits: torch.Tensor, y: torch.Tensor) -> float:
    return float((logits.argmax(dim=-1) == y).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--nodes', type=int, default=3000, help='(default: %(default)s)')
    parser.add_argument('--epochs', type=int, default=100, help='(default: %(default)s)')
    parser.add_argument('--batch-size', type=int, default=32, help='(default: %(default)s)')
    args = parser.parse_args()
    for name in ('nodes', 'epochs', 'batch_size'):  # before any work
        if not getattr(args, name) >= 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer (got "
                         f"{getattr(args, name)})")
    if args.nodes < 200:  # 20 labelled nodes per class, a sixth for validation, a third for test
        parser.error(f'--nodes must be at least 200 (got {args.nodes})')

    data = contextual_sbm(args.nodes, num_classes=5, num_features=64, avg_degree=5,
                          homophily=0.6, signal=0.5, seed=0)
    data = LowRankInverse(alpha=1.0, beta=0.5, rank=paper_rank(data.num_nodes, 16),
                          progress=False)(data)
    data = PropagateFeatures(hops=2)(data)  # data.x1 = P X, data.x2 = P² X, once
    data = paper_split(data, num_val=min(500, args.nodes // 6),
                       num_test=min(1000, args.nodes // 3), seed=0)
    x, w, v, y = data.x, data.lowrank_w, data.lowrank_v, data.y
    train = data.train_mask.nonzero().view(-1)
    test = data.test_mask.nonzero().view(-1)
    loader = DataLoader(train, batch_size=args.batch_size, shuffle=True)  # node indices
    # PyG's NodeLoader with the seed nodes only: batches of the labelled nodes' rows.
    seed_loader = SeedNodeLoader(data, input_nodes=data.train_mask,
                                 batch_size=args.batch_size, shuffle=True)

    # Full batch: every node's rows in every step.
    torch.manual_seed(0)
    model = TSGCN(data.num_features, 32, 5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    start = time.perf_counter()
    for _ in range(args.epochs):
        optimizer.zero_grad()
        F.cross_entropy(model(x, w, v)[train], y[train]).backward()
        optimizer.step()
    model.eval()
    print(f'full batch       test accuracy {accuracy(model(x, w, v)[test], y[test]):.3f} '
          f'({time.perf_counter() - start:.1f}s)')

    # Mini-batches: rows of the batch only, plus the r x 32 summary V^T H1.
    for summary, name in (('refresh', 'mode A'), ('history', 'mode B')):
        torch.manual_seed(0)
        model = MiniBatchTSGCN(data.num_features, 32, 5, summary=summary)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
        start = time.perf_counter()
        model.refresh(x, w, v)
        for _ in range(args.epochs):
            if summary == 'refresh':
                model.refresh(x, w, v)  # mode A: the summary of this epoch's weights
            model.train()
            for batch in seed_loader:  # batch.n_id: the rows' nodes (mode B writes them)
                optimizer.zero_grad()
                out = model(batch.x, batch.lowrank_w, batch.lowrank_v, batch.n_id)
                F.cross_entropy(out, batch.y).backward()
                optimizer.step()
            if summary == 'history':  # mode B: renew the other rows every 4 epochs
                model.refresh(x, w, v, index=torch.randperm(data.num_nodes)[:args.nodes // 4])
        logits = model.inference(x, w, v, index=test)  # exact, fresh summaries
        print(f'{name} ({summary:7s}) test accuracy {accuracy(logits, y[test]):.3f} '
              f'({time.perf_counter() - start:.1f}s)')

    # An MLP on the propagated features: any model, any loader.
    inputs = torch.cat([x, data.x1, data.x2], dim=-1)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(inputs.size(1), 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 5))
    optimizer = torch.optim.Adam(mlp.parameters(), lr=0.01, weight_decay=5e-4)
    start = time.perf_counter()
    for _ in range(args.epochs):
        for batch in loader:
            optimizer.zero_grad()
            F.cross_entropy(mlp(inputs[batch]), y[batch]).backward()
            optimizer.step()
    with torch.no_grad():
        print(f'MLP on [X, PX, P²X] test accuracy {accuracy(mlp(inputs[test]), y[test]):.3f} '
              f'({time.perf_counter() - start:.1f}s)')


if __name__ == '__main__':
    main()
