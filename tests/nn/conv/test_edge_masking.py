r"""EdgeMasking: an explainer's edge mask on RegularizerConv's operators,
against a dense reference, and the mask gradients of the solvers."""
import warnings

import pytest
import torch
from torch_geometric.explain import Explainer
from torch_geometric.explain.algorithm import GNNExplainer
from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

from tests.nn.helpers import conv, layer, setup, two_components
from torch_geometric_regcn import RegularizerGNN
from torch_geometric_regcn.nn.conv.edge_masking import EdgeMasking

F = 5


def masked_graph(n=6):
    r"""A small symmetric operator with entries on edges present in both
    directions, in one direction only, on the diagonal and on pairs without
    an edge, and a random mask."""
    edge_index = torch.tensor([[0, 1, 1, 3, 4, 2, 3],
                               [1, 0, 2, 4, 5, 5, 3]])  # 0 <-> 1 both ways, a loop at 3
    gen = torch.Generator().manual_seed(0)
    dense = torch.randn(n, n, dtype=torch.float64, generator=gen)
    dense = dense + dense.T
    dense[0, 3] = dense[3, 0] = 0.0  # a pair without an entry
    mask = torch.rand(edge_index.size(1), dtype=torch.float64, generator=gen)
    return edge_index, dense, mask


def dense_weights(edge_index, mask, n):
    r"""Entry (i, j): the mean of the masks of the edges j -> i and i -> j
    present, one where neither is and on the diagonal, by a loop over the
    entries."""
    weights = [[torch.ones((), dtype=torch.float64)] * n for _ in range(n)]
    edges = {(int(s), int(t)): m for (s, t), m in zip(edge_index.T, mask)}
    for i in range(n):
        for j in range(n):
            present = [edges[key] for key in ((j, i), (i, j)) if key in edges]
            if present and i != j:
                weights[i][j] = sum(present) / len(present)
    return torch.stack([torch.stack(row) for row in weights])


@pytest.mark.parametrize('layout', ['coo', 'csr'])
@pytest.mark.parametrize('apply_sigmoid', [False, True])
def test_weights_and_product_equal_the_dense_masked_operator(layout, apply_sigmoid):
    edge_index, dense, mask = masked_graph()
    matrix = dense.to_sparse() if layout == 'coo' else dense.to_sparse_csr()
    masking = EdgeMasking(mask, apply_sigmoid, edge_index)
    expected = dense_weights(edge_index, mask.sigmoid() if apply_sigmoid else mask, 6)
    row, col = dense.to_sparse().indices()  # the order of to_edge_index: row-major
    torch.testing.assert_close(masking.weights(matrix), expected[row, col], rtol=0, atol=0)
    x = torch.randn(6, 3, dtype=torch.float64)
    torch.testing.assert_close(masking.apply(matrix, x), (dense * expected) @ x)


def test_the_mask_gradient_of_the_product_is_the_dense_one():
    edge_index, dense, mask = masked_graph()
    x = torch.randn(6, 3, dtype=torch.float64)
    mask.requires_grad_()
    out = EdgeMasking(mask, False, edge_index).apply(dense.to_sparse(), x)
    (grad,) = torch.autograd.grad(out.square().sum(), mask)
    reference = mask.detach().clone().requires_grad_()
    expected_out = (dense * dense_weights(edge_index, reference, 6)) @ x
    (expected,) = torch.autograd.grad(expected_out.square().sum(), reference)
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize('solver', ['series', 'cg'])
def test_masks_on_self_loops_leave_the_layer_as_pyg_leaves_appnp(solver):
    # The masks of self-loop columns scaled the diagonal of M, identity term
    # included: 0.5 made it indefinite (CG broke down). PyG's explainers
    # leave self loops unmasked; reference: PyG's APPNP under the same mask.
    from torch_geometric.nn import APPNP

    from tests.nn.helpers import conv, setup
    x, ei = setup()
    loops = torch.arange(5)
    ei = torch.cat([ei, loops.expand(2, -1)], dim=1)  # self loops in edge_index
    mask = torch.full((ei.size(1),), 0.7, dtype=torch.float64)
    mask[-5:] = 0.5
    mask = torch.nn.Parameter(mask)
    torch.manual_seed(0)
    model = conv('appnp', solver=solver, alpha=0.1,
                 **(dict(K=400) if solver == 'series' else dict(tol=1e-13)))
    reference = APPNP(400, 0.1)
    for module in (model, reference):
        set_masks(module, mask, ei, apply_sigmoid=False)
    try:
        out = model(x, ei)
        expected = reference(x @ model.lin.weight.T, ei)
    finally:
        clear_masks(model)
        clear_masks(reference)
    # 400 terms of a series of rate 0.9 (PyG's) and CG to 1e-13: 1e-12.
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_an_empty_edge_index_leaves_the_operator_as_it_is():
    _, dense, _ = masked_graph()
    masking = EdgeMasking(torch.zeros(0, dtype=torch.float64), False,
                          torch.zeros(2, 0, dtype=torch.long))
    assert bool((masking.weights(dense.to_sparse()) == 1).all())


