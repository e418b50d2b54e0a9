r"""tsGCN's (alpha, beta) learned on the validation loss, against the validation grid, in one run.

On Cora, CiteSeer and PubMed.

Run from the repository root::

    python -m benchmarks.learnable [--datasets Cora CiteSeer PubMed] [--seeds 10 ...]
                                   [--epochs 500 ...] [--routes bilevel grid]
                                   [--device cuda] [--threads 1] [--shard I N]
                                   [--cells FILE [FILE ...]]
    python -m benchmarks.learnable --summary-only --cells FILE ...   # train nothing

Routes to tsGCN's coefficients, on the paper's random splits (seeds
0 .. SEEDS - 1, the same splits for every route), all with the 2-layer exact
tsGCN of the library's convention, :math:`(\mathbf{I} - \mathbf{S})^{-1}` by
conjugate gradient (``RegularizerGNN(F, 32, C, regularizer='tsgcn',
solver='cg', cached=True, bias=False)``), Adam on the weights with learning
rate 0.01, and test scores at the best validation epoch (the later one on
ties):

- ``bilevel`` (the learned route): alpha and beta start at the paper's values
  (``PAPER_SETTINGS``), each layer its own pair, and are learned on the
  validation loss by
  :class:`~torch_geometric_regcn.regularizers.BilevelStep`: per epoch one
  weight step on the training cross-entropy (dropout on), then, on the
  logits of the evaluation (dropout off), which also score the epoch, one
  coefficient step on :func:`~torch_geometric_regcn.regularizers.calibrated_cross_entropy`
  of the validation nodes (Adam, learning rate :obj:`COEFFICIENT_LR`,
  no weight decay), through the implicit gradient of the CG solve; the
  weights restart from their initial values after :obj:`PATIENCE` epochs
  without a lower validation loss (``docs/learnable.md`` says why).
- ``grid`` (the validation grid route): the same model with (alpha, beta)
  fixed at each point of :obj:`GRIDS` (the grid of
  ``benchmarks/results/tuning.md``, or ``--grid-alphas`` x ``--grid-betas``),
  each point trained on each split; the point with the highest mean
  validation accuracy over the splits is the route's choice (ties: the
  first in grid order), its per-split test scores the route's scores, and
  the route's time the sum of all its runs.
- ``learned`` (optional): alpha and beta learned with the weights on the
  training loss, the route of the issue that found it lost to the grid.
- ``fixed`` (optional): the pair tuning.md chose (:obj:`TUNED`), held fixed.
- ``bilevel-uncalibrated``, ``bilevel-no-restart`` (optional ablations):
  ``bilevel`` with the plain validation cross-entropy, or without restarts.
- ``bilevel-shared`` (optional): ``bilevel`` with one pair for both layers
  (the layers share one regulariser), the space the grid searches.
- ``bilevel-error`` (optional, tried on CiteSeer and not better):
  ``bilevel`` with the validation loss :func:`calibrated_expected_error`,
  the expected error at the calibrated temperature, a smooth surrogate of
  the validation error the grid minimises.
- ``bilevel-implicit`` (optional, tried on Cora and CiteSeer): ``bilevel`` whose
  coefficient step adds the indirect term of the implicit-function
  hypergradient, :math:`-\partial^2_{\lambda W} L_{\text{train}}\,
  \mathbf{H}^{-1} \nabla_W L_{\text{val}}` (:math:`\mathbf{H}` the
  Hessian of the training loss in the weights, evaluation mode, with the
  weight decay's L2 term): how the weights trained at the coefficients would
  move with them, which the direct gradient ignores.
  :math:`\mathbf{H}^{-1}` is :obj:`NEUMANN_STEPS` terms of the Neumann
  series at step :math:`\eta` = :obj:`NEUMANN_SCALE` over
  :math:`\lVert \mathbf{H} \mathbf{g} \rVert / \lVert \mathbf{g} \rVert`
  (:math:`\mathbf{g}` the validation gradient), every Hessian-vector and mixed
  product a central difference of first-order gradients (a step of
  :obj:`DIFFERENCE_STEP` times the weights' norm; the CG solve's backward has
  no double backward); from the :obj:`IMPLICIT_WARMUP`-th epoch of each
  training cycle, where the weights are taken to be near a minimum of the
  training loss, as the implicit function theorem assumes (not checked).
  Cost per epoch: about
  :math:`2 \times` :obj:`NEUMANN_STEPS` :math:`+ 2` more gradient evaluations
  of the training loss.
- ``bilevel-implicit-forward`` (optional, tried on CiteSeer): ``bilevel-implicit``
  with forward differences from the training loss's gradient at the weights
  themselves, which the evaluation's logits give at the cost of one more
  backward pass: :obj:`NEUMANN_STEPS` :math:`+ 1` more gradient evaluations
  per epoch, about half, for a first-order error in the step (the central
  difference's is second-order) that stays below the series' own.
- ``bilevel-implicit-lagged`` (optional, tried on CiteSeer): ``bilevel-implicit``
  whose indirect term is formed every :obj:`IMPLICIT_EVERY`-th epoch of a
  cycle and reused on the epochs between (the direct term stays each
  epoch's): the extra gradient evaluations divided by :obj:`IMPLICIT_EVERY`,
  for a term that lags the weights by an epoch.
- ``bilevel-refit`` (optional): ``bilevel``, then the weights trained again
  from their initial values for as many epochs with the coefficients fixed
  at those of the search's best validation epoch; its scores are the
  second training's, its time both trainings'.

Everything but (alpha, beta) is the grid route's setting of tuning.md for
every route: the semantic graph's k, dropout and weight decay of
:obj:`TUNED`, hidden 32, learning rate 0.01. The protocol's runs are 10
splits of 500 epochs; ``--seeds`` and ``--epochs`` take one value or one per
dataset. The summary compares the routes on the splits they share: the
paired difference of test accuracy (learned - grid choice, mean and its
standard error) and the time ratio (learned route / grid route, both sums
of training time on the same device).

Runs are appended, one JSON line each, to the first ``--cells`` file as they
finish; a run stored in any of the ``--cells`` files is skipped, so an
interrupted command resumes and processes that write files of their own
merge in the summary. ``--shard I N`` trains every N-th run of the whole
plan (all datasets, splits, routes and grid points), starting at run I, so
that N processes (I = 0 .. N - 1) share it evenly. ``--device cuda`` moves
the graph, the semantic graph's construction and the models there; the
script pins ``--threads`` torch threads (default 1). Features are the
row-normalised sparse CSR matrix.
"""
import argparse
import datetime
import inspect
import itertools
import json
import math
import os.path as osp
import statistics
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.cli import check_writable, non_negative_float, positive_int
from harness.data import REPO, load_paper_dataset, run_split
from harness.measure import load_average, machine_info
from harness.report import RESULTS, Report, command_line
from harness.results import ResultStore
from harness.training import FitResult, fit, keep_freed_memory, macro_f1
from torch_geometric_regcn import RegularizerGNN, SemanticGraph
from torch_geometric_regcn.datasets import PAPER_SETTINGS
from torch_geometric_regcn.regularizers import (
    BilevelStep,
    calibrated_cross_entropy,
    calibrated_temperature,
    coefficient_parameters,
    weight_parameters,
)

