from torch_geometric_regcn.datasets.csbm import contextual_sbm
from torch_geometric_regcn.datasets.split import paper_split

__all__ = ['contextual_sbm', 'paper_split']
