r"""METIS against contiguous blocks: the halo, the bytes and the time of the
row-sharded Lanczos eigensolver on 2 and 3 processes of one machine.

Each graph is partitioned in this process by ``partition(data, P, method)``
(``"contiguous"``: the node order cut into equal blocks; ``"metis"``: METIS
through pymetis, ``pip install torch_geometric_regcn[metis]``, timed), the
shards written by ``save_partition`` and read back by P spawned gloo processes
(one torch thread each), which build the operator ``S`` (``tsgcn_adjacency``
of their ``GraphOperators``, alpha 1.0, beta 0.3, the semantic graph given)
and record its halo (``ShardedMatrix.plan.halo``: the rows of other ranks
that each sparse product fetches), the time and the bytes sent of one block
product of 16 float32 columns (the median of 5), and, on graphs up to
``--lanczos-max-nodes`` nodes, the cycles of the rank ``--rank`` filtered block
Lanczos (``extreme_eigenpairs``, tol 1e-4, at most ``--max-iter`` filtered
cycles, default 1; seconds and bytes per cycle through the solver's
``callback``).
Bytes and halo are deterministic; the times depend on the machine's load.

Graphs: PubMed (19,717 nodes, the citation graph and the cosine kNN graph of
its features, k = 10, as ``SemanticGraph`` builds it) and synthetic graphs
with community structure (``harness.graphs.synthetic_graph``: 256 communities
of uneven sizes, a share ``--inside`` of the edges inside a community (0.8 and 0.98),
``--degree`` 20 once symmetrised; a semantic surrogate of Poisson(10) random
neighbours per node in its own community, as ``benchmarks.distributed``
uses), the node order shuffled so that contiguous blocks have no locality.

Run from the repository root::

    python -m benchmarks.partition_locality            # writes results/partition.md

``--nodes`` sets the sizes of the synthetic graphs (default 500,000 and
2,000,000: Lanczos on the first only, ``--lanczos-max-nodes``).
"""
import argparse
import os.path as osp
import statistics
import tempfile
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence

import torch

from benchmarks.distributed_pipeline import ALPHA, BETA, K, run_pipeline
from harness.cli import check_writable, non_negative_int, positive_float, positive_int
from harness.measure import MIB, load_average
from harness.report import RESULTS, Report

BLOCK, PRODUCTS = 16, 5  # columns of a block product, products timed


def _mib(x: float) -> str:
    return f'{x / MIB:,.1f}' if x >= 0.05 * MIB else f'{x / MIB:.3f}'


def pubmed() -> Any:
    from harness.graphs import load_pubmed
    from torch_geometric_regcn import SemanticGraph
    data = load_pubmed()
    data = SemanticGraph(K, progress=False)(data)
    return data


