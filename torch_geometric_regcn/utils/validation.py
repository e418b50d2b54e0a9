r"""Argument checks shared by the transforms and layers.

Each check raises an error that names the argument and says how to fix it.
"""
import math
import numbers
import operator
import os
from typing import Any, Callable, Optional, Sequence, Tuple, TypeVar

import torch
from torch import Tensor

from torch_geometric_regcn.utils.compat import autocast_enabled

_Choice = TypeVar('_Choice')


def type_name(value: Any) -> str:
    r"""The type of :obj:`value` as the errors name it: :obj:`"list"` for a
    built-in, else with its module, e.g. :obj:`"numpy.ndarray"`."""
    kind = type(value)
    return kind.__name__ if kind.__module__ == 'builtins' else f'{kind.__module__}.{kind.__name__}'


def conversion(name: str, value: Any) -> str:
    r"""The fix appended to the error for a non-tensor :obj:`value` passed
    as :obj:`name`: :func:`torch.from_numpy` for a NumPy array (which shares
    its memory), :func:`torch.as_tensor` for a list or tuple, else nothing."""
    kind = type(value)
    if kind.__module__ == 'numpy' and kind.__name__ == 'ndarray':
        return f"; convert it with 'torch.from_numpy({name})'"
    if isinstance(value, (list, tuple)):
        return f"; convert it with 'torch.as_tensor({name})'"
    return ''


def check_tensor(name: str, value: Any, what: str = 'a torch.Tensor') -> Tensor:
    r"""Returns :obj:`value` if it is a :class:`torch.Tensor`, else raises
    :class:`TypeError`: :obj:`"'{name}' must be {what} (got {type})"`,
    with the conversion of a NumPy array or a list (:func:`conversion`).
    :obj:`what` says what is expected, e.g. :obj:`"a torch.Tensor
    [num_nodes, rank]"`. :obj:`O(1)`."""
    if not isinstance(value, Tensor):
        raise TypeError(f"'{name}' must be {what} (got {type_name(value)})"
                        f"{conversion(name, value)}")
    return value


def all_finite(tensor: Tensor) -> bool:
    r"""Whether every entry of the dense :obj:`tensor` is finite. A
    floating-point tensor is read by its minimum and maximum, which a NaN
    turns into NaN and an infinity into an infinity: one reduction, without
    the :obj:`N`-element mask of :obj:`tensor.isfinite().all()`."""
    if tensor.is_floating_point() and tensor.element_size() == 1:  # float8: few kernels
        tensor = tensor.float()
    if tensor.is_floating_point() and tensor.numel():
        return bool(torch.stack(torch.aminmax(tensor.detach())).isfinite().all())
    return bool(tensor.isfinite().all())


def check_finite(name: str, tensor: Tensor) -> None:
    r"""Raises a :class:`ValueError` naming :obj:`name` if :obj:`tensor` (or
    the values of a sparse one) holds a NaN or an infinity
    (:func:`all_finite`)."""
    if tensor.layout == torch.sparse_coo:
        tensor = tensor.coalesce()
    values = tensor if tensor.layout == torch.strided else tensor.values()
    if not all_finite(values):
        raise ValueError(f"'{name}' contains NaN or infinite values; clean or impute them "
                         f"(e.g. 'torch.nan_to_num') before calling this transform or layer")


