r"""The networks of the heterophily comparison (issue 29, item 4) that are
more than a :class:`harness.heterophily.Stack` of PyG layers: GCNII and
FAGCN as in their papers and PyG's examples, and PyG's Polynormer on one
full graph with its local-then-global training. GPR-GNN is in
:mod:`harness.gprgnn`."""
from typing import Callable, Iterable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.nn import FAConv, GCN2Conv
from torch_geometric.nn.models import Polynormer


class _EncodeConvsDecode(torch.nn.Module):
    r"""A linear encoder, :obj:`convs` at the hidden width and a linear
    decoder: what GCNII and FAGCN share (their :meth:`forward` differ)."""
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 convs: Iterable[torch.nn.Module], dropout: float) -> None:
        super().__init__()
        self.lin_in = torch.nn.Linear(in_channels, hidden_channels)
        self.convs = torch.nn.ModuleList(convs)
        self.lin_out = torch.nn.Linear(hidden_channels, out_channels)
        self.dropout = dropout

    def reset_parameters(self) -> None:
        self.lin_in.reset_parameters()
        for conv in self.convs:
            conv.reset_parameters()
        self.lin_out.reset_parameters()


class GCNII(_EncodeConvsDecode):
    r"""GCNII of `"Simple and Deep Graph Convolutional Networks"
    <https://arxiv.org/abs/2007.02133>`_ as PyG's :obj:`examples/gcn2_cora.py`
    builds it: dropout, a linear layer and ReLU give
    :math:`\mathbf{x}^{(0)}`; then :obj:`num_layers` times dropout, PyG's
    :class:`~torch_geometric.nn.conv.GCN2Conv` (initial residual
    :obj:`alpha`, identity mapping :math:`\beta_\ell = \log(\theta / \ell
    + 1)`, one weight matrix per layer shared by both terms) and ReLU; then
    dropout and a linear layer. The convolutions normalise the graph with
    self loops (cached: one graph per model)."""
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int, alpha: float = 0.1, theta: float = 0.5,
                 dropout: float = 0.5) -> None:
        super().__init__(in_channels, hidden_channels, out_channels, (
            GCN2Conv(hidden_channels, alpha, theta, layer + 1, shared_weights=True, cached=True)
            for layer in range(num_layers)), dropout)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = F.dropout(x, self.dropout, self.training)
        x = x_0 = F.relu(self.lin_in(x))
        for conv in self.convs:
            x = F.dropout(x, self.dropout, self.training)
            x = F.relu(conv(x, x_0, edge_index))
        x = F.dropout(x, self.dropout, self.training)
        return self.lin_out(x)


class FAGCN(_EncodeConvsDecode):
    r"""FAGCN of `"Beyond Low-frequency Information in Graph Convolutional
    Networks" <https://arxiv.org/abs/2101.00797>`_ with PyG's
    :class:`~torch_geometric.nn.conv.FAConv`: dropout, a linear layer, ReLU
    and dropout give :math:`\mathbf{x}^{(0)}`; :obj:`num_layers` FAConv
    layers follow without activation between them (the signed attention
    coefficients in :math:`[-1, 1]` mix low- and high-frequency signals;
    each layer adds :math:`\epsilon\, \mathbf{x}^{(0)}`), with attention
    dropout :obj:`attention_dropout`; then a linear layer."""
    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 num_layers: int, eps: float = 0.1, dropout: float = 0.5,
                 attention_dropout: float = 0.5) -> None:
        super().__init__(in_channels, hidden_channels, out_channels, (
            FAConv(hidden_channels, eps=eps, dropout=attention_dropout, cached=True)
            for _ in range(num_layers)), dropout)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        x = F.dropout(x, self.dropout, self.training)
        x = F.relu(self.lin_in(x))
        x = x_0 = F.dropout(x, self.dropout, self.training)
        for conv in self.convs:
            x = conv(x, x_0, edge_index)
        return self.lin_out(x)


class FullGraphPolynormer(Polynormer):
    r"""PyG's :class:`~torch_geometric.nn.models.Polynormer` on one full
    graph, called as :obj:`(x, edge_index)`. Polynormer trains in two
    phases: its local layers alone first, then with its global linear
    attention over all nodes on top; :meth:`start_global` switches to the
    second phase (PyG's flag :obj:`_global`; its examples switch after a
    number of local epochs). Returns log-probabilities, as Polynormer does:
    their argmax and class differences are those of the logits, so scores
    and cross-entropy are unchanged.

    Each local layer :math:`i` (PyG's default, :obj:`local_attn=False`) is
    :math:`\mathbf{x} \leftarrow \mathrm{Dropout}(\mathrm{ReLU}(\mathrm{BN}(
    \mathrm{conv}_i(\mathbf{x}) + \mathbf{x}\mathbf{W}_i)))`, gated as
    :math:`(1 - \beta)\,\mathrm{LN}(\mathrm{ReLU}(\mathbf{x}_{\mathrm{in}}
    \mathbf{V}_i) \odot \mathbf{x}) + \beta\mathbf{x}`, and the local output
    is the sum of every layer's; :math:`\mathrm{conv}_i` is a
    :class:`~torch_geometric.nn.conv.GCNConv`, or :obj:`local_conv(in_channels,
    out_channels)` where given (the same widths: the input's, then
    :obj:`heads * hidden_channels`)."""
    def __init__(self, *args, local_conv: Optional[Callable[[int, int], torch.nn.Module]] = None,
                 **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if local_conv is not None:
            self.local_convs = torch.nn.ModuleList(
                local_conv(conv.in_channels, conv.out_channels) for conv in self.local_convs)
            self.reset_parameters()

    def start_global(self) -> None:
        self._global = True

    def reset_parameters(self) -> None:
        super().reset_parameters()
        self._global = False

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:  # type: ignore[override]
        # One graph: every node in batch 0 (used by the global phase only).
        batch = torch.zeros(x.size(0), dtype=torch.long, device=x.device)
        return super().forward(x, edge_index, batch)
