r"""tsGCN end to end on one machine at one million nodes.

A synthetic graph of ``--nodes`` nodes (default 1,000,000), about
``nodes * degree / 2`` random edges (default 10M; SBM-like, 256 communities,
80 % of edges inside one) and 128-dimensional features (community centroid
plus Gaussian noise; labels: community modulo 8) goes through every stage of
the tsGCN pipeline in one process, each stage timed (wall clock) and its peak
resident memory measured above the memory held before it:

1. the semantic kNN graph (``SemanticGraph(10)``; ``method="auto"`` picks
   the approximate IVF search on CPU above 50,000 nodes, exact on CUDA);
2. the sparse operator ``S`` (``tsgcn_operator``), alone: the part of the
   next stage that builds it;
3. the rank-64 factors (``LowRankInverse``, block Lanczos), then again from
   the on-disk cache;
4. training epochs of the paper's 2-layer tsGCN (hidden 32, Adam), forward +
   backward + step.

Recall of the approximate kNN against the exact search is measured on a
100,000-node sample of the same features (both searches run in full), on 2,000
random query nodes of the full graph, and on PubMed's real features when its
offline copy is there. Nothing is densified: the largest dense tensors
are ``N x 128`` features and the ``N x 272`` Lanczos basis.

Run from the repository root::

    python -m benchmarks.scale                    # about 15 min on 2 CPU cores
    python -m benchmarks.scale --nodes 100000     # a quick look

Writes ``benchmarks/results/scale.md`` (other sizes: ``scale-<nodes>.tmp``;
on a GPU, ``scale_cuda.md``; ``--output``: elsewhere).
"""
import argparse
import datetime
import os
import os.path as osp
import shutil
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F

from harness.cli import check_writable, positive_int
from harness.graphs import has_pubmed, load_pubmed, synthetic_graph
from harness.measure import MIB, PeakMeter, machine_info
from harness.report import RESULTS, Report, command_line
from torch_geometric_regcn import TSGCN, LowRankInverse, SemanticGraph
from torch_geometric_regcn.knn import exact_knn_cosine, ivf_knn_cosine
from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator

warnings.filterwarnings('ignore', message=r'.*sparse.*beta', category=UserWarning)
PEAKS = []  # resident memory (MiB) at each stage's peak


def recall(approx, exact):
    """Fraction of the exact neighbours that the approximate search found."""
    hits = (approx[:, :, None] == exact[:, None, :]).any(dim=2).sum()
    return float(hits) / exact.numel()


class Stage:
    """Times a block and measures its peak resident memory above the start."""

    def __init__(self, rows, name, device):
        self.rows, self.name, self.device = rows, name, device

    def __enter__(self):
        self.meter = PeakMeter().start()
        if self.device.type == 'cuda':
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.device.type == 'cuda':
            torch.cuda.synchronize()
        self.time = time.perf_counter() - self.t0
        peak = self.meter.stop()
        self.total = self.meter.base / MIB + peak  # resident memory at this stage's peak
        self.gpu = (torch.cuda.max_memory_allocated() / MIB if self.device.type == 'cuda'
                    else None)
        gpu = '-' if self.gpu is None else f'{self.gpu:,.0f}'
        self.rows.append([self.name, f'{self.time:,.1f}', f'{peak:,.0f}',
                          f'{self.total:,.0f}', gpu])
        PEAKS.append(self.total)
        print(f'  {self.name}: {self.time:.1f} s, peak Δ {peak:,.0f} MiB', flush=True)
        return False


def _synchronized(x):
    """The clock after the work queued on ``x``'s device is done."""
    if x.is_cuda:
        torch.cuda.synchronize(x.device)
    return time.perf_counter()


def recall_row(label, x):
    """Both searches on ``x``, timed: [label, recall@10, exact s, IVF s]."""
    t0 = time.perf_counter()
    exact = exact_knn_cosine(x, 10, progress=False)
    t_exact = _synchronized(x) - t0
    t0 = time.perf_counter()
    approx = ivf_knn_cosine(x, 10, generator=torch.Generator().manual_seed(0), progress=False)
    t_ivf = _synchronized(x) - t0
    return [label, f'{recall(approx, exact):.4f}', f'{t_exact:.1f}', f'{t_ivf:.1f}']