def check_real(name: str, value: float, low: float = -math.inf, high: float = math.inf,
               low_open: bool = False, high_open: bool = False) -> float:
    r"""Returns :obj:`value` as a finite :class:`float` in the interval
    :math:`[\text{low}, \text{high}]` (ends open where asked). NumPy scalars are
    accepted; booleans, tensors, strings, NaN and infinities are
    not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"'{name}' must be a real number (got {type(value).__name__} "
                        f"{value!r})")
    try:
        value = float(value)
    except OverflowError:  # an int beyond float's range
        value = math.inf if value > 0 else -math.inf
    if not math.isfinite(value):
        raise ValueError(f"'{name}' must be finite (got {value})")
    inside = (low < value if low_open else low <= value) and \
        (value < high if high_open else value <= high)
    if not inside:
        if high == math.inf and low == 0:
            rule = 'be positive' if low_open else 'be non-negative'
        elif high == math.inf:
            rule = f"be {'larger than' if low_open else 'at least'} {low}"
        else:
            rule = f"lie in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"'{name}' must {rule} (got {value})")
    return value


def check_coefficient(name: str, value: Any, low: float = -math.inf, high: float = math.inf,
                      low_open: bool = False, high_open: bool = False) -> float:
    r""":func:`check_real` of a coefficient that may also be learned: a
    one-element floating-point tensor is accepted and its value read
    without its gradient (one synchronisation with its device). Returns the
    value as a :class:`float`; the caller keeps the tensor to compute with."""
    if isinstance(value, Tensor):
        check_materialized(**{name: value})
        if value.numel() != 1 or not value.is_floating_point():
            raise TypeError(f"'{name}' must be a real number or a one-element floating-point "
                            f"tensor (got a tensor of shape {list(value.shape)}, {value.dtype})")
        value = value.detach().item()
    return check_real(name, value, low, high, low_open, high_open)


def _integer_rule(minimum: Optional[int], maximum: Optional[int]) -> str:
    r"""What :func:`check_int` asks for, in words: "a positive integer",
    "an integer in [0, 9]", ..."""
    if maximum is not None:
        low = '' if minimum is None else f'{minimum}'
        return f'an integer in [{low}, {maximum}]' if low else f'an integer of at most {maximum}'
    if minimum is None:
        return 'an integer'
    return {1: 'a positive integer', 0: 'a non-negative integer'}.get(
        minimum, f'an integer of at least {minimum}')


def check_int(name: str, value: int, minimum: Optional[int] = 1,
              maximum: Optional[int] = None) -> int:
    r"""Returns :obj:`value` as an :class:`int` in
    :math:`[\text{minimum}, \text{maximum}]` (:obj:`None`: no bound).
    NumPy integers and integer scalar tensors are accepted; booleans and
    floats (even whole ones) raise :class:`ValueError`, other types
    :class:`TypeError`."""
    rule = _integer_rule(minimum, maximum)
    if isinstance(value, Tensor):
        check_materialized(**{name: value})
    if isinstance(value, Tensor) and (value.dtype == torch.bool or value.dim() != 0):
        raise ValueError(f"'{name}' must be {rule} (got a {value.dtype} tensor of shape "
                         f"{list(value.shape)}); pass an int or an integer 0-d tensor")
    if is_boolean(value) or (isinstance(value, numbers.Number)
                             and not isinstance(value, numbers.Integral)):
        fix = ''
        if isinstance(value, numbers.Real) and not isinstance(value, bool) \
                and math.isfinite(value) and float(value) == int(value):
            fix = f'; pass it as an int, e.g. {int(value)}'
        raise ValueError(f"'{name}' must be {rule} (got {value!r}){fix}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"'{name}' must be an integer (got {type(value).__name__} "
                        f"{value!r})") from None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"'{name}' must be {rule} (got {value})")
    return value


#: The seeds :meth:`torch.Generator.manual_seed` accepts: :math:`[-2^{63}, 2^{64})`.
SEED_RANGE = (-2**63, 2**64 - 1)


def check_seed(seed: int, name: str = 'seed', minimum: int = SEED_RANGE[0]) -> int:
    r"""Returns a random seed as an :class:`int` that
    :meth:`torch.Generator.manual_seed` accepts, in :math:`[-2^{63},
    2^{64})`, or from a larger :obj:`minimum` (NumPy integers accepted;
    booleans and floats are not)."""
    try:
        return check_int(name, seed, minimum, SEED_RANGE[1])
    except ValueError:
        low, why = '-2**63', ', as torch.Generator.manual_seed accepts'
        if minimum != SEED_RANGE[0]:
            low, why = str(minimum), ''
        raise ValueError(f"'{name}' must be an integer in [{low}, 2**64){why} "
                         f"(got {seed!r})") from None


def check_dtype(name: str, dtype: Any, floating: bool = True) -> torch.dtype:
    r"""Returns :obj:`dtype` if it is a :class:`torch.dtype`, a
    floating-point one if :obj:`floating`, else raises :class:`TypeError`."""
    if not isinstance(dtype, torch.dtype) or (floating and not dtype.is_floating_point):
        kind = 'a floating-point torch.dtype' if floating else 'a torch.dtype'
        raise TypeError(f"'{name}' must be {kind} such as torch.float32 (got "
                        f"{type(dtype).__name__} {dtype!r})")
    return dtype


def check_matrix(name: str, matrix: Any, square: bool = False) -> None:
    r"""A 2-D :class:`torch.Tensor` (dense, COO or CSR), square if
    :obj:`square`: :obj:`O(1)`, reads no values."""
    check_tensor(name, matrix, 'a matrix, a 2-D dense or sparse (COO or CSR) tensor')
    if matrix.dim() != 2 or (square and matrix.size(0) != matrix.size(1)):
        what = 'square matrix' if square else 'matrix (a 2-D tensor)'
        raise ValueError(f"'{name}' must be a {what} (got shape {list(matrix.shape)})")


def check_choice(name: str, value: _Choice, choices: Sequence[Any],
                 hint: str = '') -> _Choice:
    r"""Returns the one of :obj:`choices` that :obj:`value` equals (a
    NumPy string or a 0-d array gives the plain choice), else raises
    :class:`ValueError` naming :obj:`name`, the choices and :obj:`value`,
    followed by :obj:`hint` (what each choice does), if given. An array or
    tensor of one or more dimensions is refused: it compares equal entry by
    entry, so a one-entry array passed the test and then reached the
    comparisons downstream as an array."""
    if getattr(value, 'ndim', 0) == 0:
        for choice in choices:
            if value is choice or bool(value == choice):
                return choice
    hint = f': {hint}' if hint else ''
    raise ValueError(f"'{name}' must be one of {tuple(choices)} (got {value!r}){hint}")


def check_stopping_rule(tol: float, max_iter: int) -> Tuple[float, int]:
    r"""The stopping rule of an iterative solver (conjugate gradient): a
    finite positive :obj:`tol` and a positive integer :obj:`max_iter` (NumPy
    integers accepted); returns them as :obj:`(float, int)`."""
    return check_real('tol', tol, 0.0, low_open=True), check_int('max_iter', max_iter)


def check_index(name: str, index: Any, num_nodes: int, size: Optional[int] = None,
                graph: str = 'the graph') -> Tensor:
    r"""Returns node indices :obj:`index` as an :obj:`int64` tensor: a 1-D
    integer tensor (not a boolean mask, nor a :obj:`uint8` one, which torch
    indexes as a mask), of :obj:`size` entries if given,
    each in :math:`[0, \text{num\_nodes})`. :obj:`graph` names the graph
    in the error, e.g. :obj:`"the graph the model was refreshed with"`.
    Costs one pass over :obj:`index` (its minimum and maximum)."""
    if isinstance(index, Tensor) and index.dtype in WIDE_UNSIGNED:
        raise TypeError(f"'{name}' is {index.dtype}, which torch cannot reduce (min, max); "
                        f"pass '{name}.long()'")
    if not isinstance(index, Tensor) or index.dim() != 1 or index.is_floating_point() \
            or index.is_complex() or index.dtype in (torch.bool, torch.uint8):
        got = (f'{index.dtype} of shape {list(index.shape)}' if isinstance(index, Tensor)
               else type_name(index))
        fix = (f"; for a boolean mask pass '{name}.nonzero().view(-1)'"
               if isinstance(index, Tensor) and index.dtype in (torch.bool, torch.uint8)
               else conversion(name, index))
        raise TypeError(f"'{name}' must be a 1-D tensor of integer node indices "
                        f"(got {got}){fix}")
    if size is not None and index.numel() != size:
        raise ValueError(f"'{name}' must hold one node index per row ({size}), got "
                         f"{index.numel()}")
    if index.numel():
        low, high = torch.stack([index.min(), index.max()]).tolist()
        if low < 0 or high >= num_nodes:
            raise ValueError(f"'{name}' refers to nodes outside [0, {num_nodes - 1}] of "
                             f"{graph}")
    return index.long()


def check_real_dtype(name: str, tensor: Tensor) -> None:
    r"""Raises :class:`TypeError` where :obj:`tensor` holds complex numbers:
    a cast to a real dtype would drop their imaginary parts, with only
    torch's warning."""
    if tensor.is_complex():
        raise TypeError(f"'{name}' must hold real numbers (got {tensor.dtype}); pass real "
                        f"edge weights, e.g. '{name}.real' or '{name}.float()'")


