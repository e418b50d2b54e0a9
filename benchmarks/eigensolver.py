r"""Eigensolver benchmark: :class:`LowRankInverse`'s solvers against
``scipy.sparse.linalg.eigsh`` on the same tsGCN operator :math:`\mathbf{S}`.

Graphs: PubMed (the offline copy; alpha 1.0, beta 0.3, k 10) and a synthetic
graph of 169,000 nodes and about 2.5M edges (an SBM-like graph, beta 0), rank
64, largest algebraic eigenvalues. Every run is a fresh spawned process with a
fixed number of torch and BLAS threads (1, and all cores: what a user gets by
default); the solver call alone is timed (``S`` prebuilt, float32 CSR with
32-bit indices for both solvers: the same arrays), and its peak is the rise of
the process's resident set above the start of the call (the kernel's
high-water mark, reset first), measured the same way for both. Errors are
against ``eigsh`` in float64 with tol 1e-10: the largest eigenvalue error
and the sine of the largest principal angle between the rank-64 subspaces.
Equal accuracy: criterion A, max |Δλ| <= 1e-4; criterion B, also
sin∠ <= 1e-2 (the same subspace; where the gap λ_64 - λ_65 is tiny this asks
for residuals far below the gap).

Run from the repository root::

    python -m benchmarks.eigensolver            # about 15 min on 2 cores
    python -m benchmarks.eigensolver --quick    # PubMed only, about 2 min
    python -m benchmarks.eigensolver --device cuda --threads 16   # ours on the GPU
    python -m benchmarks.eigensolver --device cuda --cupy          # and CuPy's eigsh

Writes ``benchmarks/results/eigensolver.md`` (``--device cuda``:
``eigensolver_cuda.md``; ``--quick``: the git-ignored
``benchmarks/results/eigensolver-quick.tmp``; ``--output``: elsewhere). With
``--device cuda`` our solver runs on the GPU (its time includes a
``torch.cuda.synchronize()``, its peak is the GPU's allocation above the
start) while eigsh keeps the CPU. ``--cupy`` adds CuPy's
``cupyx.scipy.sparse.linalg.eigsh`` on the same GPU (the same float32 CSR
arrays, the same seeded ``v0``, at every ``--eigsh-tols``; its allocations go
through torch's allocator, so that its peak is measured as ours is).
"""
import argparse
import datetime
import os
import os.path as osp
import tempfile
import time
import warnings

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import torch

from harness.cli import check_writable, comma_separated, positive_float, positive_int
from harness.eigenpairs import load_eigenpairs, save_eigenpairs, sort_eigenpairs, subspace_errors
from harness.graphs import csr_to_scipy, has_pubmed, load_pubmed, scipy_to_csr, synthetic_graph
from harness.measure import PeakMeter, machine_info, run_isolated, warning_messages
from harness.report import RESULTS, Report, command_line, fmt
from torch_geometric_regcn.linalg import extreme_eigenpairs
from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator
from torch_geometric_regcn.utils.sparse import compact_csr

warnings.filterwarnings('ignore', message=r'.*sparse.*beta', category=UserWarning)

EIG_TOL, SIN_TOL = 1e-4, 1e-2
#: CuPy's eigsh would run 10 N restarts before giving up (it does not warn)
CUPY_MAXITER = 2000


def _to_cupy(mat):
    r"""The scipy CSR matrix :obj:`mat` as CuPy's, on the current GPU, with
    every CuPy allocation from then on taken from torch's caching allocator
    (so that ``torch.cuda.max_memory_allocated`` sees CuPy's peak as it sees
    ours)."""
    import cupy
    import cupyx.scipy.sparse as csp

    def through_torch(size: int):
        block = torch.empty(max(size, 1), dtype=torch.uint8, device='cuda')
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(block.data_ptr(), size, block), 0)

    cupy.cuda.set_allocator(through_torch)
    return csp.csr_matrix(mat)


