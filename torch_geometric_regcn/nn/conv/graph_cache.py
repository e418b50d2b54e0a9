r"""The graph that a layer built with :obj:`cached=True` keeps, and the check
that it is called on that graph again."""
from typing import Any, Dict, Optional

import torch
from torch import Tensor

from torch_geometric_regcn.regularizers.graph import GraphOperators


class GraphCache:
    r"""The graph operators built on a layer's first call and the inputs
    (:obj:`edge_index`, :obj:`edge_weight`, the semantic graph, the number of
    nodes) they were built from. A later call passes the same graph when each
    input is the same object, not modified in place since the operators were
    built (its version counter, recorded by :meth:`seal`), or an equal one
    (one :math:`O(|\mathcal{E}|)` comparison); anything else raises
    (:meth:`check`). The operators are a cache: copies and pickles of the
    owner start empty."""
    def __init__(self) -> None:
        self.graph: Optional[GraphOperators] = None
        self._inputs: Dict[str, Any] = {}
        self._versions: Optional[Dict[str, int]] = None

    def clear(self) -> None:
        r"""Forgets the graph."""
        self.graph, self._inputs, self._versions = None, {}, None

    def store(self, graph: GraphOperators, num_nodes: int, inputs: Dict[str, Any]) -> None:
        r"""Keeps :obj:`graph`, built from :obj:`inputs` of :obj:`num_nodes` nodes."""
        self.graph, self._inputs, self._versions = graph, {'num_nodes': num_nodes, **inputs}, None

    def seal(self) -> None:
        r"""Records the version counters of the inputs once the operators are
        built (coalescing a sparse input bumps its version), if not yet done."""
        if self._versions is None:
            self._versions = {name: getattr(value, '_version', 0)
                              for name, value in self._inputs.items()}

    def check(self, owner: str, num_nodes: int, inputs: Dict[str, Any]) -> None:
        r"""Raises :class:`ValueError` unless :obj:`inputs` are the graph kept
        (see the class); :obj:`owner` names the layer in the error."""
        for name, value in {'num_nodes': num_nodes, **inputs}.items():
            cached = self._inputs[name]
            if value is cached:
                versions = self._versions
                if versions is None or getattr(value, '_version', 0) == versions[name]:
                    continue
                change = 'was modified in place'
            elif _same_value(cached, value):
                continue
            else:
                change = 'differs from the cached one'
            raise ValueError(
                f"{owner}(cached=True) was called on another graph than the one it cached: "
                f"'{name}' {change}. Call 'reset_cache()' before switching graphs, or use "
                f"cached=False (inductive or mini-batch training)")

    def __getstate__(self) -> Dict[str, Any]:
        # Sparse CSR operators cannot be copied; copies and pickles rebuild them.
        return {'graph': None, '_inputs': {}, '_versions': None}


def _same_value(a: Any, b: Any) -> bool:
    r"""Whether two inputs hold the same graph: equal tensors (the same layout
    and shape, compared in :obj:`a`'s dtype and device) or equal non-tensors."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        return a is b or (not isinstance(a, Tensor) and not isinstance(b, Tensor) and a == b)
    if (a.layout, a.shape) != (b.layout, b.shape) or a.is_floating_point() != \
            b.is_floating_point():
        return False
    b = b.to(a.device, a.dtype)
    if a.layout != torch.strided:
        a, b = a.to_sparse_coo().coalesce(), b.to_sparse_coo().coalesce()
        return torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values())
    return torch.equal(a, b)
