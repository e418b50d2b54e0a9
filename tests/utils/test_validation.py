r"""The shared argument checks: each names the argument, the rule and the fix."""
import math
import re

import numpy as np
import pytest
import torch

from torch_geometric_regcn.utils.validation import (
    check_choice,
    check_finite,
    check_index,
    check_stopping_rule,
)

METHODS = ('exact', 'ivf')


def test_check_choice_returns_a_valid_value():
    assert check_choice('method', 'ivf', METHODS) == 'ivf'
    assert check_choice('method', 'exact', list(METHODS)) == 'exact'
    # the plain choice for a NumPy string or a 0-d array, which compare equal
    for value in (np.str_('ivf'), np.array('ivf')):
        chosen = check_choice('method', value, METHODS)
        assert chosen == 'ivf' and type(chosen) is str


@pytest.mark.parametrize('value', [np.array(['ivf']), [['ivf']], torch.tensor([1])])
def test_check_choice_refuses_an_array_of_one_entry(value):
    # it compared equal entry by entry, passed, and went on as an array
    with pytest.raises(ValueError, match="'method' must be one of"):
        check_choice('method', value, METHODS + (1,))


@pytest.mark.parametrize('value', ['IVF', 'lanczos', None, 1, ('exact',)])
def test_check_choice_names_the_argument_the_choices_and_the_value(value):
    message = f"'method' must be one of ('exact', 'ivf') (got {value!r})"
    with pytest.raises(ValueError) as error:
        check_choice('method', value, METHODS)
    assert str(error.value) == message


def test_check_choice_appends_a_hint():
    with pytest.raises(ValueError, match=r"\(got 'fresh'\): 'refresh' recomputes$"):
        check_choice('summary', 'fresh', ('refresh', 'history'), "'refresh' recomputes")


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize('bad', [float('nan'), float('inf'), -float('inf')])
@pytest.mark.parametrize('layout', ['dense', 'coo', 'csr'])
def test_check_finite_finds_one_bad_entry_anywhere(dtype, bad, layout):
    # Against the elementwise definition: any one non-finite entry, wherever it
    # lies (first, middle, last) and whatever the finite values around it.
    generator = torch.Generator().manual_seed(0)
    for position in (0, 157, 299):
        x = torch.randn(100, 3, generator=generator).to(dtype)
        x.view(-1)[position] = bad
        assert not bool(x.isfinite().all())
        tensor = {'dense': x, 'coo': x.to_sparse(), 'csr': x.to_sparse_csr()}[layout]
        with pytest.raises(ValueError, match=r"'data\.x' contains NaN or infinite values"):
            check_finite('data.x', tensor)
    clean = torch.randn(100, 3, generator=generator).to(dtype) * 1e3
    check_finite('data.x', clean)  # finite: no error
    check_finite('data.x', clean[:0])  # empty: nothing to check


def test_check_index_refuses_a_uint8_tensor():
    # torch indexes with a uint8 tensor as a mask: as indices, [1, 0, 1] meant nodes 1, 0, 1.
    with pytest.raises(TypeError, match=r"integer node indices \(got torch.uint8.*for a "
                                        r"boolean mask"):
        check_index('index', torch.tensor([1, 0, 1], dtype=torch.uint8), 10)


@pytest.mark.parametrize('dtype', [torch.int64, torch.int32, torch.int16, torch.int8])
def test_check_index_returns_int64_indices(dtype):
    index = torch.tensor([3, 0, 3, 9], dtype=dtype)
    out = check_index('index', index, 10)
    assert out.dtype == torch.int64 and torch.equal(out, index.long())
    assert check_index('index', torch.tensor([], dtype=dtype), 0).numel() == 0
    assert torch.equal(check_index('n_id', index, 10, size=4), index.long())


@pytest.mark.parametrize('index, got', [  # the conversion of a list or NumPy array is named
    ([1, 2], "list); convert it with 'torch.as_tensor(index)'"),
    (np.arange(3), "numpy.ndarray); convert it with 'torch.from_numpy(index)'"),
    (torch.zeros(3), 'torch.float32 of shape [3])'),
    (torch.zeros(2, 2, dtype=torch.long), 'torch.int64 of shape [2, 2])'),
    (torch.tensor(3), 'torch.int64 of shape [])'),
    (torch.zeros(3, dtype=torch.complex64), 'torch.complex64 of shape [3])'),
])
def test_check_index_rejects_what_is_not_a_1d_integer_tensor(index, got):
    with pytest.raises(TypeError) as error:
        check_index('index', index, 10)
    assert str(error.value) == f"'index' must be a 1-D tensor of integer node indices (got {got}"


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
    # Boolean tensors passed operator.index (as 1), NumPy's bool raised a
    # TypeError, and a one-element 1-D tensor passed as a scalar.
    for value in (torch.tensor(True), torch.tensor([True]), torch.tensor([3]), np.True_):
        with pytest.raises(ValueError, match=r"^'n' must be an integer in \[0, 3\]"):
            check_int('n', value, 0, 3)


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


