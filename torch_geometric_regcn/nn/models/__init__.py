from torch_geometric_regcn.nn.models.regularizer_gnn import RegularizerGNN
from torch_geometric_regcn.nn.models.tsgcn import TSGCN
from torch_geometric_regcn.nn.models.tsgcn_minibatch import MiniBatchTSGCN

__all__ = ['MiniBatchTSGCN', 'RegularizerGNN', 'TSGCN']
