from torch_geometric_regcn.nn.conv import RegularizerConv, TSGCNConv
from torch_geometric_regcn.nn.models import TSGCN

__all__ = ['TSGCN', 'RegularizerConv', 'TSGCNConv']
