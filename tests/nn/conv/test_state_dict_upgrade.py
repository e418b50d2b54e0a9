r"""Checkpoints of RegularizerConv saved by release 0.1 load into today's layer."""
import torch

from tests.nn.helpers import conv, setup
from torch_geometric_regcn import RegularizerGNN
from torch_geometric_regcn.nn.conv.state_dict_upgrade import upgrade_0_1_state_dict


def as_0_1(state, prefix=''):
    r"""Today's state dict in 0.1's layout: the gate was 'extra', the
    coefficients were not saved."""
    gate = prefix + 'regularizer.gate.'
    return {(prefix + 'extra.' + k[len(gate):] if k.startswith(gate) else k): v
            for k, v in state.items() if k != prefix + 'regularizer._extra_state'}


def test_a_0_1_checkpoint_gives_the_same_layer():
    x, ei = setup()
    layer = conv('dagnn', K=3, beta=0.5)
    layer(x, ei)  # materialises the gate
    again = conv('dagnn', K=3, beta=0.5)
    again(x, ei)
    again.load_state_dict(as_0_1(layer.state_dict()))
    torch.testing.assert_close(again(x, ei), layer(x, ei), rtol=0, atol=0)


def test_the_hook_renames_the_gate_under_a_prefix_and_keeps_the_coefficients():
    x, ei = setup()
    model = RegularizerGNN(5, 8, 3, regularizer='dagnn', K=2).double()
    model(x, ei)
    state = model.state_dict()
    old = as_0_1(state, 'convs.0.')
    assert 'convs.0.extra.weight' in old and 'convs.0.regularizer._extra_state' not in old
    upgrade_0_1_state_dict(model.convs[0], old, 'convs.0.')
    assert set(old) == set(state)
    assert old['convs.0.regularizer._extra_state'] == {
        'K': 2, 'beta': 1.0, 'adaptive': True,
        '_regularizer': 'DAGNNRegularizer'}
    assert old['convs.0.regularizer.gate.weight'] is state['convs.0.regularizer.gate.weight']


def test_todays_checkpoints_pass_unchanged():
    x, ei = setup()
    layer = conv('dagnn', K=3, beta=0.5)
    layer(x, ei)
    state = layer.state_dict()
    upgraded = dict(state)
    upgrade_0_1_state_dict(conv('dagnn', K=7), upgraded, '')
    assert upgraded.keys() == state.keys()
    assert all(upgraded[k] is state[k] for k in state)