# -- one check, one message: non-tensors, learned coefficients, meta modules -------------

def test_check_tensor_names_the_type_and_the_conversion():
    from torch_geometric_regcn.utils.validation import check_tensor
    t = torch.zeros(2)
    assert check_tensor('x', t) is t
    for value, tail in [
        (np.zeros(2), "numpy.ndarray); convert it with 'torch.from_numpy(x)'"),
        ([0.0, 1.0], "list); convert it with 'torch.as_tensor(x)'"),
        ((0.0,), "tuple); convert it with 'torch.as_tensor(x)'"),
        ('x', 'str)'), (None, 'NoneType)'),
    ]:
        with pytest.raises(TypeError) as error:
            check_tensor('x', value, 'a torch.Tensor [n, f]')
        assert str(error.value) == f"'x' must be a torch.Tensor [n, f] (got {tail}"


def test_check_coefficient_reads_a_learned_tensor_without_its_gradient():
    import warnings

    from torch_geometric_regcn.utils.validation import check_coefficient
    alpha = torch.tensor(0.3, dtype=torch.float64, requires_grad=True) * 1  # not a leaf
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # float() of a grad tensor warns since torch 2.6
        assert check_coefficient('alpha', alpha, 0.0) == 0.3
    assert check_coefficient('alpha', torch.tensor([0.5]), 0.0) == 0.5  # one element
    assert check_coefficient('alpha', np.float32(0.5)) == 0.5
    assert type(check_coefficient('alpha', 2)) is float
    for value, error, match in [
        (torch.tensor(-1.0), ValueError, r"^'alpha' must be non-negative \(got -1.0\)$"),
        (torch.tensor(float('nan')), ValueError, r"^'alpha' must be finite \(got nan\)$"),
        (torch.ones(2), TypeError, r"one-element floating-point tensor \(got a tensor of "
                                   r"shape \[2\], torch.float32\)$"),
        (torch.tensor(1), TypeError, r"\(got a tensor of shape \[\], torch.int64\)$"),
        (True, TypeError, r"^'alpha' must be a real number \(got bool True\)$"),
    ]:
        with pytest.raises(error, match=match):
            check_coefficient('alpha', value, 0.0)


def test_check_module_materialized_names_the_owner_and_the_fix():
    from torch_geometric_regcn.utils.validation import check_module_materialized
    module = torch.nn.Linear(2, 3)
    check_module_materialized(module)
    check_module_materialized(torch.nn.ReLU())  # no parameters
    with pytest.raises(ValueError) as error:
        check_module_materialized(module.to('meta'), 'MyModel')
    assert str(error.value) == (
        "The parameters of MyModel are on the 'meta' device and hold no values; materialise "
        "it with '.to_empty(device=...)' followed by '.reset_parameters()' or "
        "'.load_state_dict(...)' (or load a state dict into the meta module with "
        "'load_state_dict(..., assign=True)') before calling it")


def _layer_inputs():
    r"""Node features and factors of eigenpairs of one graph of 30 nodes (rank 3),
    float32, for every layer and model."""
    from torch_geometric_regcn.linalg import factors_from_eigenpairs
    gen = torch.Generator().manual_seed(0)
    u = torch.linalg.qr(torch.randn(30, 3, dtype=torch.float64, generator=gen))[0]
    w, v = factors_from_eigenpairs(torch.tensor([0.5, 0.2, -0.1], dtype=torch.float64), u)
    edge_index = torch.stack([torch.arange(29), torch.arange(1, 30)])
    return torch.randn(30, 4, generator=gen), w.float(), v.float(), edge_index


def _models():
    from torch_geometric_regcn import (
        TSGCN,
        MiniBatchTSGCN,
        RegularizerConv,
        RegularizerGNN,
        TSGCNConv,
    )
    torch.manual_seed(0)
    return {'TSGCNConv': TSGCNConv(4, 2), 'TSGCN': TSGCN(4, 8, 2),
            'RegularizerConv': RegularizerConv(4, 2, 'tsgcn', solver='lowrank'),
            'RegularizerGNN': RegularizerGNN(4, 8, 2, num_layers=2),
            'MiniBatchTSGCN': MiniBatchTSGCN(4, 8, 2)}


def _call(name, model, x, w, v, edge_index, n_id=None):
    if name in ('TSGCNConv', 'TSGCN'):
        return model(x, w, v)
    if name == 'RegularizerConv':
        return model(x, edge_index, lowrank_w=w, lowrank_v=v)
    if name == 'RegularizerGNN':
        return model(x, edge_index)
    if n_id is None:  # MiniBatchTSGCN
        return model.refresh(x, w, v)
    model.refresh(*_layer_inputs()[:3])
    return model(x[:5], w[:5], v[:5], n_id)


