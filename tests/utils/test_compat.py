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


def test_no_module_calls_torch_compiler_is_compiling_directly():
    import pathlib

    import torch_geometric_regcn
    root = pathlib.Path(torch_geometric_regcn.__file__).parent
    offenders = [str(path.relative_to(root)) for path in root.rglob('*.py')
                 if path.name != 'compat.py'
                 and 'compiler.is_compiling' in path.read_text(encoding='utf-8')]
    assert offenders == []


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
