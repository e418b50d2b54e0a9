r"""Learned regulariser coefficients and weight decay: the parameter groups
that keep them out of it (:func:`param_groups`), and the warning when an
optimizer decays them.

Weight decay pulls a learned coefficient's raw parameter :obj:`raw_<name>`
towards 0, that is a positive coefficient towards :math:`\mathrm{softplus}(0)
= \ln 2`, one in :math:`(0, 1)` towards :math:`1/2`, one in
:math:`(l, \infty)` towards :math:`l + \ln 2` and an unconstrained one
(a polynomial's :math:`\gamma_k`) towards 0, whatever the data
say (see ``docs/learnable.md``). The coefficients belong in a parameter
group of their own with :obj:`weight_decay=0`.

How it is found: every :class:`~torch_geometric_regcn.regularizers.Regularizer`
with learned coefficients is marked here (weakly: by :meth:`~Regularizer.learn`
and when one is copied or unpickled), and the first marking registers one
global optimizer step pre-hook
(:func:`torch.optim.optimizer.register_optimizer_step_pre_hook`). Before an
optimizer's first step, and again after :meth:`~torch.optim.Optimizer.add_param_group`,
the hook compares its parameter groups with the raw parameters of the
marked regularisers that are alive; where a group with a non-zero
:obj:`weight_decay` holds some, a :class:`UserWarning` names them and the
fix, once per optimizer. Other steps cost one weak dictionary look-up. The
hook changes nothing (no numbers, no state of the optimizer or the model,
no strong reference to either), so pickles and copies of both are as
before.
"""
import collections
import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_pre_hook

from torch_geometric_regcn.utils.compat import compiler_disable
from torch_geometric_regcn.utils.validation import check_real, type_name
from torch_geometric_regcn.utils.warn_once import warn_once

#: The regularisers with learned coefficients (weakly held).
_LEARNED: 'weakref.WeakSet[torch.nn.Module]' = weakref.WeakSet()
#: For each optimizer checked, the number of its parameter groups then.
_CHECKED: 'weakref.WeakKeyDictionary[torch.optim.Optimizer, int]' = weakref.WeakKeyDictionary()
_HOOK: Optional[Any] = None  # the hook's handle, once registered


def watch(regularizer: torch.nn.Module) -> None:
    r"""Marks :obj:`regularizer` as one whose learned coefficients no
    optimizer should decay, and registers the step pre-hook on the first
    call. A regulariser without learned coefficients is not marked, nor one
    that is not hashable (a subclass that defines :meth:`__eq__` alone)."""
    global _HOOK
    if not getattr(regularizer, 'learned', ()):
        return
    try:
        _LEARNED.add(regularizer)
    except TypeError:  # unhashable: never checked, as before this warning existed
        return
    if _HOOK is None:
        _HOOK = register_optimizer_step_pre_hook(_step_pre_hook)


