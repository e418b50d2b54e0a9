r"""Dropout for dense or sparse node features."""
import torch
import torch.nn.functional as F
from torch import Tensor


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    r"""Like :func:`torch.nn.functional.dropout`, and also for sparse COO or
    CSR :obj:`x` (e.g. the bag-of-words features of PyG's
    :class:`~torch_geometric.datasets.AttributedGraphDataset`): only the stored
    entries are dropped and rescaled, which is dense dropout of the same matrix,
    since a dropped zero stays zero. It draws one random number per stored
    entry instead of one per entry of the dense matrix."""
    if x.layout == torch.strided:
        return F.dropout(x, p, training)
    if not training or p == 0.0:
        return x
    if x.layout == torch.sparse_csr:
        return torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(),
                                       F.dropout(x.values(), p, training), x.shape,
                                       check_invariants=False)
    if x.layout == torch.sparse_coo:
        x = x.coalesce()
        return torch.sparse_coo_tensor(x.indices(), F.dropout(x.values(), p, training),
                                       x.shape, is_coalesced=True, check_invariants=False)
    raise ValueError(f"dropout takes dense, sparse COO or sparse CSR features "
                     f"(got layout {x.layout}); convert them with 'x.to_sparse_csr()'")
