r"""tsGCN on a mini-batch of graphs, each with its own factors, against the same
rows propagated as one graph.

Graph-level tasks (``DataLoader`` over many small graphs, ``LowRankInverse``
as each graph's ``pre_transform``) pass the ``Batch``'s ``batch`` vector to
``TSGCN``, which then applies each graph's factors to its own rows
(``docs/tsgcn.md``). The baseline is the cost of the same rows as one graph:
the same ``TSGCN`` on the same features with ``LowRankInverse`` of the
``Batch`` as one (block-diagonal) graph, at the same rank, no ``batch``
vector: the same products, without the grouping into blocks.

Each measurement is a training step of the paper's 2-layer ``TSGCN``
(forward, cross-entropy of a graph-level readout, backward), cycling over
``--batches`` distinct batches so that every step builds its Woodbury cores
afresh, as in training; the time per step is the median of ``--repeats``
passes over the batches (one warm-up pass first). One process, ``--threads``
torch threads.

Workloads: 128 molecule-like graphs of 10-38 nodes
(``benchmarks.eigen_pe.molecule_graph``), rank 8; 32 contextual SBM graphs
of 100-400 nodes, rank 16; 16 features, 64 hidden units, 8 outputs.

Run from the repository root::

    OMP_NUM_THREADS=1 python -m benchmarks.graph_batch [--repeats 20] [--output PATH]
"""
import argparse
import statistics
import time
from typing import List, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data
from torch_geometric.nn import global_mean_pool

from benchmarks.eigen_pe import molecule_graph
from harness.cli import check_writable, positive_int
from torch_geometric_regcn import TSGCN, LowRankInverse
from torch_geometric_regcn.datasets import contextual_sbm

FEATURES, HIDDEN, OUT = 16, 64, 8


def molecules(count: int, seed: int) -> List[Data]:
    rng = np.random.default_rng(seed)
    graphs = [molecule_graph(rng) for _ in range(count)]
    gen = torch.Generator().manual_seed(seed)
    for g in graphs:
        g.x = torch.randn(g.num_nodes, FEATURES, generator=gen)
    return graphs


def sbm_graphs(count: int, seed: int) -> List[Data]:
    rng = np.random.default_rng(seed)
    return [contextual_sbm(num_nodes=int(rng.integers(100, 401)), num_features=FEATURES,
                           seed=seed * 1000 + i) for i in range(count)]


def prepare(graphs: List[Data], rank: int) -> Tuple[Batch, Batch]:
    r"""The batch of the graphs with each graph's factors, and the same batch
    with the factors of the batch as one graph."""
    transform = LowRankInverse(alpha=1.0, beta=0.0, rank=rank, progress=False)
    own = Batch.from_data_list([transform(Data(x=g.x, edge_index=g.edge_index,
                                               num_nodes=g.num_nodes)) for g in graphs])
    whole = transform(Data(x=own.x, edge_index=own.edge_index, num_nodes=own.num_nodes))
    one = own.clone()
    one.lowrank_w, one.lowrank_v = whole.lowrank_w, whole.lowrank_v
    return own, one


def step_time(model: TSGCN, batches: List[Batch], batched: bool, repeats: int) -> float:
    def step(b: Batch) -> None:
        model.zero_grad()
        h = model(b.x, b.lowrank_w, b.lowrank_v, batch=b.batch if batched else None,
                  batch_size=b.num_graphs if batched else None)
        out = global_mean_pool(h, b.batch, size=b.num_graphs)
        F.cross_entropy(out, b.y).backward()

    for b in batches:  # warm-up pass
        step(b)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for b in batches:
            step(b)
        times.append((time.perf_counter() - start) / len(batches))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(prog='python -m benchmarks.graph_batch')
    parser.add_argument('--repeats', type=positive_int, default=20)
    parser.add_argument('--batches', type=positive_int, default=4)
    parser.add_argument('--threads', type=positive_int, default=1)
    parser.add_argument('--output', default=None)
    args = parser.parse_args()
    if args.output:
        check_writable(parser, '--output', args.output)
    torch.set_num_threads(args.threads)
    workloads = [('128 molecule-like graphs, 10-38 nodes', lambda s: molecules(128, s), 8),
                 ('32 SBM graphs, 100-400 nodes', lambda s: sbm_graphs(32, s), 16)]
    lines = [f'torch {torch.__version__}, {args.threads} thread(s), median of {args.repeats} '
             f'passes over {args.batches} batches', '',
             '| workload | rank | rows per batch | batched (ms/step) | one graph (ms/step) | '
             'batched / one graph |', '|---|---|---|---|---|---|']
    for label, make, rank in workloads:
        pairs = []
        for seed in range(args.batches):
            own, one = prepare(make(seed), rank)
            gen = torch.Generator().manual_seed(seed)
            own.y = one.y = torch.randint(0, OUT, (own.num_graphs,), generator=gen)
            pairs.append((own, one))
        torch.manual_seed(0)
        model = TSGCN(FEATURES, HIDDEN, OUT)
        batched = step_time(model, [p[0] for p in pairs], True, args.repeats)
        single = step_time(model, [p[1] for p in pairs], False, args.repeats)
        rows = statistics.mean(p[0].num_nodes for p in pairs)
        lines.append(f'| {label} | {rank} | {rows:.0f} | {1e3 * batched:.2f} | '
                     f'{1e3 * single:.2f} | {batched / single:.2f} |')
        print(lines[-1], flush=True)
    text = '\n'.join(lines)
    print(text)
    if args.output:
        with open(args.output, 'w') as f:
            f.write(text + '\n')


if __name__ == '__main__':
    main()
