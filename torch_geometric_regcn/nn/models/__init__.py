from torch_geometric_regcn.nn.models.tsgcn import TSGCN

__all__ = ['TSGCN']
