r"""Regulariser coefficients learned on the validation loss, the network's
weights on the training loss: a first-order bilevel scheme for the learned
coefficients of :meth:`~torch_geometric_regcn.regularizers.Regularizer.learn`.

The coefficients of a regulariser (tsGCN's :math:`\alpha`, :math:`\beta`,
APPNP's :math:`\alpha`, ...) set how strongly a layer smooths. Trained on the
training loss with the weights, they follow what fits the few labelled
nodes, not what generalises; a validation grid picks them by what
generalises. The bilevel problem states the latter:

.. math::
    \min_{\theta}\ \mathcal{L}_{val}(\mathbf{W}^{*}(\theta), \theta), \qquad
    \mathbf{W}^{*}(\theta) = \operatorname*{arg\,min}_{\mathbf{W}}
    \mathcal{L}_{train}(\mathbf{W}, \theta).

:class:`BilevelStep` alternates its two levels: a weight step descends
:math:`\mathcal{L}_{train}` in the weights :math:`\mathbf{W}` alone, a
coefficient step descends :math:`\mathcal{L}_{val}` in the coefficients
:math:`\theta` alone, along the direct (first-order) hypergradient
:math:`\partial \mathcal{L}_{val} / \partial \theta` at the current weights;
the indirect term through :math:`\mathrm{d}\mathbf{W}^{*} / \mathrm{d}\theta`
is dropped. Through the solver :obj:`"cg"` this is the implicit gradient of
the solve, :math:`-\mathbf{G}^{\top} (\partial \mathbf{M} / \partial\theta)
\mathbf{H}` with :math:`\mathbf{G} = \mathbf{M}^{-1} \partial
\mathcal{L}_{val} / \partial \mathbf{H}`: a coefficient step costs one
backward pass and no weight gradient.

Two parts make the direct hypergradient measure what a validation grid
measures (``docs/learnable.md`` has the reasons and the runs):

- :func:`calibrated_cross_entropy`, the validation loss at its best
  temperature. A regulariser's propagation also scales its output (tsGCN's
  gain at the smoothest frequency is :math:`1 + \alpha + \beta`), and a
  network without biases is positively homogeneous, so at fixed weights a
  larger coefficient partly just sharpens the logits; the plain
  cross-entropy rewards that whenever the model is under-confident, a
  direction the weights could take as well and that no accuracy follows.
  Minimising over the temperature first removes it.
- :obj:`patience`: the weights return to their initial values (and their
  optimizer's state is cleared) once the validation loss has not improved
  for :obj:`patience` coefficient steps, while the coefficients keep their
  values. Each cycle is then a fresh training run at coefficients that
  moved on the validation loss, as each point of a grid is, and where the
  best validation epoch comes early (as on Cora without dropout; see
  ``docs/learnable.md``), the coefficients learned later still reach it.
"""
import math
from typing import Dict, List, Optional

import torch
from torch import Tensor
from torch.nn.parameter import is_lazy

from torch_geometric_regcn.regularizers.weight_decay import learned_coefficient_parameters
from torch_geometric_regcn.utils.validation import check_int, check_tensor, type_name


def _check_module(module: torch.nn.Module, argument: str = 'module') -> None:
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"'{argument}' must be a torch.nn.Module (got {type_name(module)})")


def _coefficients(module: torch.nn.Module) -> Dict[int, str]:
    r"""The raw parameters of the learned coefficients of :obj:`module`, by
    id, with their names in :obj:`module` (for the errors)."""
    raw = learned_coefficient_parameters(module)
    return {id(p): name for name, p in module.named_parameters() if id(p) in raw}


