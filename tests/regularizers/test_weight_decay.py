r"""An optimizer that applies weight decay to learned coefficients warns once,
at its first step, naming them and the fix; it changes no number."""
import contextlib
import copy
import gc
import pickle
import warnings
import weakref

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from tests.nn.helpers import F_IN, setup
from torch_geometric_regcn import RegularizerConv, RegularizerGNN
from torch_geometric_regcn.regularizers import Regularizer, param_groups, weight_decay

DECAY = 'learned regulariser coefficients'


@contextlib.contextmanager
def recording():
    r"""Records every warning given in the block (filter :obj:`"always"`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        yield caught


def decay_warnings(caught):
    return [w for w in caught if DECAY in str(w.message)]


def model(seed=0):
    torch.manual_seed(seed)
    return RegularizerGNN(F_IN, 8, 3, num_layers=2, regularizer='appnp', solver='closed',
                          K=10, alpha=0.1, learn=('alpha',)).double()


def train(net, optimizer, steps=3):
    x, ei = setup()
    for _ in range(steps):
        optimizer.zero_grad()
        net(x, ei).square().mean().backward()
        optimizer.step()


def raw_parameters(net):
    return [p for m in net.modules() if isinstance(m, Regularizer)
            for p in m.learned_parameters()]


def split(net, decay=5e-4):
    r"""The documented groups: the coefficients without weight decay."""
    raw = raw_parameters(net)
    rest = [p for p in net.parameters() if all(p is not q for q in raw)]
    return [{'params': rest, 'weight_decay': decay}, {'params': raw, 'weight_decay': 0.0}]


@pytest.mark.parametrize('make, decay', [
    (lambda params: torch.optim.Adam(params, lr=0.01, weight_decay=5e-4), '0.0005'),
    (lambda params: torch.optim.AdamW(params, lr=0.01), '0.01'),  # AdamW's default decay
    (lambda params: torch.optim.SGD(params, lr=0.01, weight_decay=0.1), '0.1')])
def test_decayed_coefficients_warn_once_naming_them(make, decay):
    net = model()
    optimizer = make(net.parameters())
    with recording() as caught:
        train(net, optimizer, steps=3)
    found = decay_warnings(caught)
    assert len(found) == 1, [str(w.message) for w in caught]
    message = str(found[0].message)
    name = type(optimizer).__name__
    assert message.startswith(f'{name} applies weight_decay={decay} to 1 raw parameter(s)')
    assert 'APPNPRegularizer.raw_alpha' in message  # the one decoupled layer's coefficient
    assert 'weight_decay=0' in message and f'param_groups(model, weight_decay={decay})' in message
    assert found[0].category is UserWarning and found[0].filename == __file__  # the step's line


def test_under_warnings_as_errors_every_step_raises():
    # The optimizer was marked checked before the warning: under "error" the
    # first step raised and the later ones decayed the coefficients silently.
    net = model()
    optimizer = torch.optim.Adam(net.parameters(), weight_decay=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        for _ in range(2):
            with pytest.raises(UserWarning, match='applies weight_decay=0.5'):
                train(net, optimizer, steps=1)


def test_names_every_raw_parameter_of_every_layer():
    x, ei = setup()
    net = RegularizerGNN(F_IN, 8, 3, num_layers=2, regularizer='jknet', solver='closed',
                         K=3, beta=0.5, learn=('beta',)).double()
    optimizer = torch.optim.Adam(net.parameters(), weight_decay=5e-4)
    with recording() as caught:
        net(x, ei).sum().backward()
        optimizer.step()
    (found,) = decay_warnings(caught)
    assert '2 raw parameter(s)' in str(found.message)
    assert '2 x JKNetRegularizer.raw_beta' in str(found.message)


def test_named_parameters_name_the_path():
    net = model()
    optimizer = torch.optim.Adam(net.named_parameters(), weight_decay=5e-4)
    if 'param_names' not in optimizer.param_groups[0]:
        pytest.skip('this torch keeps no parameter names in the optimizer')
    with recording() as caught:
        train(net, optimizer, steps=1)
    (found,) = decay_warnings(caught)
    assert 'convs.0.regularizer.raw_alpha' in str(found.message)


@pytest.mark.parametrize('groups', [
    split,  # the split written out
    lambda net: param_groups(net, weight_decay=5e-4),  # the helper (docs/learnable.md)
    lambda net: net.parameters(),  # no weight decay (Adam's default)
    lambda net: [{'params': net.parameters(), 'weight_decay': 0.0}]])
def test_no_warning_without_decay_on_the_coefficients(groups):
    net = model()
    with recording() as caught:
        train(net, torch.optim.Adam(groups(net), lr=0.01), steps=2)
    assert decay_warnings(caught) == []


def test_each_optimizer_warns_once_and_a_group_added_later_is_checked():
    net = model()
    groups = split(net)
    first = torch.optim.Adam([groups[0]], lr=0.01)  # the weights only
    with recording() as caught:
        train(net, first, steps=2)
    assert decay_warnings(caught) == []
    first.add_param_group({'params': groups[1]['params'], 'weight_decay': 0.1})
    second = torch.optim.AdamW(net.parameters(), lr=0.01)
    with recording() as caught:
        train(net, first, steps=2)
        train(net, second, steps=2)
        train(net, first, steps=1)
    assert [str(w.message).split()[0] for w in decay_warnings(caught)] == ['Adam', 'AdamW']


def test_copies_and_unpickled_models_are_watched():
    net = model()
    for other in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        with recording() as caught:
            train(other, torch.optim.Adam(other.parameters(), weight_decay=5e-4), steps=1)
        assert len(decay_warnings(caught)) == 1


def test_holds_no_reference_and_leaves_pickles_and_copies_alone():
    net = model()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01, weight_decay=5e-4)
    with recording() as caught:
        train(net, optimizer, steps=1)
    assert len(decay_warnings(caught)) == 1
    # Nothing of the check is attached to either: both pickle and copy, whole.
    for obj in (net, optimizer):
        copied, loaded = copy.deepcopy(obj), pickle.loads(pickle.dumps(obj))
        assert type(copied) is type(loaded) is type(obj)
    for a, b in zip(net.parameters(), pickle.loads(pickle.dumps(net)).parameters()):
        assert torch.equal(a, b)
    alive = weakref.ref(net), weakref.ref(optimizer)
    del net, optimizer, obj, copied, loaded
    gc.collect()
    assert alive[0]() is None and alive[1]() is None


def set_hook(on):
    if on and weight_decay._HOOK is None:
        weight_decay._HOOK = register_optimizer_step_pre_hook(weight_decay._step_pre_hook)
    elif not on and weight_decay._HOOK is not None:
        weight_decay._HOOK.remove()
        weight_decay._HOOK = None


@pytest.fixture
def restore_hook():
    yield
    set_hook(True)  # as after any learned regulariser (this module made some)


def test_the_hook_changes_no_number(restore_hook):
    # The same training without the hook (the reference) and with it, on a
    # learned model that warns and on a plain torch layer: equal to the bit.
    def run(make, hooked):
        torch.manual_seed(1)
        net = make()
        set_hook(hooked)  # after the model: learn() registers it
        optimizer = torch.optim.Adam(net.parameters(), lr=0.05, weight_decay=0.1)
        x, ei = torch.randn(setup()[0].size(0), F_IN, dtype=torch.float64), setup()[1]
        with recording() as caught:
            for _ in range(4):
                optimizer.zero_grad()
                out = net(x, ei) if isinstance(net, RegularizerGNN) else net(x)
                out.square().mean().backward()
                optimizer.step()
        assert len(decay_warnings(caught)) == (hooked and isinstance(net, RegularizerGNN))
        return [p.detach().clone() for p in net.parameters()], optimizer.state_dict()

    for make in (model, lambda: torch.nn.Linear(F_IN, 3).double()):
        without, hooked = run(make, hooked=False), run(make, hooked=True)
        for a, b in zip(without[0], hooked[0]):
            assert torch.equal(a, b)
        assert repr(without[1]) == repr(hooked[1])


def test_a_conv_alone_and_a_layer_without_learned_coefficients():
    x, ei = setup()
    alone = RegularizerConv(F_IN, 3, 'appnp', solver='closed', K=3, alpha=0.1,
                            learn=('alpha',)).double()
    fixed = RegularizerConv(F_IN, 3, 'appnp', solver='closed', K=3, alpha=0.1).double()
    with recording() as caught:
        for conv in (alone, fixed):
            optimizer = torch.optim.Adam(conv.parameters(), weight_decay=5e-4)
            conv(x, ei).sum().backward()
            optimizer.step()
    assert len(decay_warnings(caught)) == 1
    assert weight_decay.decayed_coefficients(
        torch.optim.Adam(fixed.parameters(), weight_decay=5e-4)) == []
    assert weight_decay.decayed_coefficients(
        torch.optim.Adam(alone.parameters(), weight_decay=5e-4)) == [
            ('APPNPRegularizer.raw_alpha', 5e-4)]


def test_param_groups_partition_the_parameters():
    # Against the model's parameter names: the raw coefficients are the
    # parameters named '...raw_alpha' (the learned one here), without decay;
    # every other parameter once, with it.
    net = model()
    groups = param_groups(net, weight_decay=5e-4)
    named = dict(net.named_parameters())
    raw = {name for name in named if name.endswith('.raw_alpha')}
    assert raw  # the model learns alpha
    assert [g['weight_decay'] for g in groups] == [5e-4, 0.0]
    assert {id(p) for p in groups[1]['params']} == {id(named[name]) for name in raw}
    assert {id(p) for p in groups[0]['params']} == \
        {id(p) for name, p in named.items() if name not in raw}
    assert sum(len(g['params']) for g in groups) == len(named)


def test_param_groups_checks_its_arguments():
    with pytest.raises(TypeError, match="'module' must be a torch.nn.Module"):
        param_groups(list(model().parameters()), weight_decay=0.1)
    for bad in (-1.0, float('nan')):
        with pytest.raises(ValueError, match="'weight_decay'"):
            param_groups(model(), weight_decay=bad)


def test_param_groups_without_coefficients_and_with_shared_ones():
    plain = RegularizerGNN(F_IN, 8, 3, regularizer='appnp', K=3, alpha=0.1)
    (group,) = param_groups(plain, weight_decay=0.1)  # no empty group
    assert group['weight_decay'] == 0.1 and len(group['params']) == len(list(plain.parameters()))
    conv = RegularizerConv(F_IN, 3, 'appnp', solver='closed', K=3, alpha=0.1, learn=('alpha',))
    twice = torch.nn.ModuleList([conv, conv])  # one layer reached twice
    rest, raw = param_groups(twice, weight_decay=0.1)
    assert [id(p) for p in raw['params']] == [id(conv.regularizer.raw_alpha)]
    assert len(rest['params']) == len(list(conv.parameters())) - 1


def test_several_decays_give_a_fix_that_is_code():
    # Two groups decay the coefficients differently: the fix must not paste
    # both values into one argument.
    net = model()
    raw = raw_parameters(net)
    rest = [p for p in net.parameters() if all(p is not q for q in raw)]
    optimizer = torch.optim.SGD([{'params': rest[:1] + raw, 'weight_decay': 1e-3},
                                 {'params': rest[1:], 'weight_decay': 5e-4}], lr=0.01)
    net2 = model(seed=1)
    raw2 = raw_parameters(net2)
    optimizer.add_param_group({'params': raw2, 'weight_decay': 5e-4})
    with recording() as caught:
        train(net, optimizer, steps=1)
    (found,) = decay_warnings(caught)
    message = str(found.message)
    assert 'weight_decay=0.001, 0.0005' in message  # what the optimizer applies
    assert 'param_groups(model, weight_decay=<your decay>)' in message
    assert message.split('weight_decay=0: ')[1].startswith('SGD(')
