r"""LowRankInverse's factors and the layer that applies them (issue 27).

One verdict on the condition of the factors' Woodbury core, from the
transform and from the layer alike (class 6): the same pivot, rounding level
and accuracy, a warning when the largest gain is imprecise and an error when
the core is numerically singular, as docs/reliability.md says. The layer's
cached core sees every edit of the factors, also through NumPy or
:obj:`.data` in a single row (class 4). Inputs of the wrong dtype, NumPy
arrays and meta tensors are named with their fix (class 5). Each case is
checked against a dense float64 reference.
"""
import re
import warnings

import pytest
import torch
from torch_geometric.data import Data

import torch_geometric_regcn.transforms.low_rank_inverse as module
from torch_geometric_regcn import TSGCN, LowRankInverse, SemanticGraph, TSGCNConv
from torch_geometric_regcn.datasets import contextual_sbm
from torch_geometric_regcn.transforms import factor_cache
from torch_geometric_regcn.transforms.low_rank_inverse import tsgcn_operator

N, F, RANK, BETA = 60, 6, 10, 0.2


@pytest.fixture(scope='module')
def graph():
    data = contextual_sbm(num_nodes=N, num_classes=3, num_features=F, seed=0)
    return SemanticGraph(4, progress=False)(data)


def data_in(graph, dtype):
    return Data(x=graph.x.to(dtype), edge_index=graph.edge_index,
                semantic_edge_index=graph.semantic_edge_index)


def true_pivot(graph, alpha, beta=BETA):
    r"""1 - λ_max of S, from the dense float64 operator: the smallest pivot of
    the exact core I - Λ."""
    s = tsgcn_operator(data_in(graph, torch.float64), alpha, beta).to_dense()
    return 1 - float(torch.linalg.eigvalsh(s).max())


def numbers(message):
    r"""The pivot and the rounding level a verdict states."""
    pivot, rounding = re.search(r'pivot (?:as small as )?([-\d.e+]+)(?: is not above the| '
                                r'against a) rounding level (?:of )?([\d.e+-]+)',
                                message).groups()
    return float(pivot), float(rounding)


def precision_warnings(record):
    return [str(w.message) for w in record if 'Woodbury core' in str(w.message)]


def dense_reference(conv, x, w, v):
    r""":math:`(\mathbf{I} + \mathbf{W}\mathbf{V}^{\top})^{-1} \mathbf{X}
    \mathbf{\Theta}^{\top} + \mathbf{b}` in float64."""
    eye = torch.eye(x.size(0), dtype=torch.float64)
    out = torch.linalg.solve(eye + w.double() @ v.double().T,
                             x.double() @ conv.lin.weight.double().T)
    return out if conv.bias is None else out + conv.bias.double()


# Class 6: one verdict on one core. ---------------------------------------------

def test_an_imprecise_core_gets_the_same_warning_from_the_transform_and_the_layer(graph):
    alpha = 1e4
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        data = LowRankInverse(alpha, BETA, rank=RANK, progress=False)(
            data_in(graph, torch.float32))
    (from_transform,) = precision_warnings(record)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter('always')
        TSGCNConv(F, 3)(data.x, data.lowrank_w, data.lowrank_v)
    (from_layer,) = precision_warnings(record)
    assert from_transform == from_layer  # the same pivot, rounding level and accuracy
    accuracy = float(re.search(r'accurate to about ([\d.]+)%', from_layer).group(1)) / 100
    # Against the dense float64 spectrum: the largest gain 1 / pivot of the
    # float32 core (its LU, as the layer factorises it) is no less accurate
    # than stated, and the stated pivot is the true one to within the stated
    # rounding level.
    w, v = data.lowrank_w, data.lowrank_v
    lu, _ = torch.linalg.lu_factor(torch.eye(RANK) + v.T @ w)
    computed = float(lu.diagonal().abs().min())
    expected = true_pivot(graph, alpha)
    assert abs(expected / computed - 1) <= accuracy
    pivot, rounding = numbers(from_layer)
    assert abs(pivot - expected) <= rounding


def test_coefficients_singular_on_every_graph_are_refused_before_any_work(graph, monkeypatch):
    # alpha = 1e8, beta = 0.2: the pivot 1 - lambda_max is at most 1.4 / (1 + alpha + beta)
    # on every graph, below float32's rounding level; the verdict came after the kNN search
    # and the eigensolve. float64 is fine there.
    monkeypatch.setattr(module, '_operator', None)
    with pytest.raises(ValueError, match=r"LowRankInverse\(alpha=1e\+08, beta=0.2\) has factors "
                                         r"whose core I \+ V\^T W is numerically singular in "
                                         r"torch\.float32 on every graph.*float64"):
        LowRankInverse(1e8, BETA, rank=RANK, progress=False)(data_in(graph, torch.float32))
    module.check_solvable(1e8, BETA, torch.float64)