def coefficient_parameters(module: torch.nn.Module) -> List[torch.nn.Parameter]:
    r"""The raw parameters :obj:`raw_<name>` of every learned regulariser
    coefficient of :obj:`module` (:obj:`learn=` of
    :class:`~torch_geometric_regcn.RegularizerConv` and
    :class:`~torch_geometric_regcn.RegularizerGNN`, or
    :meth:`~torch_geometric_regcn.regularizers.Regularizer.learn`), each
    once, in the order of :meth:`~torch.nn.Module.parameters`: what the
    coefficient optimizer of :class:`BilevelStep` trains on the validation
    loss. Raises :class:`ValueError` where :obj:`module` learns no
    coefficient.

    Args:
        module (torch.nn.Module): The model.
    """
    _check_module(module)
    found = _coefficients(module)
    if not found:
        raise ValueError(
            f"'module' ({type(module).__name__}) has no learned regulariser coefficients, so "
            f"there is nothing to learn on the validation loss: build its layers with "
            f"learn=('alpha', 'beta') (RegularizerGNN or RegularizerConv, e.g. tsGCN) or call "
            f"regularizer.learn(...) first")
    return [p for p in module.parameters() if id(p) in found]


def weight_parameters(module: torch.nn.Module) -> List[torch.nn.Parameter]:
    r"""Every parameter of :obj:`module` but those of
    :func:`coefficient_parameters`, each once, in the order of
    :meth:`~torch.nn.Module.parameters` (frozen ones included, as there):
    what the weight optimizer of :class:`BilevelStep` trains on the training
    loss.

    Args:
        module (torch.nn.Module): The model.
    """
    _check_module(module)
    found = _coefficients(module)
    return [p for p in module.parameters() if id(p) not in found]


def calibrated_cross_entropy(input: Tensor, target: Tensor, iterations: int = 30) -> Tensor:
    r"""The cross-entropy of the logits :obj:`input` at the temperature that
    minimises it,

    .. math::
        \min_{\tau > 0} \ \mathrm{CE}(\tau \mathbf{Z}, \mathbf{y})
        = \mathrm{CE}(\tau^{*} \mathbf{Z}, \mathbf{y}),

    the validation loss of :class:`BilevelStep`'s coefficient steps: it
    scores how well the logits separate the classes, not how confident
    they are. :math:`\tau^{*}` is found by :obj:`iterations` Newton steps in
    :math:`\tau` (the loss is convex in it), in float64 on the detached
    logits, from :math:`\tau = 1`, each step limited to a factor of 10 up
    or down; it is then a constant, so the gradient is
    :math:`\tau^{*} \partial \mathrm{CE} / \partial \mathbf{Z}` at
    :math:`\tau^{*} \mathbf{Z}`, which is the gradient of the minimum itself
    (the derivative in :math:`\tau` vanishes there) once the steps have
    converged: Newton approaches a far minimum slowly from below (and from
    above, after a step clamped at a tenth), so nearly separable logits
    (:math:`\tau^{*}` between about 10 and :math:`10^3`) need more than 10
    steps, which the default covers, and logits of a tiny scale need more
    :obj:`iterations` still (or logits scaled up first). Where every node is
    classified correctly the infimum lies at :math:`\tau \to \infty`
    (:math:`\tau` grows with every step, the loss and its gradient shrink
    towards 0), and where the logits predict no better than chance, at
    :math:`\tau \to 0` (the loss tends to :math:`\log C`, its gradient to
    0). A class whose logit is :math:`-\infty` (masked) has probability 0
    at every temperature; NaN or :math:`+\infty` logits raise
    :class:`ValueError`. Cost: :math:`O(\text{iterations} \cdot N C)`, one
    synchronisation (the check of the targets' range and of the logits).

    Args:
        input (torch.Tensor): The logits :math:`\mathbf{Z}`, floating point.
        target (torch.Tensor): The class of each row, integer.
        iterations (int, optional): Newton steps. (default: :obj:`30`)

    Shapes:
        - **input:** :math:`(N, C)`
        - **target:** :math:`(N)`
        - **output:** scalar
    """
    return torch.nn.functional.cross_entropy(
        calibrated_temperature(input, target, iterations) * input, target.long())


