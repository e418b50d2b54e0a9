r"""The measurement protocol of the heterophilous graphs of Platonov et al.
(ICLR 2023; issue 29): their official splits, their metrics, training with
the model chosen by the validation metric, and the baselines that every
heterophily model is compared with on the same splits and budget.

The protocol (:obj:`PROTOCOL`): each model is trained on the training nodes
of an official split with Adam (learning rate 0.01, weight decay
:math:`5 \cdot 10^{-4}`) and cross-entropy for 300 epochs, 2 layers, 64
hidden units, dropout 0.5 before each layer, no tuning; the score reported is
the test score at the epoch of best validation score (the later epoch on
ties, as :func:`harness.training.fit` does), measured by the dataset's metric
(:obj:`torch_geometric_regcn.datasets.HETEROPHILOUS[name].metric`): accuracy,
or the ROC-AUC of class 1 for the two-class sets. Node features are used as
the authors' files store them (not normalised).
"""
import copy
import math
import tempfile
import time
import warnings
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn import APPNP, GATConv, GCNConv

from harness.baselines import ProjectFirstSAGEConv
from harness.data import SHARED_DATA, offline_root
from harness.training import train_epochs
from torch_geometric_regcn import RegularizerGNN
from torch_geometric_regcn.datasets import HETEROPHILOUS, load_dataset
from torch_geometric_regcn.datasets.heterophilous import normalize_name
from torch_geometric_regcn.utils.validation import check_int

#: The metrics :func:`score` computes.
METRICS = ('accuracy', 'roc_auc')


def load_heterophilous(name: str, root: Optional[str] = None,
                       shared: str = SHARED_DATA) -> Data:
    r"""Heterophilous dataset :obj:`name` (a key of
    :obj:`torch_geometric_regcn.datasets.HETEROPHILOUS`, read as PyG reads
    names) as :func:`~torch_geometric_regcn.datasets.load_dataset` returns
    it, with its :obj:`[N, 10]` official masks and unchanged features.
    Without :obj:`root`, the raw file is copied from :obj:`shared` into a
    temporary root that is removed once the graph is in memory (nothing
    downloads; :func:`harness.data.offline_root` raises
    :class:`FileNotFoundError` for a dataset that is not staged)."""
    name = normalize_name(name)
    if name not in HETEROPHILOUS:
        raise ValueError(f"'name' must be one of {sorted(HETEROPHILOUS)} (got {name!r})")
    if root is None:
        with tempfile.TemporaryDirectory(prefix='regcn-data-') as tmp:
            return load_heterophilous(name, offline_root(name, tmp, shared), shared)
    return load_dataset(name, root)[0]


def official_split(data: Data, k: int) -> Data:
    r"""A shallow copy of :obj:`data` whose :obj:`train_mask`,
    :obj:`val_mask` and :obj:`test_mask` are column :obj:`k` of its
    :obj:`[N, K]` official masks (:obj:`[N]` each); the other attributes are
    shared with :obj:`data`, whose masks are left as they are.

    Raises :class:`ValueError` naming :obj:`k` and :obj:`K` when :obj:`k` is
    not in :math:`[0, K)` (negative indices are refused, not counted from
    the end), and when the masks are not :obj:`[N, K]` boolean tensors of
    the same :obj:`K`."""
    shapes = {}
    for part in ('train_mask', 'val_mask', 'test_mask'):
        mask = getattr(data, part, None)
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.dim() != 2:
            got = (f'shape {list(mask.shape)}, dtype {mask.dtype}' if isinstance(mask, Tensor)
                   else type(mask).__name__)
            raise ValueError(f"official_split needs boolean [N, K] 'data.{part}' (one column "
                             f"per official split, as load_dataset returns the heterophilous "
                             f"sets; got {got})")
        shapes[part] = tuple(mask.shape)
    if len(set(shapes.values())) != 1:
        raise ValueError(f'The official masks differ in shape: {shapes}')
    num_splits = shapes['train_mask'][1]
    k = check_int('k', k, None)
    if not 0 <= k < num_splits:
        raise ValueError(f"'k' must be an official split in [0, {num_splits - 1}]: the masks "
                         f"hold K = {num_splits} splits (got k={k})")
    out = copy.copy(data)
    for part in shapes:
        out[part] = data[part][:, k]
    return out


