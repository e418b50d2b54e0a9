r"""The regulariser interface of the regularizer-centred framework."""
import contextlib
import contextvars
import functools
import inspect
import itertools
import math
import numbers
import warnings
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    FrozenSet,
    Hashable,
    Iterator,
    List,
    Optional,
    Tuple,
    Union,
)

import torch
from torch import Tensor
from torch.nn.parameter import is_lazy

from torch_geometric_regcn.linalg.cg import cg_solve
from torch_geometric_regcn.linalg.woodbury import GAIN_ACCURACY
from torch_geometric_regcn.regularizers import weight_decay
from torch_geometric_regcn.regularizers.graph import GraphOperators, build_graph
from torch_geometric_regcn.utils.compat import compiler_disable
from torch_geometric_regcn.utils.fingerprint import fingerprint
from torch_geometric_regcn.utils.sparse import absolute_row_sums, diagonal, spectral_bound
from torch_geometric_regcn.utils.validation import check_tensor

#: Every solver name: the quadratic regularisers' (:obj:`"closed"`, :obj:`"series"`,
#: :obj:`"cg"`, :obj:`"lowrank"`), then the non-quadratic ones' (:obj:`"irls"`
#: and the papers' rules :obj:`"emp"`, :obj:`"amp"`, :obj:`"fixed_point"`; see
#: :class:`~torch_geometric_regcn.regularizers.IterativeRegularizer`).
SOLVERS = ('closed', 'series', 'cg', 'lowrank', 'irls', 'emp', 'amp', 'fixed_point')

#: Where the bound on the relative error of the closed solve's result (machine epsilon
#: times the estimated condition number) times max(1, sqrt(N) / 8) reaches this,
#: :func:`closed_solve` calls its matrix singular.
CLOSED_SINGULAR = 0.5
#: The steps of power and inverse iteration that estimate :math:`\|\mathbf{M}\|` and
#: :math:`\|\mathbf{M}^{-1}\|` in :func:`closed_solve`.
CONDITION_STEPS = 3

#: The range of a learnable coefficient (:attr:`Regularizer.learnable`): an
#: open interval :obj:`(low, high)`, either end possibly infinite, or one of
#: the names of :data:`INTERVALS`.
Range = Union[str, Tuple[float, float]]

#: The named ranges: :obj:`"positive"` is :math:`(0, \infty)`, :obj:`"unit"`
#: is :math:`(0, 1)`.
INTERVALS: Dict[str, Tuple[float, float]] = {'positive': (0.0, math.inf), 'unit': (0.0, 1.0)}


def interval(kind: Range, name: str = 'coefficient') -> Tuple[float, float]:
    r"""The open interval :obj:`(low, high)` of the range :obj:`kind` of the
    learnable coefficient :obj:`name`: a name of :data:`INTERVALS` or a pair
    of real numbers :obj:`low < high`, either possibly infinite (not NaN).
    :class:`ValueError` or :class:`TypeError` otherwise, naming the
    coefficient."""
    if isinstance(kind, str):
        if kind not in INTERVALS:
            raise ValueError(f"The range of learnable coefficient '{name}' must be one of "
                             f"{sorted(INTERVALS)} or an open interval (low, high) (got "
                             f"{kind!r})")
        return INTERVALS[kind]
    try:
        low, high = kind
        if isinstance(low, bool) or isinstance(high, bool) or not (
                isinstance(low, numbers.Real) and isinstance(high, numbers.Real)):
            raise TypeError
    except (TypeError, ValueError):
        raise TypeError(f"The range of learnable coefficient '{name}' must be a name in "
                        f"{sorted(INTERVALS)} or a pair (low, high) of real numbers (got "
                        f"{kind!r})") from None
    low, high = float(low), float(high)
    if not low < high:  # NaN, (inf, inf) and (-inf, -inf) included
        raise ValueError(f"The range of learnable coefficient '{name}' must be an open "
                         f"interval (low, high) with low < high (got ({low}, {high}))")
    return low, high


def constrain(raw: Tensor, low: float, high: float) -> Tensor:
    r"""A coefficient in the open interval :math:`(\text{low}, \text{high})`
    from its unconstrained parameter :obj:`raw` (elementwise):
    :math:`\text{low} + \mathrm{softplus}(r)` on :math:`(\text{low}, \infty)`,
    :math:`\text{high} - \mathrm{softplus}(-r)` on :math:`(-\infty, \text{high})`,
    :math:`\text{low} + (\text{high} - \text{low})\,\sigma(r)` on a bounded
    interval and :math:`r` itself on :math:`(-\infty, \infty)`. On
    :math:`(0, \infty)` and :math:`(0, 1)` it is :math:`\mathrm{softplus}(r)`
    and :math:`\sigma(r)` exactly, as these ranges always were. In floating
    point an end may be reached by rounding: :math:`\text{low} +
    \mathrm{softplus}(r)` rounds to :math:`\text{low}` once
    :math:`\mathrm{softplus}(r)` is below half an ulp of it (in float32,
    :math:`r < -104` for :math:`\text{low} = 0`, :math:`r < -18` for
    :math:`\text{low} = -1/2`), the sigmoid to 1 for :math:`r > 17`."""
    if low == -math.inf and high == math.inf:
        return raw
    if high == math.inf:
        value = torch.nn.functional.softplus(raw)
        return value if low == 0 else low + value
    if low == -math.inf:
        return high - torch.nn.functional.softplus(-raw)
    value = torch.sigmoid(raw)
    return value if (low, high) == (0.0, 1.0) else low + (high - low) * value


def unconstrain(value: Tensor, low: float, high: float) -> Tensor:
    r"""The inverse of :func:`constrain`: the parameter :obj:`raw` with
    :obj:`constrain(raw, low, high) == value` up to rounding, for
    :obj:`value` strictly inside the interval (computed in the dtype of
    :obj:`value`; :meth:`Regularizer.learn` uses float64). Inverse softplus
    is :math:`v + \log(-\mathrm{expm1}(-v))`, accurate for small and large
    :math:`v`; inverse sigmoid is :func:`torch.logit`."""
    if low == -math.inf and high == math.inf:
        return value.clone()
    if high == math.inf:
        v = value if low == 0 else value - low
        return v + torch.log(-torch.expm1(-v))
    if low == -math.inf:
        v = high - value
        return -(v + torch.log(-torch.expm1(-v)))
    return torch.logit(value if (low, high) == (0.0, 1.0) else (value - low) / (high - low))


def format_interval(low: float, high: float) -> str:
    r""":obj:`"(low, high)"` as the errors write it, e.g. :obj:`"(0, inf)"`,
    :obj:`"(-0.5, inf)"`."""
    return f'({low:g}, {high:g})'


