r"""Splitting a graph into row shards, one per process, and keeping them on disk."""
import hashlib
import os
import os.path as osp
import warnings
from typing import Any, List, Optional, Tuple, Union

import numpy
import torch
from torch import Tensor
from torch_geometric.data import Data

from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.utils.validation import (
    as_root,
    check_choice,
    check_edge_index,
    check_int,
)

#: :obj:`"contiguous"`: the node order as given, cut into equal blocks;
#: :obj:`"metis"`: METIS parts (through pyg-lib, torch-sparse or pymetis),
#: renumbered so that each part is one block.
PARTITION_METHODS = ('contiguous', 'metis')

#: Edge-level attributes of a shard: sliced with the edges of its rows.
EDGE_KEYS = {'edge_index': ('edge_weight', 'edge_attr'),
             'semantic_edge_index': ()}

#: The seed of METIS's random choices through pymetis (pyg-lib and
#: torch-sparse run METIS with its own fixed default seed).
METIS_SEED = 0


def metis_graph(edge_index: Tensor, num_nodes: int) -> Tuple[Tensor, Tensor]:
    r"""The graph as METIS reads it: :obj:`(rowptr, col)` of the symmetric
    adjacency in CSR form, without self loops or repeated edges (the edge
    weights are not used)."""
    from torch_geometric.utils import index_sort, remove_self_loops, to_undirected
    edge_index, _ = remove_self_loops(edge_index)
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    row, index = index_sort(edge_index[0], max_value=num_nodes)
    col = edge_index[1][index]
    rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
    rowptr[1:] = torch.bincount(row, minlength=num_nodes).cumsum(0)
    return rowptr, col


def _metis(edge_index: Tensor, num_nodes: int, num_parts: int) -> Tensor:
    r"""The METIS part of every node (k-way, METIS's default balance of 3 %):
    through pyg-lib or torch-sparse when one is installed with METIS (as
    before pymetis was supported, so their partitions stay as they were),
    else through pymetis with the seed :data:`METIS_SEED`. Deterministic for
    a given graph and backend."""
    from torch_geometric.typing import WITH_METIS
    pymetis = None
    if not WITH_METIS:
        try:
            import pymetis
        except ImportError:
            raise ImportError("method='metis' needs pymetis (pip install "
                              "torch_geometric_regcn[metis]), or pyg-lib or torch-sparse with "
                              "METIS support; use method='contiguous'") from None
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.long)
    rowptr, col = metis_graph(edge_index, num_nodes)
    if pymetis is not None:
        options = pymetis.Options(seed=METIS_SEED)
        xadj, adjncy = rowptr.numpy(), col.numpy()
        if hasattr(pymetis, 'CSRAdjacency'):  # pymetis >= 2025.2
            result = pymetis.part_graph(num_parts, pymetis.CSRAdjacency(xadj, adjncy),
                                        options=options)
        else:
            result = pymetis.part_graph(num_parts, xadj=xadj, adjncy=adjncy, options=options)
        # (edge cuts, parts); the parts an array of METIS's idx_t or a list
        return torch.from_numpy(numpy.asarray(result[1], dtype=numpy.int64))
    try:
        import pyg_lib
        return pyg_lib.partition.metis(rowptr, col, num_parts, recursive=False)
    except ImportError:
        return torch.ops.torch_sparse.partition(rowptr, col, None, num_parts, False)


