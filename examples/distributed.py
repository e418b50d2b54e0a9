"""tsGCN on several processes (and machines) with torch.distributed: each rank
holds one row shard of the graph, of the low-rank factors and of every
activation; no rank holds anything of size N x F or N x r.

One machine, two processes (gloo on CPU; with CUDA, one GPU per process),
on the default 100,000 nodes; rank 0 prints each stage's time and traffic.
At 2,000,000 nodes (``--nodes 2000000``) the semantic kNN search takes most
of the time (``benchmarks/results/distributed.md``)::

    torchrun --standalone --nproc_per_node=2 examples/distributed.py

Several machines: run the same command on each, with the machine's index::

    torchrun --nnodes=2 --nproc_per_node=4 --node_rank=0 \\
        --rdzv_backend=c10d --rdzv_endpoint=HOST:29500 examples/distributed.py --nodes 2000000

The graph is a contextual SBM generated shard by shard (``contextual_sbm_shard``:
the same graph for any number of processes), or the shards that
``torch_geometric_regcn.distributed.save_partition`` wrote to ``--root``, one
file per rank. Then, on every rank: the semantic kNN graph
(``SemanticGraph(group=)``), the low-rank factors of the tsGCN operator
(``LowRankInverse(group=)``, row-sharded block Lanczos) and a few full-batch
epochs of the paper's 2-layer tsGCN under DistributedDataParallel, with the
loss averaged over the labelled nodes of all ranks (``global_mean``).
"""
import argparse
import datetime
import math
import os
import time
from contextlib import contextmanager
from typing import Iterator, List, Tuple

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch_geometric.data import Data

from torch_geometric_regcn import TSGCN, LowRankInverse, SemanticGraph
from torch_geometric_regcn.datasets import contextual_sbm_shard
from torch_geometric_regcn.distributed import global_mean, load_partition, traffic, traffic_stage


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument('--nodes', type=int, default=100_000,
                        help='nodes of the synthetic graph')
    parser.add_argument('--features', type=int, default=64, help='features per node')
    parser.add_argument('--classes', type=int, default=5, help='classes')
    parser.add_argument('--degree', type=float, default=20.0,
                        help='expected degree once symmetrised (nodes * degree / 2 edges)')
    parser.add_argument('--k', type=int, default=10, help='neighbours of the semantic graph')
    parser.add_argument('--factor-rank', type=int, default=64,
                        help='rank r of the low-rank factors')
    parser.add_argument('--alpha', type=float, default=1.0, help='topological weight')
    parser.add_argument('--beta', type=float, default=0.2, help='semantic weight')
    parser.add_argument('--epochs', type=int, default=5, help='training epochs')
    parser.add_argument('--train', type=float, default=0.05,
                        help='share of labelled nodes (chosen per node, whatever the ranks)')
    parser.add_argument('--root', default=None,
                        help='read this rank\'s shard from save_partition\'s folder '
                             'instead of generating the synthetic graph')
    parser.add_argument('--seed', type=int, default=0, help='seed of graph and model')
    parser.add_argument('--threads', type=int, default=0,
                        help='torch threads per process (0: keep torchrun\'s setting)')
    parser.add_argument('--timeout', type=float, default=1800.0,
                        help='seconds a rank waits for its peers in a collective')
    args = parser.parse_args()
    for name in ('nodes', 'features', 'k', 'factor_rank', 'epochs'):  # before any work
        if not getattr(args, name) >= 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer (got "
                         f"{getattr(args, name)})")
    if args.classes < 2:
        parser.error(f'--classes must be at least 2 (got {args.classes})')
    for name in ('degree', 'timeout'):
        if not 0 < getattr(args, name) < math.inf:
            parser.error(f'--{name} must be a finite positive number (got {getattr(args, name)})')
    for name in ('alpha', 'beta'):
        if not 0 <= getattr(args, name) < math.inf:
            parser.error(f'--{name} must be a finite non-negative number '
                         f'(got {getattr(args, name)})')
    if not 0 < args.train <= 1:
        parser.error(f'--train must lie in (0, 1] (got {args.train})')
    if args.threads < 0:
        parser.error(f'--threads must be non-negative (got {args.threads})')
    return args


def labelled(node_id: Tensor, share: float) -> Tensor:
    r"""A mask of about :obj:`share` of the nodes, decided by each node's
    global index alone (a multiplicative hash), so that it does not depend on
    the number of ranks."""
    hashed = (node_id.long() * 2654435761) % 2**32
    return hashed < int(share * 2**32)