def _cupy_eigsh(mat, rank: int, tol: float, v0: np.ndarray):
    r"""CuPy's thick-restart Lanczos ``eigsh`` of the CuPy matrix :obj:`mat`
    (the seeded :obj:`v0` where this CuPy takes one, else its own seeded
    start), at most :obj:`CUPY_MAXITER` restarts; returns NumPy arrays."""
    import inspect

    import cupy
    import cupyx.scipy.sparse.linalg as csla
    cupy.random.seed(0)
    start = ({'v0': cupy.asarray(v0)} if 'v0' in inspect.signature(csla.eigsh).parameters
             else {})
    vals, vecs = csla.eigsh(mat, rank, which='LA', tol=tol, maxiter=CUPY_MAXITER, **start)
    cupy.cuda.Device().synchronize()
    return cupy.asnumpy(vals), cupy.asnumpy(vecs)


def _trace(start: float):
    r"""The callback of :func:`extreme_eigenpairs` that prints each cycle's
    residual and the time since :obj:`start`, as it happens."""
    def report(cycle: int, residual: float) -> None:
        print(f'      cycle {cycle}: residual {residual:.2e}, '
              f'{time.perf_counter() - start:.2f} s', flush=True)
    return report


def solve(spec: dict) -> dict:
    r"""In a spawned process: ``spec['repeats']`` calls of one solver on the
    operator in ``spec['op_path']``, timed, with their peak memory (on a GPU,
    the allocation above the start); the eigenpairs go to
    ``spec['out_path']``."""
    mat = sp.load_npz(spec['op_path']).astype(spec['dtype'])
    rank, tol = spec['rank'], spec['tol']
    times, peaks, out = [], [], {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        device = torch.device(spec.get('device', 'cpu'))
        cuda = device.type == 'cuda' and spec['solver'] != 'eigsh'
        # 32-bit indices, as in the scipy matrix that eigsh gets
        op = (None if spec['solver'] == 'eigsh' else _to_cupy(mat) if spec['solver'] == 'cupy'
              else compact_csr(scipy_to_csr(mat)).to(device))
        for _ in range(spec['repeats']):
            meter = PeakMeter().start()
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                gpu_base = torch.cuda.memory_allocated()
            t0 = time.perf_counter()
            if spec['solver'] == 'eigsh':
                v0 = np.random.default_rng(0).standard_normal(mat.shape[0]).astype(mat.dtype)
                vals, vecs = sla.eigsh(mat, rank, which='LA', tol=tol, v0=v0)
            elif spec['solver'] == 'cupy':
                v0 = np.random.default_rng(0).standard_normal(mat.shape[0]).astype(mat.dtype)
                vals, vecs = _cupy_eigsh(op, rank, tol, v0)
            else:
                trace = _trace(t0) if spec.get('trace') else None
                pairs = extreme_eigenpairs(op, rank, 'LA', tol, spec['max_iter'],
                                           spec['solver'], callback=trace,
                                           generator=torch.Generator(device).manual_seed(0))
                if cuda:
                    torch.cuda.synchronize()
                vals = pairs.eigenvalues.double().cpu().numpy()
                vecs = pairs.eigenvectors.cpu().numpy()
                out.update(iterations=pairs.iterations, converged=pairs.converged)
            times.append(time.perf_counter() - t0)
            peaks.append((torch.cuda.max_memory_allocated() - gpu_base) / 2**20 if cuda
                         else meter.stop())
    out['warnings'] = warning_messages(caught)
    save_eigenpairs(spec['out_path'], *sort_eigenpairs(np.asarray(vals, dtype=np.float64),
                                                       vecs, 'LA'))
    out.update(time=min(times), median=float(np.median(times)), peak_mib=max(peaks))
    return out


def build_operators(args, tmp):
    r"""The operators S of PubMed (when its files are there) and, unless
    ``--quick``, of the synthetic graph, written to :obj:`tmp`: {name: (path,
    a note for the report)}."""
    ops = {}
    if has_pubmed():
        t0 = time.perf_counter()
        data = load_pubmed()
        op = tsgcn_operator(data, 1.0, 0.3, 10)
        ops['PubMed'] = (op, f'alpha 1.0, beta 0.3, k 10; S built in '
                             f'{time.perf_counter() - t0:.1f} s')
    else:
        print('PubMed is not in the offline copy (harness.data.SHARED_DATA): skipped')
    if not args.quick:
        n = args.synthetic_nodes
        data = synthetic_graph(n, avg_degree=args.synthetic_degree)
        op = tsgcn_operator(data, 1.0, 0.0, 10)
        ops[f'Synthetic {n // 1000}k'] = (
            op, f'{data.edge_index.size(1):,} random edges (SBM-like, 256 communities), '
                'alpha 1.0, beta 0')
    paths = {}
    for name, (op, note) in ops.items():
        path = osp.join(tmp, f'{name.replace(" ", "_")}.npz')
        sp.save_npz(path, csr_to_scipy(op))
        paths[name] = (path, note)
    return paths


def run_graph(rep, args, name, path, note, tmp):
    r"""The reference, every solver at every thread count and the verdicts
    on one graph."""
    mat = sp.load_npz(path)
    rank = args.rank
    repeats = 1 if name.startswith('Synthetic') else args.repeats
    runs = []

    def run(label, threads, **spec):
        spec.setdefault('repeats', repeats)
        spec.update(op_path=path, rank=spec.get('rank', rank),
                    out_path=osp.join(tmp, f'{name.replace(" ", "_")}-{len(runs)}'))
        spec.setdefault('dtype', 'float32')
        print(f'  [{name}] {label}, {threads} thread(s) ...', flush=True)
        res = run_isolated(threads, solve, spec)
        res.update(label=label, threads=threads, spec=spec)
        print(f'    {res.get("time", float("nan")):.2f} s {res.get("error", "")}', flush=True)
        runs.append(res)
        return res

    # the reference's time is not compared: all the threads asked for
    ref = run('reference (eigsh float64, tol 1e-10)', args.threads[-1], solver='eigsh', tol=1e-10,
              dtype='float64', rank=rank + 1, repeats=1)
    if 'error' in ref:
        rep(f'**{name}**: the reference failed ({ref["error"]}); skipped.\n')
        return
    ref_vals, ref_vecs = load_eigenpairs(ref['spec']['out_path'])
    for threads in args.threads:
        for tol in args.eigsh_tols:
            run(f'eigsh tol={tol:g}', threads, solver='eigsh', tol=tol)
        on = '' if args.device == 'cpu' else f', {args.device}'
        # on a GPU the first solve also pays for CUDA's start-up: time the second
        again = {'repeats': max(repeats, 2)} if args.device != 'cpu' else {}
        for tol in args.ours_tols:
            run(f'ours lanczos tol={tol:g}' + (' (default)' if tol == 1e-4 else '') + on,
                threads, solver='lanczos', tol=tol, max_iter=100, device=args.device,
                trace=args.trace, **again)
        if args.cupy and threads == args.threads[-1]:  # the GPU's: once
            for tol in args.eigsh_tols:
                run(f'cupy eigsh tol={tol:g}, {args.device}', threads, solver='cupy', tol=tol,
                    device=args.device, **again)
        if args.chebyshev and not name.startswith('Synthetic'):
            run(f'ours chebyshev subspace iteration tol=1e-4{on}', threads,
                solver='chebyshev', tol=1e-4, max_iter=100, device=args.device, **again)

    gap = ref_vals[rank - 1] - ref_vals[rank]
    rep(f'**{name}**: N = {mat.shape[0]:,}, nnz(S) = {mat.nnz:,}, {note}; rank {rank}, '
        f'λ_1 = {ref_vals[0]:.6f}, λ_r = {ref_vals[rank - 1]:.6f}, '
        f'gap λ_r - λ_(r+1) = {gap:.2e}; reference {ref["time"]:.1f} s.')
    rep()
    rows = []
    for res in runs[1:]:
        if 'error' in res:
            rows.append([res['label'], res['threads'], 'FAILED: ' + res['error']] + ['-'] * 7)
            continue
        vals, vecs = load_eigenpairs(res['spec']['out_path'])
        res['eig_err'] = float(np.abs(vals[:rank] - ref_vals[:rank]).max())
        res['sin'], _ = subspace_errors(ref_vecs[:, :rank], vecs[:, :rank])
        res['equal'] = res['eig_err'] <= EIG_TOL and res['sin'] <= SIN_TOL
        cycles = res.get('iterations', '-')
        if res.get('converged') is False:  # stopped at max_iter: a time of max_iter cycles
            cycles = f'{cycles} (not converged)'
        rows.append([res['label'], res['threads'], fmt(res['time'], '.2f'),
                     fmt(res['median'], '.2f'), fmt(res['peak_mib'], '.0f'),
                     fmt(res['eig_err'], '.1e'), fmt(res['sin'], '.1e'),
                     cycles, 'yes' if res['equal'] else 'no',
                     '; '.join(res.get('warnings', []))[:90] or '-'])
    rep.table(['solver', 'threads', 'time (s, min)', 'median (s)', 'peak Δ (MiB)',
               'max |Δλ|', 'sin ∠max', 'cycles', 'meets B', 'warnings'], rows)
    criteria = {'A (max |Δλ| <= 1e-4)': lambda r: r['eig_err'] <= EIG_TOL,
                'B (max |Δλ| <= 1e-4 and sin∠ <= 1e-2)': lambda r: r['equal']}
    for threads in args.threads:
        same = [r for r in runs[1:] if r['threads'] == threads and 'error' not in r]
        ours = next((r for r in same if r['spec']['solver'] == 'lanczos'
                     and r['spec']['tol'] == 1e-4), None)
        if ours is None:
            rep(f'- {threads} thread(s): no comparison (our run failed)')
            continue
        for peer, label in (('eigsh', 'eigsh'), ('cupy', 'CuPy eigsh')):
            runs_of = [r for r in same if r['spec']['solver'] == peer]
            if not runs_of:
                continue
            for name, meets in criteria.items():
                good = [r for r in runs_of if meets(r)]
                verdict = 'meets' if meets(ours) else 'does NOT meet'
                if not good:
                    rep(f'- {threads} thread(s), criterion {name}: ours {ours["time"]:.2f} s '
                        f'({verdict} it); no {label} run in the sweep meets it')
                    continue
                best = min(good, key=lambda r: r['time'])
                rep(f'- {threads} thread(s), criterion {name}: ours {ours["time"]:.2f} s '
                    f'({verdict} it) vs the fastest {label} that meets it ({best["label"]}, '
                    f'{best["time"]:.2f} s): **{label} / ours = '
                    f'{best["time"] / ours["time"]:.2f}×**')
            if (peer == 'cupy') != (args.device != 'cpu'):
                continue  # a GPU's allocation against a CPU process's resident set: not compared
            peak = max(r['peak_mib'] for r in runs_of)
            rep(f'- {threads} thread(s), memory: ours {ours["peak_mib"]:.0f} MiB vs {label} '
                f'{peak:.0f} MiB (the largest of its runs): **ours / {label} = '
                f'{ours["peak_mib"] / peak:.2f}×**')
    rep()


def main(argv=None):
    p = argparse.ArgumentParser(prog='python -m benchmarks.eigensolver',
                               description=__doc__.split('\n\n')[0])
    p.add_argument('--quick', action='store_true', help='PubMed only, fewer runs')
    p.add_argument('--rank', type=positive_int, default=64)
    p.add_argument('--threads', type=comma_separated(positive_int), default=f'1,{os.cpu_count()}')
    p.add_argument('--repeats', type=positive_int, default=3, help='timed repeats on PubMed (min)')
    p.add_argument('--eigsh-tols', type=comma_separated(positive_float), default='1e-3,1e-4,1e-5')
    p.add_argument('--ours-tols', type=comma_separated(positive_float), default='1e-4')
    p.add_argument('--synthetic-nodes', type=positive_int, default=169_000)
    p.add_argument('--synthetic-degree', type=positive_int, default=30,
                   help='average degree: 169k nodes x 30 / 2 = 2.5M edges')
    p.add_argument('--no-chebyshev', dest='chebyshev', action='store_false',
                   help='leave out the subspace-iteration rows')
    p.add_argument('--device', default='cpu', help="where our solver runs (eigsh: the CPU)")
    p.add_argument('--trace', action='store_true',
                   help="print each cycle's residual and time of our solver as it runs")
    p.add_argument('--cupy', action='store_true',
                   help="also CuPy's eigsh on --device (a CUDA device)")
    p.add_argument('--output', default=None,
                   help='markdown output (default: benchmarks/results/eigensolver.md, '
                        'eigensolver_<device>.md, or eigensolver-quick.tmp with --quick)')
    args = p.parse_args(argv)
    args.threads = sorted(set(args.threads))
    if args.cupy and torch.device(args.device).type != 'cuda':
        p.error('--cupy needs --device cuda (CuPy runs on a CUDA device)')
    if args.quick:
        args.repeats, args.threads = 1, args.threads[:1]

    suffix = '' if args.device == 'cpu' else f'_{torch.device(args.device).type}'
    out = args.output or osp.join(RESULTS, 'eigensolver-quick.tmp' if args.quick
                                  else f'eigensolver{suffix}.md')
    check_writable(p, '--output', out, create=True)  # written at the end
    rep = Report()
    info = machine_info(args.threads)
    rep('# Eigensolver benchmark: LowRankInverse vs scipy eigsh')
    rep()
    rep(f'Command (from the repository root): `{command_line("benchmarks.eigensolver", argv)}`')
    rep()
    there = "our solver and CuPy's eigsh run" if args.cupy else 'our solver runs'
    gpu = (f" GPU: {torch.cuda.get_device_name(args.device)} ({there} there; scipy's eigsh on "
           "the CPU)." if args.device != 'cpu' else '')
    rep(f"Machine: {info['cpu']}, {info['cpu_count']} CPUs, {info['ram_gib']:.1f} GiB RAM.{gpu} "
        f"Python {info['python']}, torch {info['torch']}, scipy {info['scipy']}, numpy "
        f"{info['numpy']}. Load average at start: {info['load']}. Date: "
        f"{datetime.date.today()}.")
    rep()
    rep(__doc__.split('\n\n')[1].replace('\n', ' '))
    rep()
    if args.device != 'cpu':
        rep(f"On the GPU the peak of the rows marked {args.device} is the GPU's allocation above "
            "the start of the call, for ours and CuPy's alike (CuPy allocating through torch); "
            "the eigsh rows' is the resident set of their CPU process, not comparable with it.")
        rep()
    rep('Ours: `extreme_eigenpairs(S, 64, "LA", tol, method=...)` as `LowRankInverse` calls '
        'it (`lanczos`: Chebyshev-filtered thick-restart block Lanczos, the default; '
        '`chebyshev`: the previous default, filtered subspace iteration). eigsh: '
        'which="LA", default ncv, a seeded v0. Times are the minimum over the repeats '
        f'({args.repeats} on PubMed, 1 on the synthetic graph), median beside it.')
    rep()
    with tempfile.TemporaryDirectory(prefix='eigensolver-') as tmp:
        for name, (path, note) in build_operators(args, tmp).items():
            run_graph(rep, args, name, path, note, tmp)
            rep.write(out)  # after each graph: a run stopped later keeps this one
    print(f'written to {out}')


if __name__ == '__main__':
    main()
