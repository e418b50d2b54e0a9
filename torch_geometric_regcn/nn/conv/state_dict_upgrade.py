r"""Reading checkpoints of :class:`~torch_geometric_regcn.RegularizerConv`
saved by release 0.1."""
from typing import Any, Dict

import torch


def upgrade_0_1_state_dict(module: torch.nn.Module, state_dict: Dict[str, Any], prefix: str,
                           *args: Any) -> None:
    r"""A load-state-dict pre-hook (register it with :obj:`with_module=True`)
    that turns a 0.1 checkpoint of a
    :class:`~torch_geometric_regcn.RegularizerConv` into today's layout, in
    place: DAGNN's gate was the layer's :obj:`extra` submodule (now
    :obj:`regularizer.gate`), and the coefficients were not saved (the layer
    keeps its own: :obj:`regularizer._extra_state` is filled from them).
    Today's checkpoints pass unchanged."""
    state_dict.setdefault(prefix + 'regularizer._extra_state',
                          module.regularizer.get_extra_state())
    for key in [key for key in state_dict if key.startswith(prefix + 'extra.')]:
        state_dict[prefix + 'regularizer.gate.' + key[len(prefix + 'extra.'):]] = \
            state_dict.pop(key)
