r"""Warnings whose text is the same on every call are given once per layer
(not once per call, not once per process); those that state a value
measured in the call are given on every call."""
import contextlib
import copy
import gc
import pickle
import warnings
import weakref

import pytest
import torch
from torch_geometric.data import Data

from tests.nn.helpers import F_IN, conv, setup
from torch_geometric_regcn import RegularizerGNN, SemanticGraph
from torch_geometric_regcn.utils.warn_once import warn_once

SEMANTIC = 'builds the semantic kNN graph'


@contextlib.contextmanager
def recording():
    r"""Records every warning given in the block (filter :obj:`"always"`, as
    pytest's capture: no deduplication by Python's filters)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        yield caught


def semantic_warnings(caught):
    return [w for w in caught if SEMANTIC in str(w.message)]


def tsgcn_layer():
    return conv('tsgcn', alpha=1.0, beta=0.4, k=3, solver='closed')


def test_semantic_graph_warning_once_per_layer_over_calls():
    x, ei = setup()
    first, second = tsgcn_layer(), tsgcn_layer()
    with recording() as caught:
        outs = [layer(x, ei) for layer in (first, second, first, second, first)]
    found = semantic_warnings(caught)
    assert len(found) == 2, [str(w.message) for w in caught]  # one per layer
    assert all(w.category is UserWarning and w.filename == __file__ for w in found)
    # The warning is all that changed: every call still builds the graph the
    # SemanticGraph transform builds (the reference), from its own input.
    sei = SemanticGraph(3)(Data(x=x)).semantic_edge_index
    torch.testing.assert_close(outs[0], first(x, ei, semantic_edge_index=sei), rtol=0, atol=0)
    torch.testing.assert_close(outs[4], outs[0], rtol=0, atol=0)


def test_semantic_graph_warning_once_per_layer_of_a_model():
    x, ei = setup()
    model = RegularizerGNN(F_IN, 8, 3, num_layers=2, regularizer='tsgcn', solver='closed',
                           alpha=1.0, beta=0.4, k=3).double()
    with recording() as caught:
        for _ in range(3):
            model(x, ei)
    assert len(semantic_warnings(caught)) == 2  # the two layers, once each over three calls
    assert all(w.filename == __file__ for w in semantic_warnings(caught))


def test_rule_reset_parameters_keeps_the_record_and_copies_warn_of_their_own():
    x, ei = setup()
    layer = tsgcn_layer()
    with recording() as caught:
        layer(x, ei)
    assert len(semantic_warnings(caught)) == 1
    layer.reset_parameters()  # the warning is about the call, not the parameters
    with recording() as caught:
        layer(x, ei)
    assert semantic_warnings(caught) == []
    for copied in (copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        with recording() as caught:
            copied(x, ei)
            copied(x, ei)
        assert len(semantic_warnings(caught)) == 1


def test_semantic_graph_warning_as_error_raises_on_every_call():
    x, ei = setup()
    layer = tsgcn_layer()
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        for _ in range(2):  # an error is not a warning given: the next call raises too
            with pytest.raises(UserWarning, match=SEMANTIC):
                layer(x, ei)


def test_no_semantic_graph_warning_where_the_layer_does_not_build_it():
    x, ei = setup()
    sei = SemanticGraph(3)(Data(x=x)).semantic_edge_index
    given, cached = tsgcn_layer(), conv('tsgcn', alpha=1.0, beta=0.4, k=3, solver='closed',
                                        cached=True)
    with recording() as caught:
        given(x, ei, semantic_edge_index=sei)
        cached(x, ei)
        cached(x, ei)
    assert semantic_warnings(caught) == []


def test_measured_cg_residual_warns_on_every_call():
    # A warning that states the residual reached in the call is not deduplicated.
    x, ei = setup()
    layer = conv('appnp', K=10, alpha=0.1, solver='cg', tol=1e-14, max_iter=1)
    with recording() as caught:
        layer(x, ei)
        layer(2 * x, ei)
    residual = [w for w in caught if 'Conjugate gradient stopped' in str(w.message)]
    assert len(residual) == 2


def test_warn_once_per_owner_and_key_and_holds_no_owner():
    class Owner:
        pass

    a, b = Owner(), Owner()
    with recording() as caught:
        given = [warn_once(a, 'k', 'first'), warn_once(a, 'k', 'first'),
                 warn_once(a, 'other', 'second'), warn_once(b, 'k', 'first')]
    assert given == [True, False, True, True]
    assert [str(w.message) for w in caught] == ['first', 'second', 'first']
    assert all(w.filename == __file__ for w in caught)  # the first line outside the library
    alive = weakref.ref(a)
    del a
    gc.collect()
    assert alive() is None


def test_warn_once_counts_an_explicit_stacklevel_from_its_caller():
    # warn_once runs eagerly behind torch.compile's disable wrapper: a stacklevel
    # still counts from the caller, as warnings.warn's does (the reference).
    class Owner:
        pass

    def inner(stacklevel):
        warn_once(Owner(), 'k', 'given', stacklevel=stacklevel)
        warnings.warn('given', stacklevel=stacklevel)

    for stacklevel in (1, 2):
        with recording() as caught:
            inner(stacklevel)
        mine, reference = caught  # 1: inner's lines, one apart; 2: the loop's line
        assert mine.filename == reference.filename == __file__
        assert mine.lineno == reference.lineno - (stacklevel == 1)
