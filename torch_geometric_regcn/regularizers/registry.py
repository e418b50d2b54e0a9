r"""Regularisers by name."""
from typing import Any, Dict, Type, Union

from torch_geometric_regcn.regularizers.base import Regularizer
from torch_geometric_regcn.regularizers.spectral import (
    APPNPRegularizer,
    DAGNNRegularizer,
    GCNRegularizer,
    GNNHFRegularizer,
    GNNLFRegularizer,
    JKNetRegularizer,
    SGCRegularizer,
)
from torch_geometric_regcn.regularizers.tsgcn import TSGCNRegularizer

REGISTRY: Dict[str, Type[Regularizer]] = {
    cls.name: cls for cls in (GCNRegularizer, SGCRegularizer, APPNPRegularizer,
                              JKNetRegularizer, DAGNNRegularizer, GNNLFRegularizer,
                              GNNHFRegularizer, TSGCNRegularizer)
}


def register(cls: Type[Regularizer]) -> Type[Regularizer]:
    r"""Registers a :class:`Regularizer` subclass under its :obj:`name`
    (usable as a class decorator)."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} needs a class attribute 'name' to be registered")
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
        return regularizer(**coefficients)
    if regularizer not in REGISTRY:
        raise ValueError(f"Unknown regularizer {regularizer!r}; choose one of "
                         f"{sorted(REGISTRY)} or pass a Regularizer subclass")
    return REGISTRY[regularizer](**coefficients)
