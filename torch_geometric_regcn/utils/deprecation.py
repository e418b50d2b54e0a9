r"""Old import paths of moved names, served with a :class:`DeprecationWarning`."""
import importlib
import warnings
from typing import Any, Callable, Dict

#: The release that drops the old paths.
REMOVED_IN = '0.3.0'


def moved(module: str, names: Dict[str, str]) -> Callable[[str], Any]:
    r"""A module-level :obj:`__getattr__` for :obj:`module` that returns each
    moved name from its new home (:obj:`names` maps the old name to
    :obj:`"package.module:name"`) and warns once per call site."""
    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module '{module}' has no attribute '{name}'")
        target, _, attribute = names[name].partition(':')
        warnings.warn(f"'{module}.{name}' moved to '{target}.{attribute}'; the old path "
                      f"will be removed in {REMOVED_IN}", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(target), attribute)

    return __getattr__
