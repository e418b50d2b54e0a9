r"""The shared argument checks: each names the argument, the rule and the fix."""
import numpy as np
import pytest
import torch

from torch_geometric_regcn.utils.validation import (
    check_choice,
    check_index,
    check_stopping_rule,
)

METHODS = ('exact', 'ivf')


def test_check_choice_returns_a_valid_value():
    assert check_choice('method', 'ivf', METHODS) == 'ivf'
    assert check_choice('method', 'exact', list(METHODS)) == 'exact'


@pytest.mark.parametrize('value', ['IVF', 'lanczos', None, 1, ('exact',)])
def test_check_choice_names_the_argument_the_choices_and_the_value(value):
    message = f"'method' must be one of ('exact', 'ivf') (got {value!r})"
    with pytest.raises(ValueError) as error:
        check_choice('method', value, METHODS)
    assert str(error.value) == message


def test_check_choice_appends_a_hint():
    with pytest.raises(ValueError, match=r"\(got 'fresh'\): 'refresh' recomputes$"):
        check_choice('summary', 'fresh', ('refresh', 'history'), "'refresh' recomputes")


@pytest.mark.parametrize('dtype', [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_check_index_returns_int64_indices(dtype):
    index = torch.tensor([3, 0, 3, 9], dtype=dtype)
    out = check_index('index', index, 10)
    assert out.dtype == torch.int64 and torch.equal(out, index.long())
    assert check_index('index', torch.tensor([], dtype=dtype), 0).numel() == 0
    assert torch.equal(check_index('n_id', index, 10, size=4), index.long())


@pytest.mark.parametrize('index, got', [
    ([1, 2], 'list'),
    (np.arange(3), 'ndarray'),
    (torch.zeros(3), 'torch.float32 of shape [3]'),
    (torch.zeros(2, 2, dtype=torch.long), 'torch.int64 of shape [2, 2]'),
    (torch.tensor(3), 'torch.int64 of shape []'),
    (torch.zeros(3, dtype=torch.complex64), 'torch.complex64 of shape [3]'),
])
def test_check_index_rejects_what_is_not_a_1d_integer_tensor(index, got):
    with pytest.raises(TypeError) as error:
        check_index('index', index, 10)
    assert str(error.value) == f"'index' must be a 1-D tensor of integer node indices (got {got})"


def test_check_index_names_the_fix_for_a_boolean_mask():
    with pytest.raises(TypeError, match=r"for a boolean mask pass 'mask.nonzero\(\).view\(-1\)'"):
        check_index('mask', torch.ones(10, dtype=torch.bool), 10)


@pytest.mark.parametrize('index', [[0, 10], [-1, 3], [10]])
def test_check_index_rejects_nodes_outside_the_graph(index):
    with pytest.raises(ValueError, match=r"^'n_id' refers to nodes outside \[0, 9\] of the "
                                         r"graph the model saw$"):
        check_index('n_id', torch.tensor(index), 10, graph='the graph the model saw')


def test_check_index_checks_the_size_before_the_range():
    with pytest.raises(ValueError, match=r"'n_id' must hold one node index per row \(3\), "
                                         r"got 4"):
        check_index('n_id', torch.tensor([0, 1, 2, 99]), 10, size=3)


def test_check_stopping_rule():
    assert check_stopping_rule(1e-6, np.int64(10)) == (1e-6, 10)
    for tol in (0.0, -1e-3, float('nan'), float('inf')):
        with pytest.raises(ValueError, match="'tol'"):
            check_stopping_rule(tol, 10)
    with pytest.raises(ValueError, match="'max_iter' must be a positive integer"):
        check_stopping_rule(1e-6, 0)
    with pytest.raises(ValueError, match="'max_iter'"):
        check_stopping_rule(1e-6, 10.0)
    with pytest.raises(TypeError, match="'tol' must be a real number"):
        check_stopping_rule('1e-6', 10)


def test_check_layer_dtype_names_the_argument_and_both_fixes():
    from torch_geometric_regcn.utils.validation import check_layer_dtype
    check_layer_dtype('x', torch.zeros(2, 2), torch.float32, 'TSGCNConv')
    check_layer_dtype('index', torch.zeros(2, dtype=torch.long), torch.float32, 'TSGCNConv')
    with pytest.raises(TypeError, match=r"'x' is torch.float64 .* TSGCNConv are "
                                        r"torch.float32; pass 'x.float\(\)'.*'.double\(\)'"):
        check_layer_dtype('x', torch.zeros(2, 2, dtype=torch.float64), torch.float32,
                          'TSGCNConv')
    with torch.autocast('cpu', dtype=torch.bfloat16):  # autocast casts both sides
        check_layer_dtype('x', torch.zeros(2, 2, dtype=torch.float64), torch.float32, 'L')


def test_check_materialized_refuses_meta_tensors():
    from torch_geometric_regcn.utils.validation import check_materialized
    check_materialized(x=torch.zeros(1), w=None)
    with pytest.raises(ValueError, match="'w' is on the 'meta' device"):
        check_materialized(x=torch.zeros(1), w=torch.empty(2, device='meta'))


def test_check_int_bounds_and_messages():
    from torch_geometric_regcn.utils.validation import check_int
    assert check_int('n', np.int16(3), 0, 3) == 3 and check_int('n', -7, None) == -7
    assert type(check_int('n', torch.tensor(4))) is int
    for value, message in [(4, r"^'n' must be an integer in \[0, 3\] \(got 4\)$"),
                           (2.0, r"^'n' must be an integer in \[0, 3\] \(got 2.0\); pass it "
                                 r"as an int, e.g. 2$"),
                           (2.5, r"^'n' must be an integer in \[0, 3\] \(got 2.5\)$"),
                           (True, r"^'n' must be an integer in \[0, 3\] \(got True\)$")]:
        with pytest.raises(ValueError, match=message):
            check_int('n', value, 0, 3)
    with pytest.raises(ValueError, match=r"^'n' must be an integer of at least 2 \(got 1\)$"):
        check_int('n', 1, 2)
    with pytest.raises(ValueError, match=r"^'n' must be an integer \(got nan\)$"):
        check_int('n', float('nan'), None)


def test_check_seed_is_the_range_of_manual_seed():
    from torch_geometric_regcn.utils.validation import check_seed
    for seed in (-2**63, 0, 2**64 - 1, np.uint64(2**64 - 1)):
        torch.Generator().manual_seed(check_seed(seed))  # accepted by torch as well
    for seed in (-2**63 - 1, 2**64, 1.0, True):
        with pytest.raises(ValueError, match=r"^'seed' must be an integer in \[-2\*\*63, "
                                             r"2\*\*64\), as torch.Generator.manual_seed"):
            check_seed(seed)
    with pytest.raises(ValueError, match=r"^'seed' must be an integer in \[0, 2\*\*64\) "):
        check_seed(-1, minimum=0)
    with pytest.raises(TypeError, match=r"^'seed' must be an integer \(got str '1'\)$"):
        check_seed('1')


def test_check_dtype_and_check_matrix():
    from torch_geometric_regcn.utils.validation import check_dtype, check_matrix
    assert check_dtype('dtype', torch.float16) is torch.float16
    assert check_dtype('dtype', torch.long, floating=False) is torch.long
    with pytest.raises(TypeError, match=r"^'dtype' must be a floating-point torch.dtype such "
                                        r"as torch.float32 \(got dtype torch.int64\)$"):
        check_dtype('dtype', torch.long)
    with pytest.raises(TypeError, match=r"^'dtype' must be a torch.dtype .*\(got type"):
        check_dtype('dtype', float, floating=False)
    check_matrix('m', torch.eye(2).to_sparse_csr(), square=True)
    check_matrix('m', torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"^'m' must be a square matrix \(got shape \[2, 3\]\)$"):
        check_matrix('m', torch.ones(2, 3), square=True)
    with pytest.raises(TypeError, match=r"^'m' must be a matrix, a 2-D dense or sparse"):
        check_matrix('m', np.eye(2))