class Regularizer(torch.nn.Module):
    r"""Base class of a graph regulariser :math:`\mathcal{L}(\mathbf{H};
    \mathcal{G}) = \mathrm{Tr}(\mathbf{H}^{\top}\mathbf{R}\mathbf{H})` in the
    framework of the `"Beyond Graph Convolutional Network: An Interpretable
    Regularizer-centered Optimization Framework"
    <https://arxiv.org/abs/2301.04318>`_ paper (AAAI 2023), where a layer
    computes

    .. math::
        \mathbf{H}^{(l)} = \mathrm{proj}_{\mathcal{S}}\Big(\operatorname*{arg\,min}_{\mathbf{H}}
        -\mathrm{Tr}(\mathbf{H}^{\top}\mathbf{H}^{(l-1)}\mathbf{\Theta}) +
        \tfrac{1}{2}\mathrm{Tr}(\mathbf{H}^{\top}\mathbf{R}\mathbf{H})\Big)
        = \mathrm{proj}_{\mathcal{S}}\big(\mathbf{R}^{-1}\mathbf{H}^{(l-1)}
        \mathbf{\Theta}\big).

    :math:`\mathbf{R}` is given as :math:`\mathbf{B}^{-1}\mathbf{M}`, with
    :math:`\mathbf{M}` sparse, symmetric positive definite (:meth:`operator`)
    and :math:`\mathbf{B}` a sparse polynomial in the graph that commutes with
    it (:meth:`numerator`, the identity by default), so the propagation
    :math:`\mathbf{R}^{-1}\mathbf{X} = \mathbf{M}^{-1}\mathbf{B}\mathbf{X}` is one
    sparse solve, done by a shared solver:

    - :obj:`"closed"`: dense :func:`torch.linalg.solve`, :math:`O(N^3)`, for small
      graphs and tests;
    - :obj:`"cg"`: conjugate gradient on the sparse :math:`\mathbf{M}`, with an
      implicit backward pass;
    - :obj:`"series"`: a :math:`K`-term truncated series, the rule the paper
      states for the regulariser (:meth:`series`; by default a Neumann series of
      :math:`\mathbf{M}^{-1}`);
    - :obj:`"lowrank"`: precomputed low-rank factors, for a regulariser that
      implements :meth:`lowrank` (tsGCN).

    A regulariser is a :class:`torch.nn.Module`: its coefficients are saved in
    its :meth:`state_dict` (as extra state) and any trainable part (DAGNN's
    gate) is a submodule, so both travel with the layer that holds it.

    A new regulariser needs only :meth:`operator`: subclass, return
    :math:`\mathbf{M}` as a sparse symmetric positive definite matrix built from
    :obj:`graph.adj`, and :class:`~torch_geometric_regcn.RegularizerConv` trains
    with it. Override :meth:`numerator`, :meth:`series`,
    :meth:`frequency_response` and :meth:`requires` to say more. Coefficients
    may be set in :obj:`__init__` before (or without) calling
    :obj:`super().__init__()`. A coefficient changed after construction
    (:obj:`reg.alpha = 0.5`) passes the constructor's checks first, with the
    other coefficients' current values (a fresh instance is built from them,
    so a constructor with side effects repeats them): a value the
    constructor refuses raises there and changes nothing;
    :meth:`set_coefficients` changes several that must agree together.

    Class attributes: :obj:`name` (the registry key), :obj:`projection` (the
    hidden-layer projection it pairs with, :obj:`"relu"` or :obj:`"identity"`;
    the last layer always pairs with softmax), :obj:`solvers` (those it
    supports) and :obj:`default_solver`.
    """
    name: ClassVar[str] = ''
    projection: ClassVar[str] = 'relu'
    solvers: ClassVar[Tuple[str, ...]] = ('closed', 'series', 'cg')
    default_solver: ClassVar[str] = 'cg'
    #: whether a network transforms first and propagates once (APPNP, DAGNN)
    decoupled: ClassVar[bool] = False
    #: the number of series terms, for :obj:`solver="series"`
    K: int = 10
    #: the coefficients :meth:`learn` can make trainable, with their range: an
    #: open interval :obj:`(low, high)`, either end possibly infinite (e.g.
    #: :obj:`(-0.5, math.inf)`), or :obj:`"positive"` (:math:`(0, \infty)`)
    #: or :obj:`"unit"` (:math:`(0, 1)`); see :func:`constrain`
    learnable: ClassVar[Dict[str, Range]] = {}
    #: the ends of their interval, :obj:`"low"` or :obj:`"high"`, that
    #: learnable coefficients cannot take (the system is singular or undefined
    #: there, as APPNP's at :math:`\alpha = 0`, or has no bound above 0 over
    #: graphs, as the signed regulariser's at :math:`\alpha = -1/2`): a learned
    #: value that rounding puts on such an end is refused before any solve
    open_ends: ClassVar[Dict[str, FrozenSet[str]]] = {}
    #: coefficients fixed at construction, as they decide the regulariser's
    #: modules (e.g. DAGNN's gate), whose parameters an optimizer may hold: a
    #: later change, by assignment or a loaded state, is refused
    structural: ClassVar[FrozenSet[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.projection not in PROJECTIONS:  # RegularizerGNN would apply none, silently
            raise TypeError(f"{cls.__name__}.projection must be one of {PROJECTIONS} (got "
                            f"{cls.projection!r})")
        # Assignments inside the constructor are its own. (One defined elsewhere,
        # e.g. by a mixin or a decorator, is not marked: its first assignment of
        # each coefficient is not checked, see __setattr__.)
        if '__init__' in cls.__dict__:
            cls.__init__ = _constructor(cls.__dict__['__init__'])

    def __new__(cls, *args: Any, **kwargs: Any) -> 'Regularizer':
        # Set up the module before any __init__ runs, so that a subclass may
        # assign coefficients first or never call super().__init__().
        self = super().__new__(cls)
        torch.nn.Module.__init__(self)
        return self

    def __init__(self, **coefficients: Any) -> None:
        if coefficients:
            raise TypeError(f"{type(self).__name__} got unknown coefficient(s) "
                            f"{sorted(coefficients)}")

    # -- what a regulariser is --------------------------------------------------
    def operator(self, graph: GraphOperators) -> Tensor:
        r"""The sparse symmetric positive definite :math:`\mathbf{M}`."""
        raise NotImplementedError(f'{type(self).__name__} must implement operator(graph)')

    def cached_operator(self, graph: GraphOperators) -> Tensor:
        r""":meth:`operator`, built once per graph (on every call while
        coefficients are learned), and again when a coefficient is assigned,
        any parameter or buffer of the regulariser is replaced (as
        :func:`torch.func.functional_call` does) or changed in place by
        PyTorch (its version counter), or a parameter of
        :meth:`trainable_parameters` changes: by PyTorch (an
        optimizer step: its version counter), or also through :obj:`.data` or
        NumPy while the operator may read it (its
        :func:`~torch_geometric_regcn.utils.fingerprint.fingerprint`, one pass
        over it per call, until a call with gradients gives an operator without
        one, which reads no parameter, or reads one without its gradient, as
        :obj:`float(p)` does: such a read is then seen through the version
        counter only). While those want a gradient and the operator carries
        it, it is built on every call."""
        if self.learned:
            return self.operator(graph)
        key, trainable = (self, 'operator'), self.trainable_parameters()
        reads = (self, 'reads trainable parameters')
        # The version counters always (free): an operator may read a parameter
        # without carrying its gradient (float(p), p.detach()), which a call
        # with gradients cannot tell from not reading it.
        # Every parameter and buffer by identity (held: an id alone may be a
        # freed tensor's address, reused) and version: an in-place change, or a
        # tensor swapped in by torch.func.functional_call.
        version: Hashable = (self.assignments, *(p._version for p in trainable),
                             *((_Held(t), t._version)
                               for t in itertools.chain(self.parameters(), self.buffers())))
        if trainable and torch.is_grad_enabled() and graph.derived.get(reads, True):
            matrix = self.operator(graph)
            graph.derived[reads] = matrix.requires_grad
            if matrix.requires_grad:
                return matrix
            return graph.memo(key, lambda: matrix, version=version)
        if trainable and graph.derived.get(reads, True):  # a lazy parameter has no numbers yet
            version = (version, *(('lazy', id(p)) if is_lazy(p) else fingerprint(p)
                                  for p in trainable))
        return graph.memo(key, lambda: self.operator(graph), version=version)

    def initialize_channels(self, channels: int) -> None:
        r"""Called by a layer with the number of channels it propagates, so
        that trainable parts sized by them (DAGNN's gate) are built at once
        rather than on the first call. Nothing by default."""

    def trainable_parameters(self) -> Tuple[Tensor, ...]:
        r"""The parameters of the regulariser's submodules that want a
        gradient (not the raw parameters of learned coefficients): what a
        user's :meth:`operator` may read besides the coefficients. An
        operator that reads them is built on every call, and CG's implicit
        backward differentiates it with respect to them."""
        raws = {id(p) for p in self.learned_parameters()}
        return tuple(p for p in self.parameters() if p.requires_grad and id(p) not in raws)

    @property
    def assignments(self) -> int:
        r"""How many coefficients were assigned since construction: the version
        under which operators built from them are kept in a graph
        (:meth:`GraphOperators.memo`), so that :obj:`reg.alpha = 2.0` builds
        them again, for a cached layer too."""
        return self.__dict__.get('_assignments', 0)

    def numerator(self, x: Tensor, graph: GraphOperators) -> Tensor:
        r"""Applies :math:`\mathbf{B}` (the identity by default)."""
        return x

    def requires(self, solver: str) -> FrozenSet[str]:
        r"""What :obj:`solver` reads of the graph, a subset of
        :obj:`{"adj", "semantic", "lowrank"}` (see
        :class:`~torch_geometric_regcn.regularizers.GraphOperators`). A layer
        passes on only these inputs; by default every solver reads the
        adjacency alone."""
        return frozenset({'adj'})

    def unread(self, solver: str) -> FrozenSet[str]:
        r"""The constructor's arguments that :obj:`solver` never reads (a
        transform given one of them explicitly refuses it, rather than
        propagate as if it had): none by default."""
        return frozenset()

    def coefficients(self) -> Dict[str, Any]:
        r"""The fixed coefficients, as passed to the constructor (learned ones
        are parameters, see :meth:`learn`)."""
        return {k: v for k, v in vars(self).items()
                if not k.startswith('_') and k != 'training'}

    # -- learned coefficients -----------------------------------------------------
    def learn(self, *names: str) -> 'Regularizer':
        r"""Makes the coefficients :obj:`names` trainable, from their current
        values. Each is a function of an unconstrained parameter
        :obj:`raw_<name>` that keeps it in its range (:attr:`learnable`), an
        open interval :math:`(l, h)` (:func:`constrain`): :math:`l +
        \mathrm{softplus}` where :math:`h = \infty` (softplus itself for
        positive coefficients), :math:`l + (h - l)\,\sigma` for a bounded
        interval (the logistic sigmoid itself on :math:`(0, 1)`), the
        parameter itself on :math:`(-\infty, \infty)`. A coefficient is a
        number, or a vector (a 1-D tensor or a sequence of numbers, e.g.
        polynomial coefficients), whose parameter then has its shape. Its
        starting value must lie inside the interval, every entry of a vector
        (:class:`ValueError` naming it, its value and the interval
        otherwise); the parameter starts at :func:`unconstrain` of it,
        computed in float64 and stored in the default dtype. The solvers
        :obj:`"closed"`, :obj:`"series"` and :obj:`"cg"` differentiate through
        them; :obj:`"cg"` by implicit differentiation, :math:`\partial
        \mathbf{Y} / \partial \theta = -\mathbf{M}^{-1} (\partial \mathbf{M}
        / \partial \theta) \mathbf{Y}`, at the cost of one more product with
        :math:`\mathbf{M}` in the backward pass (see
        :func:`~torch_geometric_regcn.linalg.cg.cg_solve`).
        Every propagation first checks that the raw parameters are finite (one
        synchronisation) and raises :class:`ValueError` naming the coefficient
        where a diverged optimizer step left one NaN or infinite. An
        optimizer that applies weight decay to the raw parameters warns once,
        at its first step (see :mod:`~torch_geometric_regcn.regularizers.weight_decay`).
        Assigning to a learned coefficient (:obj:`reg.alpha = 0.5`) sets its
        raw parameter in place (checked as a start value);
        :meth:`reset_parameters` returns it to the value it was learned from.
        Returns the regulariser."""
        learned = self.__dict__.setdefault('_learned', {})
        for name in names:  # every name checked before anything changes
            if not self.learnable:
                raise ValueError(f"{type(self).__name__} cannot learn {name!r}: its "
                                 f"coefficients are fixed (it has no learnable coefficients)")
            if name not in self.learnable:
                raise ValueError(f"{type(self).__name__} cannot learn {name!r}; it can learn "
                                 f"{sorted(self.learnable)}")
        raws = {}
        for name in dict.fromkeys(names):
            if name not in learned:
                low, high = interval(self.learnable[name], name)
                value = getattr(self, name)
                raws[name] = (self._raw_value(name, value, low, high, torch.get_default_dtype()),
                              self._raw_value(name, value, low, high, torch.float64), low, high)
        for name, (raw, exact, low, high) in raws.items():
            delattr(self, name)
            # On the default device, as the layer's other parameters (the meta
            # device under torch.device('meta'); the value was checked on the CPU).
            self.register_parameter(f'raw_{name}', torch.nn.Parameter(
                raw.to(torch.empty(0).device)))
            learned[name] = (low, high)
            # In float64: a layer cast to float64 before training starts from the
            # exact value (see _apply), and reset_parameters() returns to it.
            self.__dict__.setdefault('_learned_start', {})[name] = exact.detach().clone()
        weight_decay.watch(self)
        return self

    def _raw_value(self, name: str, value: Any, low: float, high: float,
                   dtype: torch.dtype) -> Tensor:
        r"""The raw parameter, in :obj:`dtype`, of the learned coefficient
        :obj:`name` at :obj:`value` (:class:`ValueError` outside its interval,
        or on an end of it by rounding for a coefficient of
        :attr:`open_ends`)."""
        value_t, shown = _start_value(name, value)
        if not bool(((value_t > low) & (value_t < high)).all()):  # NaN included
            raise ValueError(f"'{name}' = {shown} cannot be learned: start it inside "
                             f"{format_interval(low, high)}, where its "
                             f"reparametrisation is defined")
        raw = unconstrain(value_t, low, high).to(dtype)
        start = constrain(raw, low, high)  # as the forward computes it
        if not bool(_off_excluded_ends(start, low, high, self.open_ends.get(name, ()))):
            raise ValueError(f"'{name}' = {shown} cannot be learned: its parameter in "
                             f"{raw.dtype} puts it on an end of {format_interval(low, high)} "
                             f"by rounding; start it further inside")
        return raw

    def __setattr__(self, name: str, value: Any) -> None:
        learned = self.__dict__.get('_learned')
        if learned and name in learned:
            # A plain attribute would hide the learned one from the layer and the optimizer.
            if isinstance(value, Tensor) and value.requires_grad:
                raise TypeError(f"'{name}' is learned through raw_{name}: setting it to a "
                                f"tensor that requires grad would cut that gradient; pass "
                                f"the parameter with torch.func.functional_call, or detach "
                                f"the value")
            raw = self._parameters[f'raw_{name}']
            low, high = interval(learned[name], name)
            new = self._raw_value(name, value, low, high, raw.dtype)
            if new.shape != raw.shape:
                raise ValueError(f"'{name}' is learned with shape {tuple(raw.shape)}; cannot "
                                 f"set it to a value of shape {tuple(new.shape)}")
            with torch.no_grad():
                raw.copy_(new)
            return
        if not name.startswith('_') and name != 'training':  # a coefficient: see assignments
            if name in self.structural and name in self.__dict__ \
                    and value != self.__dict__[name]:
                cls = type(self).__name__
                raise ValueError(f"'{name}' of {cls} is fixed at construction (it decides the "
                                 f"regulariser's modules, whose parameters an optimizer may "
                                 f"hold); build a new {cls}({name}={value!r})")
            if name in self.__dict__ and not _UNCHECKED.get():  # changed later: its checks
                try:
                    self._check_coefficients({**self._values(), name: value})
                except (TypeError, ValueError) as error:
                    raise type(error)(f"{error} (checked with the other coefficients' "
                                      f"current values; change coefficients that must "
                                      f"agree together with set_coefficients())") from None
            self.__dict__['_assignments'] = self.__dict__.get('_assignments', 0) + 1
        super().__setattr__(name, value)

    def set_coefficients(self, **values: Any) -> 'Regularizer':
        r"""Sets several coefficients at once, after the constructor's checks
        of all of them together (e.g. a polynomial's :obj:`K` and
        :obj:`gamma`, which must agree, where one assignment at a time would
        pass through a mix the constructor refuses). Nothing changes unless
        every check passes. Learned coefficients set their raw parameters (see
        :meth:`learn`); a name that is no coefficient raises
        :class:`TypeError`, as the constructor does. Returns the regulariser."""
        parameters = _init_parameters(type(self))
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            known = {*self.coefficients(), *self.learned, *(p.name for p in parameters)}
            unknown = sorted(set(values) - known)
            if unknown:  # else stored beside them, shown and saved, and read by nothing
                raise TypeError(f"{type(self).__name__} has no coefficient(s) {unknown}; "
                                f"its coefficients are {sorted(known)}")
        return self._set_coefficients(values)

    def _set_coefficients(self, values: Dict[str, Any], at_start: bool = False
                          ) -> 'Regularizer':
        r""":meth:`set_coefficients`; with :obj:`at_start`, checked with the
        learned coefficients at the values they were learned from (a loaded
        state: learned ones may since have reached values the constructor
        refuses together, e.g. tsGCN's two zeros by softplus underflow, which
        the forward computes and a reload must give back)."""
        self._check_coefficients({**self._values(at_start), **values})
        # Restored if an assignment fails after others (e.g. a learned vector's shape).
        fixed = {name: self.__dict__[name] for name in values if name in self.__dict__}
        raws = {name: self._parameters[f'raw_{name}'].detach().clone() for name in self.learned}
        try:
            with _unchecked():
                for name, value in values.items():
                    setattr(self, name, value)
        except BaseException:
            for name in values:
                if name in fixed:
                    self.__dict__[name] = fixed[name]
                elif name not in raws:
                    self.__dict__.pop(name, None)
            with torch.no_grad():
                for name, raw in raws.items():
                    self._parameters[f'raw_{name}'].copy_(raw)
            raise
        return self

    def _values(self, at_start: bool = False) -> Dict[str, Any]:
        r"""Every coefficient's value: the fixed ones, and the learned ones as
        numbers (lists for vectors), now or (:obj:`at_start`) when learning
        began."""
        starts = self.__dict__.get('_learned_start', {})
        learned = self.__dict__.get('_learned', {})

        def value(name: str) -> Any:
            if at_start and name in starts:
                return constrain(starts[name].double(), *learned[name]).tolist()
            return getattr(self, name).detach().tolist()
        return {**self.coefficients(), **{name: value(name) for name in self.learned}}

    def _check_coefficients(self, values: Dict[str, Any]) -> None:
        r"""Runs the constructor's checks on :obj:`values` (a fresh instance
        is built from those it takes, when it takes every required one; others,
        e.g. of an older version, pass unchecked), raising their error before
        anything changes."""
        parameters = _init_parameters(type(self))
        if any(p.kind == p.POSITIONAL_ONLY for p in parameters):
            return  # not passed by name: unchecked
        with _unchecked():  # the fresh instance's own assignments
            if not any(p.kind == p.VAR_KEYWORD for p in parameters):
                names = {p.name for p in parameters}
                checked = {k: v for k, v in values.items() if k in names}
                if all(p.name in checked for p in parameters
                       if p.default is p.empty and p.kind != p.VAR_POSITIONAL):
                    type(self)(**checked)
            else:  # **coefficients: a TypeError may be a key it does not take
                try:
                    type(self)(**values)
                except TypeError:
                    pass

    @property
    def learned(self) -> Tuple[str, ...]:
        r"""The names of the learned coefficients."""
        return tuple(self.__dict__.get('_learned', ()))

    def learned_parameters(self) -> Tuple[Tensor, ...]:
        r"""The unconstrained parameters of the learned coefficients."""
        return tuple(self._parameters[f'raw_{name}'] for name in self.learned)

    def __getattr__(self, name: str) -> Any:
        learned = self.__dict__.get('_learned')
        if learned and name in learned:
            # The range as learn() stored it; a name where pickled by an older version.
            return constrain(self._parameters[f'raw_{name}'], *interval(learned[name], name))
        return super().__getattr__(name)

    def operator_terms(self, graph: GraphOperators) -> List[Tuple[Any, Optional[Tensor]]]:
        r""":math:`\mathbf{M} = \sum_k c_k \mathbf{A}_k` as pairs :obj:`(c_k,
        A_k)` of coefficients (tensors where learned) and sparse operators that
        do not depend on them (:obj:`None` for the identity), for regularisers
        that :meth:`learn`. By default :obj:`[(1, operator(graph))]`."""
        return [(1.0, self.operator(graph))]

    def frequency_response(self, lam: Tensor) -> Tensor:
        r"""The gain :math:`g(\lambda)` of the propagation of the default solver
        on an eigenvector of :math:`\hat{\mathbf{A}}` with eigenvalue
        :math:`\lambda`."""
        raise NotImplementedError(f'{type(self).__name__} does not define its frequency '
                                  f'response')

    def _apply(self, fn: Any, recurse: bool = True) -> 'Regularizer':
        # A learned coefficient not trained yet is cast from its exact start, not
        # from its value rounded in the dtype it was created in: a float64 layer
        # learning alpha = 0.3 would start at 0.30000000275 (float32's raw value).
        before = {name: self._parameters[f'raw_{name}'].detach().clone()
                  for name in self.learned}
        super()._apply(fn, recurse)
        starts = self.__dict__.get('_learned_start', {})
        with torch.no_grad():
            for name, old in before.items():
                raw, start = self._parameters[f'raw_{name}'], starts.get(name)
                if (start is not None and raw.dtype != old.dtype and raw.is_floating_point()
                        and torch.equal(old, start.to(old.device, old.dtype))):
                    raw.copy_(start.to(raw.device, raw.dtype))
        return self

    def reset_parameters(self) -> None:
        r"""Resets the trainable parts, if any: the learned coefficients to the
        values they were learned from, the submodules by their own
        :meth:`reset_parameters`."""
        starts = self.__dict__.get('_learned_start', {})
        with torch.no_grad():
            for name in self.learned:
                if name in starts:
                    self._parameters[f'raw_{name}'].copy_(starts[name])
        for child in self.children():
            if hasattr(child, 'reset_parameters'):
                child.reset_parameters()

    # -- state --------------------------------------------------------------------
    def __setstate__(self, state: Dict[str, Any]) -> None:
        super().__setstate__(state)
        weight_decay.watch(self)  # copies and unpickled regularisers with learned coefficients

    def get_extra_state(self) -> Dict[str, Any]:
        # The class, so that a state is never read as another regulariser's.
        return {**self.coefficients(), _CLASS_KEY: type(self).__qualname__}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        state = dict(state)
        saved = state.pop(_CLASS_KEY, None)  # absent from the states of 0.1
        # Its class or one it derives from (a class moved to another module,
        # from a script's __main__, keeps its name), unless a class between
        # them is a model of its own (a registered name: SGC derives from GCN,
        # and a GCN state would load into SGC's layers as another model).
        if saved is not None:
            mro = [c.__qualname__ for c in type(self).__mro__]
            between = type(self).__mro__[:mro.index(saved)] if saved in mro else None
            if between is None or any(vars(c).get('name') for c in between):
                raise ValueError(f"The state holds the coefficients of {saved}, but this "
                                 f"module's regulariser is {type(self).__qualname__}: build "
                                 f"the module with the regulariser of the checkpoint")
        # The constructor's checks on the state as a whole, before anything
        # changes (not one key at a time, whose mixes of old and new values may
        # fail where the whole passes). A TypeError of a check is raised.
        try:  # learned ones: their parameters, kept in their intervals by their
            # reparametrisation
            self._set_coefficients({key: value for key, value in state.items()
                                    if key not in self.learned}, at_start=True)
        except ValueError as error:  # say which side is which
            raise ValueError(f"The checkpoint's coefficients ({', '.join(sorted(state))}) do not "
                             f"fit this module's regulariser {self!r}, built with other "
                             f"arguments: {error}. Build the module with the checkpoint's "
                             f"arguments") from None
        # A value for a coefficient this module learns comes from a module that
        # kept it fixed (which has no raw parameter to load, so strict=False
        # dropped it silently): learning continues from it.
        for name in self.learned:
            if name in state:
                setattr(self, name, state[name])

    # -- shared machinery ---------------------------------------------------------
    def check_solver(self, solver: Optional[str]) -> str:
        r"""Returns :obj:`solver`, or :attr:`default_solver` for :obj:`None`,
        after checking that it is one of :attr:`solvers` (:class:`ValueError`
        naming the supported ones otherwise)."""
        solver = self.default_solver if solver is None else solver
        if solver not in SOLVERS:
            raise ValueError(f"Unknown solver {solver!r}; choose one of {SOLVERS}")
        if solver not in self.solvers:
            raise ValueError(f"Regularizer '{self.name or type(self).__name__}' cannot use "
                             f"solver={solver!r}; it supports {self.solvers}")
        return solver

    def propagate(self, x: Tensor, graph: GraphOperators, solver: Optional[str] = None,
                  tol: float = 1e-6, max_iter: int = 1000) -> Tensor:
        r"""Computes :math:`\mathbf{R}^{-1}\mathbf{X}` with :obj:`solver`.

        Under :func:`torch.compile`, :obj:`"lowrank"` (dense) is compiled;
        :obj:`"closed"`, :obj:`"series"` and :obj:`"cg"`, which build sparse
        operators and loop in Python, run eagerly, as a graph break (so
        :obj:`fullgraph=True` works with :obj:`"lowrank"` only)."""
        solver = self.check_solver(solver)
        graph.check_features('x', check_tensor('x', x))
        if solver == 'lowrank':
            return self.lowrank(x, graph)
        return _sparse_propagate(self, x, graph, solver, tol, max_iter)

    def series(self, x: Tensor, graph: GraphOperators) -> Tensor:
        r"""A :obj:`K`-term Neumann series :math:`\omega \sum_{k<K} (\mathbf{I} -
        \omega\mathbf{M})^k \mathbf{B}\mathbf{X}` with :math:`\omega =
        1 / \|\mathbf{M}\|_\infty`, which converges for any symmetric positive
        definite :math:`\mathbf{M}`; its gradient includes that of
        :math:`\omega` where :math:`\mathbf{M}` depends on parameters."""
        matrix = self.cached_operator(graph)
        if matrix.size(0) == 0:  # no nodes: nothing to sum (and no bound to divide by)
            return self.numerator(x, graph)
        omega: Union[float, Tensor] = 1.0 / spectral_bound(matrix)
        if matrix.requires_grad and torch.is_grad_enabled():
            # omega depends on M (its learned coefficients, edge weights): the
            # same number, differentiable, so the gradient is the output's.
            omega = 1.0 / absolute_row_sums(matrix).max()
        term = omega * self.numerator(x, graph)
        out = term
        for _ in range(self.K - 1):
            term = term - omega * graph.matmul(matrix, term, symmetric=True)
            out = out + term
        return out

    def regularizer_matrix(self, graph: GraphOperators) -> Tensor:
        r"""The dense :math:`\mathbf{R} = \mathbf{B}^{-1}\mathbf{M}` (for
        analysis and tests on small graphs: :math:`O(N^3)`). Raises
        :class:`ValueError` where :math:`\mathbf{B}` is singular to working
        precision (its smallest singular value at most :math:`N\epsilon`
        times the largest, as :math:`\hat{\mathbf{A}}` of JKNet is on some
        graphs): :math:`\mathbf{R}` does not exist there."""
        m = self.operator(graph).to_dense()
        if type(self).numerator is Regularizer.numerator:  # B = I
            return m
        b = self.numerator(torch.eye(graph.num_nodes, dtype=m.dtype, device=m.device), graph)
        values = torch.linalg.svdvals(b.detach())
        n, eps = graph.num_nodes, torch.finfo(b.dtype).eps
        if n and not float(values.min()) > n * eps * float(values.max()):
            raise ValueError(
                f"{self!r} has no regulariser matrix on this graph: B (its propagation is "
                f"M^-1 B X) is singular to {b.dtype} precision (its smallest singular value "
                f"is {float(values.min()):.2g}, the largest {float(values.max()):.2g}), so "
                f"R = B^-1 M does not exist; the propagation is still defined, but it "
                f"minimises no energy")
        return torch.linalg.solve(b, m)

    def energy(self, h: Tensor, h_in: Tensor, edge_index: Any = None, **graph: Any) -> Tensor:
        r"""The objective the layer minimises, :math:`-\mathrm{Tr}(\mathbf{H}^{\top}
        \mathbf{H}_{in}) + \frac{1}{2}\mathrm{Tr}(\mathbf{H}^{\top}\mathbf{R}
        \mathbf{H})`, with :math:`\mathbf{H}_{in} = \mathbf{X}\mathbf{\Theta}`.
        :obj:`edge_index` may also be a prepared :class:`GraphOperators`; other
        keyword arguments are those of
        :meth:`~torch_geometric_regcn.RegularizerConv.forward`. Dense in
        :math:`\mathbf{R}`: meant for analysis on small graphs."""
        h, h_in = check_tensor('h', h), check_tensor('h_in', h_in)
        if h.dim() != 2 or h_in.shape != h.shape:
            raise ValueError(f"'h' and 'h_in' must be [N, F] matrices of one shape (got "
                             f"{list(h.shape)} and {list(h_in.shape)})")
        ops = self._energy_graph(h, edge_index, graph)
        return -(h * h_in).sum() + 0.5 * (h * (self.regularizer_matrix(ops) @ h)).sum()

    def _energy_graph(self, h: Tensor, edge_index: Any, graph: Dict[str, Any]
                      ) -> GraphOperators:
        r"""The undirected :class:`GraphOperators` that :meth:`energy` reads:
        :obj:`edge_index` itself where prepared, else built from it and the
        layer's keyword arguments :obj:`graph` (a batch's own, :obj:`batch`
        and :obj:`batch_size`, change no energy: a sum over the graphs), with
        :obj:`h` checked against it."""
        for name in ('batch', 'batch_size'):
            graph.pop(name, None)
        ops = edge_index if isinstance(edge_index, GraphOperators) else build_graph(
            self, edge_index, h.size(0), dtype=h.dtype, **graph)
        ops.check_features('h', h)
        if ops.direction is not None:  # not symmetric: no energy has it as its Hessian
            raise ValueError(f"energy() needs an undirected graph (got GraphOperators with "
                             f"direction={ops.direction!r}): a directed layer's operators are "
                             f"not symmetric, so it minimises no energy")
        return ops

    def __repr__(self) -> str:
        args = [f'{k}={v}' for k, v in self.coefficients().items()]
        args += [f'{name}=learned({_format_value(getattr(self, name).detach())})'
                 for name in self.learned]
        return f'{type(self).__name__}({", ".join(args)})'


#: Set while coefficient assignments need no check of their own: inside a
#: constructor (its checks are the coefficients' checks), while
#: :meth:`Regularizer._check_coefficients` builds its fresh instance, and
#: while :meth:`Regularizer.set_coefficients` assigns what it checked whole.
_UNCHECKED: contextvars.ContextVar[bool] = contextvars.ContextVar('_UNCHECKED', default=False)


@contextlib.contextmanager
def _unchecked() -> Iterator[None]:
    token = _UNCHECKED.set(True)
    try:
        yield
    finally:
        _UNCHECKED.reset(token)


def _constructor(init: Callable[..., None]) -> Callable[..., None]:
    r""":obj:`init`, its assignments unchecked (:meth:`Regularizer.__setattr__`
    checks later ones)."""
    @functools.wraps(init)
    def __init__(self: Regularizer, *args: Any, **kwargs: Any) -> None:
        with _unchecked():
            init(self, *args, **kwargs)
    return __init__


def _start_value(name: str, value: Any) -> Tuple[Tensor, Any]:
    r"""A coefficient's value to start learning it from, as a float64 tensor
    (0-d for a number, 1-D for a vector) and as the errors write it (a
    :class:`float`, or a list)."""
    if isinstance(value, Tensor) and value.dim() == 0 or isinstance(value, numbers.Real):
        value = float(value)
        return torch.tensor(value, dtype=torch.float64, device='cpu'), value
    try:  # on the CPU, also under a torch.device('meta') context: the value is checked
        value_t = torch.as_tensor(value.detach().cpu() if isinstance(value, Tensor) else value,
                                  dtype=torch.float64, device='cpu')
    except (TypeError, ValueError, RuntimeError):
        value_t = None
    if value_t is None or value_t.dim() != 1:
        raise TypeError(f"'{name}' cannot be learned: a learned coefficient is a real number "
                        f"or a vector (a 1-D tensor or a sequence of numbers), got "
                        f"{type(value).__name__} {value!r}")
    return value_t, value_t.tolist()


def _format_value(value: Tensor) -> str:
    r"""A learned coefficient as :meth:`Regularizer.__repr__` writes it: each
    value by the shortest decimal that reads back as it in its dtype, so
    that two reprs differ wherever the values do (PyG compares a
    pre_transform's repr with the processed dataset's to process it again)."""
    if value.is_meta:  # built under torch.device('meta'): no value yet
        return '?' if value.dim() == 0 else f'[{value.numel()} values]'
    host = value.detach().cpu()
    host = host.float() if host.dtype == torch.bfloat16 else host  # NumPy has no bfloat16
    texts = [str(v) for v in host.numpy().reshape(-1)]
    return texts[0] if value.dim() == 0 else '[' + ', '.join(texts) + ']'


@compiler_disable(reason="Regularizer.propagate runs the solvers 'closed', 'series' and 'cg' "
                  "eagerly: they build sparse graph operators and loop in Python. Compile "
                  "without fullgraph=True (a graph break), or use solver='lowrank' (tsGCN) "
                  "or TSGCNConv, which compile whole")
def _sparse_propagate(regularizer: Regularizer, x: Tensor, graph: GraphOperators, solver: str,
                      tol: float, max_iter: int) -> Tensor:
    r""":meth:`Regularizer.propagate` with a solver on the sparse graph, eagerly."""
    _check_learned(regularizer)
    if solver == 'cg' and graph.direction is not None:
        raise ValueError(f"solver='cg' needs a symmetric positive definite system, but the "
                         f"graph is directed (direction={graph.direction!r}), so its operator "
                         f"is not symmetric: use solver='series' or 'closed'")
    if solver == 'series':
        return regularizer.series(x, graph)
    rhs = regularizer.numerator(x, graph)
    if regularizer.learned:
        return _learned_solve(regularizer, rhs, graph, solver, tol, max_iter)
    matrix = regularizer.cached_operator(graph)
    if solver == 'closed':  # dense O(N^3): small graphs and tests only
        return closed_solve(graph.dense(matrix), rhs, regularizer)
    params = graph.propagate_params + graph.differentiable_inputs() + (
        regularizer.trainable_parameters() if matrix.requires_grad else ())
    batch, batch_size = graph.batch or (None, None)
    return cg_solve(matrix, rhs, tol, max_iter, graph.matmul if params else graph.propagate,
                    params, batch, batch_size)


def _init_parameters(cls: type) -> List[inspect.Parameter]:
    r"""The parameters of :obj:`cls`'s constructor, :obj:`self` left out."""
    return list(inspect.signature(cls.__init__).parameters.values())[1:]


class _Held:
    r"""A tensor in a cache's version, equal to another only if it is the
    same tensor (never by value: a tensor's :obj:`==` is elementwise), and
    kept alive so that its address is not a later tensor's."""
    __slots__ = ('tensor',)

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Held) and other.tensor is self.tensor

    def __hash__(self) -> int:
        return id(self.tensor)


#: The hidden-layer projections a regulariser may pair with (:attr:`Regularizer.projection`).
PROJECTIONS = ('relu', 'identity')

#: The key of a regulariser's extra state that names its class.
_CLASS_KEY = '_regularizer'


def _off_excluded_ends(value: Tensor, low: float, high: float, ends: Any) -> Tensor:
    r"""Whether every entry of :obj:`value` lies off the :obj:`ends` of
    :math:`(\text{low}, \text{high})` it may not take (:obj:`"low"`,
    :obj:`"high"`), as a 0-d boolean tensor (no synchronisation)."""
    ok = torch.ones((), dtype=torch.bool, device=value.device)
    if 'low' in ends:
        ok = ok & (value > low).all()
    if 'high' in ends:
        ok = ok & (value < high).all()
    return ok


def _check_learned(regularizer: Regularizer) -> None:
    r"""Raises :class:`ValueError` where a learned coefficient's raw parameter
    is NaN or infinite, as a diverged optimizer step leaves it, or where a
    coefficient has reached by rounding an end of its interval named in
    :attr:`Regularizer.open_ends` (e.g. the signed regulariser's
    :math:`\alpha = -1/2`, where its system is singular), naming the
    coefficient, its value and the fix, before any solve: left alone, a
    non-finite one makes :obj:`"closed"` and :obj:`"series"` return NaN and
    :obj:`"cg"` report a non-finite system matrix of its own. Runs eagerly
    for every sparse solver, under :func:`torch.compile` as well. Cost: one
    synchronisation per call, none without learned coefficients."""
    names = regularizer.learned
    if not names:
        return
    raws = regularizer.learned_parameters()
    values = [getattr(regularizer, name).detach() for name in names]
    bounds = [interval(regularizer.__dict__['_learned'][name], name) for name in names]
    ok = torch.stack([torch.isfinite(raw.detach()).all()
                      & _off_excluded_ends(value, low, high, regularizer.open_ends.get(name, ()))
                      for name, raw, value, (low, high) in zip(names, raws, values, bounds)])
    if bool(ok.all()):
        return
    for name, raw, value, (low, high), good in zip(names, raws, values, bounds, ok.tolist()):
        if good:
            continue
        if bool(torch.isfinite(raw.detach()).all()):
            raise ValueError(
                f"{type(regularizer).__name__}'s learned coefficient '{name}' = "
                f"{value.tolist()} has reached an end of its interval "
                f"{format_interval(low, high)} by rounding (raw_{name} = "
                f"{raw.detach().tolist()}), where it is not defined: an optimizer drove it "
                f"there; lower the learning rate, bound the parameter or fix the coefficient")
        raise ValueError(
            f"{type(regularizer).__name__}'s learned coefficient '{name}' has a "
            f"non-finite raw parameter raw_{name} = {raw.detach().tolist()} ({name} = "
            f"{value.tolist()}), so no solver can propagate with it: an optimizer step "
            f"diverged; lower the learning rate, clip the gradients or reload a checkpoint")


def closed_solve(matrix: Tensor, rhs: Tensor, regularizer: Regularizer) -> Tensor:
    r"""The solver :obj:`"closed"`: :math:`\mathbf{M}^{-1}\mathbf{Y}` for the
    dense :obj:`matrix` of :obj:`regularizer` by the LU factorisation with
    partial pivoting of :func:`torch.linalg.solve` (the same result and
    gradients, to the bit), whose accuracy is then bounded by
    :math:`\epsilon\,\kappa`, :math:`\epsilon` the machine epsilon of the
    dtype and :math:`\kappa = \|\mathbf{M}\|_2 \|\mathbf{M}^{-1}\|_2` the
    condition number, both norms estimated (from below) by
    :obj:`CONDITION_STEPS` steps of power iteration on :math:`\mathbf{M}`
    and of inverse iteration with the same factors, from a fixed random
    vector. The pivots alone do not tell: at a few thousand nodes a
    singular matrix's smallest pivot lies thousands of machine epsilons
    from zero, while a well-posed float32 system whose rows differ in scale
    has one closer. Where :math:`\epsilon\kappa \max(1, \sqrt{N}/8)`
    reaches :obj:`CLOSED_SINGULAR` (the estimate undershoots a singular matrix's
    condition, whose rounding grows with :math:`N`), the matrix is singular
    to working precision, as coefficients such as :obj:`alpha=1e20` make
    it, and :class:`ValueError` says so and how to fix it, instead of
    LAPACK's message or a result of rounding noise; where
    :math:`\epsilon\kappa` exceeds 0.1 %, a :class:`UserWarning` reports
    it. A matrix with NaN or infinite entries (non-finite learned
    coefficients) raises :class:`ValueError` as well. Cost: :math:`O(N^3)`
    time for the factorisation and :math:`O(N^2)` for the estimate,
    :math:`O(N^2)` memory; one synchronisation."""
    if hasattr(torch, '_linalg_solve_ex'):  # what torch.linalg.solve runs, with its factors
        result, lu, pivots, info = torch._linalg_solve_ex(matrix, rhs)
    else:  # the same factorisation, by its public parts
        lu, pivots, info = torch.linalg.lu_factor_ex(matrix)
        result = torch.linalg.lu_solve(lu, pivots, rhs)
    n = matrix.size(0)
    if n == 0:
        return result
    with torch.no_grad():
        m, lu = matrix.detach(), lu.detach()
        start = torch.randn(n, 1, generator=torch.Generator().manual_seed(0),
                            dtype=torch.float64)
        z = y = (start / start.norm()).to(m)
        norm, inverse_norm = m.new_zeros(()), m.new_zeros(())
        for _ in range(CONDITION_STEPS):  # both lower bounds, the largest step's kept
            w = torch.linalg.lu_solve(lu, pivots, z)
            inverse_norm = torch.maximum(inverse_norm, w.norm())
            z = w / w.norm()
            image = m @ y
            norm = torch.maximum(norm, image.norm())
            y = image / image.norm()
        eps = torch.finfo(m.dtype).eps
        error, failed, finite = torch.stack(
            [eps * norm * inverse_norm, info.to(m.dtype),
             torch.isfinite(m).all().to(m.dtype)]).tolist()
    if not finite:
        raise ValueError(f"solver='closed' cannot solve with {regularizer!r}: its system matrix "
                         f"M holds NaN or infinite values; check its coefficients (a diverged "
                         f"training step leaves learned ones non-finite)")
    # The estimate undershoots a singular matrix's condition, whose rounding grows with N.
    if failed or not error * max(1.0, math.sqrt(n) / 8) < CLOSED_SINGULAR:  # NaN, inf too
        raise ValueError(
            f"solver='closed' cannot solve with {regularizer!r}: its system matrix M is "
            f"singular to {matrix.dtype} precision (eps times its condition number, the bound "
            f"on the relative error of the result, is {error:.2g}, at least "
            f"{CLOSED_SINGULAR} / max(1, sqrt(N) / 8)), so M^-1 does not exist in this "
            f"precision. Use smaller coefficients (e.g. a smaller alpha), float64 ('.double()' "
            f"on the layer and its input) or solver='cg', which reports the residual it "
            f"reaches")
    if error > GAIN_ACCURACY:
        warnings.warn(
            f"solver='closed' with {regularizer!r}: the system matrix M is ill-conditioned in "
            f"{matrix.dtype} (eps times its condition number is {error:.2g}), so the result "
            f"may be off by up to about {error:.1%}; use float64 ('.double()' on the layer "
            f"and its input), smaller coefficients, or solver='cg'", UserWarning,
            stacklevel=2)
    return result


def _learned_solve(regularizer: Regularizer, rhs: Tensor, graph: GraphOperators, solver: str,
                   tol: float, max_iter: int) -> Tensor:
    r"""The solve of a regulariser with learned coefficients: :math:`\mathbf{M}`
    from its :meth:`~Regularizer.operator_terms`, rebuilt on every call. Their
    coefficients are computed once, here, and CG's backward differentiates
    through those tensors, so the gradient reaches the parameters this call
    read (also where they were swapped for the call, as
    :func:`torch.func.functional_call` does)."""
    # One node of its own per distinct coefficient tensor: CG's backward then
    # differentiates the product in each alone, and autograd carries that back
    # to the raw parameters once, also where one coefficient is built from
    # another or returned twice.
    own: Dict[int, Tensor] = {}
    terms = []
    for c, m in regularizer.operator_terms(graph):
        if isinstance(c, Tensor) and c.requires_grad:
            if id(c) not in own:
                own[id(c)] = c.clone()
            c = own[id(c)]
        terms.append((c, m))

    def product(_: Tensor, y: Tensor) -> Tensor:  # M(θ) y, differentiable in θ
        out = None
        for c, matrix in terms:
            term = c * (y if matrix is None else graph.matmul(matrix, y, symmetric=True))
            out = term if out is None else out + term
        return out

    if solver == 'closed':
        eye = torch.eye(graph.num_nodes, dtype=rhs.dtype, device=rhs.device)
        dense = sum(c * (eye if m is None else graph.dense(m)) for c, m in terms)
        return closed_solve(dense, rhs, regularizer)
    with torch.no_grad():  # diag(M) now, for the preconditioner (CG's products are product())
        diag = torch.zeros(graph.num_nodes, dtype=rhs.dtype, device=rhs.device)
        for c, m in terms:
            c = c.detach() if isinstance(c, Tensor) else c
            # O(nnz) per call; a memo by id(m) handed a later matrix at a freed
            # one's address that matrix's diagonal.
            diag += c if m is None else c * diagonal(m.detach())
        index = torch.arange(graph.num_nodes, device=rhs.device).expand(2, -1)
        matrix = torch.sparse_coo_tensor(index, diag, (graph.num_nodes,) * 2,
                                         check_invariants=False).to_sparse_csr()
    # What the matrices read besides the coefficients: the submodules'
    # parameters, and the learned ones themselves where operator_terms() is
    # the default [(1, operator())] (a user's operator() that reads them) or a
    # matrix carries a gradient. Then the learned parameters alone, not also
    # the coefficients' nodes, which derive from them: the product's gradient
    # in a parameter already runs through its coefficients, and would count
    # them twice (1.52 for 1.01 where a term's coefficient and matrix both
    # read one).
    read = any(m is not None and m.requires_grad for _, m in terms)
    default_terms = type(regularizer).operator_terms is Regularizer.operator_terms
    direct = default_terms or read
    params = ((() if direct else tuple(own.values())) + graph.propagate_params
              + graph.differentiable_inputs()
              + (regularizer.trainable_parameters() if read else ())
              + (regularizer.learned_parameters() if direct else ()))
    batch, batch_size = graph.batch or (None, None)
    return cg_solve(matrix, rhs, tol, max_iter, product, params, batch, batch_size)
