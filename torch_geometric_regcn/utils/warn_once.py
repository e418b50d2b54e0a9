r"""Warnings given once per object (a layer, an optimizer), not once per call,
and the frame a warning names: the user's, outside the libraries."""
import os
import sys
import warnings
import weakref
from types import FrameType
from typing import Hashable, Optional, Set, Tuple, Type

import torch
import torch_geometric

from torch_geometric_regcn.utils.compat import compiler_disable

#: The folders of the packages whose frames a warning skips (see
#: :func:`outside_stacklevel`): this one, PyG and PyTorch.
_LIBRARIES = tuple(os.path.join(os.path.dirname(os.path.abspath(path)), '') for path in (
    os.path.dirname(os.path.abspath(__file__)), torch_geometric.__file__, torch.__file__))

#: PyTorch's folder: the frames of :func:`torch.compiler.disable`'s wrapper.
_TORCH = _LIBRARIES[2]

#: The keys each owner has warned about, for the owner's lifetime: kept
#: beside it, weakly, so that nothing is added to its state (its pickle,
#: :meth:`~torch.nn.Module.state_dict` and copies are as before) and it is
#: freed as usual.
_WARNED: 'weakref.WeakKeyDictionary[object, Set[Hashable]]' = weakref.WeakKeyDictionary()


@compiler_disable(reason="the library's once-per-object warnings run eagerly: each is given "
                  "once per layer or optimizer, naming the caller's line")
def warn_once(owner: object, key: Hashable, message: str,
              category: Type[Warning] = UserWarning,
              stacklevel: Optional[int] = None) -> bool:
    r"""Issues :obj:`message` (as :func:`warnings.warn`) the first time
    :obj:`owner` warns about :obj:`key`, and returns whether it did.

    The rule: each distinct warning once per object, for the object's
    lifetime. Two objects each warn once; a copy or an unpickled object is
    another object, and warns once of its own; nothing resets the record
    (a warning about how an object is used does not depend on its
    parameters, so :meth:`reset_parameters` keeps it). Python's warning
    filters then apply as usual: :obj:`"ignore"` silences (the warning
    counts as given), :obj:`"error"` raises, on every call. Under
    :func:`torch.compile` it runs eagerly (a graph break; an error with
    :obj:`fullgraph=True`), as its record is Python state. Meant for
    warnings whose text is the same on every call; one that states a value
    measured in the call (a solver's residual) is given on every call
    instead.

    Args:
        owner (object): The object that warns, hashable by identity and
            weakly referenceable (a :class:`torch.nn.Module`, an optimizer).
            Its record goes with it when it is freed.
        key (Hashable): What the warning is about, e.g. :obj:`"semantic_knn"`.
        message (str): The warning text.
        category (type, optional): The warning class. (default: :class:`UserWarning`)
        stacklevel (int, optional): As in :func:`warnings.warn`, counted from
            the caller of this function, or :obj:`None` for the first frame
            outside this package, PyG and PyTorch (:func:`outside_stacklevel`:
            the user's line). (default: :obj:`None`)

    Cost: one dictionary and one set look-up per call; the stack is walked
    only when the warning is given.
    """
    warned = _WARNED.get(owner)
    if warned is None:
        warned = _WARNED.setdefault(owner, set())
    if key in warned:
        return False
    if stacklevel is None:
        level = outside_stacklevel()
    else:  # from the caller, past the frames of torch.compile's disable wrapper
        level = _levels_within(_TORCH, sys._getframe(1), stacklevel + 1)
    warnings.warn(message, category, stacklevel=level)
    warned.add(key)  # after: a warning that a filter turned into an error raises again
    return True


def outside_stacklevel() -> int:
    r"""The :obj:`stacklevel` of a :func:`warnings.warn` in the caller that
    names the first frame outside :data:`_LIBRARIES` (:obj:`O(depth)`)."""
    return _levels_within(_LIBRARIES, sys._getframe(1), 1)


def _levels_within(folders: Tuple[str, ...], frame: FrameType, level: int) -> int:
    r""":obj:`level` plus one per frame from :obj:`frame` outwards whose file
    lies in :obj:`folders`, up to the first that does not."""
    while frame.f_back is not None and frame.f_code.co_filename.startswith(folders):
        frame, level = frame.f_back, level + 1
    return level