def partition(data: Data, num_parts: int, method: str = 'contiguous') -> List[Data]:
    r"""Splits :obj:`data` into :obj:`num_parts` row shards for
    :mod:`torch.distributed` (one per process): shard :math:`p` holds the rows
    of nodes :obj:`bounds[p]` to :obj:`bounds[p + 1] - 1` of every node-level
    tensor (:obj:`x`, :obj:`y`, masks, ...; sparse ones too), the edges of
    :obj:`edge_index` and :obj:`semantic_edge_index` whose first index is one
    of its nodes, with their attributes (one row per edge: :obj:`edge_weight`,
    :obj:`edge_attr` and an :obj:`edge_*` of as many rows go with
    :obj:`edge_index`, :obj:`semantic_edge_*` with :obj:`semantic_edge_index`,
    another edge attribute by PyG's rule with the only edge set of as many
    edges), with global node indices, the graph-level attributes (Python
    scalars and strings, 0-dim tensors, floating-point tensors of no node
    dimension such as class weights) unchanged, :obj:`data.partition` (a
    :class:`~torch_geometric_regcn.distributed.RowPartition`) and
    :obj:`data.node_id`, the index of each row in :obj:`data`, and
    :obj:`data.graph_key`, a digest of the graph's edges and edge weights
    (:math:`O(E)`), by which :func:`load_partition`, :class:`SemanticGraph`
    and :class:`LowRankInverse` refuse shards of different graphs. No shard
    holds anything of size :math:`N \times F` or :math:`N \times N`.

    With :obj:`method="contiguous"` the nodes keep their order (a shard is a
    block of rows, :obj:`node_id` is :obj:`arange(start, end)`), which suits
    graphs whose order already follows communities. :obj:`method="metis"`
    cuts fewer edges on other graphs, so the halo a rank exchanges per sparse
    product is smaller; the nodes are then renumbered part by part, every
    index in the shards (and the rows of the results) follows the new
    numbering, and :obj:`node_id` maps back. METIS (k-way, parts within 3 %
    of :math:`N / P` nodes) partitions the graph of :obj:`edge_index` and
    :obj:`semantic_edge_index` together (the pattern of tsGCN's operator),
    symmetrised, without self loops or weights, deterministically; it runs through
    pyg-lib or torch-sparse when one is installed with METIS support, else
    through pymetis (:obj:`pip install torch_geometric_regcn[metis]`, seed
    :data:`METIS_SEED`), and needs about :math:`16 E` bytes beyond the graph.
    With :math:`P` close to :math:`N` METIS may leave parts empty (a path of
    10 nodes in 9 parts gives four), and those ranks hold no rows; on real
    graphs :math:`P \ll N` and every part holds close to :math:`N / P`.
    ``docs/distributed.md`` gives its measured halo and traffic.

    Args:
        data (torch_geometric.data.Data): The whole graph.
        num_parts (int): The number of shards :math:`P`, at most :math:`N`.
        method (str, optional): :obj:`"contiguous"` or :obj:`"metis"`.
            (default: :obj:`"contiguous"`)
    """
    num_parts = check_int('num_parts', num_parts)
    check_choice('method', method, PARTITION_METHODS)
    num_nodes = data.num_nodes
    if not num_nodes or num_parts > num_nodes:
        raise ValueError(f"'num_parts' must not exceed the number of nodes {num_nodes or 0} "
                         f"(got {num_parts})")
    for key in EDGE_KEYS:
        if key in data and data[key] is not None:
            check_edge_index(data[key], num_nodes, name=f'data.{key}')
    # Edge-level by PyG's rule (Data.is_edge_attr) or as an attribute of the
    # semantic edges by name, then node-level by row count: an edge attribute
    # stays with its edges even where an edge set has as many edges as the
    # graph has nodes.
    known = set(EDGE_KEYS) | {name for extra in EDGE_KEYS.values() for name in extra}
    edge_keys = [key for key, value in data.items()
                 if isinstance(value, Tensor) and key not in known and value.dim() > 0
                 and (key.startswith('semantic_edge_') or data.is_edge_attr(key))]
    node_keys = [key for key, value in data.items()
                 if isinstance(value, Tensor) and key not in known and key not in edge_keys
                 and value.dim() > 0 and value.size(0) == num_nodes]
    rest = [key for key in data.keys() if key not in known and key not in edge_keys
            and key not in node_keys and key != 'num_nodes']
    graph_keys = [key for key in rest if _graph_level(data[key], num_nodes)]
    if len(graph_keys) < len(rest):
        warnings.warn(f"partition() drops {[k for k in rest if k not in graph_keys]}: neither "
                      f"node- nor edge- nor graph-level (node indices, which the shards would "
                      f"read in the wrong numbering, or an object of the whole graph); "
                      f"give each shard its part of them", UserWarning, stacklevel=2)
    present = [key for key in EDGE_KEYS if key in data and data[key] is not None]
    owner = {name: _edge_set_of(name, data[name].size(0), present, data) for name in edge_keys}
    for key in present:  # one row per edge, or the shards would cut them elsewhere
        for name in (*EDGE_KEYS[key], *(n for n in edge_keys if owner[n] == key)):
            if name in data and data[name] is not None \
                    and data[name].size(0) != data[key].size(1):
                raise ValueError(f"'data.{name}' must have one row per edge of "
                                 f"'data.{key}', {data[key].size(1)} (got "
                                 f"{data[name].size(0)})")
    graph_key = _graph_key(num_nodes, data, present)
    if method == 'metis':  # the pattern of the operators: every edge set the shards hold
        graph = torch.cat([torch.empty(2, 0, dtype=torch.long)] + [
            data[key].cpu() for key in EDGE_KEYS if key in data and data[key] is not None],
            dim=1)
        cluster = _metis(graph, num_nodes, num_parts)
        node_id = cluster.argsort(stable=True)
        counts = torch.bincount(cluster, minlength=num_parts).cumsum(0).tolist()
        bounds = (0, *counts)
        new_id = torch.empty_like(node_id)
        new_id[node_id] = torch.arange(num_nodes)
    else:
        bounds = RowPartition.even(num_nodes, num_parts).bounds
        node_id = new_id = None

    edges = {}
    for key, extra in EDGE_KEYS.items():
        if key not in present:
            continue
        extra = (*extra, *(name for name in edge_keys if owner[name] == key))
        edge_keys = [name for name in edge_keys if name not in extra]
        index = data[key] if new_id is None else new_id[data[key]]
        order = index[0].argsort(stable=True)
        index = index[:, order]
        cuts = torch.searchsorted(index[0], torch.tensor(bounds)).tolist()
        attrs = {name: data[name][order] for name in extra
                 if name in data and data[name] is not None}
        edges[key] = (index, cuts, attrs)
    if edge_keys:
        warnings.warn(f"partition() drops the edge attribute(s) {edge_keys}: their rows match "
                      f"none of the edge sets {[k for k in EDGE_KEYS if k in data]}",
                      UserWarning, stacklevel=2)

    shards = []
    for p in range(num_parts):
        start, end = bounds[p], bounds[p + 1]
        rows = torch.arange(start, end) if node_id is None else node_id[start:end]
        shard = Data(num_nodes=end - start)
        for key in graph_keys:  # the graph's, the same in every shard
            shard[key] = data[key]
        for key in node_keys:
            shard[key] = _rows(data[key], rows)
        for key, (index, cuts, attrs) in edges.items():
            shard[key] = index[:, cuts[p]:cuts[p + 1]]
            for name, value in attrs.items():
                shard[name] = value[cuts[p]:cuts[p + 1]]
        shard.node_id = rows
        shard.graph_key = graph_key  # the graph it was cut from (its edges), see load_partition
        shard.partition = RowPartition(tuple(bounds), p)
        shards.append(shard)
    return shards


