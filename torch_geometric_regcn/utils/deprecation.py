r"""Deprecated names: old import paths of moved names (:func:`moved`) and
deprecated attributes (:func:`warn_deprecated`), all served with a
:class:`DeprecationWarning` that names the release :obj:`REMOVED_IN`."""
import importlib
import warnings
from typing import Any, Callable, Dict

#: The release that drops the old paths and the deprecated names.
REMOVED_IN = '0.3.0'


def warn_deprecated(message: str, stacklevel: int = 2) -> None:
    r"""Warns with :obj:`message` (what is deprecated and what replaces it)
    followed by the release that removes it, :obj:`REMOVED_IN`;
    :obj:`stacklevel` as in :func:`warnings.warn`, counted from the caller."""
    warnings.warn(f"{message}; it will be removed in {REMOVED_IN}", DeprecationWarning,
                  stacklevel=stacklevel + 1)


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
