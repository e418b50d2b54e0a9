r"""directed_adjacency against a dense float64 construction of Dir-GNN's
normalisation, and its errors."""
import pytest
import torch

from torch_geometric_regcn.linalg import directed_adjacency


def dense_reference(edge_index, num_nodes, edge_weight=None):
    r"""P_in[i, j] = sum of w over the edges j -> i / sqrt(d_in(i) d_out(j)),
    entry by entry in float64."""
    weight = (torch.ones(edge_index.size(1), dtype=torch.float64) if edge_weight is None
              else edge_weight.double())
    a = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)  # a[j, i]: edges j -> i
    a.index_put_((edge_index[0], edge_index[1]), weight, accumulate=True)
    d_out, d_in = a.sum(1), a.sum(0)
    p_in = torch.zeros_like(a)
    for i in range(num_nodes):
        for j in range(num_nodes):
            if a[j, i] > 0:
                p_in[i, j] = a[j, i] / torch.sqrt(d_in[i] * d_out[j])
    return p_in


# A directed graph with a repeated edge, a self loop, a node with no in-edge (0),
# one with no out-edge (5) and an isolated node (6).
EDGES = torch.tensor([[0, 1, 2, 3, 1, 1, 4, 0, 3],
                      [1, 2, 3, 1, 4, 4, 4, 5, 5]])


@pytest.mark.parametrize('weighted', [False, True])
def test_both_directions_equal_the_dense_normalisation(weighted):
    weight = torch.rand(EDGES.size(1), dtype=torch.float64) + 0.1 if weighted else None
    p_in = dense_reference(EDGES, 7, weight)
    got_in = directed_adjacency(EDGES, 7, weight, torch.float64, 'in').to_dense()
    got_out = directed_adjacency(EDGES, 7, weight, torch.float64, 'out').to_dense()
    # Each entry is one product, one square root and one division of sums of at
    # most 9 weights: a few units of float64 rounding.
    torch.testing.assert_close(got_in, p_in, atol=1e-14, rtol=0)
    torch.testing.assert_close(got_out, p_in.T, atol=1e-14, rtol=0)
    assert got_in[0].abs().sum() == 0 and got_out[5].abs().sum() == 0  # no in / out edges
    assert got_in[6].abs().sum() == 0 and got_in[:, 6].abs().sum() == 0
    # Schur's test: the spectral norm is at most one, so Neumann series converge.
    assert torch.linalg.matrix_norm(got_in, 2) <= 1 + 1e-12


def test_dtype_and_errors():
    assert directed_adjacency(EDGES, 7).dtype == torch.float32
    with pytest.raises(ValueError, match="'direction'"):
        directed_adjacency(EDGES, 7, direction='both')
    with pytest.raises(ValueError, match='non-negative.*drop or rescale the negative'):
        directed_adjacency(EDGES, 7, -torch.ones(EDGES.size(1)))
    # Any integer index passes the check (scatter refused int16 with its own error).
    expected = directed_adjacency(EDGES, 7).to_dense()
    for dtype in (torch.int16, torch.uint8, torch.int32):
        assert torch.equal(directed_adjacency(EDGES.to(dtype), 7).to_dense(), expected)
    with pytest.raises(ValueError, match='edge_index'):
        directed_adjacency(EDGES, 5)  # an index beyond num_nodes
    # A float64 weight finite there but not in float32 made inf / inf = NaN entries;
    # now the weights' ratios are what float32 cannot hold (1e-39: subnormal).
    weight = torch.ones(EDGES.size(1), dtype=torch.float64)
    weight[0] = 1e39
    with pytest.raises(ValueError, match="'edge_weight' spans more than torch.float32 holds: "
                       "its smallest positive weight is 1e-39 times its largest"):
        directed_adjacency(EDGES, 7, weight, torch.float32)
    assert directed_adjacency(EDGES, 7, weight, torch.float64).values().isfinite().all()


@pytest.mark.parametrize('scale', [1e39, 1e-44, 1e-50])
def test_the_weights_scale_does_not_matter_in_float32(scale):
    # Dir-GNN's normalisation is invariant to the weights' scale. Cast to float32
    # first, float64 weights below its range became zeros (the graph lost every
    # edge), subnormal ones few-bit values (entries 0.014 off), large ones
    # infinities. Reference: the dense float64 construction of the unscaled
    # weights; each entry is w / sqrt(d_in d_out) of float32 values within one
    # rounding of the reference's, so within a few float32 eps (2.4e-7 at 1).
    weight = torch.rand(EDGES.size(1), dtype=torch.float64) + 0.1
    expected = dense_reference(EDGES, 7, weight)
    for direction, reference in (('in', expected), ('out', expected.T)):
        got = directed_adjacency(EDGES, 7, weight * scale, torch.float32, direction)
        torch.testing.assert_close(got.to_dense().double(), reference, atol=1e-6, rtol=0)


def test_an_edge_of_weight_zero_keeps_its_gradient():
    # Entries of weight 0 were dropped before the matrix was built, so autograd saw
    # only the degrees' part of their gradient: d P_in[2, 0] / d w = 0 for an edge
    # 0 -> 2 of weight 0 whose ends have other edges. Reference: the formula
    # P_in[2, 0] = w / sqrt(d_in(2) d_out(0)), whose derivative at w = 0 is
    # 1 / sqrt(d_in(2) d_out(0)) = 1 here (every other degree is one).
    edge_index = torch.tensor([[0, 1, 2, 3, 0], [1, 2, 3, 0, 2]])
    weight = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64, requires_grad=True)
    p_in = directed_adjacency(edge_index, 4, weight, dtype=torch.float64, direction='in')
    grad, = torch.autograd.grad(p_in.to_dense()[2, 0], weight)
    assert float(grad[4]) == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize('weight_dtype', [torch.float16, torch.bfloat16, torch.int64])
def test_weights_of_a_narrow_dtype_are_divided_in_float64(weight_dtype):
    # Divided by the largest in their own dtype, half-precision weights were
    # rounded again (5e-4 off in float32) and float16 weights spanning 6e4 to
    # 1e-3 were refused for a float64 operator (review s55/diff55). Reference:
    # the dense float64 construction of the same (exactly representable) weights.
    weight = torch.tensor([60000.0, 0.001, 1.0, 3.0, 2.0, 1.0, 5.0, 7.0, 1.0])
    if weight_dtype == torch.int64:
        weight = weight.clamp_min(1.0)
    weight = weight.to(weight_dtype)
    expected = dense_reference(EDGES, 7, weight.double())
    got = directed_adjacency(EDGES, 7, weight, torch.float64, 'in').to_dense()
    torch.testing.assert_close(got, expected, atol=1e-14, rtol=0)