def _step_pre_hook(optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    try:
        checked = _CHECKED.get(optimizer)
    except TypeError:  # an optimizer without weak references (__slots__): not checked
        return None
    if checked != len(optimizer.param_groups):  # not on later steps
        _check(optimizer)
    return None  # a pre-hook that returns None leaves the step's arguments as they are


@compiler_disable(reason="the weight decay check of learned regulariser coefficients runs "
                  "eagerly, before an optimizer's first step")
def _check(optimizer: torch.optim.Optimizer) -> None:
    decayed = decayed_coefficients(optimizer)
    if decayed:
        counts = collections.Counter(name for name, _ in decayed)
        names = ', '.join(name if count == 1 else f'{count} x {name}'
                          for name, count in counts.items())
        decays = ', '.join(f'{d:g}' for d in dict.fromkeys(d for _, d in decayed))
        warn_once(optimizer, 'weight_decay', (
            f"{type(optimizer).__name__} applies weight_decay={decays} to {len(decayed)} raw "
            f"parameter(s) of learned regulariser coefficients ({names}): it pulls each "
            f"towards 0, that is a positive coefficient towards softplus(0) = ln 2 = 0.69, "
            f"one in (0, 1) towards 0.5 and an unconstrained one towards 0, whatever the data "
            f"say. Give them a parameter group "
            f"with weight_decay=0: {type(optimizer).__name__}("
            f"torch_geometric_regcn.regularizers.param_groups(model, weight_decay="
            f"{decays if ',' not in decays else '<your decay>'}), ...)"),
            UserWarning, stacklevel=None)
    # Checked once the warning is out: under warnings set to "error" every
    # step raises, as warn_once does, instead of the first alone.
    _CHECKED[optimizer] = len(optimizer.param_groups)


def decayed_coefficients(optimizer: torch.optim.Optimizer) -> List[Tuple[str, float]]:
    r"""The raw parameters of learned coefficients that :obj:`optimizer`
    decays, as pairs of a name and the group's :obj:`weight_decay`. The name
    is the one the optimizer was given (:obj:`named_parameters()`, where
    torch keeps it) or :obj:`"<Regulariser>.raw_<name>"`. Only
    regularisers that are alive and marked by :func:`watch` count.
    Cost: :math:`O(P)` for :math:`P` parameters of the optimizer."""
    coefficients: Dict[int, str] = {}
    for regularizer in list(_LEARNED):
        for name, raw in zip(regularizer.learned, regularizer.learned_parameters()):
            coefficients[id(raw)] = f'{type(regularizer).__name__}.raw_{name}'
    found: List[Tuple[str, float]] = []
    if not coefficients:
        return found
    for group in optimizer.param_groups:
        decay = group.get('weight_decay', 0.0)
        if not decay:
            continue
        names = group.get('param_names') or [None] * len(group['params'])
        for param, given in zip(group['params'], names):
            # Both are alive here, so equal ids are the same parameter.
            name = coefficients.get(id(param))
            if name is not None:
                found.append((given or name, float(decay)))
    return found


def learned_coefficient_parameters(module: torch.nn.Module) -> Dict[int, Tensor]:
    r"""The raw parameters of every learned regulariser coefficient in
    :obj:`module`, by :obj:`id`, each once, in module order: the one search
    that :func:`param_groups` and :mod:`~torch_geometric_regcn.regularizers.bilevel`
    share."""
    from torch_geometric_regcn.regularizers.base import Regularizer
    return {id(p): p for m in module.modules() if isinstance(m, Regularizer)
            for p in m.learned_parameters()}


def param_groups(module: torch.nn.Module, weight_decay: float) -> List[Dict[str, Any]]:
    r"""The parameters of :obj:`module` as an optimizer's parameter groups:
    every parameter with :obj:`weight_decay`, except the raw parameters of
    learned regulariser coefficients (:obj:`learn=` of
    :class:`~torch_geometric_regcn.RegularizerConv` and
    :class:`~torch_geometric_regcn.RegularizerGNN`), which get a group of
    their own without it. Each parameter appears once (shared ones too); an
    empty group is left out. Frozen parameters (:obj:`requires_grad=False`)
    are included, as in :meth:`~torch.nn.Module.parameters`; optimizers skip
    them. Other options (:obj:`lr`, ...) go to the optimizer as usual, for
    both groups.

    Args:
        module (torch.nn.Module): The model.
        weight_decay (float): The weight decay of the other parameters.

    Example:
        .. code-block:: python

            import torch
            from torch_geometric_regcn import RegularizerGNN
            from torch_geometric_regcn.regularizers import param_groups

            model = RegularizerGNN(16, 32, 4, regularizer='appnp', K=10, alpha=0.1,
                                   solver='cg', learn=('alpha',))
            optimizer = torch.optim.Adam(param_groups(model, weight_decay=5e-4), lr=0.01)
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"'module' must be a torch.nn.Module (got {type_name(module)})")
    weight_decay = check_real('weight_decay', weight_decay, low=0.0)
    coefficients = learned_coefficient_parameters(module)
    rest = [p for p in module.parameters() if id(p) not in coefficients]
    groups = [{'params': rest, 'weight_decay': weight_decay},
              {'params': list(coefficients.values()), 'weight_decay': 0.0}]
    return [group for group in groups if group['params']]
