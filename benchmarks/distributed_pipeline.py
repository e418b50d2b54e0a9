r"""What ``python -m benchmarks.distributed`` measures on each rank: the
row-sharded tsGCN pipeline (shard, semantic graph, operator, Lanczos
eigenpairs, training epochs) on spawned gloo processes of one machine, each
stage started together by a barrier and timed, with the rank's peak resident
memory and the bytes it sent through the library's collectives.

:func:`run_pipeline` starts the processes and returns every rank's
measurements; ``benchmarks/distributed.py`` plans the runs and writes the
report.
"""
import datetime
import queue
import socket
import time
import traceback
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from harness.measure import MIB, PeakMeter, child_environment

#: The measured stages, in the order they run.
STAGES = ('shard generation', 'semantic graph', 'operator S', 'Lanczos eigenpairs',
          'training epochs')
#: The operator's coefficients, the hidden width, the classes of the graph and the
#: semantic neighbours per node.
ALPHA, BETA, HIDDEN, CLASSES, K = 1.0, 0.3, 32, 5, 10


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class _Rank:
    r"""One rank's measurements: per stage its wall time, peak resident memory
    (above the start and in all) and bytes sent."""

    def __init__(self) -> None:
        self.stages: Dict[str, Dict[str, float]] = {}
        self.info: Dict[str, Any] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        from torch_geometric_regcn.distributed import traffic, traffic_stage
        meter = PeakMeter(trim=True).start()
        dist.barrier()
        start = time.perf_counter()
        with traffic_stage(name):
            yield
        seconds = time.perf_counter() - start
        delta = meter.stop()
        self.stages[name] = {'time': seconds, 'delta': delta,
                             'peak': meter.base / MIB + delta, 'sent': traffic(name)}


class _CycleClock:
    r"""The solver's :obj:`callback`: the time and the bytes sent at the end
    of each Lanczos cycle (cycle 0: the spectrum located)."""

    def __init__(self, stage: str) -> None:
        self.stage, self.start = stage, time.perf_counter()
        self.marks: List[tuple] = []

    def __call__(self, cycle: int, residual: float) -> None:
        from torch_geometric_regcn.distributed import traffic
        self.marks.append((cycle, time.perf_counter() - self.start, traffic(self.stage),
                           residual))