def knn_recall_part(args, x_full, device):
    r"""Recall rows of a sample of the synthetic features and of PubMed's
    (when its offline copy is there), both searches run in full."""
    gen = torch.Generator().manual_seed(1)
    sample = x_full[torch.randperm(x_full.size(0), generator=gen)[:args.recall_sample]]
    rows = [recall_row(f'{sample.size(0):,}-node sample of the synthetic features', sample)]
    if has_pubmed():
        x = load_pubmed().x.to(device)
        rows.append(recall_row('PubMed (19,717 nodes, 500 TF-IDF features)', x))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog='python -m benchmarks.scale',
                               description=__doc__.split('\n\n')[0])
    p.add_argument('--nodes', type=positive_int, default=1_000_000)
    p.add_argument('--degree', type=positive_int, default=20, help='average degree')
    p.add_argument('--features', type=positive_int, default=128)
    p.add_argument('--rank', type=positive_int, default=64)
    p.add_argument('--epochs', type=positive_int, default=5)
    p.add_argument('--recall-sample', type=positive_int, default=100_000)
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--threads', type=positive_int, default=None,
                   help="torch threads (default: torch's own, one per core: the target "
                        "is stated for both cores of a 2-core machine)")
    p.add_argument('--output', default=None,
                   help='markdown output (default: benchmarks/results/scale.md, '
                        'scale_<device>.md, or scale-<nodes>.tmp for other sizes)')
    args = p.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    suffix = '' if device.type == 'cpu' else f'_{device.type}'
    out = args.output or osp.join(RESULTS, f'scale{suffix}.md' if args.nodes == 1_000_000
                                  else f'scale-{args.nodes}{suffix}.tmp')
    check_writable(p, '--output', out, create=True)  # written at the end

    rep = Report()
    info = machine_info(torch.get_num_threads())
    rep(f'# tsGCN at {args.nodes:,} nodes on one machine')
    rep()
    rep(f'Command (from the repository root): `{command_line("benchmarks.scale", argv)}`')
    rep()
    gpu = torch.cuda.get_device_name(device) if device.type == 'cuda' else 'none'
    rep(f"Machine: {info['cpu']}, {info['cpu_count']} CPUs ({torch.get_num_threads()} torch "
        f"threads), {info['ram_gib']:.1f} GiB RAM, GPU: {gpu}; device used: {device}. Python "
        f"{info['python']}, torch {info['torch']}. Load average at start: {info['load']}. "
        f'Date: {datetime.date.today()}.')
    rep()
    rep(' '.join(' '.join(__doc__.split('\n\n')[1:4]).split()))
    rep()

    rows = []
    cache = tempfile.mkdtemp(prefix='regcn-cache-')
    try:
        with Stage(rows, 'synthetic graph (generation, not part of tsGCN)', device):
            data = synthetic_graph(args.nodes, avg_degree=args.degree,
                                   features=args.features)
            data = data.to(device)
        n_edges = data.edge_index.size(1)
        with Stage(rows, 'semantic kNN graph, k = 10 (SemanticGraph, auto)', device) as knn:
            data = SemanticGraph(10)(data)
        with Stage(rows, 'operator S = (α Â_G + β Â_X) / (1 + α + β), alone', device):
            op = tsgcn_operator(data, 1.0, 0.3, 10)
        nnz = op._nnz()
        del op
        transform = LowRankInverse(1.0, 0.3, rank=args.rank, cache_dir=str(cache))
        with Stage(rows, f'rank-{args.rank} factors (LowRankInverse: S, block Lanczos)',
                   device) as factors:
            data = transform(data)
        with Stage(rows, 'rank-64 factors again, from the on-disk cache', device):
            cached = transform(data)  # BaseTransform works on a shallow copy of data
        assert torch.equal(cached.lowrank_w, data.lowrank_w)
        del cached
        w, v = data.lowrank_w, data.lowrank_v
        lam = -(v * w).sum(dim=0)  # VᵀW = -Λ: the eigenvalues found
        gen = torch.Generator().manual_seed(0)
        train = torch.zeros(args.nodes, dtype=torch.bool)
        train[torch.randperm(args.nodes, generator=gen)[:20 * 8]] = True
        train = train.to(device)
        torch.manual_seed(0)
        model = TSGCN(args.features, 32, int(data.y.max()) + 1).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
        epoch_times = []
        with Stage(rows, f'{args.epochs} training epochs (2-layer tsGCN, hidden 32)',
                   device) as training:
            for _ in range(args.epochs):
                t0 = time.perf_counter()
                optimizer.zero_grad()
                loss = F.cross_entropy(model(data.x, w, v)[train], data.y[train])
                loss.backward()
                optimizer.step()
                if device.type == 'cuda':
                    torch.cuda.synchronize()
                epoch_times.append(time.perf_counter() - t0)
        with torch.no_grad():
            acc = float((model(data.x, w, v).argmax(1) == data.y).float().mean())

        rep(f'Graph: {args.nodes:,} nodes, {n_edges:,} directed random edges, '
            f'{args.features} features; semantic graph {data.semantic_edge_index.size(1):,} '
            f'directed edges; nnz(S) = {nnz:,}; W, V: {args.nodes:,} x {args.rank} each '
            f'(eigenvalues {float(lam.min()):.4f} to {float(lam.max()):.4f}).')
        rep()
        rep.table(['stage', 'time (s)', 'peak RSS Δ (MiB)', 'peak RSS (MiB)',
                   'peak GPU (MiB)'], rows)
        user = (knn, factors, training)  # what a user runs; LowRankInverse builds S itself
        gpu_peak = ('' if device.type != 'cuda' else
                    f', peak GPU memory {max(stage.gpu for stage in user):,.0f} MiB')
        rep(f'End to end as a user runs it (SemanticGraph, LowRankInverse, {args.epochs} '
            f'epochs): **{sum(stage.time for stage in user):,.1f} s**, peak resident memory '
            f'{max(stage.total for stage in user):,.0f} MiB{gpu_peak}. The operator stage '
            'times alone the build of S that LowRankInverse repeats inside its own stage, so '
            'it is not added.')
        rep()
        peak = max(PEAKS)
        rep(f'Peak resident memory of the whole process (the largest "peak RSS" above; the '
            f'kernel high-water mark is reset per stage): {peak:,.0f} MiB '
            f'({peak / 1024:.1f} GiB). Training: {1e3 * min(epoch_times):,.1f} ms per epoch '
            f'(min; median {1e3 * sorted(epoch_times)[len(epoch_times) // 2]:,.1f} ms), '
            'final loss '
            f'{loss.item():.3f}, accuracy over all nodes {acc:.3f} after {args.epochs} '
            'epochs from 160 labels (a smoke check, not a tuned result).')
        rep()

        # Recall of the pieces of the semantic graph.
        x_full = data.x
        del data, w, v, model
        q = torch.randperm(args.nodes, generator=gen)[:2000].to(device)
        t0 = time.perf_counter()
        xn = x_full / x_full.norm(dim=1, keepdim=True)
        exact_q = []
        for part in q.split(64):  # 64 x N similarities at a time
            scores = xn[part] @ xn.T
            scores[torch.arange(part.numel()), part] = -float('inf')
            exact_q.append(scores.topk(10, dim=1).indices)
        exact_q = torch.cat(exact_q)
        del scores, xn
        t_q = _synchronized(x_full) - t0
        t0 = time.perf_counter()
        approx = ivf_knn_cosine(x_full, 10, generator=torch.Generator().manual_seed(0),
                                progress=False)
        t_ivf = _synchronized(x_full) - t0
        rows_r = [[f'2,000 random queries of the {args.nodes:,}-node graph',
                   f'{recall(approx[q], exact_q):.4f}', f'{t_q:.1f} (2,000 queries only)',
                   f'{t_ivf:.1f}']]
        del approx
        rows_r += knn_recall_part(args, x_full, device)
        rep('Recall@10 of the approximate IVF search (defaults: √N cells, centroids from 64 '
            'rows per cell, the number of probed cells tuned for a recall of 0.95 on 256 '
            'brute-force queries) against the exact search:')
        rep()
        rep.table(['features', 'recall@10', 'exact (s)', 'IVF (s)'], rows_r)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    rep.write(out)
    print(f'written to {out}')


if __name__ == '__main__':
    os.environ.setdefault('TQDM_MININTERVAL', '5')
    main()
