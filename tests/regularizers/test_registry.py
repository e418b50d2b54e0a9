r"""Regularisers by name: :mod:`torch_geometric_regcn.regularizers.registry`."""
import pytest

from torch_geometric_regcn import regularizers as R


def test_registry_and_errors():
    assert sorted(R.REGISTRY) == sorted(['gcn', 'sgc', 'appnp', 'jknet', 'dagnn', 'gnn_lf',
                                         'gnn_hf', 'tsgcn', 'signed', 'polynomial', 'elastic',
                                         'airgnn', 'pgnn', 'robust'])
    with pytest.raises(ValueError, match="Unknown regularizer 'gat'.*'appnp'"):
        R.get('gat')
    assert isinstance(R.get(R.APPNPRegularizer, K=3), R.APPNPRegularizer)
    reg = R.APPNPRegularizer()
    assert R.get(reg) is reg
    with pytest.raises(ValueError, match='instance'):
        R.get(reg, K=3)


def test_built_ins_register_themselves_as_users_do():
    # The registry module knows no regulariser; each built-in class carries the
    # same @register a user's class does.
    import ast
    import inspect

    from torch_geometric_regcn.regularizers import polynomial, registry, signed, spectral, tsgcn
    imported = {node.module for node in ast.walk(ast.parse(inspect.getsource(registry)))
                if isinstance(node, ast.ImportFrom)}
    assert imported == {'typing', 'torch_geometric_regcn.regularizers.base'}
    for module in (spectral, tsgcn, signed, polynomial):
        tree = ast.parse(inspect.getsource(module))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and getattr(module, node.name).name:
                assert [ast.unparse(d) for d in node.decorator_list] == ['register']
                assert R.REGISTRY[getattr(module, node.name).name] is getattr(module, node.name)

    class Nameless(R.Regularizer):
        pass

    with pytest.raises(ValueError, match="Nameless needs a class attribute 'name'"):
        R.register(Nameless)

    @R.register
    class Tikhonov(R.Regularizer):
        name = 'test_tikhonov'

    try:
        assert isinstance(R.get('test_tikhonov'), Tikhonov)
        assert R.register(Tikhonov) is Tikhonov  # registering it again changes nothing

        class Elastic(R.Regularizer):
            name = 'elastic'

        with pytest.raises(ValueError, match="name 'elastic' of .*Elastic is taken by "
                                             "torch_geometric_regcn.regularizers.elastic"):
            R.register(Elastic)  # a built-in is never replaced silently
        assert R.REGISTRY['elastic'] is R.ElasticRegularizer
    finally:
        del R.REGISTRY['test_tikhonov']


def test_unknown_coefficient_is_a_type_error():
    with pytest.raises(TypeError):
        R.get('gcn', alpha=0.1)
    with pytest.raises(TypeError):
        R.get('appnp', beta=0.1)


def test_register_takes_regularizer_subclasses_only():
    # A class with a 'name' was registered and failed in the layer with an AttributeError.
    class NotARegularizer:
        name = 'not_a_regularizer'

    for cls in (NotARegularizer, int, R.APPNPRegularizer()):
        with pytest.raises(TypeError, match='register\\(\\) takes a subclass of .*Regularizer'):
            R.register(cls)
    assert 'not_a_regularizer' not in R.REGISTRY
