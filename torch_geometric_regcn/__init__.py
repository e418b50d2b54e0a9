r"""tsGCN and the regularizer-centred GCN framework for PyTorch Geometric."""
from torch_geometric_regcn import loader, regularizers
from torch_geometric_regcn.nn import (
    TSGCN,
    MiniBatchTSGCN,
    RegularizerConv,
    RegularizerGNN,
    TSGCNConv,
)
from torch_geometric_regcn.transforms import (
    LaplacianEigenPE,
    LowRankInverse,
    PropagateFeatures,
    SemanticGraph,
    paper_rank,
)
from torch_geometric_regcn.version import __version__

__all__ = ['TSGCN', 'LaplacianEigenPE', 'LowRankInverse', 'MiniBatchTSGCN', 'PropagateFeatures',
           'RegularizerConv', 'RegularizerGNN', 'SemanticGraph', 'TSGCNConv', '__version__',
           'loader', 'paper_rank', 'regularizers']
