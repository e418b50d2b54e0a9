r"""Forward + backward time and peak memory of a 2-layer model: TSGCNConv's
low-rank propagation against PyG's GCNConv and the authors' dense N x N one.

On PubMed (the paper's alpha 1.0, beta 0.3, k 10) and an SBM-like synthetic
graph (beta 0 unless ``--synthetic-beta``): conv(``--hidden``) → ReLU →
conv(classes), cross-entropy on the training nodes, backward; the median of
``--repeats`` timed passes after ``--warmup`` ones, each model in a fresh
spawned process with ``--threads`` threads. TSGCNConv uses the factors W, V
of the rank-r (``--rank``) eigenpairs that LowRankInverse computes by default
(block Lanczos, ``--tol``); the dense model multiplies by
P = I - W(I_r + VᵀW)⁻¹Vᵀ materialised as an N×N float32 matrix, as the
authors' code does (PubMed only; 1.5 GB). Target: TSGCNConv within 2× of
GCNConv on PubMed.

Run from the repository root::

    python -m benchmarks.propagation            # about 4 min on 2 cores
    python -m benchmarks.propagation --quick    # smoke test (rank 16, 20k nodes)

Writes ``benchmarks/results/propagation.md`` (``--quick``: the git-ignored
``benchmarks/results/propagation-quick.tmp``; ``--output``: elsewhere). This
was part 2 of the former ``benchmarks/lowrank.py``, whose last report is
``benchmarks/results/lowrank.md``.
"""
import argparse
import os.path as osp
import statistics
import tempfile
import time
import warnings

import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv

from harness.cli import (
    check_writable,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from harness.data import SHARED_DATA
from harness.eigenpairs import load_eigenpairs, save_eigenpairs, sort_eigenpairs
from harness.graphs import scipy_to_csr
from harness.measure import PEAK_DELTA, PeakMeter, run_isolated
from harness.operators import benchmark_graphs
from harness.report import RESULTS, Report
from torch_geometric_regcn import TSGCNConv
from torch_geometric_regcn.linalg import extreme_eigenpairs
from torch_geometric_regcn.linalg.woodbury import factors_from_eigenpairs, woodbury_apply

# torch flags its sparse CSR support as beta; this also runs in every spawned child.
warnings.filterwarnings('ignore', message=r'.*sparse.*beta', category=UserWarning)

LABELS = {'tsgcn': 'TSGCNConv (rank {rank}, Woodbury)',
          'gcn': 'GCNConv (cached=True)',
          'dense': 'dense N×N P, plain autograd (authors\' code)',
          'dense-sym': 'dense N×N P, backward P·grad (P symmetric)'}


class SymmetricMatmul(torch.autograd.Function):
    r"""``P @ h`` for a symmetric constant ``P``, whose backward is
    ``P @ grad`` instead of autograd's ``P.T @ grad``."""

    @staticmethod
    def forward(ctx, prop, h):
        ctx.save_for_backward(prop)
        return prop @ h

    @staticmethod
    def backward(ctx, grad):
        (prop,) = ctx.saved_tensors
        return None, prop @ grad


class DenseProp(torch.nn.Module):
    r"""The authors' layer: a dense :math:`N \times N` propagation matrix
    ``P`` times ``X Theta``, plus a bias."""

    def __init__(self, in_channels, out_channels, symmetric=False):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels, out_channels, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(out_channels))
        self.symmetric = symmetric

    def forward(self, x, prop):
        h = self.lin(x)
        out = SymmetricMatmul.apply(prop, h) if self.symmetric else prop @ h
        return out + self.bias


class TwoLayer(torch.nn.Module):
    r"""conv → ReLU → conv, with the convolution of :obj:`kind` (a key of
    :obj:`LABELS`)."""

    def __init__(self, kind, in_channels, hidden, out_channels):
        super().__init__()
        if kind == 'tsgcn':
            self.conv1, self.conv2 = (TSGCNConv(in_channels, hidden),
                                      TSGCNConv(hidden, out_channels))
        elif kind == 'gcn':
            self.conv1 = GCNConv(in_channels, hidden, cached=True)
            self.conv2 = GCNConv(hidden, out_channels, cached=True)
        else:
            sym = kind == 'dense-sym'
            self.conv1, self.conv2 = (DenseProp(in_channels, hidden, sym),
                                      DenseProp(hidden, out_channels, sym))

    def forward(self, x, *prop):
        return self.conv2(self.conv1(x, *prop).relu(), *prop)


def dense_propagation(w, v):
    r"""The dense ``I - W (I_r + V^T W)^{-1} V^T``, built with one ``N x r``
    by ``r x N`` product and in-place updates (one ``N x N`` buffer)."""
    core = torch.eye(w.size(1), dtype=w.dtype) + v.T @ w
    prop = w @ torch.linalg.solve(core, v.T)
    prop.neg_().diagonal().add_(1.0)
    return prop