MODULE = 'benchmarks.learnable'
CELLS = osp.join(RESULTS, 'learnable.jsonl')  #: one line per run
SUMMARY = osp.join(RESULTS, 'learnable.md')
DATASETS = ['Cora', 'CiteSeer', 'PubMed']
#: route -> (learns the coefficients, on the validation loss, calibrated, restarts)
ROUTES = {
    'bilevel': (True, True, True, True),
    'grid': (False, False, False, False),
    'learned': (True, False, False, False),
    'fixed': (False, False, False, False),
    'bilevel-uncalibrated': (True, True, False, True),
    'bilevel-no-restart': (True, True, True, False),
    'bilevel-shared': (True, True, True, True),
    'bilevel-refit': (True, True, True, True),
    'bilevel-error': (True, True, True, True),
    'bilevel-implicit': (True, True, True, True),
    'bilevel-implicit-forward': (True, True, True, True),
    'bilevel-implicit-lagged': (True, True, True, True),
}
#: the routes whose validation loss is the calibrated expected error
#: (:func:`calibrated_expected_error`) instead of the calibrated cross-entropy
EXPECTED_ERROR = {'bilevel-error'}
#: the routes whose layers share one regulariser, so one (alpha, beta)
SHARED = {'bilevel-shared'}
#: the routes that train the weights again with the coefficients found fixed
REFIT = {'bilevel-refit'}
#: the routes whose coefficient step adds the implicit hypergradient's indirect term
IMPLICIT = {'bilevel-implicit', 'bilevel-implicit-forward', 'bilevel-implicit-lagged'}
#: those of them whose products are forward differences from the weights' own gradient
FORWARD_DIFFERENCE = {'bilevel-implicit-forward'}
#: those of them that form the indirect term every IMPLICIT_EVERY-th epoch only
LAGGED = {'bilevel-implicit-lagged'}
IMPLICIT_EVERY = 2  #: of the lagged route: the term is reused on the epochs between
NEUMANN_STEPS = 3  #: terms of the Neumann series of the inverse Hessian beyond the first
NEUMANN_SCALE = 0.5  #: its step, over the Hessian's gain on the validation gradient
DIFFERENCE_STEP = 1e-3  #: of the central differences, relative to the weights' norm
IMPLICIT_WARMUP = 5  #: epochs of a training cycle before the indirect term is added
#: the fields of a ``bilevel-implicit`` run that record those constants
IMPLICIT_FIELDS = ('neumann_steps', 'neumann_scale', 'difference_step', 'implicit_warmup')


def implicit_constants() -> Tuple[Any, ...]:
    r"""The constants of the indirect term, in the order of :obj:`IMPLICIT_FIELDS`."""
    return NEUMANN_STEPS, NEUMANN_SCALE, DIFFERENCE_STEP, IMPLICIT_WARMUP


def implicit_every(route: str) -> int:
    r"""Every how many epochs the route :obj:`route` forms the indirect term."""
    return IMPLICIT_EVERY if route in LAGGED else 1


DEFAULT_ROUTES = ['bilevel', 'grid']
EPOCHS, SEEDS = 500, 10  #: the protocol
HIDDEN, LR = 32, 0.01
COEFFICIENT_LR = 0.05  #: Adam's learning rate of the raw coefficients (bilevel routes)
PATIENCE = 10  #: epochs without a lower validation loss before the weights restart
#: Newton steps of the calibrated validation loss (its default), and those of runs
#: stored before the field was recorded
NEWTON_STEPS = inspect.signature(calibrated_cross_entropy).parameters['iterations'].default
LEGACY_NEWTON_STEPS = 10
PROTOCOL_SPLITS = 10  #: the issue's splits; fewer get no verdict on the accuracy target


class Tuned(NamedTuple):
    r"""The grid route's setting for one dataset, from
    ``benchmarks/results/tuning.md``."""
    alpha: float  #: the pair tuning.md chose (route ``fixed``)
    beta: float
    k: int  #: the semantic graph's k
    dropout: float
    weight_decay: float
    source: str


#: The tuned settings of ``benchmarks/results/tuning.md`` (random splits).
TUNED: Dict[str, Tuned] = {
    'Cora': Tuned(5.0, 1.0, 10, 0.0, 5e-4,
                  'section "Cora (2026-11-26)": its 4 x 4 grid chose alpha = 5, beta = 1 at the '
                  "paper's k = 10, dropout 0, weight decay 5e-4"),
    'CiteSeer': Tuned(5.0, 2.0, 40, 0.8, 0.05,
                      'sections "CiteSeer (2026-11-27)" with --seeds 10 --grid-epochs 500: the '
                      '4 x 3 grid and its alpha = 10 row chose alpha = 5, beta = 2, at k = 40, '
                      'dropout 0.8, weight decay 0.05 chosen by the earlier stages'),
    'PubMed': Tuned(1.0, 0.1, 10, 0.8, 5e-3,
                    'section "PubMed (2026-11-26)" (first): its 4 x 4 grid chose alpha = 1, '
                    'beta = 0.1; stage 3 then chose dropout 0.8, weight decay 5e-3'),
}