def score(logits: Tensor, y: Tensor, mask: Tensor, metric: str) -> float:
    r"""The score of :obj:`logits` on the nodes of :obj:`mask`:

    * :obj:`"accuracy"`: the share of nodes whose largest logit is their
      class :obj:`y` (the count over the number of nodes, in Python's
      double precision; the first largest logit on ties, as
      :obj:`argmax` picks it);
    * :obj:`"roc_auc"`: the area under the ROC curve of class 1 (the
      positive class of the two-class sets) against class 0, ranking the
      nodes by their softmax probability of class 1. That probability is
      :math:`\sigma(\ell_1 - \ell_0)`, increasing in the logit difference,
      so the nodes are ranked by :math:`\ell_1 - \ell_0` in float64: the
      same order, without the false ties of a softmax that rounds to 1.0
      (float32 does beyond a difference of about 17). The area is the
      Mann-Whitney statistic, with tied scores given their mean rank (a tie
      of a positive and a negative node counts one half), as
      :func:`sklearn.metrics.roc_auc_score` computes it; :obj:`nan` when a
      score is :obj:`nan`. Cost: a sort of the selected nodes.

    Args:
        logits (torch.Tensor): :obj:`[N, C]`; :obj:`C = 2` for
            :obj:`"roc_auc"`.
        y (torch.Tensor): The classes, :obj:`[N]`; 0 or 1 for
            :obj:`"roc_auc"`, where both must occur in :obj:`mask`.
        mask (torch.Tensor): Boolean :obj:`[N]`, at least one node (one
            split: see :func:`official_split`).
        metric (str): :obj:`"accuracy"` or :obj:`"roc_auc"`.
    """
    if metric not in METRICS:
        raise ValueError(f"'metric' must be one of {list(METRICS)} (got {metric!r}); "
                         f"HETEROPHILOUS[name].metric gives each dataset's")
    if logits.dim() != 2 or y.shape != logits.shape[:1]:
        raise ValueError(f"'logits' must be [N, C] and 'y' [N] (got {list(logits.shape)} and "
                         f"{list(y.shape)})")
    if mask.dtype != torch.bool or mask.shape != y.shape:
        raise ValueError(f"'mask' must be a boolean [N] = {list(y.shape)} mask (got shape "
                         f"{list(mask.shape)}, dtype {mask.dtype}); pick one official split "
                         f"with official_split(data, k)")
    logits, y = logits[mask], y[mask]
    if y.numel() == 0:
        raise ValueError("'mask' selects no node")
    if metric == 'accuracy':
        return int((logits.argmax(dim=-1) == y).sum()) / y.numel()
    if logits.size(1) != 2:
        raise ValueError(f"'roc_auc' scores two classes: 'logits' must be [N, 2] (got "
                         f"{list(logits.shape)}); use 'accuracy' for more classes")
    positive = y == 1
    num_positive = int(positive.sum())
    if num_positive + int((y == 0).sum()) != y.numel() or num_positive in (0, y.numel()):
        raise ValueError(f"'roc_auc' needs classes 0 and 1 only, both among the masked nodes "
                         f"(got classes {y.unique().tolist()})")
    return roc_auc(logits[:, 1].double() - logits[:, 0].double(), positive)


