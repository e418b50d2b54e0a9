r"""The peak memory and time of building tsGCN's operator
:math:`\mathbf{S} = (\alpha \hat{\mathbf{A}}_G + \beta \hat{\mathbf{A}}_X) / (1 + \alpha + \beta)`
(``tsgcn_operator``), in one process and on a one-rank gloo group (the
sharded build), each measured in a fresh process with one thread: the rise of
the resident set's high-water mark during the build, divided by the stored
entries of :math:`\mathbf{S}`. This is the ``BUILD_BYTES_PER_ENTRY`` of
``benchmarks/capacity_plan.py``.

Run from the repository root::

    python -m benchmarks.operator_build --nodes 200000 1000000 [--ranks 2]

The graph is ``harness.graphs.synthetic_graph`` (``n * degree / 2`` random
directed edges, unsorted, with repeats and self loops, as ``benchmarks.scale``
uses it); the semantic graph is :obj:`k` random neighbours per node (the shape
of a :math:`k`-NN graph, without its search). With ``--save DIR`` the
single-process :math:`\mathbf{S}` is saved as ``DIR/S-<nodes>.pt``, and with
``--compare DIR`` compared with such a file entry by entry (to check that a
change of the build leaves :math:`\mathbf{S}` as it was).
"""
import argparse
import datetime
import os
import socket
import time
import warnings

import torch

from harness.cli import check_writable, positive_int
from harness.measure import MIB, PeakMeter, child_environment, machine_info, run_isolated

ALPHA, BETA, DEGREE, K = 1.0, 0.3, 20, 10


def _graph(nodes: int, degree: int, k: int):
    from torch_geometric.data import Data

    from harness.graphs import synthetic_graph
    data = synthetic_graph(nodes, avg_degree=degree, features=8)
    g = torch.Generator().manual_seed(1)
    row = torch.arange(nodes).repeat_interleave(k)
    col = torch.randint(0, nodes, (nodes * k,), generator=g)
    return Data(x=data.x, edge_index=data.edge_index, semantic_edge_index=torch.stack([row, col]),
                num_nodes=nodes)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def measure(nodes: int, sharded: bool, save: str, compare: str) -> dict:
    r"""One measurement, in the calling (fresh) process."""
    import torch.distributed as dist

    from torch_geometric_regcn.distributed import partition
    from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator
    warnings.filterwarnings('ignore', message=r'.*[Ss]parse.*beta')
    data, group = _graph(nodes, DEGREE, K), None
    if sharded:
        dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{_free_port()}',
                                rank=0, world_size=1, timeout=datetime.timedelta(minutes=5))
        data, group = partition(data, 1)[0], dist.group.WORLD
    meter = PeakMeter(trim=True).start()
    start = time.perf_counter()
    op = tsgcn_operator(data, ALPHA, BETA, group=group)
    seconds = time.perf_counter() - start
    rise = meter.stop()
    local = op.local if sharded else op
    nnz = local._nnz()
    out = {'nodes': nodes, 'sharded': sharded, 'seconds': seconds, 'mib': rise,
           'bytes_per_entry': rise * MIB / nnz, 'nnz': nnz,
           'index_dtype': str(local.crow_indices().dtype)}
    if not sharded:
        crow, col = local.crow_indices().long(), local.col_indices().long()
        if save:
            torch.save({'crow': crow, 'col': col, 'values': local.values()},
                       os.path.join(save, f'S-{nodes}.pt'))
        if compare:
            ref = torch.load(os.path.join(compare, f'S-{nodes}.pt'))
            out['same_pattern'] = (torch.equal(ref['crow'], crow)
                                   and torch.equal(ref['col'], col))
            if out['same_pattern']:
                out['max_abs_diff'] = float((ref['values'] - local.values()).abs().max())
    if sharded:
        dist.destroy_process_group()
    return out