def calibrated_temperature(input: Tensor, target: Tensor, iterations: int = 30) -> Tensor:
    r"""The temperature of the logits :obj:`input` that minimises their
    cross-entropy,

    .. math::
        \tau^{*} = \operatorname*{arg\,min}_{\tau > 0}
        \ \mathrm{CE}(\tau \mathbf{Z}, \mathbf{y}),

    that of :func:`calibrated_cross_entropy` (see there for the Newton
    steps, their start and limits, and the ends :math:`\tau \to 0` and
    :math:`\tau \to \infty`): temperature scaling's calibration of the
    logits on labelled rows. A 0-dim tensor in the dtype of :obj:`input`,
    detached; 1 where the steps overflow. Arguments, shapes and cost are
    :func:`calibrated_cross_entropy`'s.
    """
    input = check_tensor('input', input)
    target = check_tensor('target', target)
    iterations = check_int('iterations', iterations, minimum=0)
    if input.dim() != 2 or not input.is_floating_point():
        raise ValueError(f"'input' must be floating-point logits of shape [N, C] (got "
                         f"{input.dtype} of shape {tuple(input.shape)})")
    if (target.shape != input.shape[:1] or target.is_floating_point() or target.is_complex()
            or target.dtype == torch.bool):  # a mask passed for the labels
        raise ValueError(f"'target' must hold one integer class per row of 'input', shape "
                         f"[{input.size(0)}] (got {target.dtype} of shape "
                         f"{tuple(target.shape)})")
    if input.size(0) == 0:
        raise ValueError("'input' has no rows: the validation mask selects no node, so there "
                         "is no loss to learn the coefficients on")
    z = input.detach().double()
    masked = z.isneginf()  # a class ruled out: probability 0 at every temperature
    in_range = (target >= 0) & (target < input.size(1))
    if not bool(in_range.all() & ~(z.isnan() | z.isposinf()).any()):  # one synchronisation
        if not bool(in_range.all()):
            raise ValueError(f"'target' must hold classes in [0, {input.size(1)}) (an ignored "
                             f"label such as -100 included): select the labelled rows first")
        raise ValueError("'input' holds NaN or +inf logits, which no temperature calibrates "
                         "(check the model's output)")
    zy = z.gather(1, target.view(-1, 1).long()).squeeze(1)
    tau = torch.ones((), dtype=z.dtype, device=z.device)
    for _ in range(iterations):
        p = torch.softmax(tau * z, dim=1)
        # A class of logit -inf (masked) has p = 0 and adds nothing: not 0 * inf = NaN.
        pz = torch.where(masked, 0.0, p * z)
        mean = pz.sum(1)
        slope = (mean - zy).mean()  # d CE / d tau
        curvature = (torch.where(masked, 0.0, pz * z).sum(1) - mean * mean).mean()  # >= 0
        step = slope / curvature.clamp_min(torch.finfo(z.dtype).tiny)
        tau = (tau - step).clamp(tau / 10, tau * 10)
    return torch.where(torch.isfinite(tau), tau, torch.ones_like(tau)).to(input.dtype)