def communities(nodes: int, degree: float, inside: float, seed: int = 0) -> Any:
    r"""``synthetic_graph`` with a semantic surrogate in the same communities,
    node order shuffled (the same graph for every P and method)."""
    from torch_geometric.data import Data

    from harness.graphs import synthetic_graph
    data = synthetic_graph(nodes, avg_degree=int(degree), p_in=inside, features=1, seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    # the communities of synthetic_graph are contiguous runs of nodes (the sizes its
    # generator draws first): the surrogate's neighbours are drawn in a node's own run
    sizes = _community_sizes(nodes, seed)
    first = sizes.cumsum(0) - sizes
    owner = torch.repeat_interleave(torch.arange(sizes.numel()), sizes)
    src = torch.arange(nodes).repeat_interleave(
        torch.poisson(torch.full((nodes,), float(K)), generator=gen).long())
    c = owner[src]
    dst = first[c] + (torch.rand(src.numel(), generator=gen) * sizes[c]).long()
    perm = torch.randperm(nodes, generator=gen)  # node i becomes perm[i]
    semantic = perm[torch.stack([src, dst])]
    return Data(edge_index=perm[data.edge_index], semantic_edge_index=semantic, num_nodes=nodes)


def _community_sizes(nodes: int, seed: int, blocks: int = 256) -> torch.Tensor:
    r"""The community sizes ``synthetic_graph`` draws first from its generator."""
    g = torch.Generator().manual_seed(seed)
    blocks = min(blocks, nodes)
    sizes = torch.rand(blocks, generator=g).square() + 0.05
    sizes = (sizes / sizes.sum() * nodes).long().clamp_min(1)
    sizes[-1] += nodes - sizes.sum()
    return sizes


def _on_rank(rank: int, world_size: int, args: Dict[str, Any]) -> Dict[str, Any]:
    import torch.distributed as dist

    from benchmarks.distributed_pipeline import _CycleClock
    from torch_geometric_regcn.distributed import load_partition, traffic, traffic_stage
    from torch_geometric_regcn.linalg.eigensolver import extreme_eigenpairs
    from torch_geometric_regcn.regularizers import GraphOperators, tsgcn_adjacency
    warnings.filterwarnings('ignore', message=r'.*[Ss]parse.*beta')
    warnings.filterwarnings('ignore', message=r'Block Lanczos stopped after')
    group = dist.group.WORLD
    shard = load_partition(args['root'], rank, world_size)
    part = shard.partition
    dist.barrier()
    start = time.perf_counter()
    graph = GraphOperators(part.num_nodes, shard.edge_index, dtype=torch.float32,
                           semantic_edge_index=shard.semantic_edge_index, partition=part,
                           group=group)
    operator = tsgcn_adjacency(graph, ALPHA, BETA)
    out = {'rows': part.num_local, 'nnz': operator.local._nnz(),
           'halo': operator.plan.halo.numel(), 'operator_s': time.perf_counter() - start}
    del graph
    block = torch.randn(part.num_local, BLOCK, generator=torch.Generator().manual_seed(rank))
    times = []
    with traffic_stage('product'):
        for _ in range(PRODUCTS):
            dist.barrier()
            start = time.perf_counter()
            operator @ block
            times.append(time.perf_counter() - start)
    out['product_s'] = statistics.median(times)
    out['product_bytes'] = traffic('product') / PRODUCTS
    if args['lanczos']:
        clock = _CycleClock('lanczos')
        dist.barrier()
        with traffic_stage('lanczos'):
            clock.start = time.perf_counter()
            pairs = extreme_eigenpairs(operator, args['rank'], 'LA', 1e-4, args['max_iter'],
                                       'lanczos', generator=torch.Generator().manual_seed(0),
                                       callback=clock)
        out['cycles'] = clock.marks
        out['eigenvalues'] = (float(pairs.eigenvalues.min()), float(pairs.eigenvalues.max()))
    return out


def _measure(name: str, data: Any, procs: Sequence[int], args: argparse.Namespace,
             lanczos: bool) -> List[Dict[str, Any]]:
    from torch_geometric_regcn.distributed import partition, save_partition
    rows = []
    for parts in procs:
        for method in ('contiguous', 'metis'):
            start = time.perf_counter()
            shards = partition(data, parts, method=method)
            seconds = time.perf_counter() - start
            with tempfile.TemporaryDirectory(prefix='regcn-partition-') as root:
                save_partition(shards, root)
                del shards
                print(f'== {name}, P = {parts}, {method} (partition {seconds:.1f} s, load '
                      f'{load_average()})', flush=True)
                config = {'root': root, 'rank': args.rank, 'max_iter': args.max_iter,
                          'lanczos': lanczos, 'timeout': args.timeout}
                ranks = run_pipeline(parts, 1, config, fn=_on_rank)
            if 'error' in ranks[0]:
                print(ranks[0]['error'], flush=True)
            else:
                print('   halo / rows ' + ' / '.join(f'{r["halo"] / r["rows"]:.3f}'
                                                      for r in ranks), flush=True)
            rows.append({'graph': name, 'P': parts, 'method': method,
                         'partition_s': seconds, 'ranks': ranks})
    return rows


def _cycles(ranks: List[Dict[str, Any]]) -> List[tuple]:
    r"""(seconds on rank 0, bytes of the busiest rank) of each cycle: the
    locating one, then the filtered ones."""
    marks = [r['cycles'] for r in ranks]
    out = [(marks[0][0][1], max(m[0][2] for m in marks))]
    for i in range(len(marks[0]) - 1):
        out.append((marks[0][i + 1][1] - marks[0][i][1],
                    max(m[i + 1][2] - m[i][2] for m in marks)))
    return out


def _report(rep: Report, results: List[Dict[str, Any]]) -> None:
    rep('Per run (P processes x 1 thread): the halo of each rank over its rows, the '
        'bytes one block product of 16 float32 columns sends from the busiest rank and its '
        'time (the median of 5; the slowest rank), and the time of `partition()` in this '
        'process (METIS included):')
    rep()
    table = []
    for row in results:
        ranks = row['ranks']
        if 'error' in ranks[0]:
            table.append([row['graph'], row['P'], row['method'], 'failed: '
                          + ranks[0]['error'].splitlines()[0], '', '', '', ''])
            continue
        table.append([row['graph'], row['P'], row['method'],
                      ' / '.join(f'{r["halo"] / r["rows"]:.3f}' for r in ranks),
                      ' / '.join(f'{r["nnz"]:,}' for r in ranks),
                      _mib(max(r['product_bytes'] for r in ranks)),
                      f'{1e3 * max(r["product_s"] for r in ranks):,.1f}',
                      f'{row["partition_s"]:.1f}'])
    rep.table(['graph', 'P', 'partition', 'halo / rows (each rank)', 'nnz of S (each rank)',
               'MiB per block product', 'ms per block product', 'partition() s'], table)
    lanczos = [row for row in results if 'cycles' in row['ranks'][0]]
    if lanczos:
        rep('Lanczos (`extreme_eigenpairs`, filtered block Lanczos): the plain cycle that '
            'locates the spectrum, the first filtered cycle (grows the whole basis) and the '
            'restarted ones (the steady cost per cycle); seconds on rank 0 and MiB sent by '
            'the busiest rank:')
        rep()
        table = []
        for row in lanczos:
            cyc = _cycles(row['ranks'])
            later = cyc[2:]
            table.append([row['graph'], row['P'], row['method'],
                          f'{cyc[0][0]:,.1f}', _mib(cyc[0][1]),
                          f'{cyc[1][0]:,.1f}' if len(cyc) > 1 else '-',
                          _mib(cyc[1][1]) if len(cyc) > 1 else '-',
                          ', '.join(f'{t:,.1f}' for t, _ in later) or '-',
                          ', '.join(_mib(b) for _, b in later) or '-'])
        rep.table(['graph', 'P', 'partition', 'locating (s)', 'locating (MiB)',
                   'filtered 1 (s)', 'filtered 1 (MiB)', 'restarted (s each)',
                   'restarted (MiB each)'], table)
    rep('METIS against contiguous blocks, each ratio in the same run (halo: the largest '
        'rank; bytes and time per block product, and per first filtered Lanczos cycle, which '
        'grows the whole basis, where measured):')
    rep()
    table = []
    keyed = {(r['graph'], r['P'], r['method']): r['ranks'] for r in results
             if 'error' not in r['ranks'][0]}
    for (graph, parts, method), ranks in keyed.items():
        if method != 'metis' or (graph, parts, 'contiguous') not in keyed:
            continue
        base = keyed[(graph, parts, 'contiguous')]

        def worst(rs: List[Dict[str, Any]], key: str) -> float:
            return max(r[key] for r in rs)
        halo = max(r['halo'] / r['rows'] for r in ranks)
        halo0 = max(r['halo'] / r['rows'] for r in base)
        cells = [graph, parts, f'{halo0:.3f} -> {halo:.3f}',
                 f'{worst(ranks, "product_bytes") / worst(base, "product_bytes"):.3f}',
                 f'{worst(ranks, "product_s") / worst(base, "product_s"):.2f}']
        if 'cycles' in ranks[0] and len(_cycles(ranks)) > 1 and len(_cycles(base)) > 1:
            cyc, cyc0 = _cycles(ranks)[1], _cycles(base)[1]
            cells += [f'{_mib(cyc0[1])} -> {_mib(cyc[1])} ({cyc[1] / cyc0[1]:.3f})',
                      f'{cyc0[0]:,.1f} -> {cyc[0]:,.1f} ({cyc[0] / cyc0[0]:.2f})']
        else:
            cells += ['-', '-']
        table.append(cells)
    rep.table(['graph', 'P', 'halo / rows (largest rank)', 'bytes per product (ratio)',
               'time per product (ratio)', 'MiB per filtered cycle 1 (ratio)',
               's per filtered cycle 1 (ratio)'], table)


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(prog='python -m benchmarks.partition_locality',
                                description=__doc__.split('\n\n')[0])
    p.add_argument('--graphs', nargs='+', default=['pubmed', 'communities'],
                   choices=('pubmed', 'communities'))
    p.add_argument('--nodes', type=positive_int, nargs='+', default=[500_000, 2_000_000])
    p.add_argument('--degree', type=positive_float, default=20.0)
    p.add_argument('--inside', type=float, nargs='+', default=[0.8, 0.98],
                   help="shares of a synthetic graph's edges inside a community")
    p.add_argument('--procs', type=positive_int, nargs='+', default=[2, 3])
    p.add_argument('--rank', type=positive_int, default=64)
    p.add_argument('--max-iter', type=positive_int, default=1)
    p.add_argument('--lanczos-max-nodes', type=non_negative_int, default=500_000)
    p.add_argument('--timeout', type=positive_float, default=3600.0)
    p.add_argument('--output', default=osp.join(RESULTS, 'partition.md'))
    args = p.parse_args(argv)
    if min(args.procs) < 2:  # one process: no halo, no bytes, nothing to compare
        p.error(f'--procs: each must be at least 2 (got {args.procs}): with one process '
                'there is no halo and METIS and contiguous blocks are the same partition')
    if not all(0 <= inside <= 1 for inside in args.inside):
        p.error(f'--inside: each share must lie in [0, 1] (got {args.inside})')
    check_writable(p, '--output', args.output, create=True)  # written at the end
    t_start = time.perf_counter()
    rep = Report()
    rep.header('Partitions with locality: METIS against contiguous blocks',
               'benchmarks.partition_locality', argv, 1, isolated=None)
    rep(' '.join(' '.join(__doc__.split('\n\n')[1:3]).split()))
    rep()
    results = []
    if 'pubmed' in args.graphs:
        results += _measure('PubMed', pubmed(), args.procs, args, True)
    if 'communities' in args.graphs:
        for nodes in args.nodes:
            for inside in args.inside:
                data = communities(nodes, args.degree, inside)
                name = f'communities {nodes:,} (inside {inside:g})'
                results += _measure(name, data, args.procs, args,
                                    nodes <= args.lanczos_max_nodes)
                del data
    _report(rep, results)
    rep.finish(t_start, args.output)


if __name__ == '__main__':
    main()
