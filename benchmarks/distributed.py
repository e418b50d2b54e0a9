r"""The row-sharded tsGCN pipeline on 1, 2 and 3 processes of one machine.

A contextual SBM of ``--nodes`` nodes (default 2,000,000) with ``nodes *
degree / 2`` directed edges (default 20M: ``--degree 20``), ``--features``
features (default 64) and 5 classes, generated shard by shard
(``contextual_sbm_shard``: the same graph for any number of processes), goes
through the tsGCN pipeline on P gloo processes (one torch thread each, started
by ``torch.multiprocessing`` spawn), each stage started together by a barrier
and timed on every rank (wall time: the slowest rank), with every rank's peak
resident memory (the kernel's high-water mark reset at the start of the stage)
and the bytes it sent through the library's collectives (``traffic_stage``):

1. the shard (``contextual_sbm_shard``);
2. the semantic graph: ``SemanticGraph(10, group=)`` (``method="auto"`` picks
   the IVF search above 50,000 nodes on CPU), or with ``--semantic
   surrogate`` random same-class neighbours of the same size, for graphs whose
   kNN search would not fit the time (``--knn-nodes`` then times the kNN
   search alone at a smaller size);
3. the operator ``S`` (``tsgcn_adjacency`` on this rank's ``GraphOperators``, alpha 1.0,
   beta 0.3);
4. the rank ``--rank`` eigenpairs of ``S`` (``extreme_eigenpairs``, filtered
   block Lanczos, tol 1e-4, at most ``--max-iter`` cycles, then
   ``factors_from_eigenpairs``): the public calls ``LowRankInverse(group=)``
   makes after the semantic graph, each Lanczos cycle timed through the
   solver's ``callback``;
5. ``--epochs`` full-batch epochs of the paper's 2-layer tsGCN (hidden 32,
   Adam) under DistributedDataParallel with ``global_mean``.

The single process runs with one thread (the reference ``T1`` of the
scaling efficiency ``T1 / (P * TP)``) and, unless ``--baseline-threads`` is 0,
again with that many threads (the best one process can do on a 2-core
machine). Every run uses the same
sharded code (a one-rank gloo group for one process).

Run from the repository root::

    # the results file: 2M nodes, surrogate semantic graph, 2 Lanczos cycles,
    # and the kNN search alone at 200,000 nodes (about 45 min on 2 CPU cores)
    python -m benchmarks.distributed --semantic surrogate --max-iter 2 --knn-nodes 200000
    python -m benchmarks.distributed --nodes 200000     # every stage in full, 13 min

Writes ``benchmarks/results/distributed.md`` (other sizes:
``distributed-<nodes>.tmp``; ``--output``: elsewhere). What runs on each rank
is in ``benchmarks/distributed_pipeline.py``; this module plans the runs and
renders the report, also again from the raw measurements a run saved
(``--from-raw``).
"""
import argparse
import json
import os
import os.path as osp
import statistics
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks.distributed_pipeline import CLASSES, STAGES, K, run_pipeline
from harness.cli import check_writable, non_negative_int, positive_float, positive_int
from harness.measure import MIB, load_average
from harness.report import RESULTS, Report


def _mib(x: float) -> str:
    return f'{x / MIB:,.1f}' if x >= 0.05 * MIB else f'{x / MIB:.3f}'


Run = Tuple[str, int, int, List[Dict[str, Any]]]  # label, processes, threads, ranks


def _measure(plan: Sequence[Tuple[int, int]], config: Dict[str, Any],
             stages: Sequence[str]) -> List[Run]:
    r"""Runs the pipeline for each (processes, threads) of :obj:`plan`."""
    runs = []
    for procs, threads in plan:
        label = f'{procs} proc' + ('s' if procs > 1 else '') + f' x {threads} thr'
        print(f'\n== {config["nodes"]:,} nodes, {label} (load average {load_average()})',
              flush=True)
        t0 = time.perf_counter()
        ranks = run_pipeline(procs, threads, config)
        print(f'   done in {time.perf_counter() - t0:.0f} s', flush=True)
        if 'error' in ranks[0]:
            print(ranks[0]['error'], flush=True)
        else:
            for name in stages:
                peaks = ' / '.join(f'{r["stages"][name]["peak"]:,.0f}' for r in ranks)
                print(f'   {name}: {_wall(ranks, name):.1f} s, peak {peaks} MiB', flush=True)
        runs.append((label, procs, threads, ranks))
    return runs