def roc_auc(scores: Tensor, positive: Tensor) -> float:
    r"""The area under the ROC curve of :obj:`scores` :obj:`[n]` for the
    boolean labels :obj:`positive` :obj:`[n]` (both classes present): the
    Mann-Whitney statistic with mean ranks for ties, in float64;
    :obj:`nan` when a score is :obj:`nan`."""
    scores = scores.double()
    if bool(scores.isnan().any()):
        return math.nan
    _, inverse, counts = torch.unique(scores, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()  # the rank of the last member of each group of ties
    ranks = (ends - (counts.double() - 1) / 2)[inverse]  # their mean rank
    num_positive = int(positive.sum())
    num_negative = positive.numel() - num_positive
    u = ranks[positive].sum() - num_positive * (num_positive + 1) / 2
    return float(u / (num_positive * num_negative))


class SplitResult(NamedTuple):
    r"""What :func:`fit_split` reports of one split."""
    test: float  #: the test score at the epoch of best validation score
    val: float  #: the best validation score
    best_epoch: int  #: that epoch (0-based; -1 if no epoch had a finite score)
    seconds: float  #: training time, scoring included


def fit_split(model: torch.nn.Module, forward: Callable[[], Tensor], data: Data, metric: str,
              epochs: int = 300, lr: float = 0.01, weight_decay: float = 5e-4,
              param_groups: Optional[Sequence[Dict[str, Any]]] = None,
              on_epoch: Callable[[int], None] = lambda epoch: None) -> SplitResult:
    r"""Trains :obj:`model` on one split of :obj:`data` (1-D masks, see
    :func:`official_split`) by :func:`harness.training.train_epochs` (Adam,
    cross-entropy on the training nodes, :obj:`param_groups` as in
    :func:`harness.training.fit`) and returns the test score at the epoch of
    best validation score by :obj:`metric` (the later epoch on ties), with
    :func:`score`. :obj:`forward` returns the logits of all nodes.

    The selection is by the dataset's metric, not by accuracy: on the
    two-class sets the epoch of best validation ROC-AUC is not the one of
    best validation accuracy. The metric and the validation and test labels
    are checked before the first epoch; a warning says so when no epoch had
    a finite validation score (the result is then :obj:`nan`)."""
    if metric not in METRICS:
        raise ValueError(f"'metric' must be one of {list(METRICS)} (got {metric!r})")
    epochs = check_int('epochs', epochs, 0)
    for part in ('val_mask', 'test_mask'):
        mask = data[part]
        if mask.dim() != 1:
            raise ValueError(f"fit_split trains on one split: 'data.{part}' must be [N] (got "
                             f"{list(mask.shape)}); use official_split(data, k)")
        if metric == 'roc_auc':
            classes = data.y[mask].unique().tolist()
            if classes != [0, 1]:
                raise ValueError(f"'roc_auc' needs classes 0 and 1 only, both in "
                                 f"'data.{part}' (got classes {classes})")
    steps = train_epochs(model, forward, data, epochs, lr, weight_decay, param_groups)
    best = SplitResult(math.nan, -math.inf, -1, 0.0)
    start = time.perf_counter()
    for epoch, logits in enumerate(steps):
        val = score(logits, data.y, data.val_mask, metric)
        if val >= best.val:  # False for nan
            best = SplitResult(score(logits, data.y, data.test_mask, metric), val, epoch, 0.0)
        on_epoch(epoch)
    if epochs and best.best_epoch < 0:
        warnings.warn(f'fit_split: no epoch of {epochs} had a finite validation {metric} '
                      f'(the logits held nan); the test score reported is nan', stacklevel=2)
        best = best._replace(val=math.nan)
    return best._replace(seconds=time.perf_counter() - start)


class Protocol(NamedTuple):
    r"""The budget every model of :obj:`MODELS` gets (issue 29)."""
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 300


#: The protocol of issue 29: 2 layers, 64 hidden units, dropout 0.5, Adam
#: 0.01, weight decay 5e-4, 300 epochs, no tuning.
PROTOCOL = Protocol()


class Stack(torch.nn.Module):
    r"""Layers applied in turn with dropout before each and ReLU between
    them (none after the last), as
    :class:`~torch_geometric_regcn.RegularizerGNN` applies its own: graph
    layers are called with :obj:`(x, edge_index)`, others (:obj:`graph=False`)
    with :obj:`x` alone. A :obj:`propagation` (e.g. PyG's
    :class:`~torch_geometric.nn.models.APPNP`) runs once on the output."""
    def __init__(self, layers: Sequence[torch.nn.Module], dropout: float, graph: bool = True,
                 propagation: Optional[torch.nn.Module] = None) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)
        self.dropout, self.graph, self.propagation = dropout, graph, propagation

    def reset_parameters(self) -> None:
        for layer in self.layers:
            layer.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = F.dropout(x, self.dropout, self.training)
            x = layer(x, edge_index) if self.graph else layer(x)
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x if self.propagation is None else self.propagation(x, edge_index)


class Model(NamedTuple):
    r"""A model of the heterophily comparison: how to build it and run it."""
    label: str  #: its name in tables
    #: (in_channels, num_classes, protocol) -> model
    build: Callable[[int, int, Protocol], torch.nn.Module]
    run: Callable[[torch.nn.Module, Data], Tensor]  #: (model, data) -> logits of all nodes
    config: Dict[str, Any]  #: what is fixed beyond :class:`Protocol`
    semantic: bool = False  #: needs :obj:`data.semantic_edge_index` (:obj:`SemanticGraph`)


def _sizes(in_channels: int, num_classes: int, protocol: Protocol) -> list:
    sizes = [in_channels] + [protocol.hidden] * (protocol.layers - 1) + [num_classes]
    return list(zip(sizes[:-1], sizes[1:]))


def _stack(layer: Callable[[int, int, bool], torch.nn.Module], graph: bool = True,
           propagation: Optional[Callable[[], torch.nn.Module]] = None) -> Callable:
    def build(in_channels: int, num_classes: int, protocol: Protocol) -> torch.nn.Module:
        pairs = _sizes(in_channels, num_classes, protocol)
        return Stack([layer(a, b, i == len(pairs) - 1) for i, (a, b) in enumerate(pairs)],
                     protocol.dropout, graph,
                     None if propagation is None else propagation())
    return build


