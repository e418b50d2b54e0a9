"""Argument checks shared by the transforms and layers.

Each check raises an error that names the argument and says how to fix it.
"""
from typing import Optional

import torch
from torch import Tensor


def check_finite(name: str, tensor: Tensor) -> None:
    if tensor.layout == torch.sparse_coo:
        tensor = tensor.coalesce()
    values = tensor if tensor.layout == torch.strided else tensor.values()
    if not bool(values.isfinite().all()):
        raise ValueError(f"'{name}' contains NaN or infinite values; clean or impute them "
                         f"(e.g. 'torch.nan_to_num') before calling this transform or layer")


def check_nonnegative(name: str, value: float) -> None:
    if not value >= 0:  # also catches NaN
        raise ValueError(f"'{name}' must be a non-negative number (got {value})")


def check_edge_index(edge_index: Tensor, num_nodes: int,
                     edge_weight: Optional[Tensor] = None, name: str = 'edge_index') -> None:
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"'{name}' must have shape [2, num_edges] "
                         f"(got {list(edge_index.shape)})")
    if edge_index.is_floating_point():
        raise TypeError(f"'{name}' must hold integer node indices "
                        f"(got dtype {edge_index.dtype}); use '{name}.long()'")
    if edge_index.numel() > 0 and (edge_index.min() < 0 or edge_index.max() >= num_nodes):
        fix = "check 'num_nodes' or re-index the graph"
        if name == 'semantic_edge_index':  # loaders and subgraph() re-index 'edge_index' only
            fix = (f"was it built for a larger graph? Subgraph utilities and loaders leave "
                   f"'{name}' as it was; rebuild it for this graph with SemanticGraph")
        raise ValueError(f"'{name}' refers to nodes outside [0, {num_nodes - 1}]; {fix}")
    if edge_weight is not None:
        if edge_weight.dim() != 1 or edge_weight.numel() != edge_index.size(1):
            raise ValueError(f"'edge_weight' must have shape [{edge_index.size(1)}] to match "
                             f"'{name}' (got {list(edge_weight.shape)})")
        check_finite('edge_weight', edge_weight)
        if bool((edge_weight < 0).any()):
            raise ValueError("'edge_weight' must be non-negative: the normalised adjacency "
                             "needs non-negative degrees")


def check_same_device(**tensors: Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listing = ', '.join(f"'{n}' on {d}" for n, d in devices.items())
        raise ValueError(f"Expected all tensors on one device, got {listing}; "
                         f"move them with '.to(device)'")
