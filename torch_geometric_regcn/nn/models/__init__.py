from torch_geometric_regcn.nn.models.regularizer_gnn import RegularizerGNN
from torch_geometric_regcn.nn.models.tsgcn import TSGCN

__all__ = ['RegularizerGNN', 'TSGCN']