#: The (alpha, beta) grids of tuning.md, for the route ``grid``.
GRIDS: Dict[str, List[Tuple[float, float]]] = {
    'Cora': list(itertools.product([0.5, 1.0, 2.0, 5.0], [0.1, 0.3, 0.5, 1.0])),
    'CiteSeer': (list(itertools.product([1.0, 2.0, 3.0, 5.0], [0.5, 1.0, 2.0]))
                 + [(10.0, 1.0), (10.0, 2.0), (10.0, 5.0)]),
    'PubMed': list(itertools.product([0.5, 1.0, 2.0, 5.0], [0.1, 0.3, 0.5, 1.0])),
}


class Run(NamedTuple):
    dataset: str
    route: str
    seed: int
    epochs: int
    point: Optional[Tuple[float, float]]  #: (alpha, beta) of a grid run


def route_label(route: str, point: Optional[Tuple[float, float]]) -> str:
    r"""The route's name in a run's key: a grid run's names its point,
    e.g. ``'grid-a5-b1'``."""
    return route if point is None else f'{route}-a{point[0]:g}-b{point[1]:g}'


def cell_key(dataset: str, label: str, epochs: int, seed: int, device: str = 'cpu') -> str:
    r"""The name of a run, e.g. ``'Cora__bilevel__e500__3__cuda'`` (runs on
    the CPU, as all before the device was recorded, have no suffix)."""
    return f'{dataset}__{label}__e{epochs}__{seed}' + ('' if device == 'cpu' else f'__{device}')


def record_key(r: dict) -> str:
    point = (r['alpha0'], r['beta0']) if r['route'] == 'grid' else None
    return cell_key(r['dataset'], route_label(r['route'], point), r['epochs'], r['seed'],
                    r.get('device', 'cpu'))


def settings(r: dict) -> Tuple:
    r"""What a stored run was made with beyond its key (:func:`record_key`):
    :obj:`k`, dropout, weight decay, the starting :math:`(\alpha, \beta)`, the
    hidden size, and (bilevel routes) the coefficients' learning rate, the
    patience and the Newton steps of the calibrated validation loss, and
    (``bilevel-implicit`` and its variants) the constants of its indirect
    term and the period at which it is formed. Runs stored before the hidden
    size was recorded used 32, calibrated runs stored before the Newton steps
    were recorded used 10, implicit runs stored before the period was
    recorded formed the term every epoch."""
    implicit = ((*(r[name] for name in IMPLICIT_FIELDS), r.get('implicit_every', 1))
                if r['route'] in IMPLICIT else None)
    return (r['k'], r['dropout'], r['weight_decay'], r['alpha0'], r['beta0'],
            r.get('hidden', 32), r.get('coefficient_lr'), r.get('patience'),
            newton_steps(r), implicit)


def newton_steps(r: dict) -> Optional[int]:
    r"""The Newton steps of a stored run's calibrated validation loss
    (:obj:`None` for a run without one)."""
    return r.get('newton_steps', LEGACY_NEWTON_STEPS) if r.get('calibrated') else None


def job_settings(job: 'Run') -> Tuple:
    r""":func:`settings` of the run :obj:`job` would store."""
    tuned = TUNED[job.dataset]
    _, on_validation, calibrated, restarts = ROUTES[job.route]
    alpha, beta = start_point(job)
    return (tuned.k, tuned.dropout, tuned.weight_decay, alpha, beta, HIDDEN,
            COEFFICIENT_LR if on_validation else None,
            PATIENCE if on_validation and restarts else None,
            NEWTON_STEPS if on_validation and calibrated else None,
            (*implicit_constants(), implicit_every(job.route)) if job.route in IMPLICIT
            else None)


def start_point(job: 'Run') -> Tuple[float, float]:
    r"""The :math:`(\alpha, \beta)` a run starts from (a grid run's point, the
    tuned one for ``fixed``, the paper's for the routes that learn)."""
    tuned, paper = TUNED[job.dataset], PAPER_SETTINGS[job.dataset]
    return (job.point if job.point is not None
            else (tuned.alpha, tuned.beta) if job.route == 'fixed'
            else (paper.alpha, paper.beta))


def open_cells(path: str) -> ResultStore:
    return ResultStore(path, key=record_key)


def merged_records(stores: List[ResultStore]) -> List[dict]:
    r"""The runs of :obj:`stores`, each key once: a run stored alike in two
    files (a shard's file merged into another) counts once, and two different
    runs of one key (a split rerun into another file, e.g. with other Newton
    steps) raise an error naming both files, where the summary would count
    the split twice."""
    seen: Dict[str, Tuple[str, dict]] = {}
    for store in stores:
        for r in store.records():
            key = record_key(r)
            if key in seen and json.dumps(seen[key][1], sort_keys=True) != json.dumps(
                    r, sort_keys=True):  # (a NaN equals itself here)
                raise ValueError(f"run {key!r} is stored in {seen[key][0]} and, as another "
                                 f"run, in {store.path}: the summary would count its split "
                                 f"twice; pass --cells files that hold each run once")
            seen.setdefault(key, (store.path, r))
    return [r for _, r in seen.values()]


def coefficients(model: RegularizerGNN) -> Dict[str, List[float]]:
    r"""Each layer's alpha and beta."""
    regs = [conv.regularizer for conv in model.convs]
    return {name: [float(torch.as_tensor(getattr(r, name)).detach()) for r in regs]
            for name in ('alpha', 'beta')}


def calibrated_expected_error(input: Tensor, target: Tensor) -> Tensor:
    r"""The expected error of the logits :obj:`input` at their calibrated
    temperature (:func:`~torch_geometric_regcn.regularizers.calibrated_temperature`,
    held constant), :math:`\frac{1}{N} \sum_i (1 - \mathrm{softmax}(\tau^{*}
    \mathbf{z}_i)_{y_i})`: its gradient in a row's logits is the
    cross-entropy's scaled by :math:`p_{y_i}`, so the rows near the decision
    boundary, whose class the coefficients can flip, weigh most, and those
    confidently wrong, which dominate the cross-entropy's gradient, least."""
    tau = calibrated_temperature(input, target, NEWTON_STEPS)  # the steps the runs record
    p = torch.softmax(tau * input, dim=1).gather(1, target.view(-1, 1).long())
    return (1 - p).mean()


