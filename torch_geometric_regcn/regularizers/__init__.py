r"""The regularisers of the framework, one class each, registered by name
(importing :mod:`.spectral` and :mod:`.tsgcn` below registers the built-ins,
through the same :func:`register` decorator users apply)."""
from torch_geometric_regcn.regularizers.airgnn import AdaptiveResidualRegularizer
from torch_geometric_regcn.regularizers.base import Regularizer
from torch_geometric_regcn.regularizers.bilevel import (
    BilevelStep,
    calibrated_cross_entropy,
    calibrated_temperature,
    coefficient_parameters,
    weight_parameters,
)
from torch_geometric_regcn.regularizers.elastic import ElasticRegularizer
from torch_geometric_regcn.regularizers.graph import GraphOperators
from torch_geometric_regcn.regularizers.iterative import IterativeRegularizer, Solve
from torch_geometric_regcn.regularizers.p_laplacian import PLaplacianRegularizer
from torch_geometric_regcn.regularizers.polynomial import PolynomialRegularizer
from torch_geometric_regcn.regularizers.registry import REGISTRY, get, register
from torch_geometric_regcn.regularizers.robust import RobustRegularizer
from torch_geometric_regcn.regularizers.signed import SignedLaplacianRegularizer
from torch_geometric_regcn.regularizers.spectral import (
    AffineRegularizer,
    APPNPRegularizer,
    DAGNNRegularizer,
    GCNRegularizer,
    GNNHFRegularizer,
    GNNLFRegularizer,
    JKNetRegularizer,
    SGCRegularizer,
)
from torch_geometric_regcn.regularizers.tsgcn import (  # noqa: F401 (sharded_*: deprecated)
    TSGCNRegularizer,
    sharded_tsgcn_adjacency,
    tsgcn_adjacency,
)
from torch_geometric_regcn.regularizers.weight_decay import param_groups
from torch_geometric_regcn.utils.deprecation import moved

__all__ = ['APPNPRegularizer', 'AdaptiveResidualRegularizer', 'AffineRegularizer',
           'BilevelStep', 'DAGNNRegularizer', 'ElasticRegularizer', 'GCNRegularizer',
           'GNNHFRegularizer', 'GNNLFRegularizer', 'GraphOperators', 'IterativeRegularizer',
           'JKNetRegularizer', 'PLaplacianRegularizer', 'PolynomialRegularizer', 'REGISTRY',
           'Regularizer', 'RobustRegularizer', 'SGCRegularizer', 'SignedLaplacianRegularizer',
           'Solve', 'TSGCNRegularizer', 'calibrated_cross_entropy',
           'calibrated_temperature', 'coefficient_parameters',
           'get', 'param_groups', 'register', 'tsgcn_adjacency', 'weight_parameters']

# The 0.1 names, which clashed with the networks of the same name.
__getattr__ = moved(__name__, {
    old: f'{__name__}:{old}Regularizer'
    for old in ('GCN', 'SGC', 'APPNP', 'JKNet', 'DAGNN', 'GNNLF', 'GNNHF', 'TSGCN')})
