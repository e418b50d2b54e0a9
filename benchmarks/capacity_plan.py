r"""The capacity plan of ``docs/distributed.md`` for ogbn-papers100M: memory
per rank, communication per Lanczos cycle and per epoch, and times
extrapolated from the per-cycle and per-epoch costs measured by
``python -m benchmarks.distributed`` (``benchmarks/results/distributed.md``) and the
memory of building the operator measured by ``python -m benchmarks.operator_build``.

Run from the repository root::

    python -m benchmarks.capacity_plan

It prints the tables pasted into ``docs/distributed.md``; it computes, it
runs nothing. Every input is a constant below, named and sourced.
"""
import argparse
import math

# ogbn-papers100M (OGB): nodes, directed edges, float32 features, classes.
NODES, EDGES, FEATURES, CLASSES = 111_059_956, 1_615_685_872, 128, 172
K = 10  # semantic neighbours
SEMANTIC_PER_NODE = 16.6  # symmetrised kNN edges per node (benchmarks/results/scale.md, k = 10)
BLOCK = 16  # block Lanczos block size b (min(rank, 16))
HIDDEN = 32  # the paper's hidden width

# Measured (benchmarks/results/distributed.md: 2,000,000 nodes, 82.0M entries of S,
# one CPU thread per process, contiguous rows of a graph without locality):
BENCH_NODES, BENCH_NNZ = 2_000_000, 81_996_696
CYCLE_CORE_SECONDS = 192.5  # a restarted filtered Lanczos cycle, one process, one thread
EPOCH_CORE_SECONDS = 4.64  # one training epoch (forward, backward, step), idem
# Peak rise while building S, per stored entry of a rank: the largest measured by
# ``python -m benchmarks.operator_build --nodes 200000 1000000 --ranks 2`` (24-35 for
# one process, one and two gloo ranks; 108-171 before S was built by chunks of rows).
BUILD_BYTES_PER_ENTRY = 35
# Peak rise of a rank's Lanczos stage over its basis, less the halo exchange's buffer
# below: at 500,000 nodes (benchmarks/results/distributed_500k.md, since the sharded
# products allocate no n-row temporaries) 1.57 for one process, 1.65 on the largest rank
# at P = 2 (474 MiB less its 46 MiB buffer, over a 259 MiB basis) and 1.89 at P = 3 (378
# less 51, over 173: a rank's fixed costs weigh more against a smaller basis); the plan
# takes the largest, rounded up. It was 2.9 while the heap kept those temporaries.
LANCZOS_WORK = 1.9
CYCLES = 16  # filtered cycles to tol 1e-4 on the 200,000-node graph (its full run)
HALO_BUDGET = 64 * 2**20  # linalg.sharded_matrix.HALO_BUDGET: the halo rows of one exchange
DEGREE = 8  # the Chebyshev filter's degree

GB = 1e9


def basis_columns(rank: int) -> int:
    r""":math:`m + b` of :func:`~torch_geometric_regcn.linalg.block_lanczos`'s defaults."""
    b = min(rank, BLOCK)
    return b * math.ceil((2 * rank + 8 * b) / b) + b


def products_per_cycle(rank: int) -> int:
    r"""Block products of a restarted filtered cycle: the Lanczos steps times the
    filter degree, plus the Rayleigh--Ritz product with the :obj:`rank` vectors."""
    b = min(rank, BLOCK)
    m = basis_columns(rank) - b
    keep = m - b * max(1, (m - rank) // (2 * b))
    return ((m - keep - b) // b + 1) * DEGREE + rank // b


def entries(parts: int) -> float:
    r"""Stored entries of S per rank: both directions of every edge, the
    semantic edges, the diagonal."""
    return (2 * EDGES + SEMANTIC_PER_NODE * NODES + NODES) / parts


def halo_buffer(parts: int) -> float:
    r"""Bytes of a block product's halo exchange buffer at the worst-case halo
    (every other rank's rows, :math:`h = N - n`; each rank's rows sent to
    every other, :math:`s = (P - 1) n`): the :math:`(n + h + s) c` numbers
    that :class:`~torch_geometric_regcn.linalg.ShardedMatrix` keeps, whose
    chunks hold :math:`c = \max(1, \min(b, \lfloor \text{budget} / (4h)
    \rfloor))` of the block's :math:`b` columns."""
    if parts == 1:
        return 0.0
    rows = NODES / parts
    halo = NODES - rows
    columns = max(1, min(BLOCK, int(HALO_BUDGET // (4 * halo))))
    return 4 * (rows + halo + (parts - 1) * rows) * columns


def memory(parts: int, rank: int) -> dict:
    r"""Bytes per rank: float32 values, CSR with int32 columns, and in the
    Lanczos stage the buffer of a product's halo exchange
    (:func:`halo_buffer`)."""
    rows = NODES / parts
    x, s = 4 * rows * FEATURES, 8 * entries(parts)
    basis = 4 * rows * basis_columns(rank)
    return {
        'x': x,
        'S': s,
        'build S': BUILD_BYTES_PER_ENTRY * entries(parts) + x,
        'Lanczos': LANCZOS_WORK * basis + s + x + halo_buffer(parts),
        'training': x + 8 * rows * rank,
    }


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print('| ranks | r | x | S | peak building S | peak in Lanczos | training (x, W, V) |')
    print('|---|---|---|---|---|---|---|')
    for rank in (64, 128):
        for parts in (8, 16, 32):
            m = memory(parts, rank)
            cells = ' | '.join(f"{m[key] / GB:.0f}" for key in m)
            print(f'| {parts} | {rank} | {cells} |')
    print()
    print('| ranks | r | block products per cycle | GB per cycle per rank, no locality '
          '| same, halo = own rows | MB per epoch per rank |')
    print('|---|---|---|---|---|---|')
    for rank in (64, 128):
        for parts in (8, 16, 32):
            rows = NODES / parts
            per_product = 4 * min(rank, BLOCK)
            products = products_per_cycle(rank)
            epoch = 2 * 4 * rank * (HIDDEN + CLASSES) + 4 * (FEATURES * HIDDEN
                                                             + HIDDEN * CLASSES)
            print(f'| {parts} | {rank} | {products} | '
                  f'{products * (NODES - rows) * per_product / GB:.0f} | '
                  f'{products * rows * per_product / GB:.0f} | {epoch / 1e6:.2f} |')
    print()
    print('| ranks | r | core-seconds per cycle | cycle on 16 cores (s) | its network time at '
          '100 Gb/s, no locality (s) | eigenpairs (min) | epoch on 16 cores (s) |')
    print('|---|---|---|---|---|---|---|')
    for rank in (64, 128):
        for parts in (8, 16, 32):
            work = entries(parts) / BENCH_NNZ  # per rank, relative to the benchmark's S
            # the cycle's cost grows with the basis columns as the orthogonalisation does
            grow = (basis_columns(rank) / basis_columns(64)) ** 2
            core = CYCLE_CORE_SECONDS * work * grow
            network = (products_per_cycle(rank) * (NODES - NODES / parts)
                       * 4 * min(rank, BLOCK) / 12.5e9)
            cycle = core / 16 + network
            epoch = EPOCH_CORE_SECONDS * (NODES / parts) / BENCH_NODES / 16
            print(f'| {parts} | {rank} | {core:,.0f} | {core / 16:.0f} | {network:.0f} | '
                  f'{(CYCLES + 1) * cycle / 60:.0f} | {epoch:.2f} |')


if __name__ == '__main__':
    main()