def _rank(rank: int, ranks: int, nodes: int, port: int, results) -> None:
    r"""One rank of a :obj:`ranks`-rank gloo group: its peak while building
    its rows of :math:`\mathbf{S}` from its shard."""
    import torch.distributed as dist

    from torch_geometric_regcn.distributed import partition
    from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator
    torch.set_num_threads(1)
    warnings.filterwarnings('ignore', message=r'.*[Ss]parse.*beta')
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank,
                            world_size=ranks, timeout=datetime.timedelta(minutes=10))
    shard = partition(_graph(nodes, DEGREE, K), ranks)[rank]
    dist.barrier()
    meter = PeakMeter(trim=True).start()
    dist.barrier()
    start = time.perf_counter()
    op = tsgcn_operator(shard, ALPHA, BETA, group=dist.group.WORLD)
    seconds = time.perf_counter() - start
    rise = meter.stop()
    results.put({'rank': rank, 'seconds': seconds, 'mib': rise, 'nnz': op.local._nnz(),
                 'halo': op.plan.halo.numel()})
    dist.barrier()
    dist.destroy_process_group()


def measure_ranks(nodes: int, ranks: int) -> list:
    r"""Every rank's measurement on :obj:`ranks` spawned gloo processes (one
    thread each)."""
    import torch.multiprocessing as mp
    ctx = mp.get_context('spawn')
    results, port = ctx.Queue(), _free_port()
    procs = [ctx.Process(target=_rank, args=(r, ranks, nodes, port, results))
             for r in range(ranks)]
    for proc in procs:
        proc.start()
    out = sorted((results.get(timeout=1800) for _ in procs), key=lambda r: r['rank'])
    for proc in procs:
        proc.join()
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog='python -m benchmarks.operator_build',
                                description=__doc__.splitlines()[0])
    p.add_argument('--nodes', type=positive_int, nargs='+', default=[200_000])
    p.add_argument('--single', action='store_true', help='one process only, no gloo group')
    p.add_argument('--save', default='', help='save the single-process S in this folder')
    p.add_argument('--compare', default='', help='compare S with the one saved here')
    p.add_argument('--ranks', type=positive_int, default=1,
                   help='also build on this many gloo ranks (each its rows; one line per rank)')
    args = p.parse_args(argv)
    if args.save:  # each S is saved after its build
        check_writable(p, '--save', args.save, folder=True)
    for nodes in args.nodes if args.compare else ():
        if not os.path.isfile(os.path.join(args.compare, f'S-{nodes}.pt')):
            p.error(f'--compare {args.compare}: no S-{nodes}.pt there (made by --save)')
    info = machine_info(1)
    print(f"Machine: {info['cpu']}, load at start {info['load']}; one thread per process; "
          f"alpha = {ALPHA}, beta = {BETA}, degree {DEGREE}, semantic k = {K}")
    print('| nodes | build | nnz(S) | peak rise (MiB) | bytes per entry | time (s) | '
          'indices | same S |')
    print('|---|---|---|---|---|---|---|---|')
    for nodes in args.nodes:
        for sharded in (False,) if args.single else (False, True):
            r = run_isolated(1, measure, nodes, sharded, args.save, args.compare)
            if 'error' in r:
                print(f'| {nodes:,} | {"gloo, 1 rank" if sharded else "one process"} | '
                      f'{r["error"]} |')
                continue
            same = ''
            if 'same_pattern' in r:
                same = (f"pattern equal, max |diff| {r['max_abs_diff']:.1e}"
                        if r['same_pattern'] else 'pattern differs')
            print(f"| {nodes:,} | {'gloo, 1 rank' if sharded else 'one process'} | "
                  f"{r['nnz']:,} | {r['mib']:,.0f} | {r['bytes_per_entry']:.0f} | "
                  f"{r['seconds']:.2f} | {r['index_dtype']} | {same} |", flush=True)
        if args.ranks > 1:
            with child_environment(1):
                ranks = measure_ranks(nodes, args.ranks)
            for r in ranks:
                print(f"| {nodes:,} | gloo, rank {r['rank']} of {args.ranks} (halo "
                      f"{r['halo']:,}) | {r['nnz']:,} | {r['mib']:,.0f} | "
                      f"{r['mib'] * MIB / r['nnz']:.0f} | {r['seconds']:.2f} | torch.int32 | |",
                      flush=True)


if __name__ == '__main__':
    main()
