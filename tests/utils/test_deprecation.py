r"""Old import paths and deprecated names: :mod:`torch_geometric_regcn.utils.deprecation`."""
import warnings

import pytest

from torch_geometric_regcn.linalg import eigensolver
from torch_geometric_regcn.utils.deprecation import REMOVED_IN, moved, warn_deprecated


def test_moved_serves_the_new_name_and_warns_with_both_paths():
    getattr_ = moved('old.module', {'OLD': 'torch_geometric_regcn.linalg.eigensolver:'
                                           'EIGENSOLVER_METHODS'})
    with pytest.warns(DeprecationWarning) as record:
        value = getattr_('OLD')
    assert value is eigensolver.EIGENSOLVER_METHODS
    assert len(record) == 1
    message = str(record[0].message)
    assert "'old.module.OLD' moved to 'torch_geometric_regcn.linalg.eigensolver." \
           "EIGENSOLVER_METHODS'" in message
    assert REMOVED_IN in message
    assert record[0].filename == __file__  # blamed on the caller


def test_moved_raises_attribute_error_for_unknown_names():
    getattr_ = moved('old.module', {'OLD': 'os:sep'})
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # an unknown name warns nothing
        with pytest.raises(AttributeError, match="module 'old.module' has no attribute 'NEW'"):
            getattr_('NEW')


def test_a_module_using_moved_keeps_its_old_name():
    with pytest.warns(DeprecationWarning, match='EIGENSOLVER_METHODS'):
        assert eigensolver.METHODS is eigensolver.EIGENSOLVER_METHODS
    with pytest.raises(AttributeError):
        eigensolver.NO_SUCH_NAME  # noqa: B018


def test_warn_deprecated_appends_the_release_and_blames_the_caller():
    def deprecated_api():
        warn_deprecated("'f(x=...)' is deprecated; use 'f(y=...)'")

    with pytest.warns(DeprecationWarning) as record:
        deprecated_api()
    assert str(record[0].message) == (f"'f(x=...)' is deprecated; use 'f(y=...)'; it will be "
                                      f"removed in {REMOVED_IN}")
    assert record[0].filename == __file__