def train_steps(spec: dict) -> dict:
    r"""In a spawned process: the timed forward + backward passes of one
    model, with the peak memory of the whole loop (for the dense models, of
    building P too)."""
    torch.manual_seed(0)
    blob = torch.load(spec['data_path'])
    x, y, mask, edge_index = blob['x'], blob['y'], blob['train_mask'], blob['edge_index']
    vals, vecs = (torch.from_numpy(a).to(x.dtype) for a in load_eigenpairs(spec['eig_path']))
    w, v = factors_from_eigenpairs(vals, vecs)
    kind = spec['kind']
    model = TwoLayer(kind, x.size(1), spec['hidden'], int(y.max()) + 1)
    out = {}

    meter = PeakMeter().start()
    if kind == 'tsgcn':
        prop = (w, v)
    elif kind == 'gcn':
        prop = (edge_index,)
    else:
        t0 = time.perf_counter()
        prop = (dense_propagation(w, v),)
        out['build_time'] = time.perf_counter() - t0
        h = torch.randn(x.size(0), 8)
        ref = woodbury_apply(h, w, v)
        out['check'] = float((prop[0] @ h - ref).abs().max() / ref.abs().max())
    times = []
    for step in range(spec['warmup'] + spec['repeats']):
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x, *prop)[mask], y[mask])
        loss.backward()
        elapsed = time.perf_counter() - t0
        if step >= spec['warmup']:
            times.append(elapsed)
    out['peak_mib'] = meter.stop()
    out['times'] = times
    out['loss'] = loss.item()
    return out


def default_eigenpairs(op_path: str, rank: int, tol: float, out_path: str) -> None:
    r"""The eigenpairs that LowRankInverse computes by default (block
    Lanczos, 'LA', max_iter 100, seed 0) of the operator in :obj:`op_path`,
    written to :obj:`out_path`."""
    op = scipy_to_csr(sp.load_npz(op_path).astype('float32'))
    pairs = extreme_eigenpairs(op, rank, 'LA', tol, 100, 'lanczos',
                               generator=torch.Generator().manual_seed(0))
    vals = pairs.eigenvalues.double().numpy()
    save_eigenpairs(out_path, *sort_eigenpairs(vals, pairs.eigenvectors.numpy(), 'LA'))


