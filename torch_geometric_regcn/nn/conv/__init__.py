from torch_geometric_regcn.nn.conv.tsgcn_conv import TSGCNConv

__all__ = ['TSGCNConv']