def _norm(tensors: Sequence[Tensor]) -> float:
    return math.sqrt(sum(float(t.detach().square().sum()) for t in tensors))


class _TrainingLoss:
    r"""Gradients of the training loss of the implicit hypergradient (the
    route ``bilevel-implicit``): the cross-entropy of the training nodes in
    evaluation mode plus the L2 term of Adam's weight decay, in the weights
    and in the coefficients, at the weights moved by :obj:`scale` times a
    direction (restored after from a copy, bit for bit). The implicit
    function theorem holds at a minimum of that loss; the route assumes the
    weights near one from the warm-up on, and does not check it (the
    Hessian may be indefinite there)."""
    def __init__(self, forward: Callable[[], Tensor], run: Any, weights: List[Tensor],
                 coefs: List[Tensor], weight_decay: float) -> None:
        self.forward, self.run, self.weight_decay = forward, run, weight_decay
        self.weights, self.coefs = weights, coefs
        #: both gradients at the weights themselves: set, differences are forward ones
        self.base: Optional[Tuple[List[Tensor], List[Tensor]]] = None

    def loss(self, out: Tensor) -> Tensor:
        r"""The training loss of the logits :obj:`out` at the current weights."""
        run = self.run
        return F.cross_entropy(out[run.train_mask], run.y[run.train_mask]) + (
            0.5 * self.weight_decay * sum(p.square().sum() for p in self.weights))

    def set_base(self, out: Tensor) -> None:
        r"""Takes both gradients at the current weights from their evaluation's
        logits :obj:`out` (its graph kept for the validation loss), so that
        :meth:`difference` steps forward from them."""
        grads = torch.autograd.grad(self.loss(out), self.weights + self.coefs,
                                    retain_graph=True)
        n = len(self.weights)
        self.base = list(grads[:n]), list(grads[n:])

    def grads(self, direction: Sequence[Tensor], scale: float
              ) -> Tuple[List[Tensor], List[Tensor]]:
        saved = [p.detach().clone() for p in self.weights]
        with torch.no_grad():
            for p, d in zip(self.weights, direction):
                p.add_(d, alpha=scale)
        try:
            grads = torch.autograd.grad(self.loss(self.forward()), self.weights + self.coefs)
        finally:
            with torch.no_grad():
                for p, value in zip(self.weights, saved):
                    p.copy_(value)
        n = len(self.weights)
        return list(grads[:n]), list(grads[n:])

    def difference(self, direction: Sequence[Tensor]) -> Tuple[List[Tensor], List[Tensor]]:
        r"""The derivatives of both gradients along :obj:`direction` (a
        Hessian-vector and a mixed product), by a central difference, or a
        forward one from :attr:`base` where it is set."""
        step = DIFFERENCE_STEP * _norm(self.weights) / max(_norm(direction), 1e-30)
        (wp, cp) = self.grads(direction, step)
        (wm, cm), width = (self.base, step) if self.base is not None else (
            self.grads(direction, -step), 2 * step)
        return ([(a - b) / width for a, b in zip(wp, wm)],
                [(a - b) / width for a, b in zip(cp, cm)])

    def indirect(self, g: List[Tensor]) -> List[Tensor]:
        r"""The indirect term :math:`-\partial^2_{\lambda W} L\, p` with
        :math:`p \approx \mathbf{H}^{-1} \mathbf{g}` by the Neumann series."""
        hg = self.difference(g)[0]
        eta = NEUMANN_SCALE * _norm(g) / max(_norm(hg), 1e-30)
        term, total, h = list(g), list(g), hg
        for j in range(NEUMANN_STEPS):
            if j:
                h = self.difference(term)[0]
            term = [t - eta * a for t, a in zip(term, h)]
            total = [s + t for s, t in zip(total, term)]
        mixed = self.difference([eta * t for t in total])[1]
        return [-m for m in mixed]


def fit_bilevel(model: RegularizerGNN, forward: Callable[[], Tensor], run: Any,
                epochs: int, weight_decay: float,
                calibrated: bool, restarts: bool, trace: List[Dict[str, List[float]]],
                expected_error: bool = False, implicit: bool = False,
                forward_difference: bool = False, every: int = 1
                ) -> Tuple[FitResult, int]:
    r"""The training loop of the bilevel routes, scored as
    :func:`harness.training.fit` scores: returns the scores at the best
    validation epoch and after the last one, and the number of training
    cycles. :obj:`trace` receives each epoch's coefficients (those that
    made its logits). With :obj:`implicit`, the indirect term is formed on
    every :obj:`every`-th epoch of a cycle from the warm-up on and reused on
    the epochs between."""
    keep_freed_memory()
    step = BilevelStep(
        model, torch.optim.Adam(weight_parameters(model), lr=LR, weight_decay=weight_decay),
        torch.optim.Adam(coefficient_parameters(model), lr=COEFFICIENT_LR),
        patience=PATIENCE if restarts else None)
    val_loss = (calibrated_expected_error if expected_error else
                calibrated_cross_entropy if calibrated else F.cross_entropy)
    y, train, val, test = run.y, run.train_mask, run.val_mask, run.test_mask
    regs = [conv.regularizer for conv in model.convs]
    weights = [p for p in weight_parameters(model) if p.requires_grad]
    coefs = [p for p in coefficient_parameters(model) if p.requires_grad]
    training = _TrainingLoss(forward, run, weights, coefs, weight_decay) if implicit else None
    indirect: List[Tensor] = []  # the last indirect term formed
    values: List[Tensor] = []  # each epoch's [alpha per layer, beta per layer], on the device
    best = FitResult(0.0, 0.0, -1.0, -1, 0.0)
    start = time.perf_counter()
    cycle, age = step.cycles, 0
    for epoch in range(epochs):
        model.train()
        out = forward()
        step.weight_step(F.cross_entropy(out[train], y[train]))
        model.eval()
        out = forward()  # the evaluation's logits, with autograd for the coefficients
        values.append(torch.stack([r.alpha for r in regs] + [r.beta for r in regs]).detach())
        loss = val_loss(out[val], y[val])
        cycle, age = step.cycles, (age + 1 if step.cycles == cycle else 1)
        if training is not None and age >= IMPLICIT_WARMUP:
            fresh = (age - IMPLICIT_WARMUP) % every == 0
            if forward_difference and fresh:
                training.set_base(out)
            grads = torch.autograd.grad(loss, weights + coefs)
            g, direct = list(grads[:len(weights)]), grads[len(weights):]
            if fresh:
                indirect = training.indirect(g)
            hyper = [d + i for d, i in zip(direct, indirect)]
            # the loss's value, with the hypergradient as its gradient in the coefficients
            loss = loss.detach() + sum((h * (c - c.detach())).sum() for h, c in zip(hyper, coefs))
        step.coefficient_step(loss)
        pred = out.detach().argmax(dim=-1)
        accuracy = float((pred[val] == y[val]).float().mean())
        if accuracy >= best.val_accuracy:
            best = FitResult(float((pred[test] == y[test]).float().mean()),
                             macro_f1(pred[test], y[test]), accuracy, epoch, 0.0)
    best = best._replace(seconds=time.perf_counter() - start)
    layers = len(regs)
    trace.extend({'alpha': v[:layers], 'beta': v[layers:]}
                 for v in (torch.stack(values).tolist() if values else []))
    if epochs:
        best = best._replace(last_accuracy=float((pred[test] == y[test]).float().mean()),
                             last_f1=macro_f1(pred[test], y[test]))
    return best, step.cycles


