r"""What the transforms of this package write into a graph: one policy for
all of them, checked before any work.

- A transform writes only the attributes it documents, and never one of
  PyG's standard attributes (:data:`STANDARD`: :obj:`x`, :obj:`edge_index`,
  :obj:`y`, the masks, ...) nor one that another part of this package owns
  (:data:`OWNERS`: :obj:`semantic_edge_index`, :obj:`lowrank_w`, ...). Every
  attribute a transform reads is one of these, so none is ever overwritten.
  A name chosen with an argument (:obj:`attr_name`, :obj:`prefix`) that is
  one of them is refused when the transform is built
  (:func:`check_attr_name`). Writing :obj:`data.x` is the documented purpose
  of :obj:`LaplacianEigenPE(attr_name=None)` only, which concatenates to it
  as PyG does.
- Under the transform's own default names (those :data:`OWNERS` gives it), a
  value of the form it writes is its earlier output and is replaced:
  applying a transform again recomputes. A value of another form raises.
- Under a name the user chose, an existing attribute raises: the transform
  cannot tell its own earlier output from another attribute of the same
  shape. The fix is another name, or deleting the attribute first.

:func:`check_outputs` applies the last two rules; ``docs/reliability.md``
states the policy for users.
"""
import re
from typing import Any, Callable, NamedTuple, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Batch, Data, HeteroData

#: PyG's standard attributes: those its :class:`~torch_geometric.data.Data`,
#: loaders, samplers and datasets give a meaning of their own.
STANDARD = frozenset({
    'x', 'edge_index', 'edge_weight', 'edge_attr', 'y', 'pos', 'batch', 'ptr', 'face',
    'time', 'num_nodes', 'adj', 'adj_t', 'train_mask', 'val_mask', 'test_mask',
    'edge_label', 'edge_label_index', 'edge_time', 'n_id', 'e_id', 'input_id',
    'batch_size', 'num_sampled_nodes', 'num_sampled_edges', 'node_type', 'edge_type',
})

#: The attributes this package writes by default: the name, who writes it,
#: what it holds.
OWNERS = {
    'semantic_edge_index': ('SemanticGraph', 'the semantic graph'),
    'lowrank_w': ('LowRankInverse', 'the low-rank factors'),
    'lowrank_v': ('LowRankInverse', 'the low-rank factors'),
    'laplacian_eigenvector_pe': ('LaplacianEigenPE', 'the Laplacian eigenvector encoding'),
    'partition': ('distributed.partition', "a shard's row blocks"),
    'node_id': ('distributed.partition', "a shard's global node indices"),
}

#: :obj:`x1`, :obj:`x2`, ...: :class:`PropagateFeatures`' default names (and
#: those of PyG's :class:`~torch_geometric.transforms.SIGN`).
_PROPAGATED = re.compile(r'x[1-9][0-9]*')


class Form(NamedTuple):
    r"""The kind of value a transform writes: a description for errors and
    a test of a value (:math:`O(1)`, reads no tensor data)."""
    description: str
    holds: Callable[[Any], bool]


#: A floating-point matrix :obj:`[num_nodes, channels]`, as node encodings,
#: factors and propagated features are.
NODE_MATRIX = Form('a floating-point matrix [num_nodes, channels]',
                   lambda v: isinstance(v, Tensor) and v.is_floating_point() and v.dim() == 2)

#: An integer edge index :obj:`[2, num_edges]`.
EDGE_INDEX = Form('an integer edge index [2, num_edges]',
                  lambda v: isinstance(v, Tensor) and v.dim() == 2 and v.size(0) == 2
                  and not (v.is_floating_point() or v.is_complex() or v.dtype == torch.bool))


def owner_of(name: str) -> Optional[Tuple[str, str]]:
    r"""Who writes :obj:`name` by default in this package, and what it
    holds; :obj:`None` for a name of no one."""
    if _PROPAGATED.fullmatch(name):
        return 'PropagateFeatures', "propagated features (PyG's SIGN names)"
    return OWNERS.get(name)


def form_of(value: Any) -> str:
    r"""The form of a value found in a graph, in a few words, as errors set
    it against a :class:`Form`: :obj:`"a torch.float32 tensor of shape [60,
    8]"`, else its type (:obj:`"a list"`)."""
    if isinstance(value, Tensor):
        return f'a {value.dtype} tensor of shape {list(value.shape)}'
    return f'a {type(value).__name__}'


