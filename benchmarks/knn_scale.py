r"""The semantic kNN search at scale: time, peak memory and recall of one search.

The features of ``benchmarks/scale.py`` (``synthetic_graph(nodes, 20,
features=128)``: 256 noisy community centroids in 128 dimensions) go through
one search in this process, timed (wall clock) with its peak resident memory
above the memory held before it (the features already loaded); then the
recall@10 of its neighbours on 2,000 random queries against the exact
neighbours (brute force, as ``benchmarks/scale.py`` measures it). Prints one
JSON line (and appends it to ``--jsonl``).

``--what``: ``ivf`` (``ivf_knn_cosine``, the pure-torch IVF), ``faiss``
(``faiss_knn_cosine``, the same cells searched by faiss's ``IndexIVFFlat``),
or ``graph`` (the whole ``SemanticGraph(10)`` stage of ``scale.py``: search
and symmetrisation, ``method='auto'``). ``--code DIR`` imports the package
from ``DIR`` (a git worktree of an older commit), for before/after ratios
measured in alternating runs on the same machine.

Run from the repository root, one pinned thread per process::

    OMP_NUM_THREADS=1 taskset -c 0 python -m benchmarks.knn_scale --nodes 1000000 --what ivf
"""
import argparse
import json
import os
import sys
import time

from harness.cli import check_writable, positive_int


def main(argv=None):
    p = argparse.ArgumentParser(prog='python -m benchmarks.knn_scale',
                                description=__doc__.split('\n\n')[0])
    p.add_argument('--nodes', type=positive_int, default=1_000_000)
    p.add_argument('--what', choices=['ivf', 'faiss', 'graph'], default='ivf')
    p.add_argument('--threads', type=positive_int, default=1)
    p.add_argument('--queries', type=positive_int, default=2000)
    p.add_argument('--code', default=None, help='import torch_geometric_regcn from here')
    p.add_argument('--jsonl', default=None, help='append the JSON line to this file')
    args = p.parse_args(argv)
    if args.jsonl:  # appended to after the search
        check_writable(p, '--jsonl', args.jsonl)
    if args.code and not os.path.isdir(os.path.join(args.code, 'torch_geometric_regcn')):
        p.error(f'--code {args.code}: no torch_geometric_regcn folder there')
    if args.code:
        sys.path.insert(0, os.path.abspath(args.code))

    import torch

    from harness.graphs import synthetic_graph
    from harness.measure import PeakMeter
    from torch_geometric_regcn import SemanticGraph
    from torch_geometric_regcn.knn import ivf_knn_cosine

    torch.set_num_threads(args.threads)
    x = synthetic_graph(args.nodes, avg_degree=20, features=128).x.contiguous()
    gen = torch.Generator().manual_seed(0)
    if args.what == 'faiss':  # its import (0.3 s, 13 MiB) outside the measured region
        import faiss  # noqa: F401

    meter = PeakMeter(trim=True).start()
    t0 = time.perf_counter()
    if args.what == 'graph':
        from torch_geometric.data import Data
        edge_index = SemanticGraph(10, progress=False)(Data(x=x)).semantic_edge_index
        approx = None
    else:
        if args.what == 'faiss':
            from torch_geometric_regcn.knn import faiss_knn_cosine
            approx = faiss_knn_cosine(x, 10, generator=gen)
        else:
            approx = ivf_knn_cosine(x, 10, generator=gen, progress=False)
    seconds = time.perf_counter() - t0
    peak = meter.stop()

    result = dict(what=args.what, nodes=args.nodes, threads=args.threads,
                  code=args.code or 'working tree', seconds=round(seconds, 2),
                  peak_delta_mib=round(peak), base_mib=round(meter.base / 2**20))
    if approx is None:
        result['edges'] = edge_index.size(1)
    else:  # recall on random queries against the brute force, as scale.py measures it
        q = torch.randperm(args.nodes, generator=torch.Generator().manual_seed(1))
        q = q[:args.queries]
        xn = x / x.norm(dim=1, keepdim=True)
        exact = []
        for part in q.split(64):
            scores = xn[part] @ xn.T
            scores[torch.arange(part.numel()), part] = -float('inf')
            exact.append(scores.topk(10, dim=1).indices)
        exact = torch.cat(exact)
        hits = (approx[q][:, :, None] == exact[:, None, :]).any(dim=2).sum()
        result['recall'] = round(float(hits) / exact.numel(), 4)
    line = json.dumps(result)
    print(line, flush=True)
    if args.jsonl:
        with open(args.jsonl, 'a') as f:
            f.write(line + '\n')


if __name__ == '__main__':
    main()