def train(data, job: Run, device: torch.device) -> dict:
    r"""One run: the stored record."""
    tuned = TUNED[job.dataset]
    learns, on_validation, calibrated, restarts = ROUTES[job.route]
    alpha, beta = start_point(job)
    run = run_split(data, job.seed)

    def build(learn: bool) -> RegularizerGNN:
        torch.manual_seed(job.seed)  # the same initial weights for every route of a split
        return RegularizerGNN(run.num_features, HIDDEN, int(data.y.max()) + 1,
                              regularizer='tsgcn', solver='cg', alpha=alpha, beta=beta,
                              k=tuned.k, learn=('alpha', 'beta') if learn else (), cached=True,
                              bias=False, dropout=tuned.dropout).to(device)

    model = build(learns)
    if job.route in SHARED:
        for conv in model.convs[1:]:
            conv.regularizer = model.convs[0].regularizer

    def forward():
        return model(run.x, run.edge_index, semantic_edge_index=run.semantic_edge_index)

    trace: List[Dict[str, List[float]]] = []
    load = load_average()
    cycles = 1
    if on_validation:
        result, cycles = fit_bilevel(model, forward, run, job.epochs, tuned.weight_decay,
                                     calibrated, restarts, trace,
                                     expected_error=job.route in EXPECTED_ERROR,
                                     implicit=job.route in IMPLICIT,
                                     forward_difference=job.route in FORWARD_DIFFERENCE,
                                     every=implicit_every(job.route))
        found = trace[result.best_epoch] if trace else None
        if job.route in REFIT and found is not None:
            search = result
            model = build(False)  # forward() reads the new model
            for i, conv in enumerate(model.convs):
                conv.regularizer.alpha = found['alpha'][i]
                conv.regularizer.beta = found['beta'][i]
            result = fit(model, forward, run, job.epochs, LR, tuned.weight_decay)
            result = result._replace(seconds=search.seconds + result.seconds)
    else:
        raw = coefficient_parameters(model) if learns else []
        result = fit(model, forward, run, job.epochs, LR, tuned.weight_decay,
                     on_epoch=lambda epoch: trace.append(coefficients(model)) if raw else None,
                     param_groups=[{'params': raw, 'weight_decay': 0.0}] if raw else None)
    record = dict(dataset=job.dataset, route=job.route, seed=job.seed, epochs=job.epochs,
                  alpha0=alpha, beta0=beta, k=tuned.k, dropout=tuned.dropout,
                  weight_decay=tuned.weight_decay, hidden=HIDDEN, acc=100 * result.accuracy,
                  f1=100 * result.f1, val=100 * result.val_accuracy,
                  last_acc=100 * result.last_accuracy, epoch=result.best_epoch,
                  seconds=result.seconds, threads=torch.get_num_threads(), load=load,
                  device=device.type,
                  gpu=torch.cuda.get_device_name(device) if device.type == 'cuda' else None)
    if learns:
        record.update({f'{name}_last': trace[-1][name] for name in ('alpha', 'beta')})
        record.update({f'{name}_best': (found if on_validation else
                                        trace[result.best_epoch])[name]
                       for name in ('alpha', 'beta')})
    if job.route in REFIT:
        record.update(search_acc=100 * search.accuracy, search_val=100 * search.val_accuracy,
                      search_epoch=search.best_epoch, search_seconds=search.seconds)
    if job.route in IMPLICIT:
        record.update(zip(IMPLICIT_FIELDS, implicit_constants()),
                      implicit_every=implicit_every(job.route))
    if on_validation:
        record.update(cycles=cycles, coefficient_lr=COEFFICIENT_LR, calibrated=calibrated,
                      newton_steps=NEWTON_STEPS if calibrated else None,
                      patience=PATIENCE if restarts else None)
    return record


def plan(datasets: Sequence[str], seeds: Dict[str, int], epochs: Dict[str, int],
         routes: Sequence[str], grids: Dict[str, List[Tuple[float, float]]]) -> List[Run]:
    r"""Every run of the command, split by split (so that an interrupted
    command leaves whole splits of every route, and a shard a mix of them)."""
    runs = []
    for seed in range(max(seeds.values())):
        for dataset in datasets:
            if seed >= seeds[dataset]:
                continue
            for route in routes:
                for point in (grids[dataset] if route == 'grid' else [None]):
                    runs.append(Run(dataset, route, seed, epochs[dataset], point))
    return runs