@pytest.mark.parametrize('alpha', [1e6])
def test_a_singular_core_raises_the_same_error_in_the_transform_and_the_layer(
        graph, alpha, tmp_path, monkeypatch):
    # beta = 2: singular on this graph, not on every graph, so the eigensolve runs.
    data = data_in(graph, torch.float32)
    transform = LowRankInverse(alpha, 2.0, rank=RANK, progress=False, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r'numerically singular in torch\.float32') as error:
        transform(data.clone())
    from_transform = str(error.value)
    # The factors were saved before the verdict: the layer judges the same ones.
    (path,) = tmp_path.glob('lowrank-*.pt')
    saved = factor_cache.load(str(path))
    with pytest.raises(ValueError) as error:
        TSGCNConv(F, 3)(data.x, saved.tensors['lowrank_w'], saved.tensors['lowrank_v'])
    assert str(error.value) == from_transform
    # A rerun loads them and gives the verdict again, without the eigensolver.
    monkeypatch.setattr(module, 'extreme_eigenpairs', None)
    with pytest.raises(ValueError) as error:
        transform(data.clone())
    assert str(error.value) == from_transform
    # The docs' rule, against the dense float64 spectrum: the true pivot, about
    # 1 / (1 + α + β), lies below the float32 rounding level; at α = 1e8 the
    # computed one is rounding noise, more than ten times the true one.
    pivot, rounding = numbers(from_transform)
    expected = true_pivot(graph, alpha, 2.0)
    assert expected < rounding