def _wall(ranks: Sequence[Dict[str, Any]], stage: str) -> float:
    return max(r['stages'][stage]['time'] for r in ranks)


def _epoch_ms(ranks: Sequence[Dict[str, Any]]) -> float:
    return 1e3 * max(statistics.median(r['info']['epochs']) for r in ranks)


class _Runs:
    r"""The successful runs of one section and their reference runs."""

    def __init__(self, runs: List[Run], threads: int) -> None:
        self.good = [r for r in runs if 'error' not in r[3][0]]
        self.failed = [r for r in runs if 'error' in r[3][0]]
        self.reference = next((r for r in self.good if r[1] == 1 and r[2] == threads), None)
        self.baseline = next((r for r in self.good if r[1] == 1 and r[2] != threads), None)
        self.multi = [r for r in self.good if r[1] > 1]

    def times(self, stage: str) -> List[float]:
        if stage == 'total':
            return [sum(_wall(r[3], s) for s in r[3][0]['stages']) for r in self.good]
        if stage.startswith('ms'):
            return [_epoch_ms(r[3]) for r in self.good]
        return [_wall(r[3], stage) for r in self.good]

    def efficiency(self, stage: str, run: Run) -> float:
        times = dict(zip([r[0] for r in self.good], self.times(stage)))
        return times[self.reference[0]] / (run[1] * times[run[0]])

    def speedup(self, stage: str, run: Run) -> float:
        times = dict(zip([r[0] for r in self.good], self.times(stage)))
        return times[self.baseline[0]] / times[run[0]]


def _report_failures(rep: Report, runs: _Runs) -> None:
    for label, _, _, ranks in runs.failed:
        rep(f'**{label} failed:** `{ranks[0]["error"].splitlines()[0]}`')
        rep()


def _time_table(rep: Report, runs: _Runs, stages: Sequence[str]) -> None:
    header = ['stage'] + [r[0] for r in runs.good]
    if runs.reference is not None:
        header += [f'efficiency {r[0]}' for r in runs.multi]
    if runs.baseline is not None:
        header += [f'speed-up {r[0]} vs {runs.baseline[0]}' for r in runs.multi]
    rows = []
    for stage in stages:
        row = [stage] + [f'{t:,.1f}' for t in runs.times(stage)]
        if runs.reference is not None:
            row += [f'{runs.efficiency(stage, r):.2f}' for r in runs.multi]
        if runs.baseline is not None:
            row += [f'{runs.speedup(stage, r):.2f}' for r in runs.multi]
        rows.append(row)
    rep.table(header, rows)


def _memory_table(rep: Report, runs: _Runs, stages: Sequence[str]) -> None:
    rows = [[stage] + [' / '.join(f'{x["stages"][stage]["peak"]:,.0f} '
                                  f'({x["stages"][stage]["delta"]:,.0f})' for x in r[3])
                       for r in runs.good] for stage in stages]
    rows.append(['largest of the run'] + [
        ' / '.join(f'{max(x["stages"][s]["peak"] for s in stages):,.0f}' for x in r[3])
        for r in runs.good])
    rep.table(['stage'] + [r[0] for r in runs.good], rows)


def _traffic_table(rep: Report, runs: _Runs, stages: Sequence[str]) -> None:
    if runs.multi:
        rows = [[stage] + [' / '.join(_mib(x['stages'][stage]['sent']) for x in r[3])
                           for r in runs.multi] for stage in stages]
        rep.table(['stage'] + [r[0] for r in runs.multi], rows)


TIME_TEXT = ('Wall time in seconds (the slowest rank; the ranks start each stage together) '
             'and the scaling efficiency T1 / (P · TP) against one process with {t} '
             'thread(s){b}:')


def time_text(args, runs: _Runs) -> str:
    r""":data:`TIME_TEXT` for a run, naming its extra one-process run where it ran."""
    extra = (f', and the speed-up against one process with {runs.baseline[2]} threads'
             if runs.baseline is not None else '')
    return TIME_TEXT.format(t=args.threads, b=extra)


MEMORY_TEXT = ('Peak resident memory of each rank during each stage, in MiB (rank 0 / rank 1 '
               '/ ...; the whole process, its kernel high-water mark reset at the start of the '
               'stage), and in brackets its rise above the start of the stage:')
