from torch_geometric_regcn.nn.conv import TSGCNConv

__all__ = ['TSGCNConv']
