r"""The arguments of a cosine kNN search: checked on each rank before any
heavy work, agreed on by every rank (a rank with bad input makes all of them
raise, none waits in a collective), and the search method resolved. With
:obj:`group=None` the agreement costs nothing."""
import importlib.util
import zlib
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import Group, agree_arguments, check_group
from torch_geometric_regcn.distributed.row_partition import (
    RowPartition,
    check_node_id,
    check_node_id_sums,
    check_partition,
    node_id_sums,
)
from torch_geometric_regcn.utils.validation import (
    check_choice,
    check_int,
    check_node_features,
    real_features,
)

#: :obj:`"auto"` searches exactly on CUDA or up to this many nodes, else by IVF.
EXACT_LIMIT = 50_000
#: The values of :obj:`method`: chosen from the graph, exact, approximate, or
#: approximate by the optional faiss backend (one process).
KNN_METHODS = ('auto', 'exact', 'ivf', 'faiss')

#: A value every rank must hold alike: (its name in the error, the value).
Field = Tuple[str, object]


def resolve_method(method: str, x: Tensor, num_nodes: int) -> str:
    r"""The search that :obj:`method` names; :obj:`"auto"` is the exact
    search on CUDA, for sparse :obj:`x` or up to :data:`EXACT_LIMIT` nodes of
    the whole graph, else IVF."""
    check_choice('method', method, KNN_METHODS)
    if method == 'auto':
        exact = x.is_cuda or x.layout != torch.strided or num_nodes <= EXACT_LIMIT
        method = 'exact' if exact else 'ivf'
    if method in ('ivf', 'faiss') and x.layout != torch.strided:
        raise ValueError(f"the {method!r} search needs dense features; search sparse 'x' "
                         "exactly (exact_knn_cosine, or method='exact' of knn_graph_cosine "
                         "and SemanticGraph), or pass 'x.to_dense()'")
    return method


def faiss_available() -> bool:
    r"""Whether the optional ``faiss`` package can be imported."""
    return importlib.util.find_spec('faiss') is not None


def check_faiss(partition: RowPartition) -> None:
    r"""The faiss backend searches in one process and needs ``faiss``."""
    if partition.num_parts > 1:
        raise ValueError("method='faiss' searches in one process; use method='ivf' (or "
                         "'exact') on row shards")
    if not faiss_available():
        raise ImportError("method='faiss' needs faiss: 'pip install faiss-cpu' (or "
                          "'pip install torch_geometric_regcn[faiss]'), or use method='ivf'")


def check_generator(generator: Optional[torch.Generator]) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"'generator' must be a torch.Generator or None (got "
                        f"{type(generator).__name__} {generator!r})")