def check_edge_index(edge_index: Tensor, num_nodes: int,
                     edge_weight: Optional[Tensor] = None, name: str = 'edge_index',
                     weight_name: str = 'edge_weight') -> None:
    check_tensor(name, edge_index, 'a tensor [2, num_edges]')
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"'{name}' must have shape [2, num_edges] "
                         f"(got {list(edge_index.shape)})")
    if edge_index.dtype in WIDE_UNSIGNED:
        raise TypeError(f"'{name}' is {edge_index.dtype}, which torch cannot reduce (min, "
                        f"max); use '{name}.long()'")
    if edge_index.is_floating_point() or edge_index.is_complex() \
            or edge_index.dtype == torch.bool:
        raise TypeError(f"'{name}' must hold integer node indices "
                        f"(got dtype {edge_index.dtype}); use '{name}.long()'")
    if edge_index.numel() > 0 and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        fix = "check 'num_nodes' or re-index the graph"
        if name == 'semantic_edge_index':  # loaders and subgraph() re-index 'edge_index' only
            fix = (f"was it built for a larger graph? Subgraph utilities and loaders leave "
                   f"'{name}' as it was; rebuild it for this graph with SemanticGraph")
        raise ValueError(f"'{name}' refers to nodes outside [0, {num_nodes - 1}]; {fix}")
    if edge_weight is not None:
        check_tensor(weight_name, edge_weight, 'a tensor [num_edges]')
        check_real_dtype(weight_name, edge_weight)
        if edge_weight.is_floating_point() and edge_weight.element_size() == 1:
            raise TypeError(f"'{weight_name}' is {edge_weight.dtype}, which torch cannot "
                            f"compare or sum here; pass '{weight_name}.float()'")
        if edge_weight.dim() != 1 or edge_weight.numel() != edge_index.size(1):
            raise ValueError(f"'{weight_name}' must have shape [{edge_index.size(1)}] to match "
                             f"'{name}' (got {list(edge_weight.shape)})")
        check_finite(weight_name, edge_weight)
        if bool((edge_weight < 0).any()):
            raise ValueError(f"'{weight_name}' must be non-negative: the normalised adjacency "
                             f"needs non-negative degrees (their square roots); drop or "
                             f"rescale the negative weights")


