r"""Laplacian eigenvector positional encodings: :class:`LaplacianEigenPE`
against PyG's ``AddLaplacianEigenvectorPE``, time and success.

Graphs: PubMed (the offline copy), the synthetic graph of 169,000 nodes of
``benchmarks/eigensolver.py`` (``harness.graphs.synthetic_graph``, made
undirected: about 5M directed edges), and 20 random disconnected graphs of a
few thousand nodes (seeds 0-19; the table gives each N): 2 to 6 large pieces
(random sparse graphs, grids, paths and trees of 200 to 1,500 nodes), 0 to 30
small ones (2 to 30 nodes) and 1-3 % isolated nodes, shuffled. k = 16 everywhere. Every method
runs in a fresh spawned process with a pinned number of torch and BLAS
threads and a time limit per graph (``--limit``, ``--limit-large`` on the 169k
graph; the same for both methods); a call that raises or runs out of time is
a failure, with its error. A call that returns succeeds when its k columns are
orthonormal (max |UᵀU - I| <= 1e-3), each is an eigenvector
(max ||Lu - ρu|| <= 1e-3, ρ its Rayleigh quotient) and the Rayleigh quotients,
sorted, are the reference eigenvalues λ_1..λ_k (max |Δ| <= 1e-4). The
reference: float64 ``eigsh`` (tol 1e-10, or 1e-8 on the 169k graph) of PyG's
own Laplacian on the connected graphs, dense ``eigvalsh`` of each connected
component on the disconnected ones. PyG runs with ``is_undirected=False`` (its
default, ``eigs``) and ``True`` (``eigsh``); on the 169k graph only with
``True`` unless ``--pyg-default-large``. "Same twice": a second call returns
the identical encoding (PyG draws random signs).

Run from the repository root::

    python -m benchmarks.eigen_pe              # about 10 min on 2 cores
    python -m benchmarks.eigen_pe --quick      # PubMed and 5 disconnected graphs

Writes ``benchmarks/results/eigen_pe.md`` (``--quick``: the git-ignored
``benchmarks/results/eigen_pe-quick.tmp``; ``--output``: elsewhere).
"""
import argparse
import os.path as osp
import signal
import statistics
import time
import warnings
from contextlib import contextmanager
from typing import Dict, Iterator, List, Tuple

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as sla
import torch
from scipy.sparse.csgraph import connected_components
from torch_geometric.data import Data
from torch_geometric.transforms import AddLaplacianEigenvectorPE
from torch_geometric.utils import get_laplacian, to_scipy_sparse_matrix, to_undirected

from harness.graphs import has_pubmed, load_pubmed, synthetic_graph
from harness.measure import run_isolated, warning_messages
from harness.report import RESULTS, Report, fmt
from torch_geometric_regcn import LaplacianEigenPE

K = 16
ORTH_TOL, RES_TOL, EIG_TOL = 1e-3, 1e-3, 1e-4
METHODS = ('ours', 'pyg-default', 'pyg-undirected')
LABELS = {'ours': 'LaplacianEigenPE (ours)',
          'pyg-default': 'PyG AddLaplacianEigenvectorPE (is_undirected=False)',
          'pyg-undirected': 'PyG AddLaplacianEigenvectorPE (is_undirected=True)'}


# The graphs ---------------------------------------------------------------------------------

def _piece(kind: str, size: int, rng: np.random.Generator) -> np.ndarray:
    r"""The edges [2, E] of one connected piece of :obj:`size` nodes."""
    if size == 2:
        return np.array([[0], [1]])
    if kind == 'path':
        return np.stack([np.arange(size - 1), np.arange(1, size)])
    if kind == 'tree':  # random recursive tree
        child = np.arange(1, size)
        return np.stack([(rng.random(size - 1) * child).astype(np.int64), child])
    if kind == 'grid':
        width = max(2, int(np.sqrt(size)))
        node = np.arange(size)
        right = node[(node % width != width - 1) & (node + 1 < size)]
        down = node[node + width < size]
        return np.concatenate([np.stack([right, right + 1]), np.stack([down, down + width])], 1)
    ring = np.arange(size)  # 'sparse': a ring and about one random chord per node
    chords = rng.integers(0, size, (2, size))
    return np.concatenate([np.stack([ring, (ring + 1) % size]), chords], axis=1)


