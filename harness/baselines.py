r"""PyG's Chebyshev and GraphSAGE layers and networks, evaluated in the
cheaper order for wide input features: the same functions and parameters.

PyG's :class:`~torch_geometric.nn.conv.ChebConv` and
:class:`~torch_geometric.nn.conv.SAGEConv` propagate the input features before
their linear maps, so message passing on an edge list materialises an
:math:`|\mathcal{E}| \times F_{in}` tensor: 11 GB on BlogCatalog (343k directed
edges, 8,189 features), 11.5 GB on Flickr. Both aggregations are linear, so
projecting first gives the same output and propagates :math:`F_{out}` columns.
These classes are the Table 3 baselines of :mod:`harness.methods`;
they also take sparse node features, since the projection comes first: all of a
layer's weights project them in one product, whose backward pass is that of
:class:`~torch_geometric_regcn.nn.linear.SparseInputMatmul`.
"""
from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.parameter import is_lazy
from torch_geometric.nn import GraphSAGE
from torch_geometric.nn.conv import ChebConv, SAGEConv
from torch_geometric.nn.models.basic_gnn import BasicGNN

from torch_geometric_regcn.nn.linear import SparseInputMatmul


def _project(matmul: SparseInputMatmul, x: Tensor,
             lins: List[torch.nn.Module]) -> List[Tensor]:
    r""":obj:`x` times the weights of :obj:`lins` (PyG linear maps; their
    biases are left out), in one product; lazy maps are materialised first, as
    their own first call would."""
    for lin in lins:
        if is_lazy(lin.weight):
            lin.initialize_parameters(lin, (x,))
    weight = torch.cat([lin.weight for lin in lins])
    return list(matmul(x, weight).split([lin.weight.size(0) for lin in lins], dim=-1))


class ProjectFirstChebConv(ChebConv):
    r""":class:`~torch_geometric.nn.conv.ChebConv`,
    :math:`\sum_{k=0}^{K-1} \mathbf{Z}^{(k)} \mathbf{\Theta}^{(k)}` with
    :math:`\mathbf{Z}^{(k)} = T_k(\hat{\mathbf{L}})\mathbf{X}`, computed as

    .. math::
        \sum_{k=0}^{K-1} T_k(\hat{\mathbf{L}}) \left(\mathbf{X}
        \mathbf{\Theta}^{(k)}\right),

    each term by the Chebyshev recurrence on :math:`F_{out}` columns:
    :math:`K(K-1)/2` propagations of :math:`F_{out}` columns instead of
    :math:`K-1` of :math:`F_{in}`. Arguments as for
    :class:`~torch_geometric.nn.conv.ChebConv`.
    """
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._matmul = SparseInputMatmul()

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Optional[Tensor] = None,
                batch: Optional[Tensor] = None,
                lambda_max: Optional[Tensor] = None) -> Tensor:
        edge_index, norm = self.__norm__(edge_index, x.size(self.node_dim), edge_weight,
                                         self.normalization, lambda_max, dtype=x.dtype,
                                         batch=batch)
        projected = _project(self._matmul, x, list(self.lins))
        out = projected[0]
        for k in range(1, len(projected)):
            previous = projected[k]  # T_0 of this term
            current = self.propagate(edge_index, x=previous, norm=norm)  # T_1
            for _ in range(k - 1):
                following = 2. * self.propagate(edge_index, x=current, norm=norm) - previous
                previous, current = current, following
            out = out + current
        if self.bias is not None:
            out = out + self.bias
        return out


class ProjectFirstSAGEConv(SAGEConv):
    r""":class:`~torch_geometric.nn.conv.SAGEConv` with a linear aggregation
    (:obj:`"mean"`, :obj:`"sum"`, :obj:`"add"`) and no :obj:`project`,
    computed as

    .. math::
        \mathbf{x}^{\prime}_i = \mathbf{W}_1 \mathbf{x}_i +
        \mathrm{mean}_{j \in \mathcal{N}(i)} \left(\mathbf{W}_2 \mathbf{x}_j\right)
        + \mathbf{b},

    which propagates :math:`F_{out}` columns (the bias is added after the
    aggregation, so a node without neighbours still gets
    :math:`\mathbf{W}_1 \mathbf{x}_i + \mathbf{b}`, as in PyG). Other settings
    and bipartite inputs fall back to :class:`SAGEConv`'s own order.
    """
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._matmul = SparseInputMatmul()

    def forward(self, x: Union[Tensor, Tuple[Tensor, Optional[Tensor]]], edge_index: Tensor,
                size: Optional[Tuple[int, int]] = None) -> Tensor:
        if not isinstance(x, Tensor) or self.project or str(self.aggr) not in (
                'mean', 'sum', 'add'):
            return super().forward(x, edge_index, size)
        projected = _project(self._matmul, x,
                             [self.lin_l, self.lin_r] if self.root_weight else [self.lin_l])
        out = self.propagate(edge_index, x=(projected[0], projected[0]), size=size)
        if self.lin_l.bias is not None:
            out = out + self.lin_l.bias
        if self.root_weight:
            out = out + projected[1]
        if self.normalize:
            out = F.normalize(out, p=2., dim=-1)
        return out


class Chebyshev(BasicGNN):
    r"""The Chebyshev network of `"Convolutional Neural Networks on Graphs
    with Fast Localized Spectral Filtering" <https://arxiv.org/abs/1606.09375>`_
    as a PyG :class:`~torch_geometric.nn.models.basic_gnn.BasicGNN` of
    :class:`ProjectFirstChebConv` layers; :obj:`K` goes to every layer
    (default: :obj:`3`)."""
    supports_edge_weight, supports_edge_attr = True, False

    def init_conv(self, in_channels: int, out_channels: int, **kwargs) -> ChebConv:
        kwargs.setdefault('K', 3)
        return ProjectFirstChebConv(in_channels, out_channels, **kwargs)


class ProjectFirstGraphSAGE(GraphSAGE):
    r"""PyG's :class:`~torch_geometric.nn.models.GraphSAGE` with
    :class:`ProjectFirstSAGEConv` layers."""
    def init_conv(self, in_channels: int, out_channels: int, **kwargs) -> SAGEConv:
        return ProjectFirstSAGEConv(in_channels, out_channels, **kwargs)
