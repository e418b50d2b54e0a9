r"""Laplacian eigenvector positional encodings: :class:`LaplacianEigenPE`
against PyG's ``AddLaplacianEigenvectorPE``, time and success.

Graphs: 500 random molecule-like graphs of 10 to 38 nodes (a ZINC-like set:
random trees of degree at most 4 with 0 to 3 ring closures of 5 or 6 atoms,
seed 0; k = 8), PubMed (the offline copy), the synthetic graph of 169,000
nodes of ``benchmarks/eigensolver.py`` (``harness.graphs.synthetic_graph``,
made undirected: about 5M directed edges), and 20 random disconnected graphs
of a few thousand nodes (seeds 0-19; the table gives each N): 2 to 6 large
pieces (random sparse graphs, grids, paths and trees of 200 to 1,500 nodes), 0
to 30 small ones (2 to 30 nodes) and 1-3 % isolated nodes, shuffled. k = 16
except on the molecules. Every method runs in a fresh spawned process with a
pinned number of torch and BLAS threads and a time limit per graph
(``--limit``, ``--limit-large`` on the 169k graph; the same for both methods);
a call that raises or runs out of time is a failure, with its error. A call
that returns succeeds when its k columns are orthonormal (max |UᵀU - I| <=
1e-3), each is an eigenvector (max ||Lu - ρu|| <= 1e-3, ρ its Rayleigh
quotient) and the Rayleigh quotients, sorted, are the reference eigenvalues
λ_1..λ_k (max |Δ| <= 1e-4). The reference: float64 ``eigsh`` (tol 1e-10, or
1e-8 on the 169k graph) of PyG's own Laplacian on PubMed and the 169k graph,
dense ``eigvalsh`` of each connected component on the molecules and the
disconnected graphs. PyG runs with ``is_undirected=False`` (its default,
``eigs``) and ``True`` (``eigsh``); on the 169k graph only with ``True``
unless ``--pyg-default-large``. "Same twice": a second call returns the
identical encoding (PyG draws random signs).

Run from the repository root::

    python -m benchmarks.eigen_pe              # about 10 min on 2 cores
    python -m benchmarks.eigen_pe --quick      # molecules, PubMed, 5 disconnected graphs
    python -m benchmarks.eigen_pe --families molecules pubmed --output /tmp/pe.md

Writes ``benchmarks/results/eigen_pe.md`` (with ``--device cuda``:
``eigen_pe_cuda.md``; ``--quick``: the git-ignored
``benchmarks/results/eigen_pe-quick.tmp``; ``--output``: elsewhere), after
each family of graphs, so a run stopped later keeps the families it finished.
"""
import argparse
import copy
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

from harness.cli import check_writable, positive_float, positive_int
from harness.graphs import has_pubmed, load_pubmed, synthetic_graph
from harness.measure import run_isolated, warning_messages
from harness.report import RESULTS, Report, fmt
from torch_geometric_regcn import LaplacianEigenPE

K = 16
#: The molecule-like set: graphs, node range, k.
MOLECULES, MOLECULE_NODES, MOLECULE_K = 500, (10, 38), 8
FAMILIES = ('molecules', 'pubmed', 'large', 'disconnected')
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


def molecule_graph(rng: np.random.Generator) -> Data:
    r"""A random molecule-like graph: a random tree of
    :obj:`MOLECULE_NODES` nodes whose degrees stay at most 4 (valence),
    plus 0 to 3 ring closures, each an edge between two nodes 4 or 5 tree
    steps apart (a ring of 5 or 6 atoms) that both have a free valence."""
    n = int(rng.integers(MOLECULE_NODES[0], MOLECULE_NODES[1] + 1))
    degree = np.zeros(n, dtype=np.int64)
    parent = np.full(n, -1)
    for node in range(1, n):
        free = np.flatnonzero(degree[:node] < 4)
        parent[node] = free[rng.integers(free.size)]
        degree[parent[node]] += 1
        degree[node] += 1
    edges = [(int(parent[v]), v) for v in range(1, n)]
    depth = np.zeros(n, dtype=np.int64)
    for node in range(1, n):
        depth[node] = depth[parent[node]] + 1

    def distance(a: int, b: int) -> int:
        steps = 0
        while a != b:
            if depth[a] < depth[b]:
                a, b = b, a
            a, steps = parent[a], steps + 1
        return steps

    for _ in range(int(rng.integers(0, 4))):
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n)
                 if degree[a] < 4 and degree[b] < 4 and distance(a, b) in (4, 5)]
        if not pairs:
            break
        a, b = pairs[rng.integers(len(pairs))]
        edges.append((a, b))
        degree[a] += 1
        degree[b] += 1
    edge_index = torch.tensor(edges, dtype=torch.long).T
    return Data(edge_index=to_undirected(edge_index, num_nodes=n), num_nodes=n)