#: Unsigned integer dtypes wider than a byte, which torch cannot reduce (min, max).
WIDE_UNSIGNED = tuple(getattr(torch, name) for name in ('uint16', 'uint32', 'uint64')
                      if hasattr(torch, name))

#: Half-precision inputs are solved in this dtype and cast back.
HALF_DTYPES = (torch.float16, torch.bfloat16)


def solve_dtype(dtype: torch.dtype) -> torch.dtype:
    r"""The dtype a solve runs in for inputs of :obj:`dtype`: float32 for
    half precision (sparse kernels and factorisations need it, and the gains
    of a propagation need more than three significant digits), else
    :obj:`dtype` itself."""
    return torch.float32 if dtype in HALF_DTYPES else dtype


def computed_dtype(*tensors: Tensor) -> torch.dtype:
    r"""The dtype floating-point :obj:`tensors` of one dtype were computed
    in: theirs, or float32 where they are float64 values that float32 holds
    exactly (casts of float32 results, whose rounding is float32's).
    :math:`O(\text{their size})`."""
    dtype = tensors[0].dtype
    if dtype == torch.float64 and all(torch.equal(t, t.float().double()) for t in tensors):
        return torch.float32
    return dtype


def check_node_features(x: Tensor, name: str = 'x', finite: bool = True) -> None:
    r"""A floating-point node feature matrix :obj:`[N, F]`, without NaN or
    infinite values if :obj:`finite` (which reads the whole tensor once;
    layers instead check their projection, see :func:`check_projection`)."""
    check_tensor(name, x, 'a tensor of node features [num_nodes, channels]')
    if x.dim() != 2:
        raise ValueError(f"'{name}' must be a node feature matrix of shape "
                         f"[num_nodes, channels] (got shape {list(x.shape)}); use "
                         f"'{name}.view(-1, 1)' for a single feature")
    if x.is_complex():
        raise TypeError(f"'{name}' must be real (got {x.dtype}); pass '{name}.real' or "
                        f"'{name}.abs()', or the real and imaginary parts as columns")
    if not x.is_floating_point():
        raise TypeError(f"'{name}' must be floating point (got {x.dtype}); use '{name}.float()'")
    if x.layout != torch.strided and x.dense_dim() > 0:
        raise ValueError(f"'{name}' is a hybrid sparse tensor (dense over its last "
                         f"{x.dense_dim()} dimension(s)); use '{name}.to_dense().to_sparse()'")
    check_materialized(**{name: x})
    if finite:
        check_finite(name, x)