def _pipeline(rank: int, world_size: int, args: Dict[str, Any]) -> Dict[str, Any]:
    r"""The measured pipeline on one rank, up to the stage :obj:`args["upto"]`."""
    from torch.nn.parallel import DistributedDataParallel

    from torch_geometric_regcn import TSGCN, SemanticGraph
    from torch_geometric_regcn.datasets import contextual_sbm_shard
    from torch_geometric_regcn.distributed import global_mean
    from torch_geometric_regcn.linalg.eigensolver import extreme_eigenpairs
    from torch_geometric_regcn.linalg.woodbury import factors_from_eigenpairs
    from torch_geometric_regcn.regularizers import GraphOperators, tsgcn_adjacency

    warnings.filterwarnings('ignore', message=r'.*[Ss]parse.*beta')
    warnings.filterwarnings('ignore', message=r'Block Lanczos stopped after')  # --max-iter
    group, me = dist.group.WORLD, _Rank()
    with me.stage('shard generation'):
        shard = contextual_sbm_shard(args['nodes'], world_size, rank, num_classes=CLASSES,
                                     num_features=args['features'],
                                     avg_degree=args['degree'], seed=0)
    part = shard.partition
    me.info.update(rows=part.num_local, edges=shard.edge_index.size(1))
    with me.stage('semantic graph'):
        if args['semantic'] == 'knn':
            shard = SemanticGraph(K, progress=False, group=group)(shard)
        else:  # K random same-class neighbours per node, the same for any P
            shard.semantic_edge_index = contextual_sbm_shard(
                args['nodes'], world_size, rank, num_classes=CLASSES, num_features=1,
                avg_degree=2 * K, homophily=1.0, seed=1).edge_index
    me.info['semantic_edges'] = shard.semantic_edge_index.size(1)
    if args['upto'] == 'semantic graph':
        return {'stages': me.stages, 'info': me.info}
    with me.stage('operator S'):
        graph = GraphOperators(part.num_nodes, shard.edge_index, dtype=torch.float32,
                               semantic_edge_index=shard.semantic_edge_index,
                               partition=part, group=group)
        operator = tsgcn_adjacency(graph, ALPHA, BETA)
    me.info.update(nnz=operator.local._nnz(), halo=operator.plan.halo.numel())
    clock = _CycleClock('Lanczos eigenpairs')
    with me.stage('Lanczos eigenpairs'):
        clock.start = time.perf_counter()
        pairs = extreme_eigenpairs(operator, args['rank'], 'LA', 1e-4, args['max_iter'],
                                   'lanczos', generator=torch.Generator().manual_seed(0),
                                   callback=clock)
        w, v = factors_from_eigenpairs(pairs.eigenvalues, pairs.eigenvectors)
    me.info.update(cycles=clock.marks, converged=bool(pairs.converged),
                   residual=float(pairs.residual),
                   eigenvalues=(float(pairs.eigenvalues.min()),
                                float(pairs.eigenvalues.max())))
    del operator, pairs

    x, y = shard.x, shard.y
    train = (shard.node_id * 2654435761) % 2**32 < int(0.05 * 2**32)  # 5 %, per node
    torch.manual_seed(0)
    model = DistributedDataParallel(TSGCN(x.size(1), HIDDEN, CLASSES, group=group))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    epochs, losses = [], []
    with me.stage('training epochs'):
        for _ in range(args['epochs']):
            start = time.perf_counter()
            optimizer.zero_grad()
            loss = global_mean(F.cross_entropy(model(x, w, v)[train], y[train],
                                               reduction='sum'), int(train.sum()), group)
            loss.backward()
            optimizer.step()
            epochs.append(time.perf_counter() - start)
            losses.append(float(loss.detach()))
    me.info.update(epochs=epochs, losses=losses,
                   parameters=sum(p.numel() for p in model.parameters()))
    return {'stages': me.stages, 'info': me.info}


def _worker(rank: int, world_size: int, port: int, threads: int, args: Dict[str, Any],
            results: Any, fn: Optional[Callable[[int, int, Dict[str, Any]], Any]] = None
            ) -> None:
    torch.set_num_threads(threads)
    try:
        dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank,
                                world_size=world_size,
                                timeout=datetime.timedelta(seconds=args['timeout']))
        results.put((rank, (fn or _pipeline)(rank, world_size, args)))
    except BaseException as error:  # reported by the parent
        results.put((rank, {'error': f'{type(error).__name__}: {error}\n'
                                     f'{traceback.format_exc()}'}))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_pipeline(world_size: int, threads: int, args: Dict[str, Any],
                 fn: Optional[Callable[[int, int, Dict[str, Any]], Any]] = None
                 ) -> List[Dict[str, Any]]:
    r"""The pipeline (or :obj:`fn(rank, world_size, args)`, a module-level
    function) on :obj:`world_size` spawned gloo processes with
    :obj:`threads` threads each; every rank's measurements, in rank order, or
    ``[{'error': ...}]``."""
    ctx = mp.get_context('spawn')
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world_size, port, threads, args, results, fn),
                         daemon=True) for r in range(world_size)]
    with child_environment(threads):
        for p in procs:
            p.start()
    collected: Dict[int, Dict[str, Any]] = {}
    deadline = time.monotonic() + args['timeout']
    try:
        while len(collected) < world_size:
            if time.monotonic() > deadline:
                return [{'error': f'ran past {args["timeout"]:.0f} s'}]
            try:
                rank, out = results.get(timeout=5.0)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if not p.is_alive() and r not in collected]
                if dead and results.empty():
                    time.sleep(2.0)
                    if results.empty():
                        return [{'error': f'ranks {dead} died (exit codes '
                                          f'{[procs[r].exitcode for r in dead]}; out of '
                                          f'memory?)'}]
                continue
            collected[rank] = out
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    errors = [out['error'] for out in collected.values() if 'error' in out]
    return [{'error': errors[0]}] if errors else [collected[r] for r in range(world_size)]