def large_graph(nodes: int, degree: int) -> Data:
    r"""The synthetic graph of ``benchmarks/eigensolver.py``, made undirected."""
    data = synthetic_graph(nodes, avg_degree=degree)
    return Data(edge_index=to_undirected(data.edge_index, num_nodes=nodes), num_nodes=nodes)


def graphs(spec: dict) -> Iterator[Tuple[str, Data]]:
    r"""The graphs of one family, built where they are used."""
    if spec['family'] == 'molecules':
        rng = np.random.default_rng(0)
        for index in range(spec['count']):
            yield f'molecule {index}', molecule_graph(rng)
    elif spec['family'] == 'pubmed':
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
    out, k = {}, spec['k']
    for name, data in graphs(spec):
        lap = laplacian(data)
        count, label = connected_components(lap, directed=False)
        sizes = np.bincount(label)
        t0 = time.perf_counter()
        if spec['family'] in ('disconnected', 'molecules'):
            values = [np.ones(int((sizes == 1).sum()))]
            for comp in np.flatnonzero(sizes > 1):
                nodes = np.flatnonzero(label == comp)
                values.append(np.linalg.eigvalsh(lap[nodes][:, nodes].toarray()))
            values = np.sort(np.concatenate(values))[:k + 2]
        else:
            v0 = np.random.default_rng(0).standard_normal(data.num_nodes)
            values = np.sort(sla.eigsh(lap, k + 2, which='SA', tol=spec['tol'], v0=v0)[0])
        out[name] = dict(values=values, k=k, nodes=data.num_nodes,
                         edges=data.edge_index.size(1) // 2,
                         components=int(count), isolated=int((sizes == 1).sum()),
                         zeros=int((sizes > 1).sum()), time=time.perf_counter() - t0)
    return out


def _transform(method: str, k: int):
    if method == 'ours':
        return LaplacianEigenPE(k)
    return AddLaplacianEigenvectorPE(k, is_undirected=method == 'pyg-undirected')


def measure(spec: dict) -> List[dict]:
    r"""In a spawned process: one method on each graph of a family, timed
    (best of ``spec['repeats']`` calls), within the time limit; the quality of
    the encoding (Rayleigh quotients, residual, orthonormality) and whether a
    second call returns the same."""
    warnings.filterwarnings('ignore', message=r'.*[Ss]parse.*')
    results = []
    for name, data in graphs(spec):
        entry = {'graph': name}
        transform = _transform(spec['method'], spec['k'])
        # ours on --device (the graph moved there untimed, as a GPU pipeline holds it);
        # PyG's on the CPU: it computes with scipy
        device = torch.device(spec['device'] if spec['method'] == 'ours' else 'cpu')
        source = copy.copy(data).to(device)  # Data.to moves in place: keep data on the CPU
        times, outputs = [], []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            try:
                for _ in range(spec['repeats']):
                    with time_limit(spec['limit']):
                        t0 = time.perf_counter()
                        out = transform(source.clone())
                        if device.type == 'cuda':
                            torch.cuda.synchronize(device)
                        times.append(time.perf_counter() - t0)
                    outputs.append(out.laplacian_eigenvector_pe.cpu())
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
        if spec['family'] == 'molecules' and 'error' not in entry:
            continue  # 500 lines of under a millisecond
        print(f"    {spec['method']} {name}: "
              f"{fmt(entry.get('time'), '.2f')} s {entry.get('error', '')}", flush=True)
    return results


