r"""What differs between torch versions: the declared floor is torch 2.3, and
these helpers also keep older releases importable."""
import inspect
from typing import Callable, Optional, TypeVar

import torch

F = TypeVar('F', bound=Callable)


def _find_is_compiling() -> Optional[Callable[[], bool]]:
    r"""torch's own test: :obj:`torch.compiler.is_compiling` (torch 2.3 and
    later), else :obj:`torch._dynamo.is_compiling` (torch 2.1 and 2.2), else
    :obj:`None`."""
    found = getattr(getattr(torch, 'compiler', None), 'is_compiling', None)
    if found is None:
        try:
            import torch._dynamo as dynamo
        except ImportError:  # pragma: no cover - a torch built without dynamo
            return None
        found = getattr(dynamo, 'is_compiling', None)
    return found


_IS_COMPILING = _find_is_compiling()


def is_compiling() -> bool:
    r"""Whether the caller is being traced by :func:`torch.compile` (or
    :func:`torch.export`): :func:`torch.compiler.is_compiling` where torch has
    it (2.3 and later), :obj:`torch._dynamo.is_compiling` before, and
    :obj:`False` where neither exists."""
    return False if _IS_COMPILING is None else _IS_COMPILING()


def _disable_takes_reason() -> bool:
    try:
        return 'reason' in inspect.signature(torch.compiler.disable).parameters
    except (TypeError, ValueError):  # pragma: no cover - no signature to read
        return False


def compiler_disable(reason: str) -> Callable[[F], F]:
    r"""A decorator that keeps :func:`torch.compile` out of a function: it
    runs eagerly, a graph break in a compiled caller, and an error under
    :obj:`fullgraph=True`, which states :obj:`reason` where
    :func:`torch.compiler.disable` takes one (recent torch). Autograd
    records it as usual."""
    def decorate(fn: F) -> F:
        if _disable_takes_reason():
            return torch.compiler.disable(fn, reason=reason)
        return torch.compiler.disable(fn)
    return decorate


_IS_AUTOCAST_ENABLED = torch.is_autocast_enabled


def autocast_enabled(device_type: str) -> bool:
    r"""Whether :func:`torch.autocast` is on for :obj:`device_type`:
    :obj:`torch.is_autocast_enabled(device_type)` (torch 2.4 and later),
    else torch 2.3's calls, which take no argument (CUDA's, and the CPU's
    own)."""
    try:
        return _IS_AUTOCAST_ENABLED(device_type)
    except TypeError:  # torch 2.3
        if device_type == 'cpu':
            return torch.is_autocast_cpu_enabled()
        return _IS_AUTOCAST_ENABLED()