def load_graph(dataset: str, device: torch.device):
    start = time.perf_counter()
    data = load_paper_dataset(dataset, sparse_features=True).to(device)
    data = SemanticGraph(TUNED[dataset].k, progress=False)(data)
    print(f'{dataset}: loaded, semantic graph k = {TUNED[dataset].k} on {device}, '
          f'{time.perf_counter() - start:.1f} s', flush=True)
    return data


def train_all(stores: List[ResultStore], runs: Sequence[Run], device: torch.device,
              command: str) -> None:
    r"""Trains the :obj:`runs` that no store holds, appending each to the
    first store as it finishes."""
    def stored(job: Run) -> bool:
        key = cell_key(job.dataset, route_label(job.route, job.point), job.epochs, job.seed,
                       device.type)
        found = [store.get(key) for store in stores if key in store]
        for record in found:  # reused only if made as this run would be
            if settings(record) != job_settings(job):
                raise ValueError(f"run {key!r} is stored with (k, dropout, weight decay, "
                                 f"alpha0, beta0, hidden, coefficient lr, patience, "
                                 f"Newton steps) = "
                                 f"{settings(record)}, but this run would use "
                                 f"{job_settings(job)}; pass another --cells file")
        return bool(found)

    todo = [job for job in runs if not stored(job)]
    print(f'{len(todo)} of {len(runs)} runs to train on {device}', flush=True)
    graphs: Dict[str, object] = {}
    for job in todo:
        if job.dataset not in graphs:
            graphs[job.dataset] = load_graph(job.dataset, device)
        record = train(graphs[job.dataset], job, device)
        record['command'] = command
        stores[0].add(record)
        what = (f"; alpha {record['alpha_last']}, beta {record['beta_last']}"
                if 'alpha_last' in record else '')
        print(f"{job.dataset} {route_label(job.route, job.point)} seed {job.seed}: ACC "
              f"{record['acc']:.1f} (epoch {record['epoch']}), {record['seconds']:.1f} s{what}",
              flush=True)


# -- the summary ---------------------------------------------------------------------------


def _mean_std(values: Sequence[float], spec: str = '.1f') -> str:
    std = statistics.stdev(values) if len(values) > 1 else math.nan  # one run: no spread
    return f'{statistics.mean(values):{spec}} ({std:{spec}})'


def _layers(rows: List[dict], name: str) -> str:
    r"""The mean of a learned coefficient per layer, over the runs."""
    return ', '.join(f'{statistics.mean(r[name][i] for r in rows):.2f}'
                     for i in range(len(rows[0][name])))


def _paired(runs: List[dict], reference: Dict[int, float]) -> Optional[Tuple[float, float, int]]:
    r"""Mean and standard error of the per-split difference of test ACC,
    :obj:`runs` - :obj:`reference` (test ACC by seed)."""
    diffs = [r['acc'] - reference[r['seed']] for r in runs if r['seed'] in reference]
    if len(diffs) < 2:
        return None
    return statistics.mean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs)), len(diffs)


class Grid(NamedTuple):
    choice: Tuple[float, float]
    seeds: List[int]  #: the splits every point ran
    val: Dict[Tuple[float, float], float]  #: mean validation ACC per point
    runs: List[dict]  #: the choice's runs, by seed
    seconds: float  #: all points' runs on those splits


def choose(grid_runs: List[dict], seeds: Optional[set] = None,
           order: Sequence[Tuple[float, float]] = ()) -> Optional[Grid]:
    r"""The grid route on the splits that every point ran (and that are in
    :obj:`seeds`, if given): the point of highest mean validation ACC
    (ties: the first point in :obj:`order`, the grid's, then those it lacks
    in the order of the runs; not the order of the file, which shards
    interleave)."""
    points = list(dict.fromkeys((r['alpha0'], r['beta0']) for r in grid_runs))
    points.sort(key=lambda p: order.index(p) if p in order else len(order))
    by_point = {p: {r['seed']: r for r in grid_runs if (r['alpha0'], r['beta0']) == p}
                for p in points}
    common = set.intersection(*(set(runs) for runs in by_point.values())) if points else set()
    if seeds is not None:
        common &= seeds
    if not common:
        return None
    common_sorted = sorted(common)
    val = {p: statistics.mean(by_point[p][s]['val'] for s in common_sorted) for p in points}
    choice = max(points, key=lambda p: (val[p], -points.index(p)))
    seconds = sum(by_point[p][s]['seconds'] for p in points for s in common_sorted)
    return Grid(choice, common_sorted, val, [by_point[choice][s] for s in common_sorted],
                seconds)


def _verdict(diff: float, se: float, splits: int) -> str:
    if splits < PROTOCOL_SPLITS:  # a partial measurement claims nothing
        return f'n/a ({splits} of {PROTOCOL_SPLITS} splits)'
    if diff >= -0.5:
        return 'met' + (' (also mean - 2 SE)' if diff - 2 * se >= -0.5 else '')
    return f'missed by {-0.5 - diff:.1f}'