TRAFFIC_TEXT = ("MiB sent by each rank through the library's collectives (`traffic_stage`, "
                '`TRAFFIC`: halo exchanges, all-to-alls, all-reduces, all-gathers, ring '
                'passes){extra}:')


def _pipeline_section(rep: Report, runs: _Runs, args: argparse.Namespace,
                      degree: float) -> None:
    info = runs.good[0][3][0]['info']
    first = runs.good[0][3]
    edges = sum(r['info']['edges'] for r in first)
    semantic = sum(r['info']['semantic_edges'] for r in first)
    nnz = sum(r['info']['nnz'] for r in first)
    rep(f'Graph: {args.nodes:,} nodes, {edges:,} directed edges (degree {degree:g} once '
        f'symmetrised), {args.features} float32 features, {CLASSES} classes (homophily 0.8); '
        f'semantic graph {semantic:,} directed edges; nnz(S) = {nnz:,}; factors W, V: '
        f'{args.nodes:,} x {args.rank}. Training: 5 % of the nodes labelled, '
        f'{info["parameters"]:,} parameters.')
    rep()
    if args.semantic == 'surrogate':
        rep('**The semantic stage is a surrogate here** (`--semantic surrogate`): on these '
            '64-dimensional, noise-dominated features the IVF search, tuned for a recall of '
            '0.95, probes a large share of its cells, so its time grows nearly as the exact '
            f"search's N²; at {args.nodes:,} nodes it would take longer than this whole "
            'benchmark on this machine (see the semantic kNN section and the reading). Each '
            f'node instead gets Poisson({K}) random neighbours of its own class '
            '(`contextual_sbm_shard(..., num_features=1, avg_degree=20, homophily=1, '
            'seed=1)`, the same for any P), one-way, symmetrised by the operator: about as '
            'many entries of S per row as the kNN graph (17.3 per node at 200,000 nodes, '
            'against about 20 here), and the same halo (every remote node), so the operator, '
            'Lanczos and training stages cost what they would with the kNN graph.')
        rep()
    if args.max_iter < 100:
        rep(f'**Lanczos is cut at `--max-iter {args.max_iter}` filtered cycles** (not run to '
            f'tol 1e-4): enough for the per-cycle cost, which the capacity plan needs, not '
            f'for the cycles to convergence; the factors trained on are those the cycles '
            f'reached.')
        rep()
    stages = list(STAGES)
    rep(time_text(args, runs))
    rep()
    _time_table(rep, runs, stages + ['total', 'ms per epoch (median)'])
    rep(MEMORY_TEXT)
    rep()
    _memory_table(rep, runs, stages)
    rep(TRAFFIC_TEXT.format(extra=f"; DistributedDataParallel's own gradient all-reduce is "
                                  f"not counted: {info['parameters']:,} float32 gradients, "
                                  f"{info['parameters'] * 4 / 1024:.1f} KiB per epoch"))
    rep()
    _traffic_table(rep, runs, stages)

    rep('The operator S on each rank (rank 0 / rank 1 / ...): rows, stored entries, and '
        'halo nodes (`ShardedMatrix.plan.halo.numel()`: the rows of other ranks that each '
        'sparse product fetches):')
    rep()
    rows = []
    for label, procs, _, ranks in runs.good:
        if procs == 1 and runs.reference is not None and label != runs.reference[0]:
            continue
        rows.append([procs, ' / '.join(f'{x["info"]["rows"]:,}' for x in ranks),
                     ' / '.join(f'{x["info"]["nnz"]:,}' for x in ranks),
                     ' / '.join(f'{x["info"]["halo"]:,}' for x in ranks),
                     ' / '.join(f'{x["info"]["halo"] / x["info"]["rows"]:.2f}' for x in ranks)])
    rep.table(['processes', 'rows', 'nnz', 'halo', 'halo / rows'], rows)

    rep('Lanczos cycles (`callback` of `extreme_eigenpairs`): the first, plain cycle that '
        'locates the spectrum (a basis of '
        f'{2 * args.rank + 8 * min(args.rank, 16)} columns grown 16 at a time, one sparse '
        'product per block), then the filtered cycles (degree-8 Chebyshev filter: 8 '
        'products per block): the first grows the whole basis, each later one restarts '
        'from the kept Ritz vectors and grows the rest, so the later cycles are the '
        'steady cost per cycle. Seconds on rank 0, MiB sent by the busiest rank (the '
        'one-process runs send nothing):')
    rep()
    rows = []
    for label, procs, _, ranks in runs.good:
        marks = ranks[0]['info']['cycles']
        times = [b[1] - a[1] for a, b in zip(marks, marks[1:])]
        sent = [max(x['info']['cycles'][i + 1][2] - x['info']['cycles'][i][2] for x in ranks)
                for i in range(len(marks) - 1)]
        locate = max(x['info']['cycles'][0][2] for x in ranks) if marks else 0

        def mib(value: float, procs: int = procs) -> str:
            return _mib(value) if procs > 1 else '-'

        x0 = ranks[0]['info']
        rows.append([label, f'{marks[0][1]:,.1f}' if marks else '-', mib(locate),
                     f'{times[0]:,.1f}' if times else '-', mib(sent[0]) if sent else '-',
                     ', '.join(f'{t:,.1f}' for t in times[1:]) or '-',
                     ', '.join(mib(b) for b in sent[1:]) or '-',
                     f'{x0["residual"]:.1e}' + ('' if x0['converged'] else ' (not converged)'),
                     f'{x0["eigenvalues"][0]:.5f} .. {x0["eigenvalues"][1]:.5f}'])
    rep.table(['run', 'locating (s)', 'locating (MiB)', 'filtered cycle 1 (s)',
               'cycle 1 (MiB)', 'later cycles (s each)', 'later cycles (MiB each)',
               'residual', 'eigenvalues found'], rows)

    rows = [[r[0]] + [f'{x:.4f}' for x in r[3][0]['info']['losses']] for r in runs.good]
    rep('Training loss per epoch (`global_mean` over all ranks; the same graph and initial '
        'weights in every run, so the runs agree up to the rounding of the eigenvectors):')
    rep()
    rep.table(['run'] + [f'epoch {i + 1}' for i in range(args.epochs)], rows)