def _gat(heads: int) -> Callable[[int, int, bool], torch.nn.Module]:
    def layer(a: int, b: int, last: bool) -> torch.nn.Module:
        # Hidden layers: `heads` heads of b // heads units, concatenated; the last: one head.
        return GATConv(a, b, heads=1) if last else GATConv(a, b // heads, heads=heads)
    return layer


def _tsgcn(alpha: float, beta: float) -> Callable:
    def build(in_channels: int, num_classes: int, protocol: Protocol) -> torch.nn.Module:
        return RegularizerGNN(in_channels, protocol.hidden, num_classes, protocol.layers,
                              'tsgcn', dropout=protocol.dropout, solver='cg', cached=True,
                              alpha=alpha, beta=beta, k=SEMANTIC_K, normalize=True)
    return build


def _graph_inputs(model: torch.nn.Module, data: Data) -> Tensor:
    return model(data.x, data.edge_index)


def _semantic_inputs(model: torch.nn.Module, data: Data) -> Tensor:
    return model(data.x, data.edge_index, semantic_edge_index=data.semantic_edge_index)


#: The neighbours per node of the semantic graph of the tsGCN models
#: (:class:`~torch_geometric_regcn.SemanticGraph`).
SEMANTIC_K = 10

_TSGCN = {'regularizer': 'tsgcn', 'solver': 'cg', 'normalize': True}

#: The models of the heterophily comparison by name: PyG's layers in the
#: same :class:`Stack` (dropout before each layer, ReLU between; GraphSAGE's
#: :class:`~torch_geometric.nn.conv.SAGEConv` as
#: :class:`harness.baselines.ProjectFirstSAGEConv`, the same function
#: projected before the mean aggregation, which is cheaper for wide
#: features), and the
#: package's tsGCN (:class:`~torch_geometric_regcn.RegularizerGNN`, exact
#: propagation by CG) for reference, with and without its semantic graph.
#: Every model gets :obj:`PROTOCOL`; :obj:`config` holds the rest, fixed in
#: advance. The package's heterophily regularisers (issue 29, item 2) join
#: here when they exist.
MODELS: Dict[str, Model] = {
    'mlp': Model('MLP', _stack(lambda a, b, last: torch.nn.Linear(a, b), graph=False),
                 _graph_inputs, {'layer': 'torch.nn.Linear'}),
    'gcn': Model('GCN', _stack(lambda a, b, last: GCNConv(a, b, cached=True)), _graph_inputs,
                 {'layer': 'GCNConv'}),
    'sage': Model('GraphSAGE', _stack(lambda a, b, last: ProjectFirstSAGEConv(a, b)),
                  _graph_inputs, {'layer': 'SAGEConv', 'aggr': 'mean'}),
    'gat': Model('GAT', _stack(_gat(8)), _graph_inputs,
                 {'layer': 'GATConv', 'heads': 8, 'head_channels': 8, 'output_heads': 1,
                  'attention_dropout': 0.0}),
    'appnp': Model('APPNP', _stack(lambda a, b, last: torch.nn.Linear(a, b), graph=False,
                                   propagation=lambda: APPNP(K=10, alpha=0.1, cached=True)),
                   _graph_inputs, {'layer': 'torch.nn.Linear + APPNP', 'K': 10, 'alpha': 0.1}),
    'tsgcn': Model('tsGCN (a=1, b=1)', _tsgcn(1.0, 1.0), _semantic_inputs,
                   {**_TSGCN, 'alpha': 1.0, 'beta': 1.0, 'semantic_k': SEMANTIC_K},
                   semantic=True),
    'tsgcn_topology': Model('tsGCN (a=1, b=0)', _tsgcn(1.0, 0.0), _graph_inputs,
                            {**_TSGCN, 'alpha': 1.0, 'beta': 0.0}),
}


def chosen(name: str, protocol: Protocol = PROTOCOL) -> Dict[str, Any]:
    r"""The full configuration of model :obj:`name` under :obj:`protocol`:
    the protocol's fields and the model's own :obj:`config`."""
    return {**protocol._asdict(), **MODELS[name].config}


def fit_model(name: str, data: Data, metric: str, protocol: Protocol = PROTOCOL, seed: int = 0,
              on_epoch: Callable[[int], None] = lambda epoch: None) -> SplitResult:
    r"""Builds model :obj:`name` of :obj:`MODELS` after
    :obj:`torch.manual_seed(seed)`, on the device of :obj:`data.x`, and
    trains it on the split of :obj:`data` (1-D masks; with
    :obj:`data.semantic_edge_index` for a model with :obj:`semantic`) by
    :func:`fit_split` under :obj:`protocol`. The classes are
    :obj:`0 .. data.y.max()`."""
    model_def = MODELS[name]
    if model_def.semantic and 'semantic_edge_index' not in data:
        raise ValueError(f"{name} needs 'data.semantic_edge_index': apply "
                         f"SemanticGraph({SEMANTIC_K}) to the graph first")
    torch.manual_seed(seed)
    model = model_def.build(data.num_features, int(data.y.max()) + 1, protocol).to(data.x.device)
    return fit_split(model, lambda: model_def.run(model, data), data, metric, protocol.epochs,
                     protocol.lr, protocol.weight_decay, on_epoch=on_epoch)
