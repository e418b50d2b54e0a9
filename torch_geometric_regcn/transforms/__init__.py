from torch_geometric_regcn.transforms.laplacian_pe import LaplacianEigenPE
from torch_geometric_regcn.transforms.low_rank_inverse import LowRankInverse, paper_rank
from torch_geometric_regcn.transforms.propagated_features import PropagateFeatures
from torch_geometric_regcn.transforms.semantic_graph import SemanticGraph

__all__ = ['LaplacianEigenPE', 'LowRankInverse', 'PropagateFeatures', 'SemanticGraph',
           'paper_rank']
