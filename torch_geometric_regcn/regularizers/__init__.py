r"""The regularisers of the framework, one class each, registered by name."""
from torch_geometric_regcn.regularizers.base import GraphOperators, Regularizer
from torch_geometric_regcn.regularizers.registry import REGISTRY, get, register
from torch_geometric_regcn.regularizers.spectral import (
    APPNP,
    DAGNN,
    GCN,
    GNNHF,
    GNNLF,
    SGC,
    AffineRegularizer,
    JKNet,
)
from torch_geometric_regcn.regularizers.tsgcn import TSGCN

__all__ = ['APPNP', 'DAGNN', 'GCN', 'GNNHF', 'GNNLF', 'REGISTRY', 'SGC', 'TSGCN',
           'AffineRegularizer', 'GraphOperators', 'JKNet', 'Regularizer', 'get', 'register']