NUMPY_INPUTS = [('TSGCNConv', 'x'), ('TSGCNConv', 'w'), ('TSGCNConv', 'v'), ('TSGCN', 'x'),
                ('TSGCN', 'w'), ('RegularizerConv', 'x'), ('RegularizerConv', 'edge_index'),
                ('RegularizerConv', 'lowrank_w'), ('RegularizerGNN', 'x'),
                ('RegularizerGNN', 'edge_index'), ('MiniBatchTSGCN', 'x'),
                ('MiniBatchTSGCN', 'w'), ('MiniBatchTSGCN', 'n_id')]


@pytest.mark.parametrize('model, name', NUMPY_INPUTS, ids=[f'{m}-{n}' for m, n in NUMPY_INPUTS])
def test_a_numpy_array_is_named_with_its_conversion_by_every_layer_and_model(model, name):
    # Was: RegularizerGNN's x raised "'numpy.ndarray' object has no attribute 'layout'",
    # the others named the type without the conversion (or "ndarray" alone).
    x, w, v, edge_index = _layer_inputs()
    inputs = {'x': x, 'w': w, 'v': v, 'edge_index': edge_index, 'n_id': None}
    key = {'lowrank_w': 'w'}.get(name, name)
    inputs[key] = torch.arange(5).numpy() if name == 'n_id' else inputs[key].numpy()
    with pytest.raises(TypeError, match=rf"^'{name}'.* \(got [^)]*numpy\.ndarray[^)]*\); "
                                        rf"convert it with 'torch\.from_numpy\({name}\)'$"):
        _call(model, _models()[model], **inputs)


def test_every_layer_and_model_on_the_meta_device_gets_one_message():
    x, w, v, edge_index = _layer_inputs()
    messages, owners = {}, {}
    for name, model in _models().items():
        with pytest.raises(ValueError) as error:
            _call(name, model.to('meta'), x, w, v, edge_index)
        owners[name] = re.match(r'^The parameters of (\w+) are ', str(error.value))[1]
        messages[name] = str(error.value).replace(owners[name], '<owner>', 1)
    assert len(set(messages.values())) == 1, messages
    # each names itself, TSGCN its layer (whose checks the ranks of a group agree on)
    assert owners == {**{name: name for name in messages}, 'TSGCN': 'TSGCNConv'}


@pytest.mark.parametrize('dtype', ['uint16', 'uint32', 'uint64'])
def test_wide_unsigned_indices_are_named_with_their_conversion(dtype):
    # torch has no min/max for them: the range checks raised NotImplementedError
    # naming neither the argument nor the fix (review s55/utils).
    from torch_geometric_regcn.linalg import normalized_adjacency
    from torch_geometric_regcn.utils.validation import check_edge_index
    dtype = getattr(torch, dtype)
    with pytest.raises(TypeError, match=rf"'n_id' is {dtype}, which torch cannot reduce "
                                        rf"\(min, max\); pass 'n_id.long\(\)'"):
        check_index('n_id', torch.tensor([0, 1]).to(dtype), 3)
    edges = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(TypeError, match=rf"'edge_index' is {dtype}.*'edge_index.long\(\)'"):
        check_edge_index(edges.to(dtype), 3)
    with pytest.raises(TypeError, match=r"'edge_index.long\(\)'"):
        normalized_adjacency(edges.to(dtype), 3)


def test_float8_weights_are_named_and_read():
    # aminmax has no float8 kernel: NotImplementedError (review s55/utils).
    from torch_geometric_regcn.utils.validation import all_finite, check_edge_index
    weight = torch.tensor([1.0, 2.0]).to(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match=r"'edge_weight' is torch.float8_e4m3fn.*"
                                        r"'edge_weight.float\(\)'"):
        check_edge_index(torch.tensor([[0, 1], [1, 0]]), 2, weight)
    assert all_finite(weight)
    assert not all_finite(torch.tensor([1.0, math.nan]).to(torch.float8_e4m3fn))


def test_oversized_ints_and_meta_scalars_are_named():
    # float(10**400) raised OverflowError, .item() of a meta tensor torch's
    # RuntimeError, neither naming the argument (review s55/utils).
    from torch_geometric_regcn.utils.validation import check_coefficient, check_int, check_real
    for check in (check_real, check_coefficient):
        with pytest.raises(ValueError, match=r"'alpha' must be finite \(got inf\)"):
            check('alpha', 10**400)
        with pytest.raises(ValueError, match=r"'alpha' must be finite \(got -inf\)"):
            check('alpha', -10**400)
    with pytest.raises(ValueError, match="'k' is on the 'meta' device"):
        check_int('k', torch.tensor(3, device='meta'))
    with pytest.raises(ValueError, match="'alpha' is on the 'meta' device"):
        check_coefficient('alpha', torch.tensor(0.5, device='meta'))
