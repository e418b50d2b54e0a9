r"""The arguments of a cosine kNN search: checked on each rank before any
heavy work, agreed on by every rank (a rank with bad input makes all of them
raise, none waits in a collective), and the search method resolved. With
:obj:`group=None` the agreement costs nothing."""
import zlib
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor

from torch_geometric_regcn.distributed.collectives import (
    Group,
    agree,
    all_gather_ints,
    check_group,
    size_of,
)
from torch_geometric_regcn.distributed.row_partition import RowPartition, check_partition
from torch_geometric_regcn.utils.validation import check_choice, check_int, check_node_features

#: :obj:`"auto"` searches exactly on CUDA or up to this many nodes, else by IVF.
EXACT_LIMIT = 50_000
#: The values of :obj:`method`: chosen from the graph, exact, or approximate.
KNN_METHODS = ('auto', 'exact', 'ivf')

#: A value every rank must hold alike: (its name in the error, an integer
#: or digest of it, whether the integer is readable in the error).
Field = Tuple[str, int, bool]


def resolve_method(method: str, x: Tensor, num_nodes: int) -> str:
    r"""The search that :obj:`method` names; :obj:`"auto"` is the exact
    search on CUDA, for sparse :obj:`x` or up to :data:`EXACT_LIMIT` nodes of
    the whole graph, else IVF."""
    check_choice('method', method, KNN_METHODS)
    if method == 'auto':
        exact = x.is_cuda or x.layout != torch.strided or num_nodes <= EXACT_LIMIT
        method = 'exact' if exact else 'ivf'
    if method == 'ivf' and x.layout != torch.strided:
        raise ValueError("ivf_knn_cosine needs dense features; use the exact search "
                         "(method='exact') for sparse 'x'")
    return method


def check_search(x: Tensor, k: int, partition: Optional[RowPartition], group: Group,
                 what: str, method: str, block_size: Optional[int] = None,
                 generator: Optional[torch.Generator] = None,
                 options: Optional[Callable[[int], List[Field]]] = None,
                 ) -> Tuple[Tensor, RowPartition, str]:
    r"""Checks the arguments of the search :obj:`what` on this rank, agrees
    with the other ranks that all passed, and checks that every rank
    searches alike (:obj:`k`, columns, method, dtype, layout, device, the
    row blocks, the state of :obj:`generator` for IVF, and the
    :obj:`options` fields).

    Args:
        x (torch.Tensor): This rank's rows of the features; integer ones
            are converted to the default dtype.
        k (int): Neighbours per node, :math:`1 \le k < N`.
        partition (RowPartition, optional): The row blocks; required with a
            :obj:`group`, else :obj:`RowPartition.even(N, 1)`.
        group (torch.distributed.ProcessGroup, optional): The ranks.
        what (str): The entry point, named in the errors.
        method (str): :obj:`"auto"`, :obj:`"exact"` or :obj:`"ivf"`.
        block_size (int, optional): Checked to be a positive integer.
        generator (torch.Generator, optional): Compared across the ranks
            for IVF.
        options (callable, optional): Further checks, called with :math:`N`
            inside the agreement; returns the fields to compare.

    Returns:
        The floating-point features, the partition and the resolved method.
    """
    check_group(group)
    error, fields = None, []
    try:
        if isinstance(x, Tensor) and not x.is_floating_point():
            x = x.to(torch.get_default_dtype())
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
            raise ValueError(f"'k' must lie in [1, {num_nodes - 1}] for a graph of "
                             f"{num_nodes} nodes (got {k})")
        if block_size is not None:
            check_int('block_size', block_size)
        method = resolve_method(method, x, num_nodes)
        if options is not None:
            fields = options(num_nodes)
    except (TypeError, ValueError) as exc:
        error = exc
    agree(error, group, what)
    if size_of(group) > 1:
        state = torch.default_generator if generator is None else generator
        _check_same_on_every_rank(group, what, [
            ("'k'", k, True),
            ("the number of columns of 'x'", x.size(1), True),
            ('the search method', KNN_METHODS.index(method), False),
            ("the dtype, layout (dense or sparse) and device of 'x'",
             digest(x.dtype, x.layout == torch.strided, x.device.type), False),
            ("the row blocks of 'partition'", digest(partition.bounds), False),
            ("the state of 'generator'",
             digest(state.get_state().numpy().tobytes()) if method == 'ivf' else 0, False),
            *fields,
        ])
    return x, partition, method


def digest(*values: object) -> int:
    r"""A 32-bit checksum of the :func:`repr` of :obj:`values`."""
    return zlib.crc32(repr(values).encode())


def _check_same_on_every_rank(group: Group, what: str, fields: List[Field]) -> None:
    r"""Raises the same error on every rank if a field differs between the
    ranks (its values shown where :obj:`fields` says they are readable)."""
    table = all_gather_ints([value for _, value, _ in fields], group)
    for i, (name, _, readable) in enumerate(fields):
        values = [row[i] for row in table]
        if len(set(values)) > 1:
            ranks = {v: [r for r, u in enumerate(values) if u == v] for v in values}
            seen = (', '.join(f'{v} on ranks {rs}' for v, rs in ranks.items()) if readable
                    else ' and '.join(f'ranks {rs}' for rs in ranks.values()) + ' differ')
            raise ValueError(f"{what}: {name} must be the same on every rank ({seen})")