class BilevelStep:
    r"""Learns a model's regulariser coefficients on the validation loss and
    its other parameters on the training loss, by alternating first-order
    steps of the bilevel problem of
    :mod:`~torch_geometric_regcn.regularizers.bilevel`.

    The rule: :meth:`weight_step` descends the training loss in the weights
    alone, with :obj:`weight_optimizer`; :meth:`coefficient_step` descends
    the validation loss in the coefficients alone, with
    :obj:`coefficient_optimizer`. Each backward pass computes the gradients
    of its own parameters only (:obj:`inputs=` of
    :func:`torch.autograd.backward`), so the training loss never moves a
    coefficient and the validation loss never moves a weight. Call them in
    turn, once each per epoch, the validation loss from
    :func:`calibrated_cross_entropy` on the logits of :obj:`model.eval()`
    (no dropout), as the model is scored; those logits, detached, can score
    the epoch too. Select the epoch on validation as usual: the validation
    nodes train a few numbers per layer, not the weights.

    With :obj:`patience`, the weights restart (:meth:`rewind`) after
    :obj:`patience` coefficient steps without a validation loss below the
    lowest of the current cycle; the coefficients carry on. Each cycle is a
    training run from the same initial weights at the coefficients learned
    so far, so keep the best validation epoch over all of them.

    A coefficient step moves a raw parameter by about the coefficient
    optimizer's learning rate (Adam), and a positive coefficient is the
    softplus of it, so above 2 it travels about one learning rate per step:
    with :obj:`lr=0.05`, from 1 to 5 in about 90 steps. Keep weight decay off
    the coefficients (the warning of
    :mod:`~torch_geometric_regcn.regularizers.weight_decay` covers
    :obj:`coefficient_optimizer` too).

    Cost per epoch, over training the weights alone: the backward pass of the
    validation loss through every solve (for :obj:`"cg"`, one more solve per
    layer and a product with :math:`\mathbf{M}`); the forward pass is the
    evaluation's. One synchronisation per step: a step whose loss (or, for
    the coefficients, their gradient) is NaN or infinite raises
    :class:`ValueError` before the optimizer moves anything, so the work so
    far is kept. With :obj:`patience`, a copy of the weights.

    Args:
        model (torch.nn.Module): The model, with learned coefficients (see
            :func:`coefficient_parameters`).
        weight_optimizer (torch.optim.Optimizer): The optimizer of the
            weights, built from :func:`weight_parameters` (and the
            parameters of any module outside :obj:`model` that the training
            loss trains, such as a head): it must hold no coefficient. The
            weight step trains what it holds, and a restart resets that.
        coefficient_optimizer (torch.optim.Optimizer): The optimizer of the
            coefficients, built from :func:`coefficient_parameters`: it must
            hold all of them and nothing else.
        patience (int, optional): Coefficient steps without improvement of
            the validation loss after which the weights restart; :obj:`None`
            never restarts them. (default: :obj:`None`)

    Example:
        .. code-block:: python

            import torch
            import torch.nn.functional as F
            from torch_geometric_regcn import RegularizerGNN, SemanticGraph
            from torch_geometric_regcn.datasets import contextual_sbm, paper_split
            from torch_geometric_regcn.regularizers import (
                BilevelStep, calibrated_cross_entropy, coefficient_parameters,
                weight_parameters)

            data = contextual_sbm(num_nodes=600, num_classes=4, num_features=16)
            data = paper_split(SemanticGraph(k=5, progress=False)(data), num_val=200,
                               num_test=300, seed=0)
            model = RegularizerGNN(16, 32, 4, regularizer='tsgcn', solver='cg',
                                   alpha=1.0, beta=0.2, learn=('alpha', 'beta'),
                                   cached=True, bias=False)
            step = BilevelStep(
                model,
                torch.optim.Adam(weight_parameters(model), lr=0.01, weight_decay=5e-4),
                torch.optim.Adam(coefficient_parameters(model), lr=0.05),
                patience=10)

            def forward():
                return model(data.x, data.edge_index,
                             semantic_edge_index=data.semantic_edge_index)

            for epoch in range(30):
                model.train()
                out = forward()
                step.weight_step(F.cross_entropy(out[data.train_mask],
                                                 data.y[data.train_mask]))
                model.eval()
                out = forward()  # scores the epoch, detached
                step.coefficient_step(calibrated_cross_entropy(out[data.val_mask],
                                                               data.y[data.val_mask]))
            model.convs[0].regularizer.alpha  # learned on the validation loss
    """
    def __init__(self, model: torch.nn.Module, weight_optimizer: torch.optim.Optimizer,
                 coefficient_optimizer: torch.optim.Optimizer,
                 patience: Optional[int] = None) -> None:
        _check_module(model, 'model')
        for argument, optimizer in (('weight_optimizer', weight_optimizer),
                                    ('coefficient_optimizer', coefficient_optimizer)):
            if not isinstance(optimizer, torch.optim.Optimizer):
                raise TypeError(f"'{argument}' must be a torch.optim.Optimizer (got "
                                f"{type_name(optimizer)})")
        if weight_optimizer is coefficient_optimizer:
            raise ValueError("'weight_optimizer' and 'coefficient_optimizer' are the same "
                             "optimizer: build one from weight_parameters(model) and the other "
                             "from coefficient_parameters(model)")
        if patience is not None:
            patience = check_int('patience', patience, minimum=1)
        coefficients = coefficient_parameters(model)  # raises where there is none
        names = _coefficients(model)
        held = _held(weight_optimizer)
        wrong = [names[i] for i in held if i in names]
        if wrong:
            raise ValueError(
                f"'weight_optimizer' holds the raw coefficient parameter(s) {wrong}, which "
                f"the training loss would then move: build it from weight_parameters(model)")
        held = _held(coefficient_optimizer)
        extra = [i for i in held if i not in names]
        if extra:
            named = {id(p): n for n, p in model.named_parameters()}
            listed = [named.get(i, f'a {tuple(held[i].shape)} tensor outside the model')
                      for i in extra]
            raise ValueError(
                f"'coefficient_optimizer' holds {len(listed)} parameter(s) that are not "
                f"learned regulariser coefficients of 'model' ({', '.join(listed[:5])}"
                f"{', ...' if len(listed) > 5 else ''}), which the validation loss would then "
                f"train: build it from coefficient_parameters(model)")
        missing = [names[id(p)] for p in coefficients if id(p) not in held]
        if missing:
            raise ValueError(
                f"'coefficient_optimizer' lacks the raw coefficient parameter(s) {missing}, "
                f"which would then never be trained: build it from "
                f"coefficient_parameters(model)")
        self.model = model
        self.weight_optimizer = weight_optimizer
        self.coefficient_optimizer = coefficient_optimizer
        self.patience = patience
        #: the training cycles begun: 1, plus one per :meth:`rewind`
        self.cycles = 1
        # What the weight optimizer steps (a head outside 'model' included), and what
        # requires grad is read at each step: a weight frozen or unfrozen later is followed.
        weights = list(_held(weight_optimizer).values())
        if patience is not None and any(is_lazy(p) for p in weights):
            raise ValueError("'weight_optimizer' holds parameters that are not initialised "
                             "yet (in_channels=-1), so their initial values cannot be kept for "
                             "the restarts of 'patience': run one forward pass before building "
                             "the optimizer and BilevelStep")
        self._weights = weights
        self._coefficients = coefficients
        self._held = (set(_held(weight_optimizer)), set(_held(coefficient_optimizer)))
        self._initial = ([p.detach().clone() for p in weights] if patience is not None
                         else None)
        self._best, self._since = math.inf, 0
        self._split = {id(p) for p in coefficients}

    def _check_split(self) -> None:
        r"""Raises where the model's learned coefficients are no longer those
        this object was made for (a coefficient learned, or a layer added,
        since): the new ones would never be trained, or trained on the
        training loss. One pass over the parameters; no synchronisation."""
        now = set(learned_coefficient_parameters(self.model))  # by id
        if now != self._split:
            raise ValueError(f"'model' learns {len(now)} coefficient parameter(s) now, "
                             f"{len(now & self._split)} of them among the "
                             f"{len(self._split)} BilevelStep was made with: build a new "
                             f"BilevelStep (and its optimizers) after changing what the "
                             f"model learns")
        for name, optimizer, made in zip(('weight_optimizer', 'coefficient_optimizer'),
                                         (self.weight_optimizer, self.coefficient_optimizer),
                                         self._held):
            held = set(_held(optimizer))
            if held != made:  # e.g. add_param_group(): the steps would not train those
                raise ValueError(f"'{name}' holds {len(held)} parameter(s) now, "
                                 f"{len(held & made)} of them among the {len(made)} "
                                 f"BilevelStep was made with: build a new BilevelStep after "
                                 f"changing what its optimizers hold (add_param_group())")

    def weight_step(self, loss: Tensor) -> Tensor:
        r"""One step of the weights on :obj:`loss`, the training loss (a
        scalar computed by :obj:`model` with autograd on): zeroes the
        gradients of what :obj:`weight_optimizer` holds, backpropagates into
        those of them that require gradients now, alone, and steps
        :obj:`weight_optimizer`. Returns :obj:`loss`, detached."""
        self._check_split()
        params = [p for p in self._weights if p.requires_grad]
        _backward(loss, params, self.weight_optimizer)
        _check_finite(loss, [], 'training', 'weights', self.weight_optimizer)
        self.weight_optimizer.step()
        return loss.detach()

    def coefficient_step(self, loss: Tensor) -> Tensor:
        r"""One step of the coefficients on :obj:`loss`, the validation loss
        (a scalar computed by :obj:`model` with autograd on, e.g. by
        :func:`calibrated_cross_entropy`): zeroes their gradients,
        backpropagates into them alone (the direct hypergradient) and steps
        :obj:`coefficient_optimizer`; then, with :obj:`patience`, restarts
        the weights (:meth:`rewind`) where the loss has not improved on the
        cycle's lowest for :obj:`patience` steps. Returns :obj:`loss`,
        detached."""
        self._check_split()
        params = [p for p in self._coefficients if p.requires_grad]
        _backward(loss, params, self.coefficient_optimizer)
        _check_finite(loss, params, 'validation', 'coefficients', self.coefficient_optimizer)
        self.coefficient_optimizer.step()
        loss = loss.detach()
        if self.patience is not None:
            value = float(loss)
            if value < self._best:
                self._best, self._since = value, 0
            else:
                self._since += 1
                if self._since >= self.patience:
                    self.rewind()
        return loss

    def rewind(self) -> None:
        r"""Restarts the weights: sets the parameters of
        :obj:`weight_optimizer` to their values when this object was made
        and clears the state of :obj:`weight_optimizer` (Adam's
        moments and step count), so that training goes on as a fresh run
        from the same initialisation, at the coefficients learned so far,
        which are left as they are. Buffers (e.g. BatchNorm's running
        statistics) are not restarted. Needs :obj:`patience` (which keeps the
        initial weights)."""
        if self._initial is None:
            raise RuntimeError("BilevelStep.rewind() needs the initial weights, which are kept "
                               "only with 'patience': pass patience=<steps> to BilevelStep")
        with torch.no_grad():
            for param, value in zip(self._weights, self._initial):
                param.copy_(value)
        self.weight_optimizer.state.clear()
        self.cycles += 1
        self._best, self._since = math.inf, 0

    def __repr__(self) -> str:
        return (f'{type(self).__name__}({len(self._weights)} weight tensor(s) on the training '
                f'loss, {len(self._coefficients)} coefficient tensor(s) on the validation '
                f'loss, patience={self.patience})')