# The report ---------------------------------------------------------------------------------

def verdict(entry: dict, ref: dict) -> Tuple[bool, str]:
    r"""Whether a call succeeded, and why not."""
    if 'error' in entry:
        return False, entry['error']
    k = ref['k']
    if entry['shape'] != [ref['nodes'], k] or not entry['finite']:
        return False, f"shape {entry['shape']}, finite {entry['finite']}"
    eig_err = float(np.abs(entry['rayleigh'] - ref['values'][1:k + 1]).max())
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
    spec = dict(spec, family=family, device=args.device)
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
    summary, totals = [], {}
    for method in methods:
        totals[method] = sum(e['time'] for e in results[method] if 'time' in e)
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
        complete = len(times) == total and len(results['ours']) == total
        ratio = totals['ours'] / totals[method] if complete and totals[method] > 0 else None
        summary.append([LABELS[method], f'{ok}/{total}', fmt(median, '.3f'),
                        fmt(max(times) if times else None, '.3f'),
                        fmt(sum(times) if times else None, '.2f'),
                        fmt(ratio, '.2f'), same_twice(results[method]),
                        '; '.join(failures[:3]) + (f' (+{len(failures) - 3} more)'
                                                   if len(failures) > 3 else '') or '-'])
    rep.table(['method', 'success', 'time per graph (s, median)', 'max (s)', 'total (s)',
               'ours / this (total time)', 'same twice', 'failures'], summary)
    k = spec['k']
    if family == 'molecules':
        rows = []
        for method in methods:
            done = [e for e in results[method] if 'time' in e]
            worst = {key: max((e[key] for e in done if key in e), default=None)
                     for key in ('eig_err', 'residual', 'orthogonality')}
            rows.append([LABELS[method],
                         fmt(1e3 * totals[method] / len(done) if done else None, '.3f'),
                         fmt(worst['eig_err'], '.1e'), fmt(worst['residual'], '.1e'),
                         fmt(worst['orthogonality'], '.1e')])
        rep(f'{len(refs)} graphs, {min(r["nodes"] for r in refs.values())} to '
            f'{max(r["nodes"] for r in refs.values())} nodes, k = {k}; time per graph: the '
            f'faster of two calls; worst over the graphs:')
        rep()
        rep.table(['method', 'mean time per graph (ms)', 'max |Δλ|', 'max residual',
                   'max |UᵀU - I|'], rows)
        return
    if family != 'disconnected':
        name = next(iter(refs))
        ref = refs[name]
        gap = ref['values'][k + 1] - ref['values'][k]
        rep(f"{name}: N = {ref['nodes']:,}, {ref['edges']:,} undirected edges, "
            f"{ref['components']} component(s); λ_1 = {ref['values'][1]:.6f}, "
            f"λ_{k} = {ref['values'][k]:.6f}, gap λ_{k + 1} - λ_{k} = {gap:.2e}; reference "
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
                   help='molecules, PubMed and 5 disconnected graphs, no 169k graph')
    p.add_argument('--families', nargs='+', choices=FAMILIES, default=None,
                   help='the graph families to run (default: all; --quick: all but large)')
    p.add_argument('--molecules', type=positive_int, default=MOLECULES,
                   help='random molecule-like graphs')
    p.add_argument('--threads', type=positive_int, default=1, help='torch/BLAS threads per process')
    p.add_argument('--graphs', type=positive_int, default=20, help='random disconnected graphs')
    p.add_argument('--repeats', type=positive_int, default=3, help='timed calls on PubMed (best)')
    p.add_argument('--limit', type=positive_float, default=120.0,
                   help='seconds per call on PubMed and the disconnected graphs')
    p.add_argument('--limit-large', type=positive_float, default=300.0,
                   help='seconds per call on the 169k graph')
    p.add_argument('--synthetic-nodes', type=positive_int, default=169_000)
    p.add_argument('--synthetic-degree', type=positive_int, default=30)
    p.add_argument('--pyg-default-large', action='store_true',
                   help="also run PyG's is_undirected=False (eigs) on the 169k graph")
    p.add_argument('--device', default='cpu',
                   help="where LaplacianEigenPE runs, e.g. 'cuda' (PyG's runs on the CPU)")
    p.add_argument('--output', default=None,
                   help='markdown output (default: benchmarks/results/eigen_pe.md, '
                        'eigen_pe_<device>.md on another device, or eigen_pe-quick.tmp '
                        'with --quick)')
    args = p.parse_args(argv)
    if args.quick:
        args.graphs = min(args.graphs, 5)
    families = args.families or [f for f in FAMILIES if f != 'large' or not args.quick]
    device = torch.device(args.device)
    suffix = '' if device.type == 'cpu' else f'_{device.type}'
    out = args.output or osp.join(RESULTS, 'eigen_pe-quick.tmp' if args.quick else
                                  f'eigen_pe{suffix}.md')
    check_writable(p, '--output', out, create=True)  # written after each family
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rep = Report()
    rep.header(f'Laplacian eigenvector PE: LaplacianEigenPE vs PyG (k = {K}, '
               f'{MOLECULE_K} on molecules)',
               'benchmarks.eigen_pe', argv, args.threads, quick=args.quick)
    rep(' '.join(__doc__.split('\n\n')[1].split()))
    rep()
    rep('Ours: `LaplacianEigenPE(k)` with its defaults (one dense float64 eigh for a '
        'connected graph of at most 256 nodes; else per connected component, batched '
        'dense eigh up to 256 nodes, block Lanczos above, for 4,096 to 262,144 nodes in '
        'float32 first, refined in float64; tol 1e-6, seed 0). PyG: `AddLaplacianEigenvectorPE(k, '
        'is_undirected=...)` with its defaults (ARPACK on the float32 Laplacian, dense '
        'below 100 nodes). "ours / this": the total time of ours over that of the row\'s '
        f'method, in the same run. Ours ran on {device} (the graph already there, '
        "untimed); PyG's on the CPU, where its scipy solvers run.")
    rep()
    if 'molecules' in families:
        rep(f'## {args.molecules} molecule-like graphs (k = {MOLECULE_K})')
        rep()
        run_family(rep, args, 'molecules', dict(repeats=2, limit=args.limit, k=MOLECULE_K,
                                                count=args.molecules), list(METHODS))
        rep.write(out)
    if 'pubmed' in families and has_pubmed():
        rep('## PubMed')
        rep()
        run_family(rep, args, 'pubmed', dict(repeats=args.repeats, limit=args.limit,
                                             tol=1e-10, k=K), list(METHODS))
        rep.write(out)
    elif 'pubmed' in families:
        rep('PubMed is not in the offline copy (harness.data.SHARED_DATA): skipped.')
        rep()
    if 'large' in families:
        rep(f'## Synthetic {args.synthetic_nodes // 1000}k')
        rep()
        methods = list(METHODS) if args.pyg_default_large else ['ours', 'pyg-undirected']
        if not args.pyg_default_large:
            rep("PyG's default `is_undirected=False` (`eigs`, Arnoldi on the whole graph) is "
                'not run here (`--pyg-default-large` adds it); one call per method (two, the '
                'faster kept, when ours runs on a GPU).')
            rep()
        warm = device.type != 'cpu'  # the best of 2 calls: not the GPU's set-up
        run_family(rep, args, 'large', dict(repeats=1 + warm, limit=args.limit_large, tol=1e-8,
                                            k=K,
                                            nodes=args.synthetic_nodes,
                                            degree=args.synthetic_degree), methods)
        rep.write(out)
    if 'disconnected' in families:
        rep(f'## {args.graphs} random disconnected graphs')
        rep()
        run_family(rep, args, 'disconnected', dict(repeats=2, limit=args.limit, k=K,
                                                   seeds=list(range(args.graphs))),
                   list(METHODS))
    rep.finish(start, out)


if __name__ == '__main__':
    main()