def shard_node_id(data: Data, partition: Optional[RowPartition],
                  device: torch.device) -> Optional[Tensor]:
    r"""The original index of each row of a shard (:obj:`data.node_id`, as
    :func:`partition` writes it) on :obj:`device`, the tie keys of a
    :math:`k`-NN search on shards; :obj:`None` in one process (no
    :obj:`partition`) or where the shard holds none."""
    node_id = data.get('node_id') if partition is not None else None
    return node_id.to(device) if isinstance(node_id, Tensor) else None


def _graph_level(value: Any, num_nodes: int) -> bool:
    r"""Whether :obj:`value` describes the whole graph and is the same in every
    shard: a Python scalar or string, a 0-dim tensor, or a floating-point
    tensor none of whose dimensions is the number of nodes (class weights,
    a scale); not an index tensor (node indices would be in the whole
    graph's numbering) nor another object (a :obj:`SparseTensor`)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, Tensor):
        return value.dim() == 0 or (value.is_floating_point() and num_nodes not in value.shape)
    return False


def _graph_key(num_nodes: int, data: Data, present: List[str]) -> str:
    r"""A hex digest of the graph :func:`partition` cuts: its node count and
    the bytes of every edge set and edge weight (:math:`O(E)`), which every
    shard carries as :obj:`graph_key` so that shards of different graphs are
    told apart. The features are not read."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f'nodes {num_nodes}'.encode())
    for key in present:
        for name in (key, *EDGE_KEYS[key]):
            value = data[name] if name in data else None
            if not isinstance(value, Tensor):
                continue
            value = value.detach().cpu()
            value = value.double() if value.is_floating_point() else value.long()
            digest.update(f'|{name} {tuple(value.shape)}|'.encode())
            digest.update(value.contiguous().numpy().tobytes())
    return digest.hexdigest()


def _edge_set_of(name: str, rows: int, present: List[str], data: Data) -> Optional[str]:
    r"""The edge set an edge attribute belongs to: :obj:`semantic_edge_index`
    for a :obj:`semantic_edge_*` (its length checked by the caller),
    :obj:`edge_index` for an :obj:`edge_*` of as many rows, else the only
    one of as many edges (:obj:`None` if none; an error where several could
    own it)."""
    if name.startswith('semantic_edge_') and 'semantic_edge_index' in present:
        return 'semantic_edge_index'
    if name.startswith('edge_') and 'edge_index' in present \
            and data.edge_index.size(1) == rows:
        return 'edge_index'
    sized = [key for key in present if data[key].size(1) == rows]
    if len(sized) > 1:
        raise ValueError(f"'data.{name}' could belong to any of {sized} (as many edges); "
                         f"name it after its edge set (e.g. 'semantic_edge_{name}' for "
                         f"'semantic_edge_index')")
    return sized[0] if sized else None