def disconnected_graph(seed: int) -> Data:
    r"""A random disconnected graph (see the module's docstring); the same
    seed gives the same graph."""
    rng = np.random.default_rng(seed)
    sizes = list(rng.integers(200, 1501, rng.integers(2, 7)))
    kinds = list(rng.choice(['sparse', 'grid', 'path', 'tree'], len(sizes)))
    small = int(rng.integers(0, 31))
    sizes += list(rng.integers(2, 31, small))
    kinds += list(rng.choice(['sparse', 'tree', 'path'], small))
    nodes = int(sum(sizes))
    isolated = max(1, int(rng.uniform(0.01, 0.03) * nodes))
    parts, offset = [], 0
    for kind, size in zip(kinds, sizes):
        parts.append(_piece(kind, int(size), rng) + offset)
        offset += int(size)
    n = offset + isolated
    perm = rng.permutation(n)
    edge_index = torch.from_numpy(perm[np.concatenate(parts, axis=1)])
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    return Data(edge_index=to_undirected(edge_index, num_nodes=n), num_nodes=n)


def large_graph(nodes: int, degree: int) -> Data:
    r"""The synthetic graph of ``benchmarks/eigensolver.py``, made undirected."""
    data = synthetic_graph(nodes, avg_degree=degree)
    return Data(edge_index=to_undirected(data.edge_index, num_nodes=nodes), num_nodes=nodes)


def graphs(spec: dict) -> Iterator[Tuple[str, Data]]:
    r"""The graphs of one family, built where they are used."""
    if spec['family'] == 'pubmed':
        data = load_pubmed()
        yield 'PubMed', Data(edge_index=data.edge_index, num_nodes=data.num_nodes)
    elif spec['family'] == 'large':
        yield f"Synthetic {spec['nodes'] // 1000}k", large_graph(spec['nodes'], spec['degree'])
    else:
        for seed in spec['seeds']:
            yield f'disconnected seed {seed}', disconnected_graph(seed)


def laplacian(data: Data) -> sp.csr_matrix:
    r"""PyG's symmetric normalised Laplacian, in float64."""
    index, value = get_laplacian(data.edge_index, normalization='sym', dtype=torch.float64,
                                 num_nodes=data.num_nodes)
    return to_scipy_sparse_matrix(index, value, data.num_nodes).tocsr()


# In the spawned processes -------------------------------------------------------------------

@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    r"""Raises :class:`TimeoutError` in the block after :obj:`seconds` (ARPACK
    and the Lanczos iterations return to Python between products, where the
    signal is handled)."""
    def expire(*_):
        raise TimeoutError(f'no result within the time limit of {seconds:.0f} s')
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def reference(spec: dict) -> Dict[str, dict]:
    r"""The reference eigenvalues λ_0..λ_(k+1) of each graph of a family and its
    structure (nodes, edges, components, isolated nodes, zero eigenvalues)."""
    out = {}
    for name, data in graphs(spec):
        lap = laplacian(data)
        count, label = connected_components(lap, directed=False)
        sizes = np.bincount(label)
        t0 = time.perf_counter()
        if spec['family'] == 'disconnected':
            values = [np.ones(int((sizes == 1).sum()))]
            for comp in np.flatnonzero(sizes > 1):
                nodes = np.flatnonzero(label == comp)
                values.append(np.linalg.eigvalsh(lap[nodes][:, nodes].toarray()))
            values = np.sort(np.concatenate(values))[:K + 2]
        else:
            v0 = np.random.default_rng(0).standard_normal(data.num_nodes)
            values = np.sort(sla.eigsh(lap, K + 2, which='SA', tol=spec['tol'], v0=v0)[0])
        out[name] = dict(values=values, nodes=data.num_nodes, edges=data.edge_index.size(1) // 2,
                         components=int(count), isolated=int((sizes == 1).sum()),
                         zeros=int((sizes > 1).sum()), time=time.perf_counter() - t0)
    return out


def _transform(method: str):
    if method == 'ours':
        return LaplacianEigenPE(K)
    return AddLaplacianEigenvectorPE(K, is_undirected=method == 'pyg-undirected')


