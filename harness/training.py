r"""The training protocol of the examples and benchmarks: Adam on the
training nodes, test scores at the best validation epoch, and the paper's
metrics."""
import ctypes
import math
import time
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data


def macro_f1(pred: Tensor, target: Tensor) -> float:
    r"""The macro-averaged F1 score over the classes that occur in
    :obj:`target` or :obj:`pred` (a class with no true or predicted member
    scores zero), as scikit-learn's :obj:`f1_score(average="macro")`."""
    classes = torch.cat([pred, target]).unique()
    pred, target = pred[:, None] == classes, target[:, None] == classes
    tp = (pred & target).sum(0).double()
    denominator = pred.sum(0) + target.sum(0)
    return float((2 * tp / denominator.clamp_min(1)).mean())


def keep_freed_memory() -> bool:
    r"""Asks glibc's allocator to keep freed memory for reuse instead of
    returning it to the operating system. A training epoch frees and allocates
    the same large buffers (messages, dropout masks, activations) again and
    again; by default glibc unmaps every block above a few MB when it is freed,
    and each epoch then pays page faults to map it back. On the 2-core machine
    of our benchmarks this made PyG's :class:`~torch_geometric.nn.conv.ChebConv`
    on Cora 3-4x slower per epoch (322 against 86 ms). It changes only when
    memory goes back to the system, never what is computed. Returns whether
    the settings were applied (:obj:`False` where the C library is not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    trim, top_pad, mmap_threshold = -1, -2, -3  # glibc's option numbers
    # Trim the heap only beyond 2 GiB of free memory at its top, grow it 1 GiB
    # at a time, and serve blocks below 1 GiB from it (glibc versions that cap
    # the threshold accept 32 MiB).
    applied = mallopt(trim, 2**31 - 1) == 1 and mallopt(top_pad, 2**30) == 1
    return applied and (mallopt(mmap_threshold, 2**30) == 1
                        or mallopt(mmap_threshold, 2**25) == 1)


class FitResult(NamedTuple):
    accuracy: float  #: test accuracy at the best validation epoch
    f1: float  #: test macro-F1 at the same epoch
    val_accuracy: float
    best_epoch: int
    seconds: float  #: training time
    last_accuracy: float = 0.0  #: test accuracy after the last epoch (the authors' report)
    last_f1: float = 0.0  #: test macro-F1 after the last epoch


def fit(model: torch.nn.Module, forward: Callable[[], Tensor], data: Data, epochs: int = 500,
        lr: float = 0.01, weight_decay: float = 5e-4,
        on_epoch: Callable[[int], None] = lambda epoch: None,
        param_groups: Optional[Sequence[Dict[str, Any]]] = None) -> FitResult:
    r"""Trains :obj:`model` with Adam and cross-entropy on :obj:`data.train_mask`
    and returns the test accuracy and macro-F1 at the epoch of best validation
    accuracy (the later epoch on ties), and those after the last epoch, which
    is what the authors' code reports. :obj:`forward` returns the logits of
    all nodes. Calls :func:`keep_freed_memory` first.

    :obj:`param_groups`, if given, are Adam parameter groups of their own
    (dicts with :obj:`"params"` and the options they override, e.g.
    :obj:`{"params": coefficients, "weight_decay": 0.0}`); the parameters of
    :obj:`model` that no group lists form the first group, with :obj:`lr`
    and :obj:`weight_decay`."""
    steps = train_epochs(model, forward, data, epochs, lr, weight_decay, param_groups)
    # No epoch chosen (none, or every one diverged): nan, not a plausible score.
    best = FitResult(math.nan, math.nan, -1.0, -1, 0.0)
    start = time.perf_counter()
    for epoch, logits in enumerate(steps):
        pred = logits.argmax(dim=-1)
        diverged = bool(logits.isnan().any())  # argmax reads a nan row as a vote for class 0
        val = math.nan if diverged else float(
            (pred[data.val_mask] == data.y[data.val_mask]).float().mean())
        if val >= best.val_accuracy:  # never a nan epoch
            best = FitResult(*_test_scores(pred, data), val, epoch, 0.0)
        on_epoch(epoch)
    best = best._replace(seconds=time.perf_counter() - start)
    if epochs == 0:
        return best
    last_accuracy, last_f1 = (math.nan, math.nan) if diverged else _test_scores(pred, data)
    return best._replace(last_accuracy=last_accuracy, last_f1=last_f1)


def train_epochs(model: torch.nn.Module, forward: Callable[[], Tensor], data: Data,
                 epochs: int, lr: float = 0.01, weight_decay: float = 5e-4,
                 param_groups: Optional[Sequence[Dict[str, Any]]] = None) -> Iterator[Tensor]:
    r"""The training loop of :func:`fit`, for callers that score the epochs
    their own way: each step trains :obj:`model` for one epoch (Adam,
    cross-entropy on :obj:`data.train_mask`, :obj:`model.train()`) and yields
    the logits of all nodes from :obj:`forward` in :obj:`model.eval()` mode,
    computed without gradients. Calls :func:`keep_freed_memory` and builds the
    optimizer (with :obj:`param_groups` as in :func:`fit`) at once, before the
    first step."""
    keep_freed_memory()
    optimizer = torch.optim.Adam(_param_groups(model, param_groups), lr=lr,
                                 weight_decay=weight_decay)
    return _steps(model, forward, data, optimizer, epochs)


def _steps(model: torch.nn.Module, forward: Callable[[], Tensor], data: Data,
           optimizer: torch.optim.Optimizer, epochs: int) -> Iterator[Tensor]:
    for _ in range(epochs):
        model.train()
        optimizer.zero_grad()
        out = forward()
        F.cross_entropy(out[data.train_mask], data.y[data.train_mask]).backward()
        optimizer.step()
        model.eval()
        with torch.no_grad():
            logits = forward()
        yield logits


def _param_groups(model: torch.nn.Module,
                  groups: Optional[Sequence[Dict[str, Any]]]) -> List[Dict[str, Any]]:
    r"""The Adam parameter groups of :func:`fit`: the parameters of
    :obj:`model` outside :obj:`groups`, then :obj:`groups`."""
    if groups is None:
        return [{'params': list(model.parameters())}]
    own = []
    for group in groups:
        params = group['params']
        own.append({**group, 'params': [params] if isinstance(params, Tensor) else list(params)})
    listed = {id(p) for group in own for p in group['params']}
    rest = [p for p in model.parameters() if id(p) not in listed]
    return ([{'params': rest}] if rest else []) + own


def _test_scores(pred: Tensor, data: Data) -> tuple[float, float]:
    r"""Test accuracy and macro-F1 of the predicted classes :obj:`pred`."""
    pred, target = pred[data.test_mask], data.y[data.test_mask]
    return float((pred == target).float().mean()), macro_f1(pred, target)