def real_features(x: Tensor) -> Tensor:
    r"""Integer or boolean node features (counts, 0/1 bags of words) in the
    default floating-point dtype, float8 ones (which torch computes little
    with) in float32; any other tensor, complex included, as it is, for
    :func:`check_node_features` to judge."""
    if isinstance(x, Tensor) and not (x.is_floating_point() or x.is_complex()):
        return x.to(torch.get_default_dtype())
    if isinstance(x, Tensor) and x.is_floating_point() and x.element_size() == 1:
        return x.float()
    return x


def check_projection(h: Tensor, x: Tensor, name: str = 'x') -> None:
    r"""Raises the error of :func:`check_finite` for :obj:`x` when its
    projection :obj:`h` (:math:`\mathbf{X}\mathbf{\Theta}`, which carries any
    NaN or infinity of :obj:`x` and has fewer columns) is not finite; a
    non-finite :obj:`x` is named, else the layer's weights are."""
    if not all_finite(h):
        check_finite(name, x)
        raise ValueError(f"The projection of '{name}' by the layer's weights holds NaN or "
                         f"infinite values although '{name}' is finite: the weights diverged "
                         f"(lower the learning rate) or overflow {h.dtype}")


def check_factors(w: Tensor, v: Tensor, num_nodes: Optional[int],
                  names: Tuple[str, str] = ('w', 'v')) -> None:
    r"""Low-rank factors :obj:`[N, r]` of one graph with :obj:`num_nodes` nodes
    (:obj:`None`: any number of rows, as a shard's), in float32 or float64
    (see :class:`~torch_geometric_regcn.LowRankInverse`)."""
    a, b = names
    if not (isinstance(w, Tensor) and isinstance(v, Tensor)):
        name, value = (a, w) if not isinstance(w, Tensor) else (b, v)
        raise TypeError(f"'{a}' and '{b}' must be tensors [num_nodes, rank] (got "
                        f"{type_name(w)} and {type_name(v)}){conversion(name, value)}")
    if w.dim() != 2 or w.shape != v.shape:
        raise ValueError(f"'{a}' and '{b}' must both have shape [num_nodes, rank] "
                         f"(got {list(w.shape)} and {list(v.shape)})")
    if num_nodes is not None and w.size(0) != num_nodes:
        raise ValueError(f"'{a}' and '{b}' have {w.size(0)} rows but 'x' has {num_nodes} "
                         f"nodes; recompute the factors with LowRankInverse for this graph")
    if w.dtype != v.dtype or w.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"'{a}' and '{b}' must both be float32 or float64 (got {w.dtype} and "
                        f"{v.dtype}); LowRankInverse computes them in float32 for "
                        f"half-precision features")


def check_channels(**channels: int) -> Tuple[int, ...]:
    r"""Returns layer sizes as :class:`int`: each positive, and those named
    :obj:`in_channels` may also be :obj:`-1` (inferred on the first call)."""
    sizes = []
    for name, value in channels.items():
        value = check_int(name, value, minimum=-1 if name == 'in_channels' else 1)
        if value == 0 or value < -1:
            raise ValueError(f"'{name}' must be a positive integer or -1 to infer it from "
                             f"the first input (got {value})")
        sizes.append(value)
    return tuple(sizes)


