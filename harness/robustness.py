r"""The robustness protocol of issue 30: perturbed graphs (PR-BCD from a
surrogate GCN, random flips, DICE), the Jaccard preprocessing baseline, and
models trained and evaluated under evasion and poisoning."""
import copy
import math
import os
import warnings
from typing import Callable, Dict, NamedTuple, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.nn import GCN
from torch_geometric.utils import coalesce, to_undirected

from harness.heterophily import MODELS, Dims, configurations
from harness.training import train_epochs

#: The attacks of the benchmark.
ATTACKS = ('prbcd', 'random', 'dice')


def undirected_pairs(edge_index: Tensor) -> Tensor:
    r"""The undirected edges of :obj:`edge_index` as pairs :math:`i < j`,
    :obj:`[2, E']` (self loops dropped)."""
    row, col = edge_index
    keep = row != col
    pairs = torch.stack([torch.minimum(row, col), torch.maximum(row, col)])[:, keep]
    return coalesce(pairs)


def flip(edge_index: Tensor, num_nodes: int, add: Tensor, remove: Tensor) -> Tensor:
    r"""The symmetric :obj:`edge_index` with the pairs :obj:`add` inserted and
    :obj:`remove` deleted (both :obj:`[2, k]`, :math:`i < j`)."""
    pairs = undirected_pairs(edge_index)
    key = pairs[0] * num_nodes + pairs[1]
    gone = torch.isin(key, remove[0] * num_nodes + remove[1])
    pairs = coalesce(torch.cat([pairs[:, ~gone], add], dim=1))
    return to_undirected(pairs, num_nodes=num_nodes)


def random_flips(edge_index: Tensor, num_nodes: int, budget: int, seed: int) -> Tensor:
    r""":obj:`budget` uniformly random node pairs flipped: an existing edge is
    removed, an absent one inserted."""
    gen = torch.Generator().manual_seed(seed)
    candidates = torch.randint(0, num_nodes, (2, 4 * budget + 16), generator=gen)
    candidates = undirected_pairs(candidates)
    candidates = candidates[:, torch.randperm(candidates.size(1), generator=gen)[:budget]]
    pairs = undirected_pairs(edge_index)
    exists = torch.isin(candidates[0] * num_nodes + candidates[1], pairs[0] * num_nodes + pairs[1])
    return flip(edge_index, num_nodes, candidates[:, ~exists], candidates[:, exists])


