"""Any row of the paper's Table 3 on one of its datasets.

    python -m examples.regularizers --dataset Cora --model APPNP [--runs 10]
                                     [--epochs E] [--root DIR] [--device D]

Models: Chebyshev, GraphSAGE, GAT (PyG's ChebConv, SAGEConv, GATConv), GCN,
SGC, APPNP, JKNet, DAGNN, GNN-LF, GNN-HF, tsGCN-inv (RegularizerConv, the
regulariser chooses the model) and tsGCN (TSGCNConv), each with its original
paper's defaults (harness.methods.TABLE3). Names are matched ignoring case,
spaces, hyphens and parentheses, so "tsGCN (inv)" needs no quoting as
tsgcn-inv. Prints one line
per run (random split, seeded by the run index) and ACC / F1 as mean (std).
"""
import argparse
import math
import re
import statistics
import time

import torch

from harness.cli import device_name, positive_int
from harness.data import OFFLINE, load_paper_dataset
from harness.methods import TABLE3
from harness.training import fit
from torch_geometric_regcn import LowRankInverse, SemanticGraph, paper_rank
from torch_geometric_regcn.datasets import PAPER_SETTINGS, paper_split
from torch_geometric_regcn.utils.progress import progress_bar


def model_name(name: str) -> str:
    r"""The Table 3 name that :obj:`name` spells, ignoring case, spaces,
    hyphens and parentheses (:obj:`"tsgcn-inv"` is :obj:`"tsGCN (inv)"`)."""
    def key(text: str) -> str:
        return re.sub(r'[^a-z0-9]', '', text.lower())
    return {key(known): known for known in TABLE3}.get(key(name), name)


def prepare(name: str, root, model: str, k: int, device: str):
    """Loads a dataset and precomputes what the method needs; returns the data
    and the precompute time."""
    data = load_paper_dataset(name, root, sparse_features=True).to(device)
    start = time.perf_counter()
    if model.startswith('tsGCN'):
        data = SemanticGraph(k)(data)
    if model == 'tsGCN':
        setting = PAPER_SETTINGS[name]
        data = LowRankInverse(setting.alpha, setting.beta,
                              paper_rank(data.num_nodes, setting.p))(data)
    return data, time.perf_counter() - start


def run(name: str, model_name: str, data, seed: int, epochs, device: str):
    method = TABLE3[model_name]
    data = paper_split(data, seed=seed)
    torch.manual_seed(seed)
    model = method.build(data, int(data.y.max()) + 1, PAPER_SETTINGS[name]).to(device)
    epochs = method.epochs if epochs is None else epochs
    with progress_bar(epochs, f'{model_name} seed {seed}', 'epoch', leave=False) as bar:
        return fit(model, lambda: method.run(model, data), data, epochs, method.lr,
                   method.weight_decay, on_epoch=lambda _: bar.update())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--dataset', required=True, choices=OFFLINE,
                        help='the datasets whose raw files lie in ../shared/data')
    parser.add_argument('--model', required=True, type=model_name, choices=list(TABLE3),
                        metavar='MODEL', help=f"one of {', '.join(TABLE3)} (tsGCN (inv): "
                        f"tsgcn-inv; case, spaces and hyphens do not matter)")
    parser.add_argument('--runs', type=positive_int, default=10,
                        help='random splits, one per seed (default: %(default)s)')
    parser.add_argument('--epochs', type=positive_int, default=None, help="default: the method's")
    parser.add_argument('--root', default=None, help='dataset root (default: a copy of '
                        '../shared/data)')
    parser.add_argument('--device', type=device_name,
                        default='cuda' if torch.cuda.is_available() else 'cpu',
                        help='(default: %(default)s)')
    parser.add_argument('--k', type=positive_int, default=10,
                        help='neighbours of the semantic graph (default: %(default)s)')
    args = parser.parse_args()

    data, precompute = prepare(args.dataset, args.root, args.model, args.k, args.device)
    print(f'{args.model} on {args.dataset} ({TABLE3[args.model].note}); '
          f'precompute {precompute:.1f}s')
    accs, f1s = [], []
    for seed in range(args.runs):
        result = run(args.dataset, args.model, data, seed, args.epochs, args.device)
        accs.append(100 * result.accuracy)
        f1s.append(100 * result.f1)
        print(f'run {seed}: ACC {accs[-1]:.1f}  F1 {f1s[-1]:.1f}  ({result.seconds:.1f}s)')
    std = statistics.stdev if len(accs) > 1 else (lambda _: math.nan)  # one run: no spread
    print(f'ACC: {statistics.mean(accs):.1f} ({std(accs):.1f})')
    print(f'F1: {statistics.mean(f1s):.1f} ({std(f1s):.1f})')


if __name__ == '__main__':
    main()
