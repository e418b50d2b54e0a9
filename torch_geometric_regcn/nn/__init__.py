from torch_geometric_regcn.nn.conv import RegularizerConv, TSGCNConv
from torch_geometric_regcn.nn.models import TSGCN, RegularizerGNN

__all__ = ['TSGCN', 'RegularizerConv', 'RegularizerGNN', 'TSGCNConv']