def measure(spec: dict) -> List[dict]:
    r"""In a spawned process: one method on each graph of a family, timed
    (best of ``spec['repeats']`` calls), within the time limit; the quality of
    the encoding (Rayleigh quotients, residual, orthonormality) and whether a
    second call returns the same."""
    warnings.filterwarnings('ignore', message=r'.*[Ss]parse.*')
    results = []
    for name, data in graphs(spec):
        entry = {'graph': name}
        transform = _transform(spec['method'])
        times, outputs = [], []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            try:
                for _ in range(spec['repeats']):
                    with time_limit(spec['limit']):
                        t0 = time.perf_counter()
                        out = transform(data.clone())
                        times.append(time.perf_counter() - t0)
                    outputs.append(out.laplacian_eigenvector_pe)
            except Exception as error:  # noqa: BLE001 - a failure is a result here
                entry['error'] = f'{type(error).__name__}: {error}'.split('\n')[0][:160]
        entry['warnings'] = warning_messages(caught)
        if 'error' not in entry:
            pe = outputs[0].double().numpy()
            lap = laplacian(data)
            image = lap @ pe
            rayleigh = np.einsum('ij,ij->j', pe, image) / np.einsum('ij,ij->j', pe, pe)
            entry.update(
                time=min(times), shape=list(pe.shape), finite=bool(np.isfinite(pe).all()),
                rayleigh=np.sort(rayleigh),
                residual=float(np.linalg.norm(image - pe * rayleigh, axis=0).max()),
                orthogonality=float(np.abs(pe.T @ pe - np.eye(pe.shape[1])).max()),
                same=(all(torch.equal(o, outputs[0]) for o in outputs) if len(outputs) > 1
                      else None))
        results.append(entry)
        print(f"    {spec['method']} {name}: "
              f"{fmt(entry.get('time'), '.2f')} s {entry.get('error', '')}", flush=True)
    return results


# The report ---------------------------------------------------------------------------------

def verdict(entry: dict, ref: dict) -> Tuple[bool, str]:
    r"""Whether a call succeeded, and why not."""
    if 'error' in entry:
        return False, entry['error']
    if entry['shape'] != [ref['nodes'], K] or not entry['finite']:
        return False, f"shape {entry['shape']}, finite {entry['finite']}"
    eig_err = float(np.abs(entry['rayleigh'] - ref['values'][1:K + 1]).max())
    entry['eig_err'] = eig_err
    problems = []
    if entry['orthogonality'] > ORTH_TOL:
        problems.append(f"not orthonormal (max |UᵀU - I| = {entry['orthogonality']:.1e})")
    if entry['residual'] > RES_TOL:
        problems.append(f"not eigenvectors (max residual {entry['residual']:.1e})")
    if eig_err > EIG_TOL:
        problems.append(f'wrong eigenvalues (max |Δλ| = {eig_err:.1e})')
    return not problems, '; '.join(problems)


def same_twice(entries: List[dict]) -> str:
    r"""'yes' when every repeated call returned the identical encoding, 'n/a'
    without a second call."""
    checked = [e['same'] for e in entries if e.get('same') is not None]
    if not checked:
        return 'n/a'
    return 'yes' if all(checked) else f'no ({checked.count(False)}/{len(checked)} differ)'


def run_family(rep: Report, args, family: str, spec: dict, methods: List[str]) -> None:
    r"""The reference and every method on one family of graphs, and its tables."""
    spec = dict(spec, family=family)
    print(f'[{family}] reference ...', flush=True)
    refs = run_isolated(1, reference, spec)
    if 'error' in refs:
        rep(f'**{family}**: the reference failed ({refs["error"]}); skipped.')
        rep()
        return
    results = {}
    for method in methods:
        print(f'[{family}] {LABELS[method]} ...', flush=True)
        res = run_isolated(args.threads, measure, dict(spec, method=method))
        if isinstance(res, dict):  # the process died
            res = [{'graph': name, 'error': res['error']} for name in refs]
        results[method] = res
    summary = []
    for method in methods:
        ok, times, failures = 0, [], []
        for entry in results[method]:
            good, why = verdict(entry, refs[entry['graph']])
            entry['ok'], entry['why'] = good, why
            ok += good
            if 'time' in entry:
                times.append(entry['time'])
            if not good:
                failures.append(f"{entry['graph']}: {why}")
        total = len(results[method])
        median = statistics.median(times) if times else None
        summary.append([LABELS[method], f'{ok}/{total}', fmt(median, '.3f'),
                        fmt(max(times) if times else None, '.3f'),
                        fmt(sum(times) if times else None, '.2f'),
                        same_twice(results[method]),
                        '; '.join(failures[:3]) + (f' (+{len(failures) - 3} more)'
                                                   if len(failures) > 3 else '') or '-'])
    rep.table(['method', 'success', 'time per graph (s, median)', 'max (s)', 'total (s)',
               'same twice', 'failures'], summary)
    if family != 'disconnected':
        name = next(iter(refs))
        ref = refs[name]
        gap = ref['values'][K + 1] - ref['values'][K]
        rep(f"{name}: N = {ref['nodes']:,}, {ref['edges']:,} undirected edges, "
            f"{ref['components']} component(s); λ_1 = {ref['values'][1]:.6f}, "
            f"λ_{K} = {ref['values'][K]:.6f}, gap λ_{K + 1} - λ_{K} = {gap:.2e}; reference "
            f"(float64 eigsh, tol {spec['tol']:g}) {ref['time']:.1f} s.")
        rep()
        rows = []
        for method in methods:
            entry = results[method][0]
            rows.append([LABELS[method], fmt(entry.get('time'), '.3f'),
                         fmt(entry.get('eig_err'), '.1e'), fmt(entry.get('residual'), '.1e'),
                         fmt(entry.get('orthogonality'), '.1e'),
                         'ok' if entry['ok'] else 'FAILED: ' + entry['why']])
        rep.table(['method', 'time (s)', 'max |Δλ|', 'max residual', 'max |UᵀU - I|',
                   'result'], rows)
        return
    rows = []
    for index, name in enumerate(refs):
        ref = refs[name]
        row = [name.split()[-1], ref['nodes'], ref['components'], ref['isolated'],
               ref['zeros']]
        for method in methods:
            entry = results[method][index]
            cell = fmt(entry.get('time'), '.3f')
            row.append(cell + (' ok' if entry['ok'] else ' **failed**: ' + entry['why']))
        rows.append(row)
    rep('Per graph (time in s; "zeros": the multiplicity of the eigenvalue 0, one per '
        'component with an edge; with 17 or more, the encoding is a basis of the kernel):')
    rep()
    rep.table(['seed', 'N', 'components', 'isolated', 'zeros'] + [LABELS[m] for m in methods],
              rows)


