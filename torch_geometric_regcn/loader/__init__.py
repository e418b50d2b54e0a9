r"""Loaders of mini-batches for the networks that train on a batch's own rows
(:class:`~torch_geometric_regcn.MiniBatchTSGCN`, models on
:class:`~torch_geometric_regcn.PropagateFeatures`' outputs): PyG's
:class:`~torch_geometric.loader.NodeLoader` with a sampler that keeps the
seed nodes only, which needs neither ``pyg-lib`` nor ``torch-sparse``."""
from torch_geometric_regcn.loader.seed_node_loader import SeedNodeLoader, SeedNodeSampler

__all__ = ['SeedNodeLoader', 'SeedNodeSampler']