def summarize(records: List[dict], rep: Report) -> None:
    r"""Appends the summary of :obj:`records` to :obj:`rep`: one group per
    dataset, number of epochs and device."""
    groups = sorted({(r['dataset'], r['epochs'], r.get('device', 'cpu')) for r in records},
                    key=lambda g: (DATASETS.index(g[0]) if g[0] in DATASETS else 99, -g[1],
                                   g[2]))
    overview, sections = [], []
    for dataset, epochs, device in groups:
        mine = [r for r in records if (r['dataset'], r['epochs'], r.get('device', 'cpu'))
                == (dataset, epochs, device)]
        shared = {tuple(settings(r)[i] for i in (0, 1, 2, 5)) for r in mine}
        if len(shared) > 1:  # routes are compared at one k, dropout, weight decay and size
            raise ValueError(f"the stored {dataset} runs of {epochs} epochs on {device} were "
                             f"made with different (k, dropout, weight decay, hidden): "
                             f"{sorted(shared)}; keep each setting in its own file")
        by_route = {route: sorted((r for r in mine if r['route'] == route),
                                  key=lambda r: r['seed']) for route in ROUTES}
        grid = choose(by_route['grid'], order=GRIDS.get(dataset, ()))
        sections.append((dataset, epochs, device, by_route, grid))
        if grid is None or not by_route['bilevel']:
            continue
        bilevel = [r for r in by_route['bilevel'] if r['seed'] in grid.seeds]
        grid = choose(by_route['grid'], {r['seed'] for r in bilevel},
                      GRIDS.get(dataset, ())) or grid
        paired = _paired(bilevel, {r['seed']: r['acc'] for r in grid.runs})
        if paired is None:
            continue
        seconds = sum(r['seconds'] for r in bilevel)
        ratio = seconds / grid.seconds
        steps = sorted({newton_steps(r) for r in bilevel if r.get('calibrated')})
        overview.append([dataset, device, f'{paired[2]} x {epochs}',
                         ', '.join(map(str, steps)) or '-',
                         f'({grid.choice[0]:g}, {grid.choice[1]:g}) of {len(grid.val)}',
                         _mean_std([r['acc'] for r in grid.runs]),
                         _mean_std([r['acc'] for r in bilevel]),
                         f'{paired[0]:+.1f} ({paired[1]:.1f})', _verdict(*paired[:3]),
                         f'{seconds:.0f}', f'{grid.seconds:.0f}', f'{ratio:.2f}',
                         'met' if ratio <= 1 / 3 else 'missed'])
    if overview:
        rep('## Summary')
        rep()
        rep('Test ACC (%) of the exact tsGCN (CG), mean (std) over the splits both routes ran, '
            'with (alpha, beta) learned on the validation loss (bilevel) and chosen by the '
            'validation grid on the same splits and epochs (grid: its choice and the number '
            'of points); bilevel - grid is the mean per-split difference (its standard '
            'error), the target >= -0.5. Newton steps: those of the calibrated validation '
            'loss in the bilevel runs (the default was 10, then 30). Seconds: training '
            'time summed over the route\'s runs (the grid: every point on every split); '
            'the target ratio <= 1/3. The runs may '
            'come from several of the commands above, made at different loads (the header '
            'gives the range), so the ratio carries that noise; the ms/epoch column of each '
            'section gives the routes\' cost per epoch.')
        rep()
        rep.table(['dataset', 'device', 'splits x epochs', 'Newton steps', 'grid choice',
                   'grid ACC', 'bilevel ACC', 'bilevel - grid', 'ACC target', 'bilevel (s)',
                   'grid (s)', 'time ratio', 'time target'], overview)
    for dataset, epochs, device, by_route, grid in sections:
        _section(rep, dataset, epochs, device, by_route, grid)


def _section(rep: Report, dataset: str, epochs: int, device: str,
             by_route: Dict[str, List[dict]], grid: Optional[Grid]) -> None:
    tuned, paper = TUNED[dataset], PAPER_SETTINGS[dataset]
    rep(f'## {dataset}, {epochs} epochs, {device}')
    rep()
    rep(f'Every route: k = {tuned.k}, dropout {tuned.dropout:g}, weight decay '
        f'{tuned.weight_decay:g}, hidden {HIDDEN}, learning rate {LR:g} (tuning.md, '
        f'{tuned.source}). Learned routes start from the paper\'s ({paper.alpha:g}, '
        f'{paper.beta:g}); the bilevel ones learn on the validation loss with Adam at '
        f'{COEFFICIENT_LR:g}, restarts after {PATIENCE} epochs without a lower one.')
    rep()
    rows = []
    if grid is not None:
        alphas = sorted({p[0] for p in grid.val})
        betas = sorted({p[1] for p in grid.val})
        rep(f'Grid route: mean validation ACC (%) over {len(grid.seeds)} splits; chosen '
            f'({grid.choice[0]:g}, {grid.choice[1]:g}); {grid.seconds:.0f} s for '
            f'{len(grid.val)} points x {len(grid.seeds)} splits.')
        rep()
        rep.table(['alpha \\ beta'] + [f'{b:g}' for b in betas],
                  [[f'{a:g}'] + [(f'**{grid.val[(a, b)]:.1f}**' if (a, b) == grid.choice
                                  else f'{grid.val[(a, b)]:.1f}') if (a, b) in grid.val
                                 else '-' for b in betas] for a in alphas])
        reference = {r['seed']: r['acc'] for r in grid.runs}
        rows.append(_row(f'grid choice ({grid.choice[0]:g}, {grid.choice[1]:g})', grid.runs,
                         None, grid.seconds))
    for route, runs in by_route.items():
        if route == 'grid' or not runs:
            continue
        what = route
        if 'alpha_last' in runs[0]:
            what += (f': alpha {_layers(runs, "alpha_last")}, beta {_layers(runs, "beta_last")}'
                     f' (layers 1, 2; at the best epoch alpha {_layers(runs, "alpha_best")}, '
                     f'beta {_layers(runs, "beta_best")})')
        elif route == 'fixed':
            what += f' at ({tuned.alpha:g}, {tuned.beta:g})'
        steps = {r['seed']: newton_steps(r) for r in runs if r.get('calibrated')}
        if len(set(steps.values())) > 1:  # the default changed from 10 to 30 Newton steps
            what += '; Newton steps of the calibrated loss: ' + ', '.join(
                f'{n} on splits {sorted(s for s in steps if steps[s] == n)}'
                for n in sorted(set(steps.values())))
        elif steps:
            what += f'; {next(iter(steps.values()))} Newton steps of the calibrated loss'
        paired = _paired(runs, reference) if grid is not None else None
        rows.append(_row(what, runs, paired, sum(r['seconds'] for r in runs)))
    rep.table(['route', 'splits', 'test ACC', 'test F1', 'ACC last epoch', 'val ACC',
               'best epoch (median)', 'cycles (mean)', '- grid choice (SE)', 'seconds',
               'ms/epoch'], rows)


