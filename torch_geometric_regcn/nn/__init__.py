r"""The layers and networks, also importable from the package root. A layer
applies what it is handed (low-rank factors, edges, a semantic graph) and
leaves the activation to the caller, as PyG's convolutions do."""
from torch_geometric_regcn.nn.conv import RegularizerConv, TSGCNConv
from torch_geometric_regcn.nn.models import TSGCN, MiniBatchTSGCN, RegularizerGNN

__all__ = ['TSGCN', 'MiniBatchTSGCN', 'RegularizerConv', 'RegularizerGNN', 'TSGCNConv']