def check_search(x: Tensor, k: int, partition: Optional[RowPartition], group: Group,
                 what: str, method: str, block_size: Optional[int] = None,
                 generator: Optional[torch.Generator] = None,
                 options: Optional[Callable[[int], List[Field]]] = None,
                 node_id: Optional[Tensor] = None,
                 ) -> Tuple[Tensor, RowPartition, str, int, Optional[int]]:
    r"""Checks the arguments of the search :obj:`what` on this rank, agrees
    with the other ranks that all passed, and checks that every rank
    searches alike (:obj:`k`, columns, method, dtype, layout, device, the
    row blocks, the state of :obj:`generator` for IVF, and the
    :obj:`options` fields).

    Args:
        x (torch.Tensor): This rank's rows of the features; integer ones
            are converted to the default dtype, half-precision ones to
            float32.
        k (int): Neighbours per node, :math:`1 \le k < N`.
        partition (RowPartition, optional): The row blocks; required with a
            :obj:`group`, else :obj:`RowPartition.even(N, 1)`.
        group (torch.distributed.ProcessGroup, optional): The ranks.
        what (str): The entry point, named in the errors.
        method (str): :obj:`"auto"`, :obj:`"exact"`, :obj:`"ivf"` or
            :obj:`"faiss"`.
        block_size (int, optional): Checked to be a positive integer.
        generator (torch.Generator, optional): Compared across the ranks
            for IVF.
        options (callable, optional): Further checks, called with :math:`N`
            inside the agreement; returns the fields to compare.
        node_id (torch.Tensor, optional): The tie keys of this rank's rows
            (:func:`~torch_geometric_regcn.distributed.row_partition.check_node_id`),
            given on every rank or on none, together a permutation.

    Returns:
        The floating-point features, the partition, the resolved method, and
        :obj:`k` and :obj:`block_size` as :class:`int` (a NumPy integer or a
        0-d tensor, which the checks accept, would wrap in :obj:`k + 1` or
        reach faiss as it is).
    """
    check_group(group)
    error, fields, same = None, [], {}
    try:
        x = real_features(x)
        if isinstance(x, Tensor) and x.is_floating_point() and x.element_size() < 4:
            # Half precision or float8, whose few significant digits would decide
            # the neighbours: float32, as LowRankInverse searches.
            x = x.float()
        check_generator(generator)
        check_node_features(x, 'x')
        if partition is None and group is None:
            partition = RowPartition.even(x.size(0), 1)
        partition = check_partition(partition, group, 'partition')
        if x.size(0) != partition.num_local:
            raise ValueError(f"'x' has {x.size(0)} rows, but rank {partition.rank} owns "
                             f"{partition.num_local} nodes of the partition (nodes "
                             f"{partition.start} to {partition.end - 1})")
        k = check_int('k', k)
        num_nodes = partition.num_nodes
        if not k < num_nodes:
            if num_nodes < 2:
                raise ValueError(f"a kNN graph needs at least 2 nodes, each with another to "
                                 f"link to (got {num_nodes})")
            raise ValueError(f"'k' must lie in [1, {num_nodes - 1}] for a graph of "
                             f"{num_nodes} nodes (got {k})")
        if block_size is not None:
            block_size = check_int('block_size', block_size)
        check_node_id(node_id, x.size(0), num_nodes, x.device, "'x'")
        method = resolve_method(method, x, num_nodes)
        if method == 'faiss':
            check_faiss(partition)
        if options is not None:
            fields = options(num_nodes)
        if group is not None:  # agreed with the checks, in one collective
            state = torch.default_generator if generator is None else generator
            same = dict([
                ("'k'", k),
                ("the number of columns of 'x'", x.size(1)),
                ('the search method', method),
                ("the dtype, layout (dense or sparse) and device of 'x'",
                 (x.dtype, x.layout, x.device.type)),
                ("the row blocks of 'partition'", partition.bounds),
                ("whether 'node_id' is given", node_id is not None),
                # a few thousand bytes: compared, and shown, by their checksum
                ("the state of 'generator'", f'checksum {zlib.crc32(state.get_state().numpy())}'
                 if method in ('ivf', 'faiss') else 0),
                *fields])
    except (TypeError, ValueError) as exc:
        error = exc
    # Distinct on each rank, the keys must also be a permutation over the ranks: their
    # hashed sums shared in the same collective.
    shared = agree_arguments(group, what, same, error,
                             share=node_id_sums(node_id if error is None else None, group))
    check_node_id_sums(shared, node_id, partition.num_nodes, group)
    return x, partition, method, k, block_size


def check_kmeans(x: Tensor, cells: int, iterations: int, block_size: Optional[int],
                 generator: Optional[torch.Generator] = None
                 ) -> Tuple[int, int, Optional[int]]:
    r"""The arguments of :func:`~torch_geometric_regcn.knn.spherical_kmeans`:
    a dense floating-point :obj:`x` :obj:`[N, F]` without NaN or infinity
    whose rows are of unit norm or zero, within :math:`10^{-3}` or four
    units of its dtype's rounding (bfloat16's normalisation moves a norm by
    up to about :math:`4 \cdot 10^{-3}`; two passes over it),
    :math:`1 \le \text{cells} \le N`, a non-negative
    :obj:`iterations`, a positive :obj:`block_size` (or :obj:`None`) and a
    :class:`torch.Generator` (or :obj:`None`); returns the counts as
    :class:`int`."""
    check_node_features(x, 'x')
    if x.layout != torch.strided:
        raise TypeError("'x' must be dense for spherical_kmeans; use 'x.to_dense()'")
    norms = x.norm(dim=1, dtype=torch.float32 if x.element_size() < 4 else x.dtype)
    # bfloat16's rounding (eps 7.8e-3) alone moves a normalised row's norm by 4e-3.
    off = ((norms - 1).abs() > max(1e-3, 4 * torch.finfo(x.dtype).eps)) & (norms != 0)
    if bool(off.any()):
        row = int(off.nonzero()[0])
        raise ValueError(f"spherical_kmeans clusters unit rows, but row {row} of 'x' has norm "
                         f"{float(norms[row]):.4g}: normalise the rows first "
                         f"(knn.normalize_rows)")
    check_generator(generator)
    cells = check_int('cells', cells, minimum=None)
    if not 0 < cells <= x.size(0):
        raise ValueError(f"'cells' must lie in [1, {x.size(0)}], at most one cluster per row "
                         f"of 'x' (got {cells})")
    return (cells, check_int('iterations', iterations, minimum=0),
            None if block_size is None else check_int('block_size', block_size))