def main(argv=None):
    p = argparse.ArgumentParser(prog='python -m benchmarks.eigen_pe',
                                description=__doc__.split('\n\n')[0])
    p.add_argument('--quick', action='store_true',
                   help='PubMed and 5 disconnected graphs, no 169k graph')
    p.add_argument('--threads', type=int, default=1, help='torch/BLAS threads per process')
    p.add_argument('--graphs', type=int, default=20, help='random disconnected graphs')
    p.add_argument('--repeats', type=int, default=3, help='timed calls on PubMed (best)')
    p.add_argument('--limit', type=float, default=120.0,
                   help='seconds per call on PubMed and the disconnected graphs')
    p.add_argument('--limit-large', type=float, default=300.0,
                   help='seconds per call on the 169k graph')
    p.add_argument('--synthetic-nodes', type=int, default=169_000)
    p.add_argument('--synthetic-degree', type=int, default=30)
    p.add_argument('--pyg-default-large', action='store_true',
                   help="also run PyG's is_undirected=False (eigs) on the 169k graph")
    p.add_argument('--output', default=None,
                   help='markdown output (default: benchmarks/results/eigen_pe.md, or '
                        'eigen_pe-quick.tmp with --quick)')
    args = p.parse_args(argv)
    if args.quick:
        args.graphs = min(args.graphs, 5)
    out = args.output or osp.join(RESULTS, 'eigen_pe-quick.tmp' if args.quick else
                                  'eigen_pe.md')
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rep = Report()
    rep.header(f'Laplacian eigenvector PE: LaplacianEigenPE vs PyG (k = {K})',
               'benchmarks.eigen_pe', argv, args.threads, quick=args.quick)
    rep(' '.join(__doc__.split('\n\n')[1].split()))
    rep()
    rep('Ours: `LaplacianEigenPE(16)` with its defaults (block Lanczos per connected '
        'component, float64, tol 1e-6, seed 0). PyG: `AddLaplacianEigenvectorPE(16, '
        'is_undirected=...)` with its defaults (ARPACK on the float32 Laplacian, dense '
        'below 100 nodes).')
    rep()
    if has_pubmed():
        rep('## PubMed')
        rep()
        run_family(rep, args, 'pubmed', dict(repeats=args.repeats, limit=args.limit,
                                             tol=1e-10), list(METHODS))
    else:
        rep('PubMed is not in the offline copy (harness.data.SHARED_DATA): skipped.')
        rep()
    if not args.quick:
        rep(f'## Synthetic {args.synthetic_nodes // 1000}k')
        rep()
        methods = list(METHODS) if args.pyg_default_large else ['ours', 'pyg-undirected']
        if not args.pyg_default_large:
            rep("PyG's default `is_undirected=False` (`eigs`, Arnoldi on the whole graph) is "
                'not run here (`--pyg-default-large` adds it); one call per method.')
            rep()
        run_family(rep, args, 'large', dict(repeats=1, limit=args.limit_large, tol=1e-8,
                                            nodes=args.synthetic_nodes,
                                            degree=args.synthetic_degree), methods)
    rep(f'## {args.graphs} random disconnected graphs')
    rep()
    run_family(rep, args, 'disconnected', dict(repeats=2, limit=args.limit,
                                               seeds=list(range(args.graphs))), list(METHODS))
    rep.finish(start, out)


if __name__ == '__main__':
    main()