def _knn_section(rep: Report, runs: _Runs, args: argparse.Namespace) -> None:
    first = runs.good[0][3]
    semantic = sum(r['info']['semantic_edges'] for r in first)
    rep(f'## The semantic kNN graph at {args.knn_nodes:,} nodes')
    rep()
    rep(f'The same generator at {args.knn_nodes:,} nodes (degree and features as above), '
        f'then `SemanticGraph({K}, group=)` with `method="auto"` (IVF above 50,000 nodes: '
        f'k-means sample and probe tuning as one process, the feature blocks passed around '
        f'the ring of ranks): {semantic:,} directed edges.')
    rep()
    stages = ['shard generation', 'semantic graph']
    rep(time_text(args, runs))
    rep()
    _time_table(rep, runs, stages)
    rep(MEMORY_TEXT)
    rep()
    _memory_table(rep, runs, stages)
    rep(TRAFFIC_TEXT.format(extra=''))
    rep()
    _traffic_table(rep, runs, stages)


def _reading(rep: Report, main: _Runs, knn: Optional[_Runs], surrogate: bool) -> None:
    rep('## Reading')
    rep()
    rep('This machine has 2 cores, so no run can be more than twice as fast as one process '
        'with one thread: the scaling efficiency T1 / (P · TP) is at most 1 for 2 processes '
        'and at most 2/3 for 3 (three single-threaded ranks share two cores)'
        + (', and the speed-up over the best single process (2 threads) is bounded near 1 '
           'wherever two threads already use both cores' if main.baseline is not None else '')
        + '. What sharding is for, more memory than one machine '
        'has, shows in the memory table instead: the state of each rank (its rows of x, '
        'the edges, S and the Lanczos basis) should fall about as 1/P, above a floor of '
        'about 0.3 GiB per process (Python, torch, the gloo buffers), while the halo of S '
        'grows with P.')
    rep()
    if main.reference is None or not main.good:
        return
    def cycles(run: Run) -> List[Tuple[float, float]]:
        # (seconds on rank 0, MiB of the busiest rank) of each filtered cycle
        marks = [x['info']['cycles'] for x in run[3]]
        return [(marks[0][i + 1][1] - marks[0][i][1],
                 max(m[i + 1][2] - m[i][2] for m in marks) / MIB)
                for i in range(len(marks[0]) - 1)]

    peak1 = max(x['stages'][s]['peak'] for x in main.reference[3] for s in STAGES)
    parts = []
    for run in main.multi:
        peakp = max(x['stages'][s]['peak'] for x in run[3] for s in STAGES)
        steady = cycles(run)[1:] or cycles(run)
        parts.append(f'{run[1]} processes: total efficiency {main.efficiency("total", run):.2f}'
                     f' (Lanczos {main.efficiency("Lanczos eigenpairs", run):.2f}, operator '
                     f'{main.efficiency("operator S", run):.2f}, training '
                     f'{main.efficiency("training epochs", run):.2f}), largest rank '
                     f'{peakp / 1024:.1f} GiB against {peak1 / 1024:.1f} GiB for one process '
                     f'({peakp / peak1:.2f}x)' + (
                         f', a restarted Lanczos cycle {steady[-1][0]:,.1f} s and '
                         f'{steady[-1][1]:,.0f} MiB sent per rank' if steady else ''))
    if parts:
        rep('Measured: ' + '; '.join(parts) + '.')
        rep()
    ref = cycles(main.reference)
    if len(ref) > 1 and main.multi:
        halo = main.multi[0][3][0]['info']
        rep(f'The steady Lanczos cost, the capacity plan\'s input, is the restarted cycle: '
            f'{ref[-1][0]:,.1f} s for one process with one thread (the first filtered cycle, '
            f'which grows the whole basis, {ref[0][0]:,.1f} s). Its traffic is nearly all halo '
            f'exchange: this random graph has no locality, so the halo of S holds every node '
            f'of the other ranks ({halo["halo"]:,} of {halo["rows"]:,} rows at P = '
            f'{main.multi[0][1]}) and each block product sends a rank\'s whole block to every '
            f'other rank, (P - 1) / P · N · 16 · 4 bytes; the bytes per rank therefore grow '
            f'with P while its memory falls. A partition that follows communities (METIS, '
            f'`partition(method="metis")`) shrinks the halo on graphs that have them.')
        rep()
    if main.baseline is not None:
        rep(f'One process with {main.baseline[2]} threads takes '
            f'{main.times("total")[main.good.index(main.baseline)]:,.0f} s in all against '
            f'{main.times("total")[main.good.index(main.reference)]:,.0f} s with one; '
            + '; '.join(f'{r[0]}: {main.times("total")[main.good.index(r)]:,.0f} s' for r in
                        main.multi) + '.')
        rep()
    if knn is not None and knn.reference is not None:
        n, big = knn.good[0][3][0]['info']['rows'], main.good[0][3][0]['info']['rows']
        t1 = knn.times('semantic graph')[knn.good.index(knn.reference)]
        rep(f'Semantic kNN at {n:,} nodes: {t1:,.0f} s for one process with one thread; '
            + '; '.join(f'{r[1]} processes efficiency {knn.efficiency("semantic graph", r):.2f}'
                        for r in knn.multi)
            + f'. With √N cells and a steady share of them probed, the IVF search does '
              f'N^1.5 to N² work: at {big:,} nodes one process with one thread would need '
              f'{t1 * (big / n) ** 1.5 / 60:,.0f} to {t1 * (big / n) ** 2 / 60:,.0f} min'
              + (', which is why the pipeline above uses the surrogate.' if surrogate
                 else '.'))
        rep()


