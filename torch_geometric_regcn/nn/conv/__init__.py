from torch_geometric_regcn.nn.conv.regularizer_conv import RegularizerConv
from torch_geometric_regcn.nn.conv.tsgcn_conv import TSGCNConv

__all__ = ['RegularizerConv', 'TSGCNConv']
