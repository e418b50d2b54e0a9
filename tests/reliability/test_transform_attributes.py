r"""What the transforms write into a graph (one policy, in
torch_geometric_regcn/transforms/attributes.py): never PyG's standard
attributes, never what they read or what another transform owns; under their
default names an earlier output is replaced; under a name the user chose an
existing attribute raises before any work, and the graph is left as it was."""
import pytest
import torch
import torch.distributed as dist
from torch_geometric.data import Data

from tests.distributed.launch import requires_gloo, run_ranks
from torch_geometric_regcn import (
    LaplacianEigenPE,
    LowRankInverse,
    PropagateFeatures,
    SemanticGraph,
)
from torch_geometric_regcn.datasets import contextual_sbm, paper_split
from torch_geometric_regcn.distributed import partition

N, F = 50, 6


def graph():
    data = contextual_sbm(N, 3, F, seed=0)
    data.edge_weight = torch.rand(data.edge_index.size(1),
                                  generator=torch.Generator().manual_seed(0)) + 0.5
    return paper_split(data, 3, 10, 10)


def prepared():
    data = SemanticGraph(4, progress=False)(graph())
    return LowRankInverse(1.0, 0.3, rank=6, progress=False)(data)


class Snapshot:
    r"""A copy of a value that compares equal to the value only while its
    type, dtype, shape and every entry are the same."""
    def __init__(self, value):
        self.value = value.clone() if isinstance(value, torch.Tensor) else value

    def __eq__(self, other):
        a, b = self.value, other.value
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
                    and torch.equal(a, b))
        return type(a) is type(b) and a == b


def state(data):
    return {key: Snapshot(value) for key, value in data.to_dict().items()}


def pe_fails(*args, **kwargs):
    raise AssertionError('the eigensolver ran although the attribute check should fail first')


# (id, constructor, regex naming the attribute and the fix)
REFUSED_NAMES = [
    ('pe-x', lambda: LaplacianEigenPE(3, attr_name='x'),
     r"'attr_name' would make LaplacianEigenPE write 'data.x', one of PyG's standard "
     r"attributes.*choose another name; attr_name=None concatenates the encoding to data.x"),
    ('pe-edge-index', lambda: LaplacianEigenPE(3, attr_name='edge_index'),
     r"write 'data.edge_index', one of PyG's standard attributes"),
    ('pe-edge-weight', lambda: LaplacianEigenPE(3, attr_name='edge_weight'),
     r"write 'data.edge_weight', one of PyG's standard attributes"),
    ('pe-y', lambda: LaplacianEigenPE(3, attr_name='y'), r"write 'data.y', one of PyG's"),
    ('pe-pos', lambda: LaplacianEigenPE(3, attr_name='pos'), r"write 'data.pos', one of PyG's"),
    ('pe-train-mask', lambda: LaplacianEigenPE(3, attr_name='train_mask'),
     r"write 'data.train_mask', one of PyG's"),
    ('pe-batch', lambda: LaplacianEigenPE(3, attr_name='batch'), r"write 'data.batch'"),
    ('pe-semantic', lambda: LaplacianEigenPE(3, attr_name='semantic_edge_index'),
     r"write 'data.semantic_edge_index', where SemanticGraph stores the semantic graph; "
     r"choose another name"),
    ('pe-lowrank', lambda: LaplacianEigenPE(3, attr_name='lowrank_w'),
     r"where LowRankInverse stores the low-rank factors"),
    ('pe-propagated', lambda: LaplacianEigenPE(3, attr_name='x2'),
     r"write 'data.x2', where PropagateFeatures stores propagated features"),
    ('pe-partition', lambda: LaplacianEigenPE(3, attr_name='partition'),
     r"where distributed.partition stores a shard's row blocks"),
    ('pe-empty', lambda: LaplacianEigenPE(3, attr_name=''), r"'attr_name' must not be empty"),
]


@pytest.mark.parametrize('build, match', [case[1:] for case in REFUSED_NAMES],
                         ids=[case[0] for case in REFUSED_NAMES])
