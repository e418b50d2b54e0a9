r"""Regularisers by name: :obj:`REGISTRY`, filled by :func:`register`, the
class decorator that the built-in regularisers use as users do."""
import inspect
from typing import Any, Dict, Type, Union

from torch_geometric_regcn.regularizers.base import Regularizer

#: The registered regularisers by :obj:`name` (the built-ins once
#: :mod:`torch_geometric_regcn.regularizers` is imported).
REGISTRY: Dict[str, Type[Regularizer]] = {}


def register(cls: Type[Regularizer]) -> Type[Regularizer]:
    r"""Registers a :class:`Regularizer` subclass under its :obj:`name`
    (usable as a class decorator). A name already taken by another class (a
    built-in one included) raises a :class:`ValueError`; the same class
    defined again (its module and qualified name unchanged, e.g. a module
    reloaded) replaces its earlier definition."""
    if not (isinstance(cls, type) and issubclass(cls, Regularizer)):
        raise TypeError(f"register() takes a subclass of torch_geometric_regcn.regularizers."
                        f"Regularizer (got {cls!r})")
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a class attribute 'name' to be registered")
    taken = REGISTRY.get(cls.name)
    if taken is not None and (taken.__module__, taken.__qualname__) != (cls.__module__,
                                                                         cls.__qualname__):
        raise ValueError(f"The regularizer name {cls.name!r} of {cls.__qualname__} is taken by "
                         f"{taken.__module__}.{taken.__qualname__}; give the class another "
                         f"'name', or pass the class itself to the layer "
                         f"(regularizer={cls.__name__})")
    REGISTRY[cls.name] = cls
    return cls


def get(regularizer: Union[str, Regularizer, Type[Regularizer]], **coefficients: Any
        ) -> Regularizer:
    r"""Returns a regulariser from its name (one of :obj:`REGISTRY`), its class,
    or an instance (then :obj:`coefficients` must be empty)."""
    if isinstance(regularizer, Regularizer):
        if coefficients:
            raise ValueError(f"Coefficients {sorted(coefficients)} were given with a "
                             f"regularizer instance; set them on the instance instead")
        return regularizer
    if isinstance(regularizer, type) and issubclass(regularizer, Regularizer):
        return _construct(regularizer, coefficients)
    if not isinstance(regularizer, str):
        raise TypeError(f"'regularizer' must be a name, a Regularizer subclass or an "
                        f"instance (got {type(regularizer).__name__} {regularizer!r}); choose "
                        f"a name from {sorted(REGISTRY)}")
    if regularizer not in REGISTRY:
        raise ValueError(f"Unknown regularizer {regularizer!r}; choose one of "
                         f"{sorted(REGISTRY)} or pass a Regularizer subclass")
    return _construct(REGISTRY[regularizer], coefficients)


def _construct(cls: Type[Regularizer], coefficients: Dict[str, Any]) -> Regularizer:
    # Unknown coefficients are named with the accepted ones, before construction.
    try:
        inspect.signature(cls).bind(**coefficients)
    except TypeError:
        accepted = [name for name, p in inspect.signature(cls).parameters.items()
                    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        unknown = sorted(set(coefficients) - set(accepted))
        if unknown:
            raise TypeError(f"{cls.__name__} has no coefficient(s) {unknown}; it accepts "
                            f"{accepted}") from None
    return cls(**coefficients)
