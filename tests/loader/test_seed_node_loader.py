"""SeedNodeLoader: an epoch visits every input node once, a batch holds the
rows of its seed nodes (against indexing the whole graph's tensors) and no
edges, MiniBatchTSGCN trains from it exactly as from a loop over index
batches, in worker processes too, and the argument checks."""
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data, HeteroData
from torch_geometric.loader import NodeLoader

from tests.conftest import messy_graph
from torch_geometric_regcn import LowRankInverse, MiniBatchTSGCN, PropagateFeatures
from torch_geometric_regcn.loader import SeedNodeLoader, SeedNodeSampler

N, F_IN, HIDDEN, CLASSES, RANK = 50, 6, 5, 3, 8
#: The node-level attributes of graph(), sliced by the loader.
NODE_KEYS = ('x', 'y', 'lowrank_w', 'lowrank_v', 'x1', 'x2', 'train_mask')


def graph(seed=0):
    gen = torch.Generator().manual_seed(seed)
    data = Data(x=torch.randn(N, F_IN, dtype=torch.float64, generator=gen),
                edge_index=messy_graph(N, num_edges=3 * N, seed=seed), num_nodes=N,
                semantic_edge_index=messy_graph(N, num_edges=2 * N, seed=seed + 100),
                y=torch.randint(0, CLASSES, (N,), generator=gen))
    data.edge_weight = torch.rand(data.num_edges, generator=gen)
    data.train_mask = torch.rand(N, generator=gen) < 0.4
    data.name = 'a graph-level value'
    data = LowRankInverse(1.0, 0.3, rank=RANK, progress=False)(data)
    return PropagateFeatures(hops=2)(data)


def seeds(form, data):
    r"""``input_nodes`` in the given form, and the seed nodes they stand for."""
    mask = data.train_mask
    if form == 'mask':
        return mask, mask.nonzero().view(-1)
    if form == 'index':  # unsorted, one node twice
        index = torch.tensor([7, 3, 41, 3, 0, 49, 18, 25, 11, 30, 2])
        return index, index
    if form == 'list':
        return [4, 1, 9, 33], torch.tensor([4, 1, 9, 33])
    if form == 'bool list':  # a mask too (it was read as the indices 0 and 1)
        return mask.tolist(), mask.nonzero().view(-1)
    if form == 'typed':  # PyG's (node type, nodes); it failed converting None to a tensor
        return (None, torch.tensor([5, 2, 8])), torch.tensor([5, 2, 8])
    return None, torch.arange(N)


def test_a_uint8_mask_is_refused():
    # torch indexes with a uint8 tensor as a mask; as indices it would mean nodes 0 and 1.
    data = graph()
    with pytest.raises(TypeError, match=r"'input_nodes' must be a 1-D tensor of integer node "
                                        r"indices \(got torch.uint8.*for a boolean mask"):
        SeedNodeLoader(data, input_nodes=data.train_mask.to(torch.uint8), batch_size=4)


