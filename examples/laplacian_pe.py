"""Laplacian eigenvector positional encodings with LaplacianEigenPE on a
synthetic graph cut into pieces: no download needed.

    python examples/laplacian_pe.py [--nodes 3000] [--k 8] [--epochs 200]

The contextual SBM is cut into four disconnected parts with a few isolated
nodes; the encoding is computed twice (identical), compared with PyG's
AddLaplacianEigenvectorPE (random signs, and on such graphs ARPACK may raise
or return wrong vectors), and fed with the features to an MLP.
"""
import argparse
import time

import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import MLP
from torch_geometric.transforms import AddLaplacianEigenvectorPE

from torch_geometric_regcn import LaplacianEigenPE
from torch_geometric_regcn.datasets import contextual_sbm, paper_split


def cut_into_parts(data: Data, parts: int, isolated: int) -> Data:
    """Drops the edges between `parts` blocks of consecutive nodes and every
    edge of the last `isolated` nodes."""
    block = torch.arange(data.num_nodes) * parts // data.num_nodes
    row, col = data.edge_index
    keep = (block[row] == block[col]) & (row < data.num_nodes - isolated) \
        & (col < data.num_nodes - isolated)
    data.edge_index = data.edge_index[:, keep]
    return data


def train_mlp(x: torch.Tensor, data: Data, epochs: int) -> float:
    """Adam on the training nodes; the test accuracy at the best validation epoch."""
    torch.manual_seed(0)
    model = MLP([x.size(1), 64, int(data.y.max()) + 1], dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    best_val = test = 0.0
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        F.cross_entropy(model(x)[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            correct = model(x).argmax(dim=-1) == data.y
        val = float(correct[data.val_mask].float().mean())
        if val >= best_val:
            best_val, test = val, float(correct[data.test_mask].float().mean())
    return test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--nodes', type=int, default=3000, help='(default: %(default)s)')
    parser.add_argument('--k', type=int, default=8, help='(default: %(default)s)')
    parser.add_argument('--epochs', type=int, default=200, help='(default: %(default)s)')
    args = parser.parse_args()

    data = contextual_sbm(args.nodes, num_classes=5, num_features=64, avg_degree=6,
                          homophily=0.8, signal=0.3, seed=0)
    data = cut_into_parts(data, parts=4, isolated=5)
    paper_split(data, num_val=args.nodes // 6, num_test=args.nodes // 3, seed=0)

    transform = LaplacianEigenPE(k=args.k)
    start = time.perf_counter()
    pairs = transform.eigenpairs(data)
    print(f'{data.num_nodes} nodes, {data.num_edges} edges, 4 parts and 5 isolated nodes; '
          f'k={args.k} eigenpairs in {time.perf_counter() - start:.2f}s')
    print('eigenvalues:', ' '.join(f'{v:.4f}' for v in pairs.eigenvalues.tolist()))
    first = transform(data.clone()).laplacian_eigenvector_pe
    second = transform(data.clone()).laplacian_eigenvector_pe
    print(f'LaplacianEigenPE identical on both calls: {torch.equal(first, second)}')

    try:
        pyg = [AddLaplacianEigenvectorPE(args.k, is_undirected=True)(data.clone())
               .laplacian_eigenvector_pe for _ in range(2)]
        same = torch.allclose(pyg[0], pyg[1], atol=1e-4)
        print(f"PyG's AddLaplacianEigenvectorPE identical on both calls: {same}")
    except Exception as error:  # noqa: BLE001 - the point is to show it
        print(f"PyG's AddLaplacianEigenvectorPE raised {type(error).__name__}: {error}")

    for name, x in (('features', data.x), ('features + PE', torch.cat([data.x, first], 1)),
                    ('PE only', first)):
        print(f'MLP on {name:13s}: test accuracy {train_mlp(x, data, args.epochs):.3f}')


if __name__ == '__main__':
    main()