def test_float64_factors_at_the_same_alpha_are_silent_and_exact(graph):
    # In float64 the rounding level is 16 eps (1 + 1) = 7e-15 against the pivot
    # 1e-8: accurate to 1e-6, no warning, and the layer matches the dense
    # inverse of I + α L̃_G + β L̃_X.
    alpha = 1e8
    data = data_in(graph, torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        data = LowRankInverse(alpha, BETA, rank=N, tol=1e-12, progress=False)(data)
        conv = TSGCNConv(F, 3, bias=False).double()
        got = conv(data.x, data.lowrank_w, data.lowrank_v).detach()
    s = tsgcn_operator(data, alpha, BETA).to_dense()
    expected = torch.linalg.solve(torch.eye(N, dtype=torch.float64) - s,
                                  conv.lin(data.x).detach())
    # The largest gain 1e8 carries ε (1 + α) = 2e-8 relative rounding, times the
    # eigensolver's tol-limited accuracy of the top eigenvalue: 1e-5 is loose,
    # and factors of a rounded core are O(1) off.
    assert float((got - expected).norm() / expected.norm()) < 1e-5


# Class 4: the layer's cached core sees every edit of the factors. ---------------

@pytest.mark.parametrize('edit', ['one row through NumPy', 'one entry through .data'])
def test_an_edit_of_one_row_of_the_factors_is_seen(graph, edit):
    # float32 factors, whose V^T W may be off-diagonal up to 3.5e-3 (relative):
    # a 2% edit of one row keeps them those of one graph, as far as the layer
    # can tell, and changes the core by about 2% / N.
    data = LowRankInverse(1.0, BETA, rank=RANK, progress=False)(data_in(graph, torch.float32))
    w, v = data.lowrank_w.clone(), data.lowrank_v.clone()
    conv = TSGCNConv(F, 3)
    before = conv(data.x, w, v).detach()  # caches the core
    if edit == 'one row through NumPy':  # neither the version counter nor row 0 or N - 1
        v.numpy()[1] *= 1.02
    else:  # bypasses the version counter too
        w.data[2, 0] *= 1.02
    got = conv(data.x, w, v).detach()
    # A fresh layer with the same weights factorises the edited factors: the same
    # operations on the same numbers, so the same bits.
    fresh = TSGCNConv(F, 3)
    fresh.load_state_dict(conv.state_dict())
    assert torch.equal(got, fresh(data.x, w.clone(), v.clone()).detach())
    expected = dense_reference(conv, data.x, w, v).detach()
    # float32 against float64: 60-term products, gains <= 2.2: 1e-5 relative.
    assert float((got.double() - expected).norm() / expected.norm()) < 1e-5
    assert not torch.equal(before, got)


# Class 5: named errors of TSGCNConv. ---------------------------------------------

@pytest.mark.parametrize('x_dtype, layer_dtype, fix', [
    (torch.float64, torch.float32, r"'x\.float\(\)'.*'\.double\(\)'"),
    (torch.float32, torch.float64, r"'x\.double\(\)'.*'\.float\(\)'"),
    (torch.float16, torch.float32, r"'x\.float\(\)'.*'\.half\(\)'"),
])
@pytest.mark.parametrize('model', ['conv', 'lazy conv', 'TSGCN'])
def test_features_of_another_dtype_than_the_layer_are_named(graph, x_dtype, layer_dtype, fix,
                                                            model):
    data = LowRankInverse(1.0, BETA, rank=RANK, progress=False)(data_in(graph, layer_dtype))
    layer = {'conv': lambda: TSGCNConv(F, 3), 'lazy conv': lambda: TSGCNConv(-1, 3),
             'TSGCN': lambda: TSGCN(F, 4, 3)}[model]().to(layer_dtype)
    with pytest.raises(TypeError, match=rf"'x' is {x_dtype} but the parameters of TSGCNConv "
                                        rf"are {layer_dtype}; pass {fix}"):
        layer(data.x.to(x_dtype), data.lowrank_w, data.lowrank_v)
    # Raised before any work: a lazy layer is still uninitialised, and the fix
    # gives the dense float64 result.
    conv = layer if model != 'TSGCN' else layer.convs[0]
    assert conv.in_channels == (-1 if model == 'lazy conv' else F)
    if model != 'TSGCN':
        got = layer(data.x.to(x_dtype).to(layer_dtype), data.lowrank_w, data.lowrank_v)
        expected = dense_reference(layer, data.x.to(x_dtype).to(layer_dtype),
                                   data.lowrank_w, data.lowrank_v)
        # float32: 60-term products of O(1) numbers and gains <= 2.2.
        torch.testing.assert_close(got.double(), expected.detach(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('name', ['x', 'w', 'v'])
def test_a_numpy_array_is_named_with_its_conversion(graph, name):
    data = LowRankInverse(1.0, BETA, rank=RANK, progress=False)(data_in(graph, torch.float64))
    inputs = {'x': data.x, 'w': data.lowrank_w, 'v': data.lowrank_v}
    conv = TSGCNConv(F, 3).double()
    with pytest.raises(TypeError, match=rf"'{name}' must be a torch\.Tensor .*\(got "
                                        rf"numpy\.ndarray\); convert it with "
                                        rf"'torch\.from_numpy\({name}\)'"):
        conv(**{**inputs, name: inputs[name].numpy()})
    fixed = conv(**{**inputs, name: torch.from_numpy(inputs[name].numpy())})
    torch.testing.assert_close(fixed, dense_reference(conv, **inputs), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('what', ['x', 'w', 'v', 'the layer'])
def test_meta_tensors_are_named(graph, what):
    data = LowRankInverse(1.0, BETA, rank=RANK, progress=False)(data_in(graph, torch.float32))
    inputs = {'x': data.x, 'w': data.lowrank_w, 'v': data.lowrank_v}
    conv = TSGCNConv(F, 3)
    if what == 'the layer':
        conv = conv.to('meta')  # as built under torch.device('meta')
        match = r"parameters of TSGCNConv are on the 'meta' device.*'\.to_empty\(device=\.\.\.\)'"
    else:
        inputs[what] = inputs[what].to('meta')
        match = rf"'{what}' is on the 'meta' device and holds no values; materialise it"
    with pytest.raises(ValueError, match=match):
        conv(**inputs)


def test_the_precision_warning_points_to_the_callers_line(graph):
    # The verdict is given deep inside (woodbury_core under the layer's cache,
    # under torch's Module.__call__, under PyG's BaseTransform.__call__); its
    # warning names the line that called the layer, the model or the
    # transform, here this file (a fixed stacklevel named torch's module.py
    # for the layer and the model).
    def caught(call):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter('always')
            call()
        (found,) = [w for w in record if 'accurate to about' in str(w.message)]
        return found.filename

    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        data = LowRankInverse(1e4, BETA, rank=RANK, progress=False)(data_in(graph, torch.float32))
    x, w, v = data.x, data.lowrank_w, data.lowrank_v
    transform = LowRankInverse(1e4, BETA, rank=RANK, progress=False)
    assert caught(lambda: transform(data_in(graph, torch.float32))) == __file__
    assert caught(lambda: TSGCNConv(F, 3)(x, w, v)) == __file__
    assert caught(lambda: TSGCN(F, 4, 3)(x, w, v)) == __file__