def dice(edge_index: Tensor, y: Tensor, budget: int, seed: int) -> Tensor:
    r"""DICE (Waniek et al., 2018): half of :obj:`budget` edges between nodes
    of the same class deleted, the rest inserted between nodes of different
    classes, at random."""
    gen = torch.Generator().manual_seed(seed)
    n = y.numel()
    pairs = undirected_pairs(edge_index)
    internal = pairs[:, y[pairs[0]] == y[pairs[1]]]
    removed = internal[:, torch.randperm(internal.size(1), generator=gen)[:budget // 2]]
    need = budget - removed.size(1)
    candidates = undirected_pairs(torch.randint(0, n, (2, 8 * need + 16), generator=gen))
    external = candidates[:, y[candidates[0]] != y[candidates[1]]]
    absent = ~torch.isin(external[0] * n + external[1], pairs[0] * n + pairs[1])
    external = external[:, absent]  # sorted by node (coalesced): drawn from, not cut
    added = external[:, torch.randperm(external.size(1), generator=gen)[:need]]
    return flip(edge_index, n, added, removed)


def _accuracy(logits: Tensor, data: Data, mask: Tensor) -> float:
    r"""The accuracy on :obj:`mask`; :obj:`nan` where a logit is (argmax
    would read a nan row as a vote for class 0)."""
    if bool(logits[mask].isnan().any()):
        return math.nan
    return float((logits[mask].argmax(-1) == data.y[mask]).float().mean())


def train_best(model: torch.nn.Module, forward: Callable[[], Tensor], data: Data, epochs: int,
               lr: float = 0.01, weight_decay: float = 5e-4) -> Tuple[Dict, float]:
    r"""Trains :obj:`model` by :func:`harness.training.train_epochs` and
    returns the weights of its best validation epoch (the later one on ties)
    and their test accuracy."""
    best, state, test = -1.0, None, math.nan
    for logits in train_epochs(model, forward, data, epochs, lr, weight_decay):
        val = _accuracy(logits, data, data.val_mask)
        if val >= best:
            best, state = val, copy.deepcopy(model.state_dict())
            test = _accuracy(logits, data, data.test_mask)
    return state, test


def train_surrogate(data: Data, seed: int, epochs: int = 200) -> torch.nn.Module:
    r"""The surrogate of PR-BCD: PyG's 2-layer GCN (64 hidden, dropout 0.5),
    trained on the training nodes (Adam 0.01, weight decay 5e-4), the
    weights of the best validation epoch."""
    torch.manual_seed(seed)
    model = GCN(data.num_features, 64, 2, int(data.y.max()) + 1, dropout=0.5)
    state, _ = train_best(model, lambda: model(data.x, data.edge_index), data, epochs)
    model.load_state_dict(state)
    return model.eval()


def prbcd(data: Data, budget: int, seed: int, epochs: int = 125) -> Tensor:
    r"""PyG's :class:`~torch_geometric.contrib.nn.PRBCDAttack` on a surrogate
    GCN (:func:`train_surrogate`): a global evasion attack of :obj:`budget`
    edge flips on the test nodes' predictions (their true labels, the
    probability margin loss), with the attack's defaults but :obj:`epochs`;
    the perturbed graph is then transferred to every model."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # contrib is experimental
        from torch_geometric.contrib.nn import PRBCDAttack
    surrogate = train_surrogate(data, seed)
    torch.manual_seed(seed)
    attack = PRBCDAttack(surrogate, block_size=250_000, epochs=epochs,
                         epochs_resampling=int(0.8 * epochs), log=False)
    perturbed, _ = attack.attack(data.x, data.edge_index, data.y, budget,
                                 idx_attack=data.test_mask.nonzero().view(-1))
    return to_undirected(perturbed, num_nodes=data.num_nodes)


#: The version of the attacks' settings (the surrogate, PR-BCD's epochs and
#: block): part of every cached file's name, raised when they change.
ATTACK_VERSION = 1
#: The versions of single attacks since, in their files' names instead
#: (DICE 2: its insertions drawn at random, not the lowest-numbered pairs).
ATTACK_VERSIONS = {'dice': 2}


def perturbed_graph(data: Data, attack: str, fraction: float, seed: int,
                    cache: Optional[str] = None, name: str = 'graph') -> Tensor:
    r"""The :obj:`edge_index` of :obj:`data` after :obj:`attack` with a budget
    of :obj:`fraction` of its undirected edges, seeded, read from and saved
    to the folder :obj:`cache` when given (files named by the dataset
    :obj:`name`, its size, the attack, its version (:data:`ATTACK_VERSIONS`,
    else :data:`ATTACK_VERSION`), the fraction and the seed)."""
    if fraction == 0:
        return data.edge_index
    budget = int(round(fraction * undirected_pairs(data.edge_index).size(1)))
    path = None
    if cache is not None:
        os.makedirs(cache, exist_ok=True)
        version = ATTACK_VERSIONS.get(attack, ATTACK_VERSION)
        path = os.path.join(cache, f'{name}-{data.num_nodes}-{attack}-v{version}-'
                                   f'{fraction:g}-{seed}.pt')
        if os.path.exists(path):
            return torch.load(path, weights_only=True)
    if attack == 'prbcd':
        edge_index = prbcd(data, budget, seed)
    elif attack == 'random':
        edge_index = random_flips(data.edge_index, data.num_nodes, budget, seed)
    elif attack == 'dice':
        edge_index = dice(data.edge_index, data.y, budget, seed)
    else:
        raise ValueError(f"'attack' must be one of {list(ATTACKS)} (got {attack!r})")
    if path is not None:
        torch.save(edge_index, path)
    return edge_index


def jaccard_filter(x: Tensor, edge_index: Tensor, threshold: float = 0.01) -> Tensor:
    r"""GCN-Jaccard's preprocessing (Wu et al., IJCAI 2019): the edges whose
    ends' binary features (:math:`x > 0`) have a Jaccard similarity below
    :obj:`threshold` removed."""
    binary = (x > 0).float()
    row, col = edge_index
    both = (binary[row] * binary[col]).sum(-1)
    either = binary[row].sum(-1) + binary[col].sum(-1) - both
    similarity = both / either.clamp_min(1)
    return edge_index[:, similarity >= threshold]


#: The models of the robustness benchmark: a name of
#: :obj:`harness.heterophily.MODELS` (first configuration) and whether the
#: Jaccard preprocessing is applied to every graph it sees.
ROBUSTNESS_MODELS: Dict[str, Tuple[str, bool]] = {
    'gcn': ('gcn', False), 'appnp': ('appnp', False), 'tsgcn': ('tsgcn_topology', False),
    'elastic': ('elastic', False), 'airgnn': ('airgnn', False), 'robust': ('robust', False),
    'gcn_jaccard': ('gcn', True)}


class Scores(NamedTuple):
    evasion: float  #: trained on the clean graph, tested on the perturbed one
    poisoning: float  #: trained and tested on the perturbed graph


def _graph(data: Data, edge_index: Tensor, jaccard: bool) -> Data:
    out = copy.copy(data)
    out.edge_index = jaccard_filter(data.x, edge_index) if jaccard else edge_index
    return out


def _fit(name: str, data: Data, seed: int, epochs: int
         ) -> Tuple[Callable[[Data], Tensor], float]:
    # Trains MODELS[name] on `data`; returns the evaluation of its best
    # validation weights on any graph (a fresh copy, so no cached operator of
    # the training graph is reused) and their test accuracy on `data`.
    model_def, config = MODELS[name], configurations(name)[0]
    torch.manual_seed(seed)
    dims = Dims(data.num_features, int(data.y.max()) + 1, data.num_nodes)
    model = model_def.build(dims, config)
    state, test = train_best(model, lambda: model_def.run(model, data), data, epochs,
                             config['lr'], config['weight_decay'])

    def evaluate(graph: Data) -> Tensor:
        fresh = model_def.build(dims, config)
        fresh.load_state_dict(state)
        fresh.eval()
        with torch.no_grad():
            return model_def.run(fresh, graph)
    return evaluate, test


def robustness_scores(name: str, data: Data, perturbed: Tensor, seed: int,
                      epochs: int = 300) -> Scores:
    r"""Test accuracy of model :obj:`name` of :data:`ROBUSTNESS_MODELS` on the
    split of :obj:`data` (1-D masks) with the graph :obj:`perturbed`: trained
    on the clean graph (evasion) and on the perturbed one (poisoning), each
    at its best validation epoch."""
    model_name, jaccard = ROBUSTNESS_MODELS[name]
    clean, attacked = _graph(data, data.edge_index, jaccard), _graph(data, perturbed, jaccard)
    evaluate, _ = _fit(model_name, clean, seed, epochs)
    evasion = _accuracy(evaluate(attacked), data, data.test_mask)
    _, poisoning = _fit(model_name, attacked, seed, epochs)
    return Scores(evasion, poisoning)