def test_the_old_import_path_warns():
    from torch_geometric_regcn.nn.conv import regularizer_conv
    with pytest.warns(DeprecationWarning, match='edge_masking.EdgeMasking'):
        assert regularizer_conv.EdgeMasking is EdgeMasking


def mask_gradient(conv, x, edge_index, mask):
    set_masks(conv, mask, edge_index, apply_sigmoid=True)
    try:
        out = conv(x, edge_index)
        (grad,) = torch.autograd.grad(out[0].sum() + out[5].square().sum(), mask)
    finally:
        clear_masks(conv)
    return out.detach(), grad


def test_implicit_mask_gradient_of_cg_equals_a_converged_series():
    # APPNP's K-step series converges to its CG solve ((1-α)^K = 0.5^60), so the
    # edge-mask gradients of both, one by autograd through 60 masked steps,
    # the other by CG's implicit backward, must agree.
    x, edge_index = two_components()
    mask = torch.randn(edge_index.size(1), dtype=torch.float64, requires_grad=True)
    series = layer('appnp', 'series', K=60, alpha=0.5)
    cg = layer('appnp', 'cg', K=60, alpha=0.5, tol=1e-13)
    cg.load_state_dict(series.state_dict())
    out_s, grad_s = mask_gradient(series, x, edge_index, mask)
    out_c, grad_c = mask_gradient(cg, x, edge_index, mask)
    torch.testing.assert_close(out_c, out_s, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(grad_c, grad_s, rtol=1e-7, atol=1e-11)
    assert grad_s[:edge_index.size(1) // 2].abs().max() > 0


def test_cg_mask_gradient_matches_finite_differences():
    x, edge_index = two_components()
    conv = layer('tsgcn', 'cg', alpha=1.0, beta=0.5, tol=1e-13)
    semantic = edge_index.flip(0)[:, ::3]

    def loss(mask):
        set_masks(conv, mask, edge_index, apply_sigmoid=False)
        try:
            return conv(x, edge_index, semantic_edge_index=semantic)[:3].square().sum()
        finally:
            clear_masks(conv)

    mask = torch.rand(edge_index.size(1), dtype=torch.float64, requires_grad=True)
    f = loss(mask)
    (grad,) = torch.autograd.grad(f, mask)
    # The central difference (f(m + h) - f(m - h)) / 2h errs by the truncation
    # h^2 |f'''| / 6 (about 1e-13 here) plus 2 delta / 2h, with delta the
    # rounding error of one computed loss: CG's ~15 iterations round every
    # entry of the solve, so delta <= c eps |f| with c = 64 (iterations times
    # the condition number of M, at most 1 + alpha + beta = 2.5, with a margin).
    # The difference is thus within c eps |f| / h of the exact derivative
    # (3e-7 here; one rounding of f at h = 1e-6 already gives 4e-9). CG stops
    # at a relative residual of tol, so the two losses may also come from
    # different stopping points: at most cond(M) tol |f| apart, which adds
    # 2.5 tol |f| / h (5e-6 here) where a step changes the iteration count.
    h, tol = 1e-6, 1e-13
    bound = (64 * torch.finfo(torch.float64).eps + 2.5 * tol) * abs(float(f.detach())) / h
    seen = (edge_index < 20).all(dim=0)  # the output's rows 0..2 are in nodes 0..19
    last = edge_index.size(1) - 1
    assert bool(seen[0]) and bool(seen[7]) and not bool(seen[last])
    assert float(grad[last]) == 0.0  # an edge the output cannot see: exactly zero
    for e in (0, 7, last):
        step = torch.zeros_like(mask)
        step[e] = h
        with torch.no_grad():
            numeric = (loss(mask.detach() + step) - loss(mask.detach() - step)) / (2 * h)
        assert float(grad[e]) == pytest.approx(float(numeric), rel=1e-5, abs=bound)


@pytest.mark.parametrize('regularizer, solver', [('appnp', 'series'), ('appnp', 'cg'),
                                                 ('gnn_lf', 'cg')])
def test_gnn_explainer_returns_an_edge_mask(regularizer, solver):
    x, edge_index = two_components()
    torch.manual_seed(0)
    model = RegularizerGNN(F, 8, 3, regularizer=regularizer, solver=solver).double()
    explainer = Explainer(model, algorithm=GNNExplainer(epochs=20),
                          explanation_type='model', node_mask_type='attributes',
                          edge_mask_type='object',
                          model_config=dict(mode='multiclass_classification', task_level='node',
                                            return_type='raw'))
    explanation = explainer(x, edge_index, index=0)
    mask = explanation.edge_mask
    assert mask.shape == (edge_index.size(1),)
    other = (edge_index[0] >= 20) & (edge_index[1] >= 20)  # node 0 cannot see them
    assert mask[~other].max() > 0
    assert mask[other].abs().max() == 0
    assert not model.convs[0].explain  # the explainer cleaned up


def test_int32_edge_indices_of_a_large_graph_are_masked():
    # Keys target * n + source overflowed int32 beyond 46,340 nodes and matched
    # no edge: the mask silently became 1. Reference: the int64 indices.
    n = 50_000
    edge_index = torch.tensor([[49_999, 49_998, 3], [49_998, 49_999, 4]])
    mask = torch.tensor([0.1, 0.2, 0.7])
    entries = torch.tensor([[49_998, 49_999, 4, 0], [49_999, 49_998, 3, 0]])
    expected = EdgeMasking(mask, False, edge_index).entry_weights(entries, n)
    torch.testing.assert_close(expected, torch.tensor([0.15, 0.15, 0.7, 1.0]))
    # An int32 edge_index against the int64 entries of a sparse operator.
    got = EdgeMasking(mask, False, edge_index.int()).entry_weights(entries, n)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize('regularizer, solver', [('appnp', 'series'), ('gcn', 'series'),
                                                 ('appnp', 'cg'), ('robust', 'irls')])
def test_a_diverged_edge_mask_is_named(regularizer, solver):
    # A NaN in the explainer's mask came back as NaN outputs (series), as CG's
    # "not positive definite", or as an 'edge_weight' the user never passed.
    x, edge_index = two_components()
    conv = layer(regularizer, solver)
    mask = torch.full((edge_index.size(1),), 0.5, dtype=torch.float64)
    mask[3] = float('nan')
    set_masks(conv, torch.nn.Parameter(mask), edge_index, apply_sigmoid=True)
    with pytest.raises(ValueError, match="explainer's edge mask of this layer holds NaN"):
        conv(x, edge_index)
    # Through the sigmoid, an infinite entry is a hard mask (sigmoid 0 or 1):
    # the layer under the mask of those sigmoid values, given without it.
    mask[3] = float('inf')
    set_masks(conv, torch.nn.Parameter(mask), edge_index, apply_sigmoid=True)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # IRLS's K = 10 stops short of its tolerance here
        hard = conv(x, edge_index)
        set_masks(conv, torch.nn.Parameter(mask.sigmoid()), edge_index, apply_sigmoid=False)
        torch.testing.assert_close(hard, conv(x, edge_index), rtol=0, atol=0)
        mask[3] = float('inf')  # without a sigmoid an infinite mask is refused
        set_masks(conv, torch.nn.Parameter(mask), edge_index, apply_sigmoid=False)
        with pytest.raises(ValueError, match="holds NaN or infinite values"):
            conv(x, edge_index)


def test_a_mask_of_the_wrong_length_is_named():
    # It failed inside torch's index_add_ ("Number of indices (10) should be
    # equal to source.size..."), after the graph was built, naming nothing.
    x, ei = setup()
    layer = conv('appnp')
    set_masks(layer, torch.ones(ei.size(1) - 1, dtype=torch.float64), ei, apply_sigmoid=False)
    try:
        with pytest.raises(ValueError, match="edge mask of this layer has .* entries, but "
                                             "'edge_index' has"):
            layer(x, ei)
    finally:
        clear_masks(layer)


def test_explain_without_a_mask_is_named():
    # explain=True set by hand (a custom explainer that forgot set_masks): the
    # mask check read None.numel(), an AttributeError (review s55/conv), where
    # PyG's own layers name the missing mask.
    x, ei = setup()
    layer = conv('appnp')
    layer.explain = True
    with pytest.raises(ValueError, match="set to explain without an edge mask; use "
                                         "torch_geometric.explain.Explainer"):
        layer(x, ei)


@pytest.mark.parametrize('regularizer, learn', [('appnp', ()), ('gnn_hf', ()), ('jknet', ()),
                                                ('tsgcn', ()), ('appnp', ('alpha',))])
def test_closed_applies_the_mask_to_the_whole_system_as_cg_does(regularizer, learn):
    # "closed" solved with the unmasked dense M while the numerator B X of
    # GNN-LF/HF and JKNet went through the masked products: the explained
    # function was neither the masked model nor the unmasked one (and for the
    # others the mask was unused). Reference: CG to 1e-13 under the same mask
    # (well conditioned, cond(M) <= 1 + 2 alpha / m0 here: 1e-12 margin).
    x, edge_index = two_components()
    mask = torch.rand(edge_index.size(1), dtype=torch.float64,
                      generator=torch.Generator().manual_seed(1))
    kwargs = {'semantic_edge_index': edge_index.flip(0)[:, ::3]} \
        if regularizer == 'tsgcn' else {}
    results = []
    for solver in ('closed', 'cg'):
        conv = layer(regularizer, solver, tol=1e-13, learn=learn)
        m = mask.clone().requires_grad_()
        set_masks(conv, m, edge_index, apply_sigmoid=False)
        try:
            out = conv(x, edge_index, **kwargs)
            (grad,) = torch.autograd.grad(out[:3].square().sum(), m)
        finally:
            clear_masks(conv)
        results.append((out.detach(), grad))
    (out_closed, grad_closed), (out_cg, grad_cg) = results
    torch.testing.assert_close(out_closed, out_cg, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad_closed, grad_cg, rtol=0, atol=1e-12)


def test_lowrank_refuses_to_be_explained():
    from tests.nn.helpers import eigen_factors
    x, edge_index = two_components()
    w, v = eigen_factors()
    conv = layer('tsgcn', 'lowrank')
    set_masks(conv, torch.ones(edge_index.size(1), dtype=torch.float64, requires_grad=True),
              edge_index, apply_sigmoid=False)
    try:
        with pytest.raises(ValueError, match="solver='lowrank' is not supported.*solver='cg'"):
            conv(x, edge_index, lowrank_w=w, lowrank_v=v)
    finally:
        clear_masks(conv)


@pytest.mark.parametrize('regularizer', ['robust', 'pgnn'])
def test_an_explained_batch_keeps_each_graph_its_own_solve(regularizer):
    # The masked graph of a non-quadratic regulariser was rebuilt without the
    # layer's batch=, so under the explainer a graph beside one of 1e4 larger
    # features was 5e-3 off its solution alone (review s55/nonquad2).
    # Reference: the same layer, unexplained, with batch= (a mask of ones).
    from torch_geometric_regcn import RegularizerConv
    ring = torch.arange(30)
    ring = torch.stack([ring, (ring + 1) % 30])
    ring = torch.cat([ring, ring.flip(0)], dim=1)
    edges = torch.cat([ring, ring + 30], dim=1)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(60, 4, dtype=torch.float64, generator=gen)
    x[30:] *= 1e4
    batch = torch.cat([torch.zeros(30), torch.ones(30)]).long()
    torch.manual_seed(0)
    layer = RegularizerConv(4, 3, regularizer, bias=False).double()
    expected = layer(x, edges, batch=batch)
    set_masks(layer, torch.ones(edges.size(1), dtype=torch.float64), edges,
              apply_sigmoid=False)
    try:
        got = layer(x, edges, batch=batch)
    finally:
        clear_masks(layer)
    # Both solve each graph to CG's tol 1e-6 (times a condition below 10); the
    # masked graph without batch= was 5e-3 off.
    small = slice(0, 30)
    assert float((got[small] - expected[small]).norm() / expected[small].norm()) < 1e-5