def _held(optimizer: torch.optim.Optimizer) -> Dict[int, Tensor]:
    return {id(p): p for group in optimizer.param_groups for p in group['params']}


def _check_finite(loss: Tensor, params: List[Tensor], which: str, what: str,
                  optimizer: torch.optim.Optimizer) -> None:
    r"""Raises, before :obj:`optimizer` steps, where :obj:`loss` or a
    gradient of :obj:`params` is NaN or infinite (one synchronisation): the
    step would make the parameters and the optimizer's moments NaN, and the
    work so far would be lost. The gradients are cleared, nothing else moves."""
    values = [loss.detach().reshape(1)] + [p.grad.detach().reshape(-1) for p in params
                                           if p.grad is not None]
    if bool(torch.stack([v.isfinite().all() for v in values]).all()):
        return
    optimizer.zero_grad(set_to_none=True)
    value = float(loss.detach())
    cause = (f"The {which} loss is {value}" if not math.isfinite(value) else
             f"The {which} loss is finite but its gradient in the {what} is not")
    raise ValueError(f"{cause}: the {what} cannot learn on it and were left as they were "
                     f"(check the logits, the {which} mask and the input)")


def _backward(loss: Tensor, params: List[Tensor], optimizer: torch.optim.Optimizer) -> None:
    loss = check_tensor('loss', loss)
    if loss.numel() != 1 or not loss.requires_grad:
        raise ValueError(f"'loss' must be a scalar computed by the model with autograd on (got "
                         f"shape {tuple(loss.shape)}, requires_grad={loss.requires_grad}): "
                         f"compute it outside torch.no_grad()")
    optimizer.zero_grad(set_to_none=True)
    if params:
        torch.autograd.backward(loss.reshape(()), inputs=params)
