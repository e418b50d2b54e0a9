r"""The graph that a layer built with :obj:`cached=True` keeps, and the check
that it is called on that graph again."""
from typing import Any, Dict, FrozenSet, Optional

import torch
from torch import Tensor

from torch_geometric_regcn.regularizers.graph import GraphOperators
from torch_geometric_regcn.utils.fingerprint import fingerprint


class GraphCache:
    r"""The graph operators built on a layer's first call and the inputs
    (:obj:`edge_index`, :obj:`edge_weight`, the semantic graph, the number of
    nodes) they were built from.

    Each input is recorded by its :func:`~torch_geometric_regcn.utils.fingerprint.fingerprint`
    when it is stored, so a change is seen however it was written: an
    in-place operation, :obj:`.data`, or a NumPy array sharing the memory. A
    later call passes the same graph when each input holds the same numbers
    as then: the same tensor left as it was, a copy of it, the same indices
    in another integer dtype (:obj:`int32` for :obj:`int64`) or, for a
    :obj:`torch.sparse` COO matrix, with its duplicates merged or not
    (compared as :meth:`~torch.Tensor.coalesce` gives it). Anything else
    raises (:meth:`check`), also the same weights in another floating-point
    dtype (their fingerprint is taken in their own dtype, so it differs); a
    write that leaves the numbers as they were is no change.

    Cost per call: one pass over each input (:math:`O(|\mathcal{E}|)`) and one
    synchronisation with the device each; an input that differs from the
    stored one as stored is compared once more, moved to the stored device
    (for a COO matrix, coalesced), by its fingerprint without the dtype.
    The operators are a cache: copies and pickles of the owner start empty.
    With them it keeps what the regulariser read when they were built
    (:obj:`needs`, its :meth:`~torch_geometric_regcn.regularizers.Regularizer.requires`)
    and whether they were built in :func:`torch.inference_mode`
    (:obj:`inference`), which the owner compares before reusing them."""
    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        r"""Forgets the graph."""
        self.graph: Optional[GraphOperators] = None
        self._inputs: Dict[str, Any] = {}
        self._prints: Dict[str, Any] = {}
        self._canonical: Dict[str, Any] = {}
        self.needs: FrozenSet[str] = frozenset()
        self.inference = False

    def store(self, graph: GraphOperators, num_nodes: int, inputs: Dict[str, Any],
              needs: FrozenSet[str] = frozenset({'adj'})) -> None:
        r"""Keeps :obj:`graph`, built from :obj:`inputs` of :obj:`num_nodes`
        nodes for a regulariser that reads :obj:`needs`, and the
        fingerprints of the inputs as they are now."""
        self.needs, self.inference = needs, torch.is_inference_mode_enabled()
        inputs = {'num_nodes': num_nodes, **inputs}
        self.graph, self._inputs = graph, inputs
        self._prints = {name: fingerprint(value) for name, value in inputs.items()}
        self._canonical = {name: _canonical(value, self._prints[name])
                           for name, value in inputs.items()}

    def check(self, owner: str, num_nodes: int, inputs: Dict[str, Any]) -> None:
        r"""Raises :class:`ValueError` unless :obj:`inputs` are the graph kept
        (see the class); :obj:`owner` names the layer in the error. Only the
        inputs that were stored are compared (those the regulariser read)."""
        given = {'num_nodes': num_nodes, **inputs}
        for name, cached in self._inputs.items():
            value, printed = given.get(name), self._prints[name]
            if (value is None and cached is None) or fingerprint(value) == printed:
                continue
            if value is cached:
                change = 'was modified in place (through PyTorch, .data or a NumPy view)'
            elif (isinstance(value, Tensor) and isinstance(cached, Tensor)
                  and _canonical(_on_device(value, printed.device))
                  == self._canonical[name]):
                continue
            else:
                change = 'differs from the cached one'
            raise ValueError(
                f"{owner}(cached=True) was called on another graph than the one it cached: "
                f"'{name}' {change}. Call 'reset_cache()' before switching graphs, or use "
                f"cached=False (inductive or mini-batch training)")

    def __getstate__(self) -> Dict[str, Any]:
        # Sparse CSR operators cannot be copied; copies and pickles rebuild them.
        return GraphCache().__dict__


def _on_device(value: Tensor, device: torch.device) -> Tensor:
    return value if value.device == device else value.to(device)


def _canonical(value: Any, printed: Any = None) -> Any:
    r"""What two inputs that hold the same graph share: the fingerprint of
    the tensor without its dtype, integers as int64 (equal integers in
    another integer dtype are the same graph; floating-point numbers are
    printed in their own dtype, so another one differs), a COO matrix
    coalesced first;
    non-tensors as they are.
    :obj:`printed` is :obj:`value`'s fingerprint, when already taken."""
    if not isinstance(value, Tensor):
        return value
    if value.layout == torch.sparse_coo and not value.is_coalesced():
        value, printed = value.coalesce(), None
    if value.layout == torch.strided and not value.is_floating_point() \
            and value.dtype != torch.int64:  # the words of int64 indices
        value, printed = value.long(), None
    elif value.layout in (torch.sparse_csr, torch.sparse_csc):
        compressed, plain = ((value.crow_indices(), value.col_indices())
                             if value.layout == torch.sparse_csr
                             else (value.ccol_indices(), value.row_indices()))
        if compressed.dtype != torch.int64:  # int32 indices: the same graph
            build = (torch.sparse_csr_tensor if value.layout == torch.sparse_csr
                     else torch.sparse_csc_tensor)
            value = build(compressed.long(), plain.long(), value.values(), value.shape)
            printed = None
    if printed is None:
        printed = fingerprint(value)
    return printed._replace(dtype=None)
