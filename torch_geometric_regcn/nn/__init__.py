from torch_geometric_regcn.nn.conv import RegularizerConv, TSGCNConv
from torch_geometric_regcn.nn.models import TSGCN, MiniBatchTSGCN, RegularizerGNN

__all__ = ['TSGCN', 'MiniBatchTSGCN', 'RegularizerConv', 'RegularizerGNN', 'TSGCNConv']
