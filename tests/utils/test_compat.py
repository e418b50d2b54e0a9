import pytest
import torch

from torch_geometric_regcn.utils import compat


def test_is_compiling_is_false_eagerly_and_true_under_torch_compile():
    assert compat.is_compiling() is False

    def probe(x):
        return x + 1 if compat.is_compiling() else x - 1

    x = torch.zeros(3)
    assert torch.equal(probe(x), -torch.ones(3))
    torch._dynamo.reset()
    assert torch.equal(torch.compile(probe, fullgraph=True, backend='eager')(x), torch.ones(3))
    torch._dynamo.reset()


def test_is_compiling_falls_back_on_older_torch(monkeypatch):
    # torch 2.1 and 2.2 have torch._dynamo.is_compiling but no torch.compiler.is_compiling.
    monkeypatch.delattr(torch.compiler, 'is_compiling')
    assert compat._find_is_compiling() is torch._dynamo.is_compiling
    monkeypatch.delattr(torch._dynamo, 'is_compiling')
    assert compat._find_is_compiling() is None
    monkeypatch.setattr(compat, '_IS_COMPILING', None)
    assert compat.is_compiling() is False


def test_no_module_calls_torch_compiler_is_compiling_or_is_autocast_enabled_directly():
    import pathlib

    import torch_geometric_regcn
    root = pathlib.Path(torch_geometric_regcn.__file__).parent
    for call in ('compiler.is_compiling', 'is_autocast_enabled'):  # both moved in torch
        offenders = [str(path.relative_to(root)) for path in root.rglob('*.py')
                     if path.name != 'compat.py'
                     and call in path.read_text(encoding='utf-8')]
        assert offenders == [], call


@pytest.mark.parametrize('takes_reason', [True, False])
def test_compiler_disable_runs_eagerly_and_states_its_reason(monkeypatch, takes_reason):
    if not takes_reason:  # torch before the 'reason' argument
        disable = torch.compiler.disable
        monkeypatch.setattr(torch.compiler, 'disable',
                            lambda fn=None, recursive=True: disable(fn, recursive))

    @compat.compiler_disable(reason='runs eagerly for a test')
    def eager(x):
        assert not compat.is_compiling()
        return x * 2

    def outer(x):
        return eager(x + 1) - 1

    x = torch.arange(3.0)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(outer, backend='eager')(x), outer(x))
    torch._dynamo.reset()
    match = 'runs eagerly for a test' if takes_reason else 'disable'
    with pytest.raises(torch._dynamo.exc.Unsupported, match=match):
        torch.compile(outer, fullgraph=True, backend='eager')(x)
    torch._dynamo.reset()


def test_autocast_enabled_on_torch_2_3s_calls(monkeypatch):
    # The package declares torch >= 2.3, whose is_autocast_enabled takes no
    # argument (the device type came in 2.4): the layers' dtype check raised
    # torch's TypeError there, under autocast or not (review s55/utils).
    # Emulated: torch 2.3's signatures, checked against autocast's real state.
    from torch_geometric_regcn import RegularizerConv
    current = torch.is_autocast_enabled

    def no_argument():
        return current('cuda')

    monkeypatch.setattr(compat, '_IS_AUTOCAST_ENABLED', no_argument)
    monkeypatch.setattr(torch, 'is_autocast_cpu_enabled', lambda: current('cpu'))
    assert compat.autocast_enabled('cpu') is False
    with torch.autocast('cpu', dtype=torch.bfloat16):
        assert compat.autocast_enabled('cpu') is True
        conv = RegularizerConv(4, 3, 'appnp')
        out = conv(torch.randn(5, 4, dtype=torch.bfloat16), torch.tensor([[0, 1], [1, 0]]))
        assert out.shape == (5, 3)
    with pytest.raises(TypeError, match=r"'x' is torch.bfloat16 but the parameters"):
        conv(torch.randn(5, 4, dtype=torch.bfloat16), torch.tensor([[0, 1], [1, 0]]))
