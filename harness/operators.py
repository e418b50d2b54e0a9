r"""The tsGCN operators :math:`\mathbf{S}` that the low-rank benchmarks
measure on: PubMed at the paper's setting and the SBM-like synthetic graph,
built once in the parent process and written to files that the spawned
measurements read."""
import os.path as osp
import time
from typing import Callable, List, NamedTuple, Tuple

import scipy.sparse as sp
import torch
from torch import Tensor
from torch_geometric.data import Data

from harness.data import SHARED_DATA
from harness.graphs import csr_to_scipy, has_pubmed, load_pubmed, synthetic_graph
from torch_geometric_regcn.knn import knn_graph_cosine
from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator

#: The paper's PubMed setting: alpha, beta and the semantic graph's k.
PUBMED = dict(alpha=1.0, beta=0.3, k=10)


class OperatorGraph(NamedTuple):
    r"""A graph and its tsGCN operator."""
    name: str  #: ``'PubMed'`` or ``'Synthetic 200k'``
    data: Data  #: features ``x``, labels ``y``, ``train_mask`` and ``edge_index``
    op: Tensor  #: :math:`\mathbf{S}`, float32 sparse CSR
    note: str  #: a paragraph for the report: the graph, the setting and the build times


def pubmed_operator(shared: str = SHARED_DATA) -> OperatorGraph:
    r"""PubMed (Planetoid's raw features and public training nodes) and its
    operator at the paper's setting :obj:`PUBMED`, the semantic kNN graph and
    :math:`\mathbf{S}` each timed."""
    alpha, beta, k = PUBMED['alpha'], PUBMED['beta'], PUBMED['k']
    data = load_pubmed(shared)
    t0 = time.perf_counter()
    data.semantic_edge_index = knn_graph_cosine(data.x, k)
    t_knn = time.perf_counter() - t0
    t0 = time.perf_counter()
    op = tsgcn_operator(data, alpha, beta, k)
    t_op = time.perf_counter() - t0
    note = (f'PubMed: N = {data.num_nodes:,}, {data.num_edges:,} directed edges, '
            f'{data.num_features} features, alpha = {alpha}, beta = {beta}, k = {k}; '
            f'semantic kNN {t_knn:.1f} s, S = tsgcn_operator(...) {t_op:.1f} s (not part of '
            'the measured times).')
    data = Data(x=data.x, y=data.y, train_mask=data.train_mask, edge_index=data.edge_index,
                num_nodes=data.num_nodes)
    return OperatorGraph('PubMed', data, op, note)


def synthetic_operator(n: int, beta: float = 0.0, probe: int = 10000) -> OperatorGraph:
    r""":func:`~harness.graphs.synthetic_graph` with :obj:`n` nodes (5 % of
    them, drawn with seed 0, for training) and its operator with alpha 1 and
    :obj:`beta`, k = 10. The cosine kNN graph costs :math:`O(N^2)`: it is
    timed on :obj:`probe` nodes and extrapolated, and built only for
    :obj:`beta` > 0."""
    data = synthetic_graph(n)
    probe = min(n, probe)
    t0 = time.perf_counter()
    knn_graph_cosine(data.x[:probe], 10)
    t_probe = time.perf_counter() - t0
    estimate = t_probe * (n / probe) ** 2
    t0 = time.perf_counter()
    op = tsgcn_operator(data, 1.0, beta, 10)
    t_op = time.perf_counter() - t0
    note = (f'Synthetic: SBM-like graph, N = {n:,}, 256 communities of uneven sizes, average '
            f'degree ~10 (80 % of edges inside a community), 64-dim features, 8 classes; '
            f'alpha = 1.0, beta = {beta:g}. The cosine kNN took {t_probe:.1f} s on '
            f'{probe:,} nodes, so ~{estimate / 60:.0f} min on {n:,} (O(N²)): '
            + ('it was run (--synthetic-beta > 0).' if beta > 0 else
               'beta = 0 (tsGCN-t, no semantic graph); use --synthetic-beta to force it.')
            + f' S built in {t_op:.1f} s.')
    train_mask = torch.rand(n, generator=torch.Generator().manual_seed(0)) < 0.05
    data = Data(x=data.x, y=data.y, train_mask=train_mask, edge_index=data.edge_index,
                num_nodes=n)
    return OperatorGraph(f'Synthetic {n // 1000}k', data, op, note)


def save_operator_graph(graph: OperatorGraph, folder: str) -> Tuple[str, str]:
    r"""Writes :obj:`graph`'s operator (scipy ``.npz``) and its data
    (``torch.save`` of a dict of ``x``, ``y``, ``train_mask`` and
    ``edge_index``) to :obj:`folder`; returns both paths."""
    stem = osp.join(folder, graph.name.replace(' ', '_'))
    op_path, data_path = stem + '-S.npz', stem + '-data.pt'
    sp.save_npz(op_path, csr_to_scipy(graph.op))
    torch.save({key: graph.data[key] for key in ('x', 'y', 'train_mask', 'edge_index')},
               data_path)
    return op_path, data_path


class SavedGraph(NamedTuple):
    r"""Where :func:`save_operator_graph` wrote a graph."""
    name: str
    op_path: str
    data_path: str
    num_nodes: int


def benchmark_graphs(say: Callable[[str], None], folder: str, synthetic_nodes: int,
                     synthetic_beta: float = 0.0, probe: int = 10000,
                     shared: str = SHARED_DATA, skip_pubmed: bool = False) -> List[SavedGraph]:
    r"""PubMed (:func:`pubmed_operator`, unless :obj:`skip_pubmed` or its
    files are not in :obj:`shared`) and the synthetic graph of
    :obj:`synthetic_nodes` nodes (:func:`synthetic_operator`), written to
    :obj:`folder`. :obj:`say` (a :class:`~harness.report.Report`) receives
    each graph's note, or why PubMed is left out."""
    graphs = []
    if skip_pubmed:
        say('PubMed: skipped (--skip-pubmed).')
    elif not has_pubmed(shared):
        say(f'PubMed: SKIPPED, {osp.join(shared, "PubMed")} not found (pass --data-root).')
    else:
        print('Loading PubMed and building S ...', flush=True)
        graph = pubmed_operator(shared)
        say(graph.note)
        say('')
        graphs.append(SavedGraph(graph.name, *save_operator_graph(graph, folder),
                                 graph.data.num_nodes))
        del graph
    print(f'Building the synthetic graph ({synthetic_nodes:,} nodes) ...', flush=True)
    graph = synthetic_operator(synthetic_nodes, synthetic_beta, probe)
    say(graph.note)
    say('')
    graphs.append(SavedGraph(graph.name, *save_operator_graph(graph, folder), synthetic_nodes))
    return graphs