def _row(what: str, runs: List[dict], paired: Optional[tuple], seconds: float) -> list:
    cycles = [r['cycles'] for r in runs if 'cycles' in r]
    return [what, len(runs), _mean_std([r['acc'] for r in runs]),
            _mean_std([r['f1'] for r in runs]), _mean_std([r['last_acc'] for r in runs]),
            _mean_std([r['val'] for r in runs]),
            f"{statistics.median(r['epoch'] for r in runs):g}",
            f'{statistics.mean(cycles):.1f}' if cycles else '-',
            (f'{paired[0]:+.1f} ({paired[1]:.1f})' + ('' if paired[2] == len(runs) else
                                                       f' on the {paired[2]} splits both ran')
             if paired else '-'), f'{seconds:.0f}',
            f"{1000 * sum(r['seconds'] for r in runs) / sum(r['epochs'] for r in runs):.0f}"]


def _per_dataset(values: Sequence[int], datasets: Sequence[str], name: str,
                 parser: argparse.ArgumentParser) -> Dict[str, int]:
    if len(values) == 1:
        return dict.fromkeys(datasets, values[0])
    if len(values) != len(datasets):
        parser.error(f'--{name} takes one value or one per dataset ({len(datasets)})')
    return dict(zip(datasets, values))


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(prog=f'python -m {MODULE}',
                                     description=__doc__.splitlines()[0])
    parser.add_argument('--datasets', nargs='+', default=DATASETS, choices=DATASETS)
    parser.add_argument('--seeds', nargs='+', type=positive_int, default=[SEEDS],
                        help='splits 0 .. SEEDS - 1: one value, or one per dataset '
                             '(default: %(default)s)')
    parser.add_argument('--epochs', nargs='+', type=positive_int, default=[EPOCHS],
                        help='one value, or one per dataset (default: %(default)s)')
    parser.add_argument('--routes', nargs='+', default=DEFAULT_ROUTES, choices=list(ROUTES))
    parser.add_argument('--grid-alphas', nargs='+', type=non_negative_float,
                        help="with --grid-betas: the route grid's points for every dataset "
                             "(default: tuning.md's grid of each dataset, GRIDS)")
    parser.add_argument('--grid-betas', nargs='+', type=non_negative_float)
    parser.add_argument('--device', default='cpu', help="e.g. 'cuda' (default: %(default)s)")
    parser.add_argument('--threads', type=positive_int, default=1,
                        help='torch threads (default: %(default)s)')
    parser.add_argument('--shard', nargs=2, type=int, metavar=('I', 'N'), default=(0, 1),
                        help='train runs I, I + N, I + 2N, ... of the plan (default: all)')
    parser.add_argument('--summary-only', action='store_true',
                        help='write the summary of the stored runs, train nothing')
    parser.add_argument('--cells', nargs='+', default=[CELLS],
                        help='JSON-lines files of runs: new runs go to the first, runs in any '
                             'are skipped and summarised (default: %(default)s)')
    parser.add_argument('--output', default=SUMMARY, help='the markdown summary')
    args = parser.parse_args(argv)
    seeds = _per_dataset(args.seeds, args.datasets, 'seeds', parser)
    epochs = _per_dataset(args.epochs, args.datasets, 'epochs', parser)
    if (args.grid_alphas is None) != (args.grid_betas is None):
        parser.error('--grid-alphas and --grid-betas go together')
    grids = ({d: list(itertools.product(args.grid_alphas, args.grid_betas))
              for d in args.datasets} if args.grid_alphas else GRIDS)
    index, count = args.shard
    if not 0 <= index < count:
        parser.error(f'--shard I N needs 0 <= I < N (got {index} {count})')
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        parser.error('--device cuda: no CUDA device is available')
    # Before any training: new runs go to the first --cells file as each ends, the
    # summary to --output at the end.
    if not args.summary_only:
        check_writable(parser, '--cells', args.cells[0], create=True)
    check_writable(parser, '--output', args.output, create=True)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    command = command_line(MODULE, argv)
    stores = [open_cells(path) for path in args.cells]
    try:  # before any training: the summary at the end reads them all
        merged_records(stores)
    except ValueError as error:
        parser.error(f'--cells: {error}')
    load_at_start = load_average()
    if not args.summary_only:
        runs = plan(args.datasets, seeds, epochs, args.routes, grids)[index::count]
        train_all(stores, runs, device, command)
    records = merged_records(stores)
    info = machine_info(args.threads)
    rep = Report()
    rep('# Learned (alpha, beta) against the validation grid search')
    rep()
    rep(f'Written by `{command}` (from the repository root); see the docstring of '
        '`benchmarks/learnable.py` for the protocol. Test ACC and macro-F1 in %, mean (std) '
        'over the splits, at each run\'s best validation epoch; "ACC last epoch" after the '
        'last one. Seconds are training times (each epoch: the training step(s) and an '
        'evaluation), summed over a route\'s runs.')
    rep()
    gpus = sorted({r['gpu'] for r in records if r.get('gpu')})
    loads = [float(r['load'].split()[0]) for r in records if r.get('load', 'n/a') != 'n/a']
    spread = f' {min(loads):.1f} to {max(loads):.1f}' if loads else ' n/a'
    rep(f"Machine of this command: {info['cpu']}, {info['cpu_count']} CPUs; "
        f"{args.threads} torch thread(s). Python {info['python']}, torch {info['torch']}, "
        f"torch_geometric {info['torch_geometric']}. GPU of the stored runs: "
        f"{', '.join(gpus) if gpus else 'none'}. Load average at the start of this command: "
        f'{load_at_start}; the 1-minute load average at the start of the stored runs:{spread}. '
        f'Date: {datetime.date.today().isoformat()}.')
    rep()
    commands = sorted({r['command'] for r in records})
    rep(f'{len(records)} runs stored in '
        + ', '.join(f'`{osp.relpath(s.path, REPO)}`' for s in stores) + ', made by: '
        + '; '.join(f'`{c}`' for c in commands) + '.')
    rep()
    summarize(records, rep)
    rep(f"Training time of all stored runs: {sum(r['seconds'] for r in records) / 60:.1f} min.")
    rep()
    rep.finish(start, args.output)


if __name__ == '__main__':
    main()