def check_attr_name(name: Any, arg: str, owner: str, hint: str = '') -> str:
    r"""Returns the attribute name :obj:`name` that the argument :obj:`arg`
    of :obj:`owner` chose, if it may be written: a non-empty :obj:`str`, not
    a standard attribute (:data:`STANDARD`), not one that another part of
    the package owns (:data:`OWNERS`), and not one that PyG's batching
    treats as an index (a name holding :obj:`index` or :obj:`batch`, or
    :obj:`face`: concatenated along the last dimension or offset per graph,
    which would scramble a node-level matrix). :obj:`hint` ends the error
    (another way to reach what was meant)."""
    if not isinstance(name, str):
        raise TypeError(f"'{arg}' must be a str, the name of the attribute {owner} writes "
                        f"(got {type(name).__name__} {name!r})")
    if not name:
        raise ValueError(f"'{arg}' must not be empty; choose a name for the attribute "
                         f"{owner} writes")
    hint = f'; {hint}' if hint else ''
    if name in STANDARD:
        raise ValueError(f"'{arg}' would make {owner} write 'data.{name}', one of PyG's "
                         f"standard attributes, which the transforms of this package never "
                         f"overwrite; choose another name{hint}")
    other = owner_of(name)
    if other is not None and other[0] != owner:
        raise ValueError(f"'{arg}' would make {owner} write 'data.{name}', where "
                         f"{other[0]} stores {other[1]}; choose another name{hint}")
    probe, value = Data(num_nodes=2), torch.zeros(2, 1)
    if probe.__cat_dim__(name, value) != 0 or probe.__inc__(name, value) != 0:
        raise ValueError(f"'{arg}' would make {owner} write 'data.{name}', which PyG's "
                         f"batching reads as an index (names holding 'index' or 'batch', and "
                         f"'face', are concatenated along their last dimension or offset per "
                         f"graph), scrambling the node-level matrix; choose another name{hint}")
    return name


def check_outputs(data: Data, names: Sequence[str], owner: str, form: Form,
                  arg: Optional[str] = None, chosen: bool = False) -> None:
    r"""Checks, before any work, that :obj:`owner` may write :obj:`names`
    into :obj:`data` as values of :obj:`form`: an absent name (or one set to
    :obj:`None`) is free; under :obj:`owner`'s own default name
    (:func:`owner_of`) a value of :obj:`form` is its earlier output and will
    be replaced, one of another form raises; any other existing attribute
    raises (the name was chosen with the argument :obj:`arg`), as does every
    existing one where :obj:`chosen` says the names are the user's (a prefix
    of their own may spell a default name: :obj:`x1` + :obj:`1`).
    :math:`O(\text{len(names)})`, reads no tensor data."""
    for name in names:
        if name not in data:
            continue
        value = data[name]
        default = None if chosen else owner_of(name)
        if default is not None and default[0] == owner:
            if form.holds(value):
                continue
            raise ValueError(f"'data.{name}' holds {form_of(value)}, not {form.description} "
                             f"as {owner} writes there; if it is something else, move it to "
                             f"another attribute (or delete it: del data['{name}']) before "
                             f"applying {owner}")
        fix = f"pass another '{arg}', or" if arg else 'rename or'
        raise ValueError(f"{owner} would overwrite 'data.{name}' ({form_of(value)}): under a "
                         f"name you choose it writes only to a free attribute; {fix} delete "
                         f"the attribute first (del data['{name}'])")


#: Where PyG keeps a graph as a sparse adjacency instead of :obj:`edge_index`
#: (:class:`~torch_geometric.transforms.ToSparseTensor` writes :obj:`adj_t`).
SPARSE_ADJACENCIES = ('adj_t', 'adj')


def check_edge_attribute(data: Data, owner: str) -> None:
    r"""Raises :class:`ValueError` where :obj:`data` stores its graph as a
    sparse adjacency (:obj:`adj_t` or :obj:`adj`, as PyG's
    :class:`~torch_geometric.transforms.ToSparseTensor` leaves it) and no
    :obj:`edge_index`, which :obj:`owner` reads: the graph would be taken
    for one without edges."""
    if data.get('edge_index') is None:
        for name in SPARSE_ADJACENCIES:
            if data.get(name) is not None:
                raise ValueError(
                    f"{owner} reads the graph from 'data.edge_index', but this graph stores "
                    f"it as 'data.{name}' (as T.ToSparseTensor() leaves it) and has no "
                    f"'edge_index': apply {owner} before T.ToSparseTensor(), or set "
                    f"'data.edge_index' (e.g. from torch_geometric.utils.to_edge_index)")



