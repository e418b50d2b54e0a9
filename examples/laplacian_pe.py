"""Laplacian eigenvector positional encodings: where a node sits in the graph,
as features a model can read. A synthetic graph, no download needed.

    python examples/laplacian_pe.py [--nodes 2000] [--classes 5] [--degree 8]
        [--homophily 0.8] [--k 8] [--epochs 200] [--seed 0]

The graph is a stochastic block model whose classes are its blocks and whose
node features are pure noise (``contextual_sbm`` with ``signal=0``): nothing
but a node's place in the graph tells its class. An MLP on the features is at
chance; the first ``classes - 1`` eigenvectors of the Laplacian span the
blocks (what spectral clustering reads), so an MLP on the encoding alone finds
the classes. The script prints

1. the graph as it is: nodes, edges, connected components and isolated nodes
   (counted by scipy);
2. the eigenvalues of the encoding and what they say: a zero for each
   component beyond the first (its columns then mark components, not
   positions), on a connected graph the widest gap (below it, the block
   structure), the isolated nodes (eigenvalue 1, an all-zero row unless ``k``
   reaches it);
3. the test accuracy of an MLP on the features, on ``LaplacianEigenPE``, on
   both, and on PyG's ``AddLaplacianEigenvectorPE``;
4. the same trained MLPs fed by a second call of each transform on the same
   graph, as after reloading a dataset: PyG draws new random signs, which the
   trained model has not seen; ``LaplacianEigenPE`` returns the same encoding.

Lower ``--degree`` to see a graph with many components and isolated nodes.
"""
import argparse
import math
import time
from typing import List, Tuple

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from scipy.sparse.csgraph import connected_components
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn import MLP
from torch_geometric.transforms import AddLaplacianEigenvectorPE
from torch_geometric.utils import remove_self_loops

from torch_geometric_regcn import LaplacianEigenPE
from torch_geometric_regcn.datasets import contextual_sbm, paper_split


def graph_summary(data: Data) -> Tuple[int, np.ndarray, Tensor]:
    """The number of undirected edges, the sizes of the connected components
    (largest first) and the isolated nodes of the graph made symmetric, self
    loops dropped: the graph whose Laplacian the encodings take."""
    edge_index, _ = remove_self_loops(data.edge_index)
    row, col = edge_index.numpy()
    adjacency = sp.coo_matrix((np.ones(row.size), (row, col)),
                              shape=(data.num_nodes, data.num_nodes)).tocsr()
    adjacency = adjacency + adjacency.T
    _, labels = connected_components(adjacency, directed=False)
    isolated = torch.from_numpy(np.flatnonzero(adjacency.getnnz(axis=1) == 0))
    return sp.triu(adjacency, k=1).nnz, np.sort(np.bincount(labels))[::-1], isolated


def describe_graph(num_nodes: int, num_edges: int, sizes: np.ndarray) -> str:
    """One line on the nodes, edges, components and isolated nodes."""
    isolated = int((sizes == 1).sum())
    text = (f'{num_nodes} nodes, {num_edges} undirected edges, '
            f'{len(sizes)} connected component{"s" * (len(sizes) != 1)}')
    if len(sizes) > 1:
        largest = int(sizes[0])
        text += f' (the largest has {largest} node{"s" * (largest != 1)})'
    return text + f', {isolated} isolated node{"s" * (isolated != 1)}'


def explain_eigenvalues(eigenvalues: List[float], sizes: np.ndarray, pe: Tensor,
                        isolated_nodes: Tensor) -> List[str]:
    """What the eigenvalues λ_1..λ_k of the encoding say about the graph."""
    k = len(eigenvalues)
    with_edges = int((sizes > 1).sum())
    extra = max(with_edges - 1, 0)
    zeros = min(extra, k)
    shown = ' '.join(f'{v:.4f}' for v in eigenvalues[:16]) + (' ...' if k > 16 else '')
    lines = [f'eigenvalues λ_1..λ_{k}: {shown}']
    if zeros:
        lines.append(f'λ_1..λ_{zeros} = 0: each connected component with edges beyond the first '
                     f'adds a zero ({extra} here); their columns are component indicators '
                     f'(sqrt(degree) on the component, zero elsewhere), not positions '
                     f'within one')
    if extra >= k:
        lines.append(f'positions within components start at λ_{extra + 1}: raise --k above '
                     f'{extra} or --degree')
    rest = np.asarray(eigenvalues)
    if with_edges == 1 and rest.size >= 2 and np.ptp(rest) > 0:
        j = int(np.diff(rest).argmax())
        lines.append(f'widest gap after λ_{j + 1} ({rest[j]:.4f} -> {rest[j + 1]:.4f}): '
                     f'{j + 1} eigenvector{"s" * (j != 0)} of the coarsest structure below it '
                     f'(an SBM of C blocks has C - 1)')
    if isolated_nodes.numel():
        encoded = int((pe[isolated_nodes] != 0).any(dim=1).sum())
        lines.append(f'{isolated_nodes.numel()} isolated node(s): eigenvalue 1 each, '
                     f'{encoded} of them within the k columns, '
                     f'{isolated_nodes.numel() - encoded} with an all-zero encoding row')
    return lines


