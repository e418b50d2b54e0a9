r"""The :class:`~torch_geometric.transforms.BaseTransform` s that precompute,
once per graph, what the layers apply (the semantic graph, the low-rank
factors, propagated features, positional encodings); also importable from the
package root. Use them as a dataset's ``pre_transform``, so that the result is
saved with the processed data."""
from torch_geometric_regcn.transforms.laplacian_pe import LaplacianEigenPE
from torch_geometric_regcn.transforms.low_rank_inverse import LowRankInverse, paper_rank
from torch_geometric_regcn.transforms.propagated_features import PropagateFeatures
from torch_geometric_regcn.transforms.semantic_graph import SemanticGraph

__all__ = ['LaplacianEigenPE', 'LowRankInverse', 'PropagateFeatures', 'SemanticGraph',
           'paper_rank']