def compare(rep: Report, args, name: str, data_path: str, eig_path: str, n: int,
            dense: bool):
    r"""Every model on one graph and its table; returns TSGCN / GCN (the
    ratio of the median times), or :obj:`None` if either failed."""
    rows, medians = [], {}
    labels = {kind: label.format(rank=args.rank) for kind, label in LABELS.items()}
    for kind in ['tsgcn', 'gcn'] + (['dense', 'dense-sym'] if dense else []):
        print(f'  [{name}] {labels[kind]} ...', flush=True)
        is_dense = kind.startswith('dense')
        spec = dict(data_path=data_path, eig_path=eig_path, kind=kind, hidden=args.hidden,
                    repeats=args.dense_repeats if is_dense else args.repeats,
                    warmup=1 if is_dense else args.warmup)
        res = run_isolated(args.threads, train_steps, spec)
        if 'error' in res:
            rows.append([labels[kind], 'FAILED: ' + res['error'], '-', '-', '-', '-'])
            continue
        medians[kind] = statistics.median(res['times'])
        extra = ''
        if is_dense:
            extra = (f"P built in {res['build_time']:.2f} s; P·h vs Woodbury rel. diff "
                     f"{res['check']:.1e}")
        rows.append([labels[kind], f'{1000 * medians[kind]:.1f}',
                     f"{1000 * min(res['times']):.1f}", f"{res['peak_mib']:.1f}",
                     len(res['times']), extra])
    if not dense:
        rows.append([labels['dense'], 'skipped', '-', '-', '-',
                     f'N² float32 = {4 * n * n / 1e9:,.0f} GB'])
    rep.table([f'model (2 layers, hidden {args.hidden})', 'median fwd+bwd (ms)', 'min (ms)',
               'peak Δ (MiB)', 'repeats', 'notes'], rows)
    if 'tsgcn' not in medians or 'gcn' not in medians:
        return None
    ratio = medians['tsgcn'] / medians['gcn']
    line = f'TSGCN / GCN = {ratio:.2f}×'
    for kind in ('dense', 'dense-sym'):
        if kind in medians:
            line += f"; {kind} / TSGCN = {medians[kind] / medians['tsgcn']:.0f}×"
    rep(line + '.')
    rep()
    return ratio


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog='python -m benchmarks.propagation',
                               description=__doc__.split('\n\n')[0])
    p.add_argument('--rank', type=positive_int, default=None,
                   help='rank r (default 64, 16 with --quick)')
    p.add_argument('--synthetic-nodes', type=positive_int, default=None,
                   help='nodes of the synthetic graph (default 200000, 20000 with --quick)')
    p.add_argument('--synthetic-beta', type=non_negative_float, default=0.0,
                   help='beta of the synthetic graph; > 0 runs the O(N^2) semantic kNN '
                        '(default %(default)s)')
    p.add_argument('--tol', type=positive_float, default=1e-4,
                   help="tolerance of the eigenpairs (default %(default)s, LowRankInverse's)")
    p.add_argument('--hidden', type=positive_int, default=32,
                   help='hidden units (default %(default)s)')
    p.add_argument('--repeats', type=positive_int, default=None,
                   help='timed fwd+bwd repeats (default 10, 3 with --quick)')
    p.add_argument('--dense-repeats', type=positive_int, default=None,
                   help='timed repeats of the dense N x N model (default 5, 1 with --quick)')
    p.add_argument('--warmup', type=non_negative_int, default=2,
                   help='untimed fwd+bwd passes first (default %(default)s; dense models: 1)')
    p.add_argument('--threads', type=positive_int, default=1,
                   help='torch/BLAS threads of every measurement, the same for all models '
                        '(default %(default)s)')
    p.add_argument('--skip-dense', action='store_true',
                   help='skip the dense N x N propagation on PubMed (1.5 GB)')
    p.add_argument('--skip-pubmed', action='store_true', help='leave PubMed out')
    p.add_argument('--data-root', default=SHARED_DATA,
                   help='folder holding PubMed/raw (default %(default)s)')
    p.add_argument('--quick', action='store_true', help='small, fast smoke test')
    p.add_argument('--output', default=None,
                   help='markdown output (default benchmarks/results/propagation.md)')
    args = p.parse_args(argv)
    q = args.quick
    args.rank = args.rank or (16 if q else 64)
    args.synthetic_nodes = args.synthetic_nodes or (20000 if q else 200000)
    args.repeats = args.repeats or (3 if q else 10)
    args.dense_repeats = args.dense_repeats or (1 if q else 5)
    args.output = args.output or osp.join(RESULTS, 'propagation-quick.tmp' if q
                                          else 'propagation.md')
    check_writable(p, '--output', args.output, create=True)  # written at the end
    return args


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rep = Report()
    rep.header('Forward + backward of a 2-layer model: TSGCNConv vs GCNConv vs dense N×N',
               'benchmarks.propagation', argv, args.threads, args.quick)
    rep(PEAK_DELTA)
    rep()
    ratio = None
    with tempfile.TemporaryDirectory(prefix='propagation-') as tmp:
        graphs = benchmark_graphs(rep, tmp, args.synthetic_nodes, args.synthetic_beta,
                                  probe=5000 if args.quick else 10000, shared=args.data_root,
                                  skip_pubmed=args.skip_pubmed)
        rep(f'conv(hidden {args.hidden}) → ReLU → conv(classes), cross-entropy on the '
            f'training nodes, backward; median over {args.repeats} timed repeats after '
            f'{args.warmup} warm-up ones. GCNConv has cached=True, so its normalisation is '
            'computed once during warm-up and the timed loop compares propagation (plus the '
            'shared linear layers). TSGCNConv uses W, V from the rank-'
            f'{args.rank} eigenpairs that LowRankInverse computes by default (block Lanczos, '
            f"which='LA', tol={args.tol:g}, max_iter 100, seed 0; computed beforehand, not "
            'timed); the dense model multiplies by P = I - W(I_r + VᵀW)⁻¹Vᵀ materialised as '
            "an N×N float32 matrix, as the authors' code does (its peak Δ includes building "
            'P).')
        rep()
        for graph in graphs:
            print(f'  [{graph.name}] eigenpairs ...', flush=True)
            eig_path = osp.join(tmp, f'{graph.name}-eigenpairs')
            default_eigenpairs(graph.op_path, args.rank, args.tol, eig_path)
            dense = graph.name == 'PubMed' and not args.skip_dense
            rep(f'**{graph.name}** (N = {graph.num_nodes:,})'
                + ('' if dense or graph.name != 'PubMed' else ' — dense skipped (--skip-dense)'))
            rep()
            r = compare(rep, args, graph.name, graph.data_path, eig_path, graph.num_nodes,
                        dense)
            if graph.name == 'PubMed':
                ratio = r

    rep('## Target')
    rep()
    if ratio is None:
        row = ['TSGCNConv fwd+bwd ≤ 2× GCNConv on PubMed', '-', 'SKIPPED']
    else:
        row = [f'TSGCNConv fwd+bwd ≤ 2× GCNConv on PubMed (rank {args.rank})', f'{ratio:.2f}×',
               'PASS' if ratio <= 2 else 'FAIL']
    rep.table(['target', 'measured', 'verdict'], [row])
    rep.finish(start, args.output)


if __name__ == '__main__':
    main()
