r"""Time per training epoch of the non-quadratic regularisers against APPNP, in one run.

Run from the repository root::

    python -m benchmarks.nonquadratic [--datasets cora citeseer pubmed]
        [--models elastic airgnn pgnn robust] [--epochs 20] [--repeats 5]
        [--device cuda] [--count-ops]

Each model is the network of ``harness.heterophily.MODELS`` (an MLP of 2
layers, 64 hidden, and a parameter-free propagation: PyG's ``APPNP`` with
K = 10, or the package's regulariser with its first configuration there),
trained on the paper's random split of seed 0 (Adam, the full graph, one
epoch = one forward, backward and step). The models run in alternating blocks
of ``--epochs`` epochs, ``--repeats`` times each, so that a change in the
machine's load hits all of them alike; the result is each model's median
seconds per epoch over its blocks and its ratio to APPNP's. Pin the threads
(``OMP_NUM_THREADS=1``) and run on a quiet machine. With ``--device cuda``
every model and the graph live on the GPU, and each block's time ends with a
``torch.cuda.synchronize()``.

With ``--count-ops`` it also profiles one training epoch of each model
(``torch.profiler``) and prints the operator calls it made (the top-level
``aten`` operators: each one a dispatch, and on a GPU at least one kernel
launch), the autograd nodes its backward pass ran and, on a GPU, the kernels
launched, each with its ratio to APPNP's: where an epoch is bound by launches
rather than arithmetic (small graphs on a GPU), these counts decide its time.
"""
import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from harness.cli import positive_int
from harness.heterophily import (
    HOMOPHILOUS,
    MODELS,
    Dims,
    configurations,
    load_homophilous,
    official_split,
)


def _model(name: str, data) -> tuple:
    config = configurations(name)[0]
    torch.manual_seed(0)
    model = MODELS[name].build(Dims(data.num_features, int(data.y.max()) + 1, data.num_nodes),
                               config).to(data.x.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config['lr'],
                                 weight_decay=config['weight_decay'])
    return model, optimizer


def _block(name: str, model, optimizer, data, epochs: int) -> float:
    model.train()
    start = time.perf_counter()
    for _ in range(epochs):
        optimizer.zero_grad()
        out = MODELS[name].run(model, data)
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
    if data.x.is_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / epochs


def _count_ops(name: str, model, optimizer, data) -> dict:
    r"""The operator calls, autograd nodes and (on a GPU) kernel launches of
    one training epoch of :obj:`model`, after the warm-up epochs."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if data.x.is_cuda else [])
    with profile(activities=activities) as prof:
        _block(name, model, optimizer, data, 1)
    events = prof.events()
    counts = {
        'operators': sum(1 for e in events if e.name.startswith('aten::') and (
            e.cpu_parent is None or not e.cpu_parent.name.startswith('aten::'))),
        'autograd nodes': sum(1 for e in events
                              if e.name.startswith('autograd::engine::evaluate_function')),
    }
    if data.x.is_cuda:
        counts['kernels'] = sum(1 for e in events if e.name in (
            'cudaLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernel', 'cuLaunchKernelEx'))
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--datasets', nargs='+', type=str.lower, default=list(HOMOPHILOUS),
                        choices=HOMOPHILOUS)
    parser.add_argument('--models', nargs='+', default=['elastic', 'airgnn', 'pgnn', 'robust'],
                        choices=['elastic', 'airgnn', 'pgnn', 'robust'])
    parser.add_argument('--epochs', type=positive_int, default=20)
    parser.add_argument('--repeats', type=positive_int, default=5)
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--count-ops', action='store_true',
                        help='also count the operators, autograd nodes and kernels of an epoch')
    args = parser.parse_args()
    names = ['appnp'] + args.models
    where = (torch.cuda.get_device_name(args.device) if torch.device(args.device).type == 'cuda'
             else f'threads {torch.get_num_threads()}')
    print(f"{where}; seconds per epoch (median of {args.repeats} "
          f"blocks of {args.epochs}), ratio to APPNP")
    for dataset in args.datasets:
        data = official_split(load_homophilous(dataset, 1), 0).to(args.device)
        models = {name: _model(name, data) for name in names}
        for name in names:  # warm up: operators built, allocator settled
            _block(name, *models[name], data, 2)
        times = {name: [] for name in names}
        for _ in range(args.repeats):
            for name in names:
                times[name].append(_block(name, *models[name], data, args.epochs))
        base = statistics.median(times['appnp'])
        cells = [f'{name} {1e3 * statistics.median(times[name]):.1f} ms '
                 f'({statistics.median(times[name]) / base:.2f}x)' for name in names]
        print(f'{dataset}: ' + ', '.join(cells), flush=True)
        if args.count_ops:
            counts = {name: _count_ops(name, *models[name], data) for name in names}
            for what in counts['appnp']:
                base_count = counts['appnp'][what]
                cells = [f'{name} {counts[name][what]}' + (
                    f' ({counts[name][what] / base_count:.2f}x)' if base_count else '')
                    for name in names]
                print(f'{dataset}, {what} per epoch: ' + ', '.join(cells), flush=True)


if __name__ == '__main__':
    torch.set_num_threads(int(os.environ.get('OMP_NUM_THREADS', '1')))
    main()
