r"""The affine regularisers of :mod:`torch_geometric_regcn.regularizers.spectral`:
what their energies are where they have no minimiser, and their coefficients' ranges."""
import pytest
import torch

from tests.regularizers.helpers import N, h_in, operators
from torch_geometric_regcn import regularizers as R


def test_jknet_is_a_saddle_point_where_adjacency_is_indefinite():
    reg = R.get('jknet')
    graph = operators(reg)
    lam, vec = torch.linalg.eigh(graph.adj.to_dense())
    assert lam.min() < 0
    x = h_in()
    h = reg.propagate(x, graph, 'closed')
    down = vec[:, :1].expand(-1, 3)  # the eigenvector of the most negative eigenvalue
    assert reg.energy(h + 1e-2 * down, x, graph) < reg.energy(h, x, graph)


@pytest.mark.parametrize('name', ['gcn', 'sgc'])
def test_gcn_energy_is_unbounded_below(name):
    """R = L̃ is singular (L̃ D̂^{1/2} 1 = 0 per component): no exact minimiser."""
    reg = R.get(name)
    graph = operators(reg)
    x = h_in()
    null = torch.zeros(N, dtype=torch.float64)
    null[1] = 1.0  # an isolated node: its row of L̃ is zero
    direction = null[:, None] * x[1:2]
    energies = [float(reg.energy(t * direction, x, graph)) for t in (1.0, 10.0, 100.0)]
    assert energies[0] > energies[1] > energies[2]
    assert energies[2] == pytest.approx(-100.0 * float(x[1].square().sum()))


@pytest.mark.parametrize('name, coefficients, message', [
    ('appnp', dict(alpha=0.0), "'alpha' must lie in \\(0.0, 1.0\\]"),
    ('appnp', dict(alpha=1.5), "'alpha'"),
    ('appnp', dict(K=0), "'K' must be a positive integer"),
    ('sgc', dict(K=1.5), "'K'"),
    ('jknet', dict(beta=-1.0), "'beta'"),
    ('dagnn', dict(beta=-0.1), "'beta'"),
    ('gnn_lf', dict(alpha=1.0, mu=0.5), '2 \\* mu \\+ 2 / alpha > 3'),
    ('gnn_lf', dict(mu=1.5), "'mu'"),
    ('gnn_hf', dict(alpha=2.0), "'alpha'"),
])
def test_coefficients_out_of_range(name, coefficients, message):
    with pytest.raises(ValueError, match=message):
        R.get(name, **coefficients)


def test_dagnn_adaptive_is_a_flag_fixed_at_construction():
    # The string 'False' built the gate (bool('False') is True); a later
    # adaptive = False kept it while repr and state said otherwise.
    with pytest.raises(TypeError, match="'adaptive' must be True or False"):
        R.get('dagnn', adaptive='False')
    gated, plain = R.get('dagnn'), R.get('dagnn', adaptive=False)
    assert gated.gate is not None and plain.gate is None
    gated.adaptive = True  # unchanged: allowed
    with pytest.raises(ValueError, match=r"fixed at construction .*\(adaptive=False\)"):
        gated.adaptive = False
    with pytest.raises(ValueError, match='fixed at construction'):
        gated.load_state_dict(plain.state_dict(), strict=False)
    assert gated.adaptive is True and gated.gate is not None


def test_adaptive_dagnn_reports_no_frequency_response():
    # Its gated propagation is not a function of A^ alone (per-node scores of
    # the input): the Neumann response it reported was 1.0 at lam = 1 where the
    # propagation's gain was 6.8 (review s45/quad). adaptive=False reports it.
    lam = torch.linspace(-1, 1, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match='no frequency response.*adaptive=False'):
        R.get('dagnn').frequency_response(lam)
    plain = R.get('dagnn', K=3, beta=0.5, adaptive=False)
    expected = sum(0.5**k / 1.5**(k + 1) * lam**k for k in range(4))
    torch.testing.assert_close(plain.frequency_response(lam), expected, rtol=0, atol=1e-15)


def test_a_fresh_dagnn_layer_saves_a_state_that_torch_load_reads(tmp_path):
    # The gate was lazy until the first call: a fresh layer's state_dict held
    # an UninitializedParameter, which torch.load(weights_only=True) refuses.
    # The layer knows the width it propagates, so the gate is built at once.
    from torch_geometric_regcn import RegularizerConv, RegularizerGNN
    for module in (RegularizerConv(8, 4, 'dagnn'), RegularizerGNN(8, 16, 4, 2, 'dagnn')):
        torch.save(module.state_dict(), tmp_path / 'state.pt')
        state = torch.load(tmp_path / 'state.pt', weights_only=True)
        gate = [key for key in state if key.endswith('gate.weight')]
        assert len(gate) == 1 and state[gate[0]].shape == (1, 4)
        copy = type(module)(*((8, 4) if isinstance(module, RegularizerConv)
                              else (8, 16, 4, 2)), 'dagnn')
        copy.load_state_dict(state)
        x, ei = h_in(8).float(), torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
        torch.testing.assert_close(copy.eval()(x, ei), module.eval()(x, ei), rtol=0, atol=0)
    alone = R.get('dagnn')  # used alone, the regulariser still infers its width
    assert torch.nn.parameter.is_lazy(alone.gate.weight)