def train_mlp(x: Tensor, data: Data, epochs: int, seed: int) -> Tuple[MLP, float]:
    """Adam on the training nodes; the model as it was at the best validation
    epoch, and its test accuracy there."""
    torch.manual_seed(seed)
    model = MLP([x.size(1), 64, int(data.y.max()) + 1], dropout=0.5)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    best_val = test = 0.0
    best_state = None
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        F.cross_entropy(model(x)[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
        val, acc = accuracy(model, x, data)
        if val >= best_val:
            best_val, test = val, acc
            best_state = {name: p.clone() for name, p in model.state_dict().items()}
    model.load_state_dict(best_state)
    return model, test


@torch.no_grad()
def accuracy(model: MLP, x: Tensor, data: Data) -> Tuple[float, float]:
    """Validation and test accuracy."""
    model.eval()
    correct = model(x).argmax(dim=-1) == data.y
    return (float(correct[data.val_mask].float().mean()),
            float(correct[data.test_mask].float().mean()))


def column_changes(first: Tensor, second: Tensor) -> Tuple[int, int]:
    """How many columns of :obj:`second` are those of :obj:`first` with the
    sign flipped, and how many differ otherwise (cosine below 0.999)."""
    cos = (first * second).sum(0) / (first.norm(dim=0) * second.norm(dim=0)).clamp_min(1e-30)
    return int((cos < -0.999).sum()), int((cos.abs() <= 0.999).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--nodes', type=int, default=2000, help='(default: %(default)s)')
    parser.add_argument('--classes', type=int, default=5,
                        help='the blocks of the SBM (default: %(default)s)')
    parser.add_argument('--degree', type=float, default=8.0,
                        help='the expected degree (default: %(default)s)')
    parser.add_argument('--homophily', type=float, default=0.8,
                        help='the share of edges inside a block (default: %(default)s)')
    parser.add_argument('--k', type=int, default=8,
                        help='eigenvectors in the encoding (default: %(default)s)')
    parser.add_argument('--epochs', type=int, default=200, help='(default: %(default)s)')
    parser.add_argument('--seed', type=int, default=0,
                        help='of the graph, the split and the models (default: %(default)s)')
    args = parser.parse_args()
    for name in ('nodes', 'classes', 'k', 'epochs'):  # before any work
        if not getattr(args, name) >= 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer (got "
                         f"{getattr(args, name)})")
    if not 0 < args.degree < math.inf:
        parser.error(f'--degree must be a finite positive number (got {args.degree})')
    if not 0 <= args.homophily <= 1:
        parser.error(f'--homophily must lie in [0, 1] (got {args.homophily})')
    if args.nodes < max(2 * args.classes, args.k + 1):
        parser.error(f'--nodes must be at least 2 --classes and above --k '
                     f'(got {args.nodes} for {args.classes} classes and k = {args.k})')

    data = contextual_sbm(args.nodes, num_classes=args.classes, num_features=32,
                          avg_degree=args.degree, homophily=args.homophily, signal=0.0,
                          seed=args.seed)
    per_class = max(1, min(20, args.nodes // (4 * args.classes)))
    paper_split(data, per_class, num_val=args.nodes // 6, num_test=args.nodes // 3,
                seed=args.seed)
    num_edges, sizes, isolated = graph_summary(data)
    print(f'SBM of {args.classes} blocks (the classes), features pure noise: '
          f'{describe_graph(data.num_nodes, num_edges, sizes)}')

    # Each column of an encoding has unit norm, entries of about 1 / sqrt(N): the
    # MLPs get them scaled by sqrt(N), to a mean square of 1 (batch norm follows
    # the first layer, but weight decay would hold back the weights tiny inputs need).
    scale = data.num_nodes**0.5
    transform = LaplacianEigenPE(k=args.k)
    start = time.perf_counter()
    pairs = transform.eigenpairs(data)
    print(f'LaplacianEigenPE(k={args.k}): {time.perf_counter() - start:.2f}s')
    for line in explain_eigenvalues(pairs.eigenvalues.tolist(), sizes, pairs.eigenvectors,
                                    isolated):
        print('  ' + line)
    ours = transform(data.clone()).laplacian_eigenvector_pe * scale

    torch.manual_seed(args.seed)  # PyG draws its random signs from torch's generator
    pyg_transform = AddLaplacianEigenvectorPE(args.k, is_undirected=True)
    start = time.perf_counter()
    try:
        pyg = pyg_transform(data.clone()).laplacian_eigenvector_pe.float() * scale
    except Exception as error:  # noqa: BLE001 - the point is to show it
        print(f"PyG's AddLaplacianEigenvectorPE raised {type(error).__name__}: {error}")
        pyg = None
    else:
        print(f"PyG's AddLaplacianEigenvectorPE(k={args.k}): "
              f'{time.perf_counter() - start:.2f}s')

    majority = float(torch.bincount(data.y[data.test_mask]).max()) / int(data.test_mask.sum())
    print(f'MLP test accuracy (chance: {1 / args.classes:.3f}, majority class: {majority:.3f})')
    inputs = {'features (noise)': data.x, 'LaplacianEigenPE': ours,
              'features + LaplacianEigenPE': torch.cat([data.x, ours], 1)}
    if pyg is not None:
        inputs["PyG's AddLaplacianEigenvectorPE"] = pyg
    models = {}
    for name, x in inputs.items():
        models[name], test = train_mlp(x, data, args.epochs, args.seed)
        print(f'  {name:32s} {test:.3f}')

    print('The same MLPs on a second call of each transform (same graph, as after a reload):')
    again = transform(data.clone()).laplacian_eigenvector_pe * scale
    _, test = accuracy(models['LaplacianEigenPE'], again, data)
    print(f'  {"LaplacianEigenPE":32s} {test:.3f} (identical encoding: '
          f'{torch.equal(again, ours)})')
    if pyg is not None:
        pyg_again = pyg_transform(data.clone()).laplacian_eigenvector_pe.float() * scale
        flipped, changed = column_changes(pyg, pyg_again)
        _, test = accuracy(models["PyG's AddLaplacianEigenvectorPE"], pyg_again, data)
        print(f"  {'PyG':32s} {test:.3f} ({flipped} of {args.k} columns flipped sign, "
              f'{changed} changed otherwise)')


if __name__ == '__main__':
    main()
