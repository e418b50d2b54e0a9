r"""The methods of the paper's Table 3: how each is built and trained, with
its original paper's defaults."""
from typing import Callable, Dict, NamedTuple

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn import GAT

from harness.baselines import Chebyshev, ProjectFirstGraphSAGE
from torch_geometric_regcn import TSGCN, RegularizerGNN
from torch_geometric_regcn.datasets import PaperSetting


class Method(NamedTuple):
    r"""A row of the paper's Table 3: how to build the model and train it."""
    #: (data, num_classes, the dataset's tsGCN setting) -> model
    build: Callable[[Data, int, PaperSetting], torch.nn.Module]
    run: Callable[[torch.nn.Module, Data], Tensor]  #: (model, data) -> logits
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200
    note: str = ''


def _pyg(conv: str) -> Callable[..., torch.nn.Module]:
    def build(data: Data, num_classes: int, setting: PaperSetting) -> torch.nn.Module:
        if conv == 'cheb':
            return Chebyshev(data.num_features, 16, 2, num_classes, dropout=0.5, K=3)
        if conv == 'sage':
            return ProjectFirstGraphSAGE(data.num_features, 64, 2, num_classes, dropout=0.5)
        return GAT(data.num_features, 64, 2, num_classes, dropout=0.6, heads=8)
    return build


def _framework(regularizer: str, hidden: int, dropout: float, bias: bool = True,
               num_layers: int = 2, solver=None, **coefficients) -> Callable:
    def build(data: Data, num_classes: int, setting: PaperSetting) -> torch.nn.Module:
        if regularizer == 'tsgcn':
            coefficients.update(alpha=setting.alpha, beta=setting.beta)
        return RegularizerGNN(data.num_features, hidden, num_classes, num_layers, regularizer,
                              dropout=dropout, bias=bias, solver=solver, cached=True,
                              **coefficients)
    return build


def _graph_inputs(model: torch.nn.Module, data: Data) -> Tensor:
    return model(data.x, data.edge_index)


def _semantic_inputs(model: torch.nn.Module, data: Data) -> Tensor:
    return model(data.x, data.edge_index, semantic_edge_index=data.semantic_edge_index)


def _tsgcn(data: Data, num_classes: int, setting: PaperSetting) -> torch.nn.Module:
    return TSGCN(data.num_features, 32, num_classes)


def _lowrank_inputs(model: torch.nn.Module, data: Data) -> Tensor:
    return model(data.x, data.lowrank_w, data.lowrank_v)


#: Every method of Table 3 with its original paper's defaults (hidden units,
#: dropout, learning rate, weight decay; 2 layers). ``tsGCN (inv)`` is the exact
#: tsGCN by conjugate gradient and needs ``data.semantic_edge_index``; ``tsGCN``
#: needs ``data.lowrank_w`` and ``data.lowrank_v`` (:class:`LowRankInverse`).
TABLE3: Dict[str, Method] = {
    'Chebyshev': Method(_pyg('cheb'), _graph_inputs, note='ChebConv K=3, hidden 16'),
    'GraphSAGE': Method(_pyg('sage'), _graph_inputs, note='SAGEConv mean, hidden 64'),
    'GAT': Method(_pyg('gat'), _graph_inputs, lr=0.005,
                  note='8 heads x 8 hidden, dropout 0.6'),
    'GCN': Method(_framework('gcn', 16, 0.5), _graph_inputs, note='hidden 16, dropout 0.5'),
    'SGC': Method(_framework('sgc', 16, 0.0, num_layers=1, K=2), _graph_inputs, lr=0.2,
                  weight_decay=5e-5, epochs=100, note='K=2, one layer'),
    'APPNP': Method(_framework('appnp', 64, 0.5, K=10, alpha=0.1), _graph_inputs,
                    weight_decay=5e-3, epochs=500, note='MLP hidden 64, K=10, alpha=0.1'),
    'JKNet': Method(_framework('jknet', 32, 0.5, K=4, beta=1.0), _graph_inputs, lr=0.005,
                    note='Table 1 rule, K=4, beta=1, hidden 32'),
    'DAGNN': Method(_framework('dagnn', 64, 0.8, K=10), _graph_inputs, weight_decay=5e-3,
                    epochs=500, note='MLP hidden 64, K=10, dropout 0.8'),
    'GNN-LF': Method(_framework('gnn_lf', 64, 0.5, alpha=0.1, mu=0.9), _graph_inputs,
                     weight_decay=5e-3, epochs=500, note='closed form by CG, alpha 0.1, mu 0.9'),
    'GNN-HF': Method(_framework('gnn_hf', 64, 0.5, alpha=0.1, beta=1.0), _graph_inputs,
                     weight_decay=5e-3, epochs=500, note='closed form by CG, alpha 0.1, beta 1'),
    'tsGCN (inv)': Method(_framework('tsgcn', 32, 0.0, bias=False, solver='cg',
                                     normalize=False),
                          _semantic_inputs, epochs=500,
                          note="exact inverse by CG, the authors' scaling"),
    'tsGCN': Method(_tsgcn, _lowrank_inputs, epochs=500, note='low rank, rank N // p'),
}
