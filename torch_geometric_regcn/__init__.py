"""tsGCN and the regularizer-centred GCN framework for PyTorch Geometric."""
from torch_geometric_regcn import regularizers
from torch_geometric_regcn.nn import TSGCN, RegularizerConv, RegularizerGNN, TSGCNConv
from torch_geometric_regcn.transforms import LowRankInverse, SemanticGraph, paper_rank

__version__ = '0.1.0'

__all__ = ['TSGCN', 'LowRankInverse', 'RegularizerConv', 'RegularizerGNN', 'SemanticGraph',
           'TSGCNConv', 'paper_rank', 'regularizers']