class Stages:
    r"""Wall time and bytes sent by this rank, per stage; the ranks start each
    stage together (a barrier), so the slowest rank's time is the stage's."""

    def __init__(self) -> None:
        self.rows: List[Tuple[str, float, int]] = []

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        dist.barrier()
        start = time.perf_counter()
        with traffic_stage(name):
            yield
        self.rows.append((name, time.perf_counter() - start, traffic(name)))

    def report(self, device: torch.device) -> None:
        r"""Prints, on rank 0, each stage's time on the slowest rank and the
        largest number of bytes a rank sent."""
        values = torch.tensor([[t, b] for _, t, b in self.rows], dtype=torch.float64,
                              device=device)
        dist.all_reduce(values, op=dist.ReduceOp.MAX)
        if dist.get_rank() == 0:
            print(f'{"stage":<28}{"time (s)":>10}{"sent per rank (MiB)":>22}')
            for (name, _, _), (seconds, sent) in zip(self.rows, values.tolist()):
                print(f'{name:<28}{seconds:>10.2f}{sent / 2**20:>22.1f}')


def load_shard(args: argparse.Namespace, rank: int, world_size: int) -> Data:
    if args.root is not None:
        return load_partition(args.root, rank, world_size)
    return contextual_sbm_shard(args.nodes, world_size, rank, num_classes=args.classes,
                                num_features=args.features, avg_degree=args.degree,
                                seed=args.seed)


def run(args: argparse.Namespace, device: torch.device) -> None:
    group = dist.group.WORLD
    rank, world_size = dist.get_rank(), dist.get_world_size()
    quiet = rank != 0
    stages = Stages()

    with stages('graph shard'):
        shard = load_shard(args, rank, world_size).to(device)
    part = shard.partition
    num_classes = torch.tensor([int(shard.y.max()) + 1 if shard.y.numel() else 0],
                               device=device)
    dist.all_reduce(num_classes, op=dist.ReduceOp.MAX)
    num_classes = int(num_classes)
    if not quiet:
        print(f'{world_size} ranks, {part.num_nodes:,} nodes, {shard.x.size(1)} features, '
              f'{num_classes} classes; rank 0 holds rows {part.start:,}..{part.end - 1:,} '
              f'and {shard.edge_index.size(1):,} edges', flush=True)

    with stages('semantic kNN graph'):
        shard = SemanticGraph(args.k, seed=args.seed, progress=not quiet, group=group)(shard)
    with stages('low-rank factors'):
        shard = LowRankInverse(args.alpha, args.beta, args.factor_rank, k=args.k,
                               seed=args.seed, progress=not quiet, group=group)(shard)

    x, w, v, y = shard.x, shard.lowrank_w, shard.lowrank_v, shard.y
    train = shard.train_mask if 'train_mask' in shard else labelled(shard.node_id, args.train)
    torch.manual_seed(args.seed)  # DDP broadcasts rank 0's initial weights anyway
    model = DistributedDataParallel(TSGCN(x.size(1), 32, num_classes, group=group).to(device))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    with stages(f'{args.epochs} training epochs'):
        for epoch in range(1, args.epochs + 1):
            start = time.perf_counter()
            optimizer.zero_grad()
            out = model(x, w, v)
            loss = global_mean(F.cross_entropy(out[train], y[train], reduction='sum'),
                               int(train.sum()), group)
            loss.backward()
            optimizer.step()
            if not quiet:
                print(f'epoch {epoch:3d}  loss {float(loss.detach()):.4f}  '
                      f'{1e3 * (time.perf_counter() - start):.0f} ms (rank 0)', flush=True)

    model.eval()
    with torch.no_grad():
        correct = model(x, w, v).argmax(dim=-1) == y
    counts = torch.tensor([float(correct[~train].sum()), float((~train).sum()),
                           float(correct[train].sum()), float(train.sum())],
                          dtype=torch.float64, device=device)
    dist.all_reduce(counts)  # the sums over every rank's rows
    stages.report(device)
    if not quiet:
        unlabelled, num_unlabelled, fitted, num_train = counts.tolist()
        print(f'final loss {float(loss.detach()):.4f}; accuracy '
              f'{fitted / max(num_train, 1):.3f} on the {num_train:,.0f} training nodes, '
              f'{unlabelled / max(num_unlabelled, 1):.3f} on the other '
              f'{num_unlabelled:,.0f} nodes (all ranks)')


def main() -> None:
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if torch.cuda.is_available():
        # The library's small integer collectives run on CPU tensors, so gloo
        # serves those and NCCL the CUDA ones.
        backend = 'cpu:gloo,cuda:nccl'
        device = torch.device('cuda', int(os.environ.get('LOCAL_RANK', 0)))
        torch.cuda.set_device(device)
    else:
        backend, device = 'gloo', torch.device('cpu')
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=args.timeout))
    try:
        run(args, device)
    finally:
        dist.destroy_process_group()


if __name__ == '__main__':
    os.environ.setdefault('TQDM_MININTERVAL', '5')
    main()
