r"""What the reliability checks of the layers cost: each layer call with its
checks against the same work without them, side by side in one process.

- ``MiniBatchTSGCN`` training step (forward and backward of a batch) with
  ``n_id``, whose rows of ``x``, ``w`` and ``v`` are checked against the
  refreshed graph, against the same step without ``n_id`` (not checked);
- ``TSGCNConv`` forward on the whole graph, whose cached Woodbury core is
  validated by a fingerprint of ``w`` and ``v`` on every call, against
  ``woodbury_apply`` of the projection with the core given (the layer's
  arithmetic without the cache check);
- ``RegularizerConv(cached=True)`` forward (``'appnp'``, ``series``), whose
  graph inputs are fingerprinted on every call, against the same layer with
  the fingerprint check replaced by a no-op.

A contextual SBM of ``--nodes`` nodes (``--features`` features, average degree
about 10), factors of rank ``--rank`` from ``LowRankInverse``; ``--threads``
threads; each pair timed alternately, ``--repeats`` times, medians reported.

Run from the repository root::

    python -m benchmarks.reliability            # about a minute on 2 CPU cores

Writes ``benchmarks/results/reliability.md`` (``--output``: elsewhere).
"""
import argparse
import os.path as osp
import statistics
import time
from typing import Callable, Dict, List, Tuple
from unittest import mock

import torch

from harness.cli import check_writable, positive_int
from harness.report import RESULTS, Report
from torch_geometric_regcn import LowRankInverse, MiniBatchTSGCN, RegularizerConv, TSGCNConv
from torch_geometric_regcn.datasets import contextual_sbm
from torch_geometric_regcn.linalg import woodbury_apply, woodbury_core


def paired(first: Callable[[], None], second: Callable[[], None],
           repeats: int) -> Tuple[float, float]:
    r"""Median seconds of :obj:`first` and :obj:`second`, timed alternately
    after one warm-up call each."""
    first(), second()
    times: Dict[int, List[float]] = {0: [], 1: []}
    for _ in range(repeats):
        for i, fn in enumerate((first, second)):
            start = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog='python -m benchmarks.reliability',
                                description=__doc__.splitlines()[0])
    p.add_argument('--nodes', type=positive_int, default=8000)
    p.add_argument('--features', type=positive_int, default=500)
    p.add_argument('--rank', type=positive_int, default=64)
    p.add_argument('--hidden', type=positive_int, default=64)
    p.add_argument('--batch-sizes', type=positive_int, nargs='+', default=[256, 1024, 4096])
    p.add_argument('--repeats', type=positive_int, default=30)
    p.add_argument('--threads', type=positive_int, default=1)
    p.add_argument('--output', default=osp.join(RESULTS, 'reliability.md'))
    args = p.parse_args(argv)
    check_writable(p, '--output', args.output, create=True)  # written at the end
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rep = Report()
    rep.header('What the reliability checks cost', 'benchmarks.reliability', argv,
               args.threads, isolated=False)

    data = contextual_sbm(num_nodes=args.nodes, num_classes=7, num_features=args.features,
                          seed=0)
    data = LowRankInverse(1.0, 0.2, rank=args.rank, progress=False)(data)
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    rows = []

    model = MiniBatchTSGCN(args.features, args.hidden, 7)
    model.refresh(x, w, v)
    generator = torch.Generator().manual_seed(0)
    for size in args.batch_sizes:
        batch = torch.randperm(args.nodes, generator=generator)[:size]
        rows_of = (x[batch], w[batch], v[batch])

        def step(n_id=None, rows_of=rows_of):
            model(*rows_of, n_id).sum().backward()

        checked, bare = paired(lambda batch=batch: step(batch), step, args.repeats)
        rows.append([f'`MiniBatchTSGCN` step, batch of {size}: with `n_id` / without',
                     f'{checked * 1e3:.2f} ms', f'{bare * 1e3:.2f} ms',
                     f'{checked / bare:.2f}'])

    conv = TSGCNConv(args.features, args.hidden)
    core = woodbury_core(w, v, from_eigenpairs=True)
    with torch.no_grad():
        checked, bare = paired(lambda: conv(x, w, v),
                               lambda: woodbury_apply(conv.lin(x), w, v, core) + conv.bias,
                               args.repeats)
    rows.append(['`TSGCNConv` forward, all nodes: layer (core fingerprinted) / '
                 '`woodbury_apply` with the core given', f'{checked * 1e3:.2f} ms',
                 f'{bare * 1e3:.2f} ms', f'{checked / bare:.2f}'])

    layer = RegularizerConv(args.features, args.hidden, 'appnp', solver='series',
                            cached=True)
    with torch.no_grad():
        layer(x, data.edge_index)

        def unchecked():
            with mock.patch.object(type(layer._graph_cache), 'check', lambda *a, **k: None):
                layer(x, data.edge_index)

        checked, bare = paired(lambda: layer(x, data.edge_index), unchecked, args.repeats)
    rows.append(["`RegularizerConv('appnp', cached=True)` forward: graph fingerprinted / "
                 'check skipped', f'{checked * 1e3:.2f} ms', f'{bare * 1e3:.2f} ms',
                 f'{checked / bare:.2f}'])

    rep(f'Contextual SBM, {args.nodes} nodes, {args.features} features, factors of rank '
        f'{args.rank}, hidden {args.hidden}; medians of {args.repeats} alternating calls, both '
        f'sides of each pair in this one process.')
    rep()
    rep.table(['call', 'with the checks', 'without', 'ratio'], rows)
    rep.finish(start, args.output)


if __name__ == '__main__':
    main()