def check_single_graph(data: Data, owner: str, what: str,
                       collated: Sequence[str] = (), fix: Optional[str] = None) -> None:
    r"""Raises :class:`ValueError` where :obj:`data` is a
    :class:`~torch_geometric.data.Batch` of several graphs and :obj:`owner`
    would compute :obj:`what` over their union (a kNN graph over all rows,
    whose edges join the graphs), as
    :class:`~torch_geometric_regcn.LaplacianEigenPE` refuses its encoding.
    With :obj:`collated`, only where one of those attributes was collated
    from the graphs (each graph's own low-rank factors, stacked: their
    :math:`\mathbf{W}\mathbf{V}^{\top}` couples the graphs), not where it
    was computed for the batch as a whole. :math:`O(1)`."""
    graphs = data.num_graphs if isinstance(data, Batch) else 1
    if graphs <= 1:
        return
    if collated:
        stacked = [key for key in collated if key in getattr(data, '_slice_dict', {})]
        if not stacked:
            return
        what = f"{what} (of 'data.{stacked[0]}', collated from each graph's own)"
    fix = fix or ("apply it to each graph before batching (e.g. as the dataset's "
                  "'pre_transform' or 'transform')")
    raise ValueError(f"{owner} got a Batch of {graphs} graphs, whose {what} would join "
                     f"the graphs; {fix}")


def computed_for_the_batch(data: Data, keys: Sequence[str]) -> None:
    r"""Marks the attributes :obj:`keys`, just written to a
    :class:`~torch_geometric.data.Batch`, as computed for the batch as a
    whole: they leave its record of collated attributes (which
    :func:`check_single_graph` reads and :meth:`Batch.to_data_list` slices by),
    where the graphs' own, collated, left them. The records are replaced, not
    edited: a shallow copy of the Batch (what :class:`BaseTransform` hands a
    transform) shares them with the caller's Batch, whose collated attributes
    they must go on describing. :math:`O(1)`."""
    for record in ('_slice_dict', '_inc_dict'):
        collated = getattr(data, record, None)
        if isinstance(collated, dict) and any(key in collated for key in keys):
            setattr(data, record, {k: v for k, v in collated.items() if k not in keys})


def computed_for_the_graph(data: Data, keys: Sequence[str]) -> None:
    r"""Marks the attributes :obj:`keys`, just written to a
    :class:`~torch_geometric.data.Batch` of one graph, as that graph's own:
    its record of collated attributes (by which :meth:`Batch.to_data_list`
    and :meth:`Batch.get_example` slice) takes their new sizes, where the
    old values' sizes would cut them short. Replaced, not edited, as in
    :func:`computed_for_the_batch`. :math:`O(1)`."""
    for record in ('_slice_dict', '_inc_dict'):
        collated = getattr(data, record, None)
        if isinstance(collated, dict):  # a Batch: the keys new to it too
            collated = dict(collated)
            for key in keys:
                if key in data:
                    value = data[key]
                    size = value.size(data.__cat_dim__(key, value))
                    collated[key] = (torch.tensor([0, size]) if record == '_slice_dict'
                                     else torch.zeros(1, dtype=torch.long))
            setattr(data, record, collated)


def check_homogeneous(data: Any, owner: str) -> None:
    r"""Raises :class:`TypeError` where :obj:`data` is a
    :class:`~torch_geometric.data.HeteroData`, whose attributes live per
    node and edge type (:obj:`data.x` does not exist), instead of the
    :class:`AttributeError` of the first attribute read. :math:`O(1)`."""
    if isinstance(data, HeteroData):
        raise TypeError(f"{owner} takes a homogeneous graph (torch_geometric.data.Data), "
                        f"got HeteroData with node types {data.node_types}: apply it to "
                        f"'data.to_homogeneous()', or to a Data of the node and edge type "
                        f"you want it on")