def test_standard_and_owned_names_are_refused_at_construction(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_attr_name_of_another_type_is_a_type_error():
    with pytest.raises(TypeError, match=r"'attr_name' must be a str"):
        LaplacianEigenPE(3, attr_name=3)


def test_a_chosen_name_that_exists_raises_before_any_work(monkeypatch):
    data = prepared()
    data.pe = torch.rand(N, 3)  # e.g. a random-walk encoding of the same shape
    before = state(data)
    monkeypatch.setattr(LaplacianEigenPE, 'eigenpairs', pe_fails)
    with pytest.raises(ValueError, match=r"^LaplacianEigenPE would overwrite 'data.pe' \(a "
                                         r"torch.float32 tensor of shape \[50, 3\]\): under a "
                                         r"name you choose it writes only to a free "
                                         r"attribute; pass another 'attr_name', or delete "
                                         r"the attribute first \(del data\['pe'\]\)$"):
        LaplacianEigenPE(3, attr_name='pe')(data)
    assert state(data) == before


def test_a_chosen_prefix_that_exists_raises_before_any_work(monkeypatch):
    data = prepared()
    data.exact2 = torch.arange(N)  # an attribute of the user's
    before = state(data)
    monkeypatch.setattr('torch_geometric_regcn.transforms.propagated_features.build_graph',
                        pe_fails)
    with pytest.raises(ValueError, match=r"PropagateFeatures would overwrite 'data.exact2' \(a "
                                         r"torch.int64 tensor of shape \[50\]\).*pass another "
                                         r"'prefix'"):
        PropagateFeatures(2, solver='cg', alpha=1.0, beta=0.3, prefix='exact')(data)
    assert state(data) == before
    monkeypatch.undo()
    PropagateFeatures(1, solver='cg', alpha=1.0, beta=0.3, prefix='exact')(data)  # exact1 free
    assert torch.equal(data.exact2, torch.arange(N))


# (id, attribute, a value of another form, transform, regex)
WRONG_FORM = [
    ('semantic-float', 'semantic_edge_index', torch.rand(2, 8),
     lambda: SemanticGraph(4, progress=False),
     r"^'data.semantic_edge_index' holds a torch.float32 tensor of shape \[2, 8\], not an "
     r"integer edge index \[2, num_edges\] as SemanticGraph writes there"),
    ('semantic-transposed', 'semantic_edge_index', torch.zeros(8, 2, dtype=torch.long),
     lambda: SemanticGraph(4, progress=False), r"'data.semantic_edge_index' holds a "),
    ('lowrank-int', 'lowrank_w', torch.arange(N),
     lambda: LowRankInverse(1.0, 0.3, rank=6, progress=False),
     r"^'data.lowrank_w' holds a torch.int64 tensor of shape \[50\], not a floating-point "
     r"matrix \[num_nodes, channels\] as LowRankInverse writes there"),
    ('lowrank-str', 'lowrank_v', 'cached elsewhere',
     lambda: LowRankInverse(1.0, 0.3, rank=6, progress=False),
     r"^'data.lowrank_v' holds a str, not a floating-point matrix"),
    ('pe-int', 'laplacian_eigenvector_pe', torch.zeros(N, 3, dtype=torch.long),
     lambda: LaplacianEigenPE(3), r"^'data.laplacian_eigenvector_pe' holds a torch.int64"),
    ('propagate-int', 'x1', torch.zeros(N, F, dtype=torch.long),
     lambda: PropagateFeatures(1), r"^'data.x1' holds a torch.int64 tensor of shape \[50, 6\]"),
]


@pytest.mark.parametrize('name, value, build, match', [case[1:] for case in WRONG_FORM],
                         ids=[case[0] for case in WRONG_FORM])
def test_a_default_name_holding_something_else_raises(name, value, build, match):
    data = prepared()
    data[name] = value
    before = state(data)
    with pytest.raises(ValueError, match=match):
        build()(data)
    assert state(data) == before


def fresh(transform, data):
    return transform(data.clone())


def test_a_second_application_replaces_its_own_output():
    # Each default name: applying again equals applying once to a graph without it.
    base = graph()
    once = SemanticGraph(6, progress=False)(base.clone())
    twice = SemanticGraph(6, progress=False)(SemanticGraph(3, progress=False)(base.clone()))
    assert torch.equal(twice.semantic_edge_index, once.semantic_edge_index)

    data = prepared()
    again = LowRankInverse(2.0, 0.1, rank=4, progress=False)(data.clone())
    del data.lowrank_w, data.lowrank_v
    expected = LowRankInverse(2.0, 0.1, rank=4, progress=False)(data)
    assert again.lowrank_w.shape == (N, 4)
    assert torch.equal(again.lowrank_w, expected.lowrank_w)
    assert torch.equal(again.lowrank_v, expected.lowrank_v)

    pe = LaplacianEigenPE(4)(LaplacianEigenPE(2)(base.clone()))
    assert torch.equal(pe.laplacian_eigenvector_pe,
                       LaplacianEigenPE(4)(base.clone()).laplacian_eigenvector_pe)

    data = prepared()
    twice = PropagateFeatures(2)(PropagateFeatures(2, solver='cg', alpha=1.0, beta=0.3)(
        data.clone()))
    once = PropagateFeatures(2)(data.clone())
    assert torch.equal(twice.x1, once.x1) and torch.equal(twice.x2, once.x2)


def test_pyg_sign_outputs_are_replaced_like_its_own():
    # x1, x2 are also the names of PyG's SIGN: the same kind of value, replaced.
    data = prepared()
    data.x1 = data.x.clone()
    out = PropagateFeatures(1)(data)
    w, v = data.lowrank_w.double(), data.lowrank_v.double()
    core = torch.eye(w.size(1), dtype=torch.float64) + v.T @ w
    expected = data.x.double() - w @ torch.linalg.solve(core, v.T @ data.x.double())
    # float32 products of [50, 6] factors: relative rounding ~1e-6.
    torch.testing.assert_close(out.x1.double(), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('transform', [
    lambda: SemanticGraph(4, progress=False),
    lambda: LowRankInverse(1.0, 0.3, rank=6, progress=False),
    lambda: LaplacianEigenPE(3),
    lambda: LaplacianEigenPE(3, attr_name='pe'),
    lambda: PropagateFeatures(2),
    lambda: PropagateFeatures(1, solver='cg', alpha=1.0, beta=0.3, prefix='exact'),
], ids=['semantic', 'lowrank', 'pe', 'pe-named', 'propagate', 'propagate-cg'])
def test_what_a_transform_reads_is_left_as_it_was(transform):
    data = prepared()
    t = transform()
    written = {'SemanticGraph': {'semantic_edge_index'},
               'LowRankInverse': {'lowrank_w', 'lowrank_v'},
               'LaplacianEigenPE': {getattr(t, 'attr_name', None)},
               'PropagateFeatures': {f'{getattr(t, "prefix", "")}{k}'
                                     for k in range(1, getattr(t, 'hops', 0) + 1)},
               }[type(t).__name__]
    before = state(data)
    out = t(data)
    after = state(out)
    assert set(after) - set(before) <= written
    for key, value in before.items():
        if key not in written:
            assert after[key] == value, key


def test_attr_name_none_extends_x_on_every_application():
    # The documented purpose of attr_name=None (as PyG): concatenate to data.x.
    data = graph()
    pe = LaplacianEigenPE(3)(data.clone()).laplacian_eigenvector_pe
    once = LaplacianEigenPE(3, attr_name=None)(data.clone())
    assert torch.equal(once.x, torch.cat([data.x, pe], dim=-1))
    twice = LaplacianEigenPE(3, attr_name=None)(once)
    assert torch.equal(twice.x, torch.cat([data.x, pe, pe], dim=-1))
    bare = LaplacianEigenPE(3, attr_name=None)(Data(edge_index=data.edge_index,
                                                    edge_weight=data.edge_weight, num_nodes=N))
    assert torch.equal(bare.x, pe)


def test_paper_split_replaces_masks_as_documented():
    data = graph()
    ones = torch.ones(N, dtype=torch.bool)
    data.train_mask = ones.clone()
    out = paper_split(data, 3, 10, 10, seed=1)
    expected = paper_split(contextual_sbm(N, 3, F, seed=0), 3, 10, 10, seed=1)
    assert torch.equal(out.train_mask, expected.train_mask)
    assert not bool(out.train_mask.all())


def _one_rank_holds_something_else(rank, world_size):
    group, out = dist.group.WORLD, {}
    data = contextual_sbm(120, 3, F, seed=1)
    shard = partition(data, world_size)[rank]
    if rank == 1:
        shard.semantic_edge_index = torch.rand(2, 5)
        shard.lowrank_w = torch.arange(shard.num_nodes)
    for name, transform in [('semantic', SemanticGraph(3, progress=False, group=group)),
                            ('lowrank', LowRankInverse(1.0, 0.0, 4, progress=False,
                                                       group=group))]:
        try:
            transform(shard)
        except ValueError as error:
            out[name] = str(error)
    return out


@pytest.mark.slow
@requires_gloo
def test_the_check_is_agreed_by_every_rank():
    # A rank whose shard holds another kind of value raises its own error, the
    # others a named one: none waits in a collective for it.
    results = run_ranks(_one_rank_holds_something_else, 2, timeout=120.0)
    assert "'data.semantic_edge_index' holds a torch.float32" in results[1]['semantic']
    assert 'SemanticGraph failed its checks on rank(s) [1] of 2' in results[0]['semantic']
    assert "'data.lowrank_w' holds a torch.int64" in results[1]['lowrank']
    assert 'LowRankInverse failed its checks on rank(s) [1] of 2' in results[0]['lowrank']