def _rows(value: Tensor, rows: Tensor) -> Tensor:
    r"""The rows :obj:`rows` of a node attribute, dense or sparse (COO, CSR)."""
    if value.layout == torch.sparse_coo:
        return value.index_select(0, rows)
    if value.layout == torch.sparse_csr:
        return value.to_sparse_coo().index_select(0, rows).to_sparse_csr()
    return value[rows]


#: The file of a shard directory that names the graph of the last
#: :func:`save_partition`, whose shards :func:`load_partition` alone reads.
GRAPH_KEY_FILE = 'graph-key.txt'


def _shard_path(root: str, rank: int, num_parts: int) -> str:
    return osp.join(osp.expanduser(root), f'part-{rank}-of-{num_parts}.pt')


def save_partition(shards: List[Data], root: Union[str, 'os.PathLike[str]']) -> List[str]:
    r"""Writes each shard of :func:`partition` to
    :obj:`root/part-{p}-of-{P}.pt` (the tensors and the row blocks, atomically)
    and returns the paths. A process (or a machine) then reads only its own
    shard with :func:`load_partition`; to write one shard, pass a list of one."""
    root = as_root(root)
    os.makedirs(osp.expanduser(root), exist_ok=True)
    paths = []
    for shard in shards:
        part = shard.partition
        if not isinstance(part, RowPartition):
            raise ValueError("every shard must come from partition() (it lacks "
                             "'partition', its row blocks)")
        payload = {'bounds': list(part.bounds), 'rank': part.rank,
                   'tensors': {key: value for key, value in shard.items()
                               if isinstance(value, Tensor)},
                   'values': {key: value for key, value in shard.items()
                              if isinstance(value, (bool, int, float, str))
                              and key not in ('num_nodes', 'graph_key')},
                   'graph_key': shard.get('graph_key'),
                   'num_nodes': part.num_local}
        path = _shard_path(root, part.rank, part.num_parts)
        tmp = f'{path}.tmp-{os.getpid()}'
        torch.save(payload, tmp)
        os.replace(tmp, path)
        paths.append(path)
    keys = {shard.get('graph_key') for shard in shards}
    if len(keys) == 1 and None not in keys:  # the graph of the last save: older files are stale
        marker = osp.join(osp.expanduser(root), GRAPH_KEY_FILE)
        with open(f'{marker}.tmp-{os.getpid()}', 'w') as file:
            file.write(keys.pop())
        os.replace(f'{marker}.tmp-{os.getpid()}', marker)
    return paths


def load_partition(root: Union[str, 'os.PathLike[str]'], rank: int,
                   num_parts: int, map_location: Optional[str] = None) -> Data:
    r"""Reads the shard of :obj:`rank` of a graph saved by
    :func:`save_partition` in :obj:`num_parts` parts (typically
    :obj:`rank=dist.get_rank()`, :obj:`num_parts=dist.get_world_size()`),
    with :obj:`torch.load(weights_only=True)`."""
    root = as_root(root)
    rank = check_int('rank', rank, minimum=0)
    num_parts = check_int('num_parts', num_parts)
    path = _shard_path(root, rank, num_parts)
    if not osp.exists(path):
        raise FileNotFoundError(f"No shard {rank} of {num_parts} in '{root}' ({path} is "
                                f"missing); save_partition() writes one file per rank")
    payload = torch.load(path, map_location=map_location, weights_only=True)
    bounds = tuple(int(b) for b in payload['bounds'])
    if len(bounds) != num_parts + 1 or int(payload['rank']) != rank:
        raise ValueError(f"'{path}' holds part {payload['rank']} of {len(bounds) - 1}, not "
                         f"{rank} of {num_parts}")
    marker = osp.join(osp.expanduser(root), GRAPH_KEY_FILE)
    graph_key = payload.get('graph_key')
    if osp.exists(marker):
        with open(marker) as file:
            latest = file.read().strip()
        if graph_key != latest:
            raise ValueError(f"'{path}' holds a shard of another graph than the one "
                             f"save_partition() last wrote to '{root}' (a stale file of an "
                             f"older save); write the shards of {num_parts} parts again with "
                             f"save_partition(partition(data, {num_parts}), root)")
    shard = Data(num_nodes=int(payload['num_nodes']), **payload['tensors'],
                 **payload.get('values', {}))
    if graph_key is not None:
        shard.graph_key = graph_key
    shard.partition = RowPartition(bounds, rank)
    return shard