def main(argv: Optional[Sequence[str]] = None) -> None:
    p = argparse.ArgumentParser(prog='python -m benchmarks.distributed',
                                description=__doc__.split('\n\n')[0])
    p.add_argument('--nodes', type=positive_int, default=2_000_000)
    edges = p.add_mutually_exclusive_group()
    edges.add_argument('--degree', type=positive_float, default=None,
                       help='expected degree once symmetrised: nodes * degree / 2 directed '
                            'edges (default 20)')
    edges.add_argument('--edges', type=positive_int, default=None,
                       help='directed edges (sets the degree to 2 * edges / nodes)')
    p.add_argument('--procs', type=positive_int, nargs='+', default=[1, 2, 3])
    p.add_argument('--features', type=positive_int, default=64)
    p.add_argument('--rank', type=positive_int, default=64)
    p.add_argument('--epochs', type=positive_int, default=5)
    p.add_argument('--max-iter', type=positive_int, default=100,
                   help='filtered Lanczos cycles at most (fewer: the per-cycle cost only)')
    p.add_argument('--semantic', choices=('knn', 'surrogate'), default='knn',
                   help='the semantic graph: SemanticGraph, or random same-class neighbours')
    p.add_argument('--knn-nodes', type=non_negative_int, default=0,
                   help='also time the semantic kNN graph alone at this many nodes')
    p.add_argument('--threads', type=positive_int, default=1, help='torch threads per process')
    p.add_argument('--baseline-threads', type=non_negative_int, default=2,
                   help='threads of the extra one-process run (0: none)')
    p.add_argument('--timeout', type=positive_float, default=3600.0, help='seconds per run at most')
    p.add_argument('--output', default=None)
    p.add_argument('--from-raw', default=None,
                   help='render the report from the raw measurements a run saved '
                        '(<output>.raw.tmp) instead of measuring')
    args = p.parse_args(argv)
    saved = None
    if args.from_raw:
        if not osp.isfile(args.from_raw):
            p.error(f'--from-raw {args.from_raw}: no such file (a run saves its raw '
                    'measurements as <output>.raw.tmp)')
        with open(args.from_raw) as f:
            saved = json.load(f)
        output, args = args.output, p.parse_args(saved['argv'])
        args.output = output
    degree = (2 * args.edges / args.nodes if args.edges is not None
              else 20.0 if args.degree is None else args.degree)
    out = args.output or osp.join(RESULTS, 'distributed.md' if args.nodes == 2_000_000
                                  else f'distributed-{args.nodes}.tmp')
    check_writable(p, '--output', out, create=True)  # before hours of measurements
    plan = [(n, args.threads) for n in args.procs]
    if 1 in args.procs and args.baseline_threads and args.baseline_threads != args.threads:
        plan.insert(args.procs.index(1) + 1, (1, args.baseline_threads))
    config = {'nodes': args.nodes, 'degree': degree, 'features': args.features,
              'rank': args.rank, 'epochs': args.epochs, 'max_iter': args.max_iter,
              'semantic': args.semantic, 'upto': None, 'timeout': args.timeout}

    if saved is None:
        t_start = time.perf_counter()
        header = Report()
        header.header(f'Row-sharded tsGCN at {args.nodes:,} nodes on 1 to {max(args.procs)} '
                      f'processes of one machine', 'benchmarks.distributed', argv,
                      args.threads)
        main_runs = _measure(plan, config, STAGES)
        knn_runs = None
        if args.knn_nodes:
            knn_config = {**config, 'nodes': args.knn_nodes, 'semantic': 'knn',
                          'upto': 'semantic graph'}
            knn_runs = _measure(plan, knn_config, STAGES[:2])
        finish = (f'Total wall time {(time.perf_counter() - t_start) / 60:.1f} min; load '
                  f'average at the end: {load_average()}.')
        saved = {'argv': list(sys.argv[1:] if argv is None else argv),
                 'header': header.lines, 'finish': finish, 'main': main_runs,
                 'knn': knn_runs}
        raw = (out[:-3] if out.endswith('.md') else out) + '.raw.tmp'
        os.makedirs(osp.dirname(osp.abspath(raw)), exist_ok=True)
        with open(raw, 'w') as f:  # every measurement, to render the report again
            json.dump(saved, f)
        print(f'raw measurements in {raw} (--from-raw renders the report from them)')

    rep = Report()
    for line in saved['header']:
        rep(line)
    rep(' '.join(' '.join(__doc__.split('\n\n')[1:4]).split()))
    rep()
    main_runs = _Runs(saved['main'], args.threads)
    knn_runs = None if saved['knn'] is None else _Runs(saved['knn'], args.threads)
    rep(f'## The pipeline at {args.nodes:,} nodes')
    rep()
    _report_failures(rep, main_runs)
    if main_runs.good:
        _pipeline_section(rep, main_runs, args, degree)
    if knn_runs is not None:
        _report_failures(rep, knn_runs)
        if knn_runs.good:
            _knn_section(rep, knn_runs, args)
    _reading(rep, main_runs, knn_runs, args.semantic == 'surrogate')
    rep(saved['finish'])
    rep.write(out)
    print(f'\nWritten to {out}')


if __name__ == '__main__':
    main()