@pytest.mark.parametrize('form', ['mask', 'index', 'list', 'bool list', 'typed', 'none'])
@pytest.mark.parametrize('shuffle', [False, True])
def test_an_epoch_visits_every_input_node_once(form, shuffle):
    data = graph()
    input_nodes, expected = seeds(form, data)
    loader = SeedNodeLoader(data, input_nodes=input_nodes, batch_size=4, shuffle=shuffle)
    assert len(loader) == -(-expected.numel() // 4)
    orders = []
    for _ in range(2):
        batches = list(loader)
        assert [b.batch_size for b in batches[:-1]] == [4] * (len(batches) - 1)
        order = torch.cat([b.n_id for b in batches])
        if shuffle:
            assert torch.equal(order.sort().values, expected.sort().values)
        else:
            assert torch.equal(order, expected)
        orders.append(order)
    if shuffle and expected.numel() > 10:  # two epochs, two orders (odds 1 / 11! and less)
        assert not torch.equal(orders[0], orders[1])


@pytest.mark.parametrize('form', ['mask', 'index', 'none'])
def test_batches_hold_the_seed_rows_and_no_edges(form):
    data = graph()
    input_nodes, _ = seeds(form, data)
    seen = 0
    for batch in SeedNodeLoader(data, input_nodes=input_nodes, batch_size=6, shuffle=True):
        n_id = batch.n_id
        assert batch.batch_size == batch.num_nodes == n_id.numel() and n_id.dtype == torch.long
        for key in NODE_KEYS:  # the reference: the whole graph's tensors indexed by n_id
            assert torch.equal(batch[key], data[key][n_id]), key
        # input_id: the seeds' positions in input_nodes, their node indices for a mask
        # (PyG's rule).
        if form == 'mask':
            assert torch.equal(batch.input_id, n_id)
        else:
            assert torch.equal(seeds(form, data)[1][batch.input_id], n_id)
        # No edges: both edge indices are empty, edge-level attributes left out.
        assert batch.edge_index.shape == batch.semantic_edge_index.shape == (2, 0)
        assert batch.edge_index.dtype == batch.semantic_edge_index.dtype == torch.long
        assert 'edge_weight' not in batch and 'e_id' not in batch
        assert batch.name == data.name
        seen += 1
    assert seen > 1
    # The whole graph is left as it was.
    assert data.semantic_edge_index.size(1) == 2 * N + 4 and data.x.size(0) == N


@pytest.mark.parametrize('case', ['as many as edges', 'no edge_index, as many as nodes',
                                  'no edge_index', 'int32, as many as edges'])
def test_edge_indices_are_emptied_whatever_their_size(case):
    # PyG takes a [2, E'] tensor for an edge-level attribute when E' is the
    # number of edges (E' itself without edge_index) and drops it from the
    # batch: the loader must write the empty edge index all the same.
    gen = torch.Generator().manual_seed(3)
    data = Data(x=torch.randn(N, F_IN, generator=gen), y=torch.randint(0, CLASSES, (N,)))
    num_semantic = {'as many as edges': 3 * N, 'no edge_index, as many as nodes': N,
                    'no edge_index': 2 * N, 'int32, as many as edges': 3 * N}[case]
    if not case.startswith('no edge_index'):
        data.edge_index = torch.randint(0, N, (2, 3 * N), generator=gen)
    dtype = torch.int32 if case.startswith('int32') else torch.long
    data.semantic_edge_index = torch.randint(0, N, (2, num_semantic), generator=gen,
                                             dtype=dtype)
    assert data.num_edges == num_semantic or case.startswith('no edge_index, as many')
    for batch in SeedNodeLoader(data, batch_size=16, shuffle=True):
        assert batch.semantic_edge_index.shape == (2, 0)
        assert batch.semantic_edge_index.dtype == dtype
        assert torch.equal(batch.x, data.x[batch.n_id])
        if 'edge_index' in data:
            assert batch.edge_index.shape == (2, 0) and batch.edge_index.dtype == torch.long
        else:
            assert 'edge_index' not in batch
    assert data.semantic_edge_index.shape == (2, num_semantic)


def test_edge_indices_follow_the_graph_after_the_loader_was_built():
    # The loader holds data by reference: an edge index added later is emptied
    # as well (never the whole graph's edges in a batch), one deleted later is
    # not brought back.
    data = graph()
    loader = SeedNodeLoader(data, batch_size=16)
    data.knn_edge_index = torch.randint(0, N, (2, 33), dtype=torch.int32)
    del data.semantic_edge_index
    for batch in loader:
        assert batch.knn_edge_index.shape == (2, 0)
        assert batch.knn_edge_index.dtype == torch.int32
        assert 'semantic_edge_index' not in batch
        assert batch.edge_index.shape == (2, 0)


def test_transform_sees_the_batch_without_edges():
    data = graph()
    shapes = []

    def transform(batch):
        shapes.append(tuple(batch.semantic_edge_index.shape))
        batch.h = batch.x * 2
        return batch

    batch = next(iter(SeedNodeLoader(data, batch_size=5, transform=transform)))
    assert shapes == [(2, 0)]
    assert torch.equal(batch.h, 2 * data.x[:5])


def train(model, data, epochs):
    r"""Trains :obj:`model` one epoch per entry of :obj:`epochs`, a function
    that yields ``(x, w, v, n_id, y)`` per batch, and returns its parameters."""
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    model.refresh(data.x, data.lowrank_w, data.lowrank_v)
    for epoch in epochs:
        if model.summary == 'refresh':
            model.refresh(data.x, data.lowrank_w, data.lowrank_v)
        model.train()
        for x, w, v, n_id, y in epoch():
            optimizer.zero_grad()
            F.cross_entropy(model(x, w, v, n_id), y).backward()
            optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def fresh_model(summary):
    torch.manual_seed(0)
    return MiniBatchTSGCN(F_IN, HIDDEN, CLASSES, summary=summary).double()


@pytest.mark.parametrize('summary', ['refresh', 'history'])
def test_minibatch_tsgcn_trains_from_the_loader_as_from_index_batches(summary):
    data = graph()
    loader = SeedNodeLoader(data, input_nodes=data.train_mask, batch_size=4, shuffle=True,
                            generator=torch.Generator().manual_seed(1))
    orders = []

    def from_loader():
        orders.append([])
        for batch in loader:
            orders[-1].append(batch.n_id)
            yield batch.x, batch.lowrank_w, batch.lowrank_v, batch.n_id, batch.y

    got = train(fresh_model(summary), data, [from_loader] * 6)
    # The reference: the manual loop over the same seed orders, indexing the whole graph.
    train_nodes = data.train_mask.nonzero().view(-1)
    epochs = iter(orders)

    def by_hand():
        order = next(epochs)
        assert torch.equal(torch.cat(order).sort().values, train_nodes)
        x, w, v, y = data.x, data.lowrank_w, data.lowrank_v, data.y
        for batch in order:
            yield x[batch], w[batch], v[batch], batch, y[batch]

    expected = train(fresh_model(summary), data, [by_hand] * 6)
    assert len({tuple(torch.cat(o).tolist()) for o in orders}) == 6  # shuffled per epoch
    # The same float64 operations on the same numbers: equal up to a BLAS kernel
    # choosing another summation order for another memory alignment (a few ulps
    # per step, not amplified over 6 x 5 steps of Adam at these sizes).
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert not torch.equal(got[0], fresh_model(summary).convs[0].lin.weight.detach())


@pytest.mark.parametrize('filter_per_worker', [None, False, True])
def test_worker_processes_give_the_same_batches(filter_per_worker):
    data = graph()
    single = list(SeedNodeLoader(data, input_nodes=data.train_mask, batch_size=4))
    loader = SeedNodeLoader(data, input_nodes=data.train_mask, batch_size=4, num_workers=2,
                            filter_per_worker=filter_per_worker)
    # The documented default for data on the CPU: slice in the workers.
    assert loader.filter_per_worker is (True if filter_per_worker is None else filter_per_worker)
    workers = list(loader)
    assert len(workers) == len(single)
    for a, b in zip(single, workers):
        for key in NODE_KEYS + ('n_id',):
            assert torch.equal(a[key], b[key]), key
        assert b.semantic_edge_index.shape == (2, 0)


def test_the_batch_n_id_lets_the_model_check_the_rows():
    data = graph()
    model = fresh_model('refresh')
    model.refresh(data.x, data.lowrank_w, data.lowrank_v)
    batch = next(iter(SeedNodeLoader(data, batch_size=8, shuffle=True)))
    model(batch.x, batch.lowrank_w, batch.lowrank_v, batch.n_id)  # the rows of n_id
    batch.x[3, 0] += 1.0  # a batch row edited after refresh()
    with pytest.raises(ValueError, match="rows of 'x' are not those of the nodes 'n_id'"):
        model(batch.x, batch.lowrank_w, batch.lowrank_v, batch.n_id)
    # Mode B writes the rows of n_id: a batch and the model agree on the node indices.
    model = fresh_model('history')
    model.refresh(data.x, data.lowrank_w, data.lowrank_v)
    batch = next(iter(SeedNodeLoader(data, input_nodes=torch.tensor([9, 2, 40]),
                                     batch_size=3)))
    model.train()
    model(batch.x, batch.lowrank_w, batch.lowrank_v, batch.n_id)
    with torch.no_grad():
        model.eval()
        hidden = model.convs[0](data.x, data.lowrank_w, data.lowrank_v).relu()
    torch.testing.assert_close(model.history_1[[9, 2, 40]], hidden[[9, 2, 40]],
                               rtol=0, atol=1e-12)  # the same rows, in float64


def test_the_sampler_works_with_pyg_nodeloader():
    data = graph()
    batch = next(iter(NodeLoader(data, SeedNodeSampler(), input_nodes=torch.tensor([5, 1]),
                                 batch_size=2)))
    assert torch.equal(batch.n_id, torch.tensor([5, 1]))
    assert torch.equal(batch.x, data.x[[5, 1]]) and batch.edge_index.shape == (2, 0)
    with pytest.raises(NotImplementedError, match='seed nodes only.*LinkNeighborLoader'):
        SeedNodeSampler().sample_from_edges(None)


def test_sparse_coo_features_and_compressed_ones_refused():
    data = graph()
    dense = data.x.clone()
    dense[dense.abs() < 0.7] = 0.0
    data.x = dense.to_sparse()
    batch = next(iter(SeedNodeLoader(data, batch_size=9, shuffle=True)))
    assert batch.x.layout == torch.sparse_coo
    assert torch.equal(batch.x.to_dense(), dense[batch.n_id])
    data.x = dense.to_sparse_csr()  # index_select has no CSR kernel: refused up front
    with pytest.raises(TypeError, match=r"'data.x' is a torch.sparse_csr tensor.*to_sparse_coo"):
        SeedNodeLoader(data, batch_size=9)


def test_argument_checks_before_any_batch():
    data = graph()
    with pytest.raises(TypeError, match='takes one graph as a torch_geometric.data.Data'):
        SeedNodeLoader(HeteroData(), batch_size=2)
    with pytest.raises(ValueError, match="one entry per node \\[50\\] \\(got shape \\[49\\]"):
        SeedNodeLoader(data, input_nodes=data.train_mask[:-1])
    with pytest.raises(ValueError, match=r"'input_nodes' refers to nodes outside \[0, 49\]"):
        SeedNodeLoader(data, input_nodes=torch.tensor([3, 50]))
    with pytest.raises(ValueError, match=r"'input_nodes' refers to nodes outside"):
        SeedNodeLoader(data, input_nodes=torch.tensor([-1]))
    with pytest.raises(TypeError, match="'input_nodes' must be a 1-D tensor of integer"):
        SeedNodeLoader(data, input_nodes=torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="'transform' must be None or callable"):
        SeedNodeLoader(data, transform='x')
    with pytest.raises(TypeError, match="takes no 'num_neighbors'.*NeighborLoader"):
        SeedNodeLoader(data, num_neighbors=[0])
    # Names PyG gives each batch, which it would slice or overwrite.
    for key, value in [('n_id', torch.arange(N) + 100), ('batch_size', 7),
                       ('input_id', torch.arange(N))]:
        data = graph()
        data[key] = value
        with pytest.raises(ValueError, match=f"'data' holds an attribute '{key}'.*"
                                             f"del data.{key}"):
            SeedNodeLoader(data)


@pytest.mark.parametrize('key', ['batch', 'seed_time', 'num_sampled_nodes',
                                 'num_sampled_edges'])
def test_names_pyg_deletes_from_a_batch_are_refused(key):
    # PyG's NodeLoader sets these on each batch from the sampler's output, None here, which
    # deleted them: a Batch's graph-membership vector vanished from every mini-batch.
    data = graph()
    data[key] = torch.arange(N) // 10
    with pytest.raises(ValueError, match=f"'data' holds an attribute '{key}'.*rename it"):
        SeedNodeLoader(data, batch_size=4)


def test_per_node_values_pyg_would_not_slice_are_refused():
    # A per-node list failed at the first batch naming no attribute; an [N, k] tensor named
    # like an index (concatenated along its last dimension) reached every batch whole.
    data = graph()
    data.names = [f'node {i}' for i in range(N)]
    with pytest.raises(TypeError, match="'data.names' is a list with one entry per node"):
        SeedNodeLoader(data, batch_size=4)
    data = graph()
    data.knn_index = torch.arange(3 * N).view(N, 3)
    with pytest.raises(ValueError, match=r"'data.knn_index' has one row per node "
                                         r"\(shape \[50, 3\]\).*rename it"):
        SeedNodeLoader(data, batch_size=4)
    # A sparse adjacency 'adj' is not read as an index: accepted, passed to batches whole.
    adjacency = graph()
    adjacency.adj = torch.sparse_coo_tensor(adjacency.edge_index,
                                            torch.ones(adjacency.num_edges), (N, N))
    assert next(iter(SeedNodeLoader(adjacency, batch_size=4))).adj.shape == (N, N)
    data.knn_neighbours = data.pop('knn_index')  # renamed: its rows are sliced
    batch = next(iter(SeedNodeLoader(data, input_nodes=torch.tensor([4, 1]), batch_size=2)))
    assert torch.equal(batch.knn_neighbours, data.knn_neighbours[[4, 1]])



@pytest.mark.parametrize('form', [tuple, list])
def test_a_node_type_is_refused_naming_it(form):
    with pytest.raises(TypeError, match="homogeneous graphs.*node type 'paper'"):
        SeedNodeLoader(graph(), input_nodes=form(['paper', torch.tensor([1, 2])]),
                       batch_size=2)


def test_sparse_coo_features_with_worker_processes():
    # PyG's workers move each sliced attribute into shared memory, which a
    # sparse tensor has none of: the default crashed in the first batch
    # ("Cannot access storage of SparseTensorImpl"). They are sliced in the
    # main process now, and filter_per_worker=True is refused up front.
    data = graph()
    dense = data.x.clone()
    dense[dense.abs() < 0.7] = 0.0
    data.x = dense.to_sparse()
    loader = SeedNodeLoader(data, batch_size=9, num_workers=2)
    assert loader.filter_per_worker is False
    batches = list(loader)
    assert torch.equal(torch.cat([b.n_id for b in batches]), torch.arange(data.num_nodes))
    for batch in batches:
        assert torch.equal(batch.x.to_dense(), dense[batch.n_id])
    with pytest.raises(ValueError, match=r"'data.x' is a sparse COO.*filter_per_worker=False"):
        SeedNodeLoader(data, batch_size=9, num_workers=2, filter_per_worker=True)


@pytest.mark.parametrize('layout', [torch.sparse_csr, torch.sparse_coo, torch.strided])
def test_an_adj_t_tensor_is_refused_when_the_loader_is_built(layout):
    # T.ToSparseTensor() without torch-sparse stores 'adj_t' as a torch.sparse
    # tensor; PyG's filter_data takes that key for a torch_sparse.SparseTensor and
    # the first batch failed inside PyG ("'torch.device' object is not callable").
    data = Data(x=torch.randn(6, 2), num_nodes=6)
    adj = torch.eye(6)
    data.adj_t = adj if layout == torch.strided else (
        adj.to_sparse_csr() if layout == torch.sparse_csr else adj.to_sparse())
    with pytest.raises(TypeError, match=r"'data.adj_t' is a torch.Tensor.*del data.adj_t"):
        SeedNodeLoader(data, batch_size=2)