def check_same_device(**tensors: Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listing = ', '.join(f"'{n}' on {d}" for n, d in devices.items())
        raise ValueError(f"Expected all tensors on one device, got {listing}; "
                         f"move them with '.to(device)'")


def check_materialized(**tensors: Tensor) -> None:
    r"""Raises :class:`ValueError` for a tensor on the :obj:`meta` device,
    which has a shape but no values to compute with."""
    for name, tensor in tensors.items():
        if isinstance(tensor, Tensor) and tensor.device.type == 'meta':
            raise ValueError(f"'{name}' is on the 'meta' device and holds no values; "
                             f"materialise it (e.g. 'torch.empty_like(..., device=\'cpu\')' "
                             f"and fill it) before calling this layer or transform")


def check_module_materialized(module: torch.nn.Module, owner: Optional[str] = None) -> None:
    r"""Raises :class:`ValueError` when a parameter of :obj:`module` lies on
    the :obj:`meta` device (a module built under :obj:`torch.device("meta")`
    has shapes but no values), naming :obj:`owner` (default: the module's
    class) and how to materialise it. :obj:`O(\text{number of
    parameters})`, reads no values."""
    if any(p.device.type == 'meta' for p in module.parameters()):
        owner = owner or type(module).__name__
        raise ValueError(f"The parameters of {owner} are on the 'meta' device and hold no "
                         f"values; materialise it with '.to_empty(device=...)' followed by "
                         f"'.reset_parameters()' or '.load_state_dict(...)' (or load a state "
                         f"dict into the meta module with 'load_state_dict(..., assign=True)') "
                         f"before calling it")


def check_layer_dtype(name: str, tensor: Tensor, dtype: torch.dtype, owner: str) -> None:
    r"""Raises :class:`TypeError` when the floating-point :obj:`tensor` does
    not have the :obj:`dtype` of :obj:`owner`'s parameters (outside
    :func:`torch.autocast`, which casts both)."""
    if tensor.dtype == dtype or not tensor.is_floating_point():
        return
    if autocast_enabled(tensor.device.type):
        return
    raise TypeError(f"'{name}' is {tensor.dtype} but the parameters of {owner} are {dtype}; "
                    f"pass '{name}{_cast(dtype)}', or convert the module with "
                    f"'{_cast(tensor.dtype)}', or run it under torch.autocast")


#: The conversion method of each floating-point dtype.
_CASTS = {torch.float64: 'double', torch.float32: 'float', torch.float16: 'half',
          torch.bfloat16: 'bfloat16'}


def _cast(dtype: torch.dtype) -> str:
    r"""The call that converts a tensor or module to :obj:`dtype`:
    :obj:`".float()"`, ..., or :obj:`".to(dtype)"`."""
    method = _CASTS.get(dtype)
    return f'.{method}()' if method else f'.to({dtype})'



def as_root(root: Any, name: str = 'root') -> str:
    r"""Returns the dataset folder :obj:`root` (a :obj:`str` or
    :class:`os.PathLike`) as a :obj:`str`."""
    if isinstance(root, (bytes, bytearray)) or not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"'{name}' must be a folder path, a str or os.PathLike such as "
                        f"pathlib.Path (got {type(root).__name__} {root!r})")
    root = os.fspath(root)
    if not isinstance(root, str):
        raise TypeError(f"'{name}' must name a folder as text, not bytes (got {root!r}); "
                        f"decode it with os.fsdecode")
    if not root:
        raise ValueError(f"'{name}' must not be empty; pass a folder such as 'data' "
                         f"(the dataset's folder is made below it)")
    return root


def is_boolean(value: Any) -> bool:
    r"""Whether :obj:`value` is a Python or NumPy boolean."""
    kind = type(value)
    return isinstance(value, bool) or (kind.__module__ == 'numpy'
                                       and kind.__name__ in ('bool', 'bool_'))


def check_flag(name: str, value: Any) -> bool:
    r"""Returns :obj:`value` as a :class:`bool`: a Python or NumPy boolean
    (:func:`is_boolean`); anything else (a string such as :obj:`"False"`,
    which :func:`bool` would read as :obj:`True`, a number, :obj:`None`)
    raises a :class:`TypeError` naming :obj:`name`."""
    if is_boolean(value):
        return bool(value)
    raise TypeError(f"'{name}' must be True or False (got {type_name(value)} {value!r})")


def check_callable(name: str, value: Optional[Callable]) -> None:
    r"""Checks that :obj:`value` is :obj:`None` or callable."""
    if value is not None and not callable(value):
        raise TypeError(f"'{name}' must be None or callable, e.g. a transform of "
                        f"torch_geometric.transforms (got {type(value).__name__} {value!r})")
