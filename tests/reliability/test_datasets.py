"""Issue 19, datasets: inputs are checked up front with errors that name the
argument, processed files never unpickle code, and the harness leaves no
temporary directory behind."""
import os
import os.path as osp
import pathlib
import pickle
import tempfile
import warnings
import zipfile

import numpy as np
import pytest
import torch
from torch_geometric.data import Data, InMemoryDataset

import harness.data as harness_data
from harness.data import SHARED_DATA, has_offline_copy, load_paper_dataset, offline_root
from torch_geometric_regcn.datasets import ACM, contextual_sbm, load_dataset, paper_split
from torch_geometric_regcn.datasets.amgcn import AMGCNDataset

# A 4-node graph in the AM-GCN zip layout: features, labels, edges.
TOY_FEATURES = '1 0 1\n0 0 1\n1 1 0\n0 1 0\n'
TOY_LABELS = '0\n2\n1\n2\n'
TOY_EDGES = '0 1\n1 2\n3 1\n'


def write_zip(path, prefix: str, edge_file: str, features=TOY_FEATURES, labels=TOY_LABELS,
              edges=TOY_EDGES) -> None:
    os.makedirs(osp.dirname(path), exist_ok=True)
    with zipfile.ZipFile(path, 'w') as z:
        z.writestr(f'{prefix}/{prefix}.feature', features)
        z.writestr(f'{prefix}/{prefix}.label', labels)
        z.writestr(f'{prefix}/{edge_file}', edges)


def toy_acm_root(root) -> str:
    """A root holding a 4-node graph as ACM's raw zip."""
    write_zip(osp.join(root, 'ACM', 'raw', 'acm.zip'), 'acm', 'acm_PAP.edge')
    return str(root)


class Toy(AMGCNDataset):
    name, zip_name, prefix, edge_file = 'Toy', 'toy.zip', 'toy', 'toy.edge'


# 1. Arguments ################################################################


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(num_nodes=0), ValueError, "'num_nodes'"),
    (dict(num_nodes=-5), ValueError, "'num_nodes'"),
    (dict(num_nodes=100.0), ValueError, "'num_nodes'"),
    (dict(num_nodes=True), ValueError, "'num_nodes'"),
    (dict(num_nodes='100'), TypeError, "'num_nodes'"),
    (dict(num_classes=1), ValueError, "'num_classes'"),
    (dict(num_classes=0), ValueError, "'num_classes'"),
    (dict(num_classes=-3), ValueError, "'num_classes'"),
    (dict(num_classes=3.0), ValueError, "'num_classes'"),
    (dict(num_nodes=10, num_classes=11), ValueError, "'num_classes'.*'num_nodes'"),
    (dict(num_features=0), ValueError, "'num_features'"),
    (dict(num_features=-1), ValueError, "'num_features'"),
    (dict(num_features=2.5), ValueError, "'num_features'"),
    (dict(avg_degree=-1.0), ValueError, "'avg_degree'"),
    (dict(avg_degree=float('nan')), ValueError, "'avg_degree'"),
    (dict(avg_degree=float('inf')), ValueError, "'avg_degree'"),
    (dict(avg_degree='8'), TypeError, "'avg_degree'"),
    (dict(avg_degree=True), TypeError, "'avg_degree'"),
    (dict(homophily=1.5), ValueError, "'homophily'"),
    (dict(homophily=-0.1), ValueError, "'homophily'"),
    (dict(homophily=float('nan')), ValueError, "'homophily'"),
    (dict(homophily=None), TypeError, "'homophily'"),
    (dict(signal=-1.0), ValueError, "'signal'"),
    (dict(signal=float('nan')), ValueError, "'signal'"),
    (dict(signal=float('inf')), ValueError, "'signal'"),
    (dict(seed=1.5), ValueError, "'seed'"),
    (dict(seed=True), ValueError, "'seed'"),
])
def test_contextual_sbm_rejects_bad_arguments(kwargs, error, match):
    kwargs = {'num_nodes': 100, **kwargs}
    with pytest.raises(error, match=match):
        contextual_sbm(**kwargs)


def test_contextual_sbm_accepts_numpy_scalars_and_draws_as_before():
    data = contextual_sbm(60, num_classes=3, num_features=4, avg_degree=3.0, homophily=0.7,
                          signal=1.5, seed=11)
    # Pinned from the code before the checks were added: the same random draws.
    assert data.edge_index.size(1) == 166
    # float32 normal draws differ in their last bits between ATen's vectorised
    # (AVX2/AVX-512) and scalar kernels: 240 draws of a few ulps each move the sum
    # by up to ~1e-5; a changed draw sequence moves it by O(0.1). The integer
    # draws below are pinned exactly.
    assert float(data.x.double().sum()) == pytest.approx(-3.1229436435, abs=1e-5)
    assert data.y[:12].tolist() == [0, 0, 1, 2, 0, 0, 2, 1, 1, 2, 2, 1]
    assert data.edge_index[:, :6].tolist() == [[0, 0, 0, 0, 0, 1], [12, 14, 22, 36, 40, 17]]
    again = contextual_sbm(np.int64(60), num_classes=np.int32(3), num_features=np.int64(4),
                           avg_degree=np.float64(3.0), homophily=np.float32(0.7),
                           signal=np.float64(1.5), seed=np.int64(11))
    for key in ('x', 'edge_index', 'y'):
        assert torch.equal(again[key], data[key])
    assert contextual_sbm(60, 3, 4, avg_degree=3, homophily=1, signal=0).num_nodes == 60


def split_graph(num_nodes: int = 60) -> Data:
    return contextual_sbm(num_nodes, num_classes=3, num_features=4, avg_degree=3.0,
                          homophily=0.7, signal=1.5, seed=11)


def test_paper_split_without_labels_says_so():
    data = Data(x=torch.randn(5, 2), edge_index=torch.tensor([[0, 1], [1, 0]]))
    with pytest.raises(ValueError, match=r"'data\.y'.*label"):
        paper_split(data)
    data.y = None
    with pytest.raises(ValueError, match=r"'data\.y'.*label"):
        paper_split(data)


@pytest.mark.parametrize('y, error, match', [
    (torch.tensor([0, 1, -1, 2, 1, 0]), ValueError, 'negative'),
    (torch.tensor([0., 1., 1., 2., 1., 0.]), TypeError, r"'data\.y'.*integer"),
    (torch.zeros(6, 3, dtype=torch.long), ValueError, r"'data\.y'.*one label per node"),
    (torch.tensor([0, 1, 2, 1]), ValueError, r"'data\.y'.*6 nodes"),
    ([0, 1, 2, 1, 0, 2], TypeError, r"'data\.y'.*tensor"),
])
def test_paper_split_rejects_bad_labels(y, error, match):
    data = Data(x=torch.randn(6, 2), y=y)
    with pytest.raises(error, match=match):
        paper_split(data, num_train_per_class=1, num_val=1, num_test=1)


def test_paper_split_rejects_what_is_not_a_graph():
    with pytest.raises(TypeError, match="'data'"):
        paper_split({'y': torch.tensor([0, 1])})


@pytest.mark.parametrize('kwargs, error, match', [
    (dict(num_train_per_class=-1), ValueError, "'num_train_per_class'"),
    (dict(num_train_per_class=0), ValueError, "'num_train_per_class'"),
    (dict(num_train_per_class=2.0), ValueError, "'num_train_per_class'"),
    (dict(num_train_per_class=True), ValueError, "'num_train_per_class'"),
    (dict(num_val=-5), ValueError, "'num_val'"),
    (dict(num_val=1.5), ValueError, "'num_val'"),
    (dict(num_test=-1), ValueError, "'num_test'"),
    (dict(num_test=False), ValueError, "'num_test'"),
    (dict(seed=0.5), ValueError, "'seed'"),
    (dict(num_val=50, num_test=50), ValueError, "'num_val'.*'num_test'.*60 nodes"),
])
def test_paper_split_rejects_bad_sizes(kwargs, error, match):
    kwargs = {'num_train_per_class': 2, 'num_val': 10, 'num_test': 20, **kwargs}
    data = split_graph()
    with pytest.raises(error, match=match):
        paper_split(data, **kwargs)
    assert 'train_mask' not in data  # nothing written before the error


def test_paper_split_accepts_numpy_scalars_and_draws_as_before():
    # Pinned from the code before the checks were added.
    expected = {
        'train_mask': [5, 10, 11, 19, 41, 44],
        'val_mask': [9, 13, 18, 22, 23, 30, 34, 35, 48, 58],
        'test_mask': [1, 3, 6, 12, 14, 16, 17, 20, 21, 24, 25, 26, 27, 32, 36, 38, 39, 51, 57,
                      59],
    }
    for ints in (int, np.int64):
        data = paper_split(split_graph(), num_train_per_class=ints(2), num_val=ints(10),
                           num_test=ints(20), seed=ints(4))
        for key, nodes in expected.items():
            assert data[key].nonzero().view(-1).tolist() == nodes
    # Still fine: all of a class smaller than num_train_per_class, no validation nodes.
    data = paper_split(split_graph(), num_train_per_class=1000, num_val=0, num_test=0)
    assert bool(data.train_mask.all()) and not bool(data.val_mask.any())


def test_load_dataset_name_errors():
    with pytest.raises(TypeError, match="'name'.*Cora"):
        load_dataset(5, '.')
    with pytest.raises(ValueError, match="unknown dataset 'Reddit'.*Cora, CiteSeer.*UAI"):
        load_dataset('Reddit', '.')
    with pytest.raises(ValueError, match="did you mean 'Cora'"):
        load_dataset('Corra', '.')


@pytest.mark.parametrize('root, error', [
    (5, TypeError), (None, TypeError), (b'data', TypeError), ('', ValueError),
])
def test_load_dataset_root_errors(root, error):
    # None made PyG download Cora into a folder named '???'.
    with pytest.raises(error, match="'root'"):
        load_dataset('Cora', root)
    with pytest.raises(error, match="'root'"):
        ACM(root)


def test_load_dataset_transform_errors_come_before_any_file_work(tmp_path):
    root = tmp_path / 'never'
    with pytest.raises(TypeError, match="'transform'.*callable"):
        load_dataset('ACM', str(root), transform='NormalizeFeatures')
    with pytest.raises(TypeError, match="'pre_transform'.*callable"):
        load_dataset('Cora', str(root), pre_transform=5)
    assert not root.exists()


def test_load_dataset_accepts_path_like_roots(tmp_path):
    data = load_dataset('ACM', pathlib.Path(toy_acm_root(tmp_path)))[0]
    assert data.y.tolist() == [0, 2, 1, 2]


# 2. Processed files are loaded with weights_only=True #########################


class Planted:
    """Unpickling calls open(marker, 'w'): the marker's existence means code ran."""
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (self.marker, 'w')


def plant(path: str, marker: str, how: str) -> None:
    os.makedirs(osp.dirname(path), exist_ok=True)
    if how == 'torch.save':
        torch.save(Planted(marker), path)
    else:  # a bare pickle, which torch.load reads through its legacy path; protocol 2
        with open(path, 'wb') as f:  # is the one torch's weights_only unpickler parses
            pickle.dump(Planted(marker), f, protocol=2)


class PlainPyG(InMemoryDataset):
    """A dataset as PyG's documentation writes one: PyG reads its processed
    files itself, without vet_processed."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.load(self.processed_paths[0])

    @property
    def raw_file_names(self) -> list:
        return []

    @property
    def processed_file_names(self) -> list:
        return ['data.pt']

    def download(self) -> None:
        pass

    def process(self) -> None:
        data = Data(x=torch.ones(3, 1), edge_index=torch.tensor([[0, 1], [1, 2]]))
        self.save([data], self.processed_paths[0])


@pytest.mark.parametrize('file', ['data.pt', 'pre_transform.pt', 'pre_filter.pt'])
def test_pyg_itself_runs_a_planted_processed_file(tmp_path, file):
    """Why AMGCNDataset vets its processed files before PyG opens them: PyG's
    own dataset (the PyG of constraints.txt, 2.8.1) runs the code of a planted
    file. InMemoryDataset.load retries with weights_only=False when
    weights_only=True refuses a global (fs.torch_load), and Dataset._process
    reads pre_transform.pt and pre_filter.pt with weights_only=False. Should a
    PyG release stop doing so, this fails: vet_processed may then skip the file
    (test_amgcn_planted_processed_file_does_not_run is the guard's own test)."""
    import torch_geometric

    PlainPyG(str(tmp_path))  # processes once: all three files exist, and load
    marker = tmp_path / 'ran'
    plant(str(tmp_path / 'processed' / file), str(marker), 'torch.save')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # PyG's advice to allowlist; "pre_transform differs"
        try:
            PlainPyG(str(tmp_path))
        except AssertionError:  # data.pt: what ran returned a file, not the data (PyG asserts)
            assert file == 'data.pt'
    assert marker.exists(), (f'PyG {torch_geometric.__version__} no longer runs a planted '
                             f'processed/{file}')


@pytest.mark.parametrize('how', ['torch.save', 'pickle'])
@pytest.mark.parametrize('file', ['data.pt', 'pre_transform.pt', 'pre_filter.pt'])
def test_amgcn_planted_processed_file_does_not_run(tmp_path, file, how):
    write_zip(tmp_path / 'Toy' / 'raw' / 'toy.zip', 'toy', 'toy.edge')
    expected = Toy(str(tmp_path))[0]  # processes once: all processed files exist
    marker = tmp_path / 'ran'
    path = osp.join(tmp_path, 'Toy', 'processed', file)
    plant(path, str(marker), how)
    with pytest.warns(UserWarning, match=f"{file}.*weights_only=True.*processed again"):
        data = Toy(str(tmp_path))[0]
    assert not marker.exists()
    for key in ('x', 'edge_index', 'y'):
        assert torch.equal(data[key], expected[key])
    # The planted file was replaced: the next load is silent.
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        Toy(str(tmp_path))
    assert not marker.exists()


def test_load_dataset_acm_planted_processed_file_does_not_run(tmp_path):
    root = toy_acm_root(tmp_path)
    marker = tmp_path / 'ran'
    plant(osp.join(root, 'ACM', 'processed', 'data.pt'), str(marker), 'torch.save')
    with pytest.warns(UserWarning, match='weights_only=True'):
        data = load_dataset('ACM', root)[0]
    assert not marker.exists() and data.num_nodes == 4


def test_amgcn_load_has_no_unsafe_fallback(tmp_path):
    write_zip(tmp_path / 'Toy' / 'raw' / 'toy.zip', 'toy', 'toy.edge')
    dataset = Toy(str(tmp_path))
    marker = tmp_path / 'ran'
    path = str(tmp_path / 'planted.pt')
    plant(path, str(marker), 'torch.save')
    with pytest.raises(RuntimeError, match='weights_only=True.*add_safe_globals'):
        dataset.load(path)
    assert not marker.exists()


def write_corafull_npz(root) -> None:
    sp = pytest.importorskip('scipy.sparse')
    attr = sp.csr_matrix(np.eye(5, 4, dtype=np.float32))
    adj = sp.csr_matrix((np.ones(4, dtype=np.float32), ([0, 1, 2, 3], [1, 2, 2, 4])),
                        shape=(5, 5))
    os.makedirs(osp.join(root, 'cora', 'raw'))
    np.savez(osp.join(root, 'cora', 'raw', 'cora.npz'), attr_data=attr.data,
             attr_indices=attr.indices, attr_indptr=attr.indptr,
             attr_shape=np.array(attr.shape), adj_data=adj.data, adj_indices=adj.indices,
             adj_indptr=adj.indptr, adj_shape=np.array(adj.shape),
             labels=np.array([0, 1, 1, 2, 0]))


@pytest.mark.parametrize('file', ['data_undirected.pt', 'pre_transform.pt'])
def test_load_dataset_vets_pyg_processed_files(tmp_path, file):
    write_corafull_npz(tmp_path)
    expected = load_dataset('CoraFull', str(tmp_path))[0]
    marker = tmp_path / 'ran'
    plant(osp.join(tmp_path, 'cora', 'processed', file), str(marker), 'torch.save')
    with pytest.warns(UserWarning, match=f"{file}.*weights_only=True.*processed again"):
        data = load_dataset('CoraFull', str(tmp_path))[0]
    assert not marker.exists()
    assert torch.equal(data.edge_index, expected.edge_index)


def test_load_dataset_vets_planetoid_processed_files(tmp_path):
    if not has_offline_copy('Cora'):
        pytest.skip(f'Cora is not in {SHARED_DATA}')
    root = offline_root('Cora', str(tmp_path))
    marker = tmp_path / 'ran'
    plant(osp.join(root, 'Cora', 'processed', 'data.pt'), str(marker), 'pickle')
    with pytest.warns(UserWarning, match='weights_only=True'):
        data = load_dataset('Cora', root)[0]
    assert not marker.exists() and data.num_nodes == 2708


@pytest.mark.parametrize('name', ['Cora', 'CiteSeer', 'PubMed', 'BlogCatalog', 'Flickr'])
def test_the_vetted_file_is_the_one_pyg_opens(shared_root, name):
    from torch_geometric_regcn.datasets.registry import _PYG_PROCESSED

    root = shared_root(name)  # skips when the raw files are not in ../shared/data
    dataset = load_dataset(name, root)
    folder, file = _PYG_PROCESSED[name]
    assert dataset.processed_paths[0] == osp.join(root, folder, 'processed', file)


@pytest.mark.parametrize('obj', [load_dataset, ACM])
def test_root_docs_say_to_trust_the_folder(obj):
    assert 'trust' in obj.__doc__ and 'weights_only' in obj.__doc__


# 3. The harness leaves no temporary directory behind ##########################


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Points the tempfile module at an empty folder of this test and records
    every directory made by tempfile.mkdtemp (which TemporaryDirectory uses)."""
    folder = tmp_path / 'tmp'
    folder.mkdir()
    monkeypatch.setattr(tempfile, 'tempdir', str(folder))
    made = []
    mkdtemp = tempfile.mkdtemp

    def recording(*args, **kwargs):
        made.append(mkdtemp(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(tempfile, 'mkdtemp', recording)
    return folder, made


def assert_cleaned(private_tmp) -> None:
    folder, made = private_tmp
    assert made, 'load_paper_dataset made no temporary root: the check would be vacuous'
    assert all(osp.dirname(path) == str(folder) for path in made)
    leftovers = [path for path in made if osp.exists(path)]
    assert not leftovers and not os.listdir(folder), f'left behind: {os.listdir(folder)}'


def fake_shared(tmp_path, **zip_kwargs) -> str:
    shared = tmp_path / 'shared'
    write_zip(shared / 'AM-GCN' / 'acm.zip', 'acm', 'acm_PAP.edge', **zip_kwargs)
    return str(shared)


def test_load_paper_dataset_removes_its_temporary_root(tmp_path, private_tmp):
    data = load_paper_dataset('ACM', shared=fake_shared(tmp_path))
    assert data.num_nodes == 4 and data.x.size() == (4, 3)
    assert_cleaned(private_tmp)


def test_load_paper_dataset_removes_its_temporary_root_when_loading_fails(tmp_path,
                                                                          private_tmp):
    shared = fake_shared(tmp_path, edges='0 7\n')  # node 7 of a 4-node graph
    with pytest.raises(ValueError, match='outside'):
        load_paper_dataset('ACM', shared=shared)
    assert_cleaned(private_tmp)


def test_load_paper_dataset_removes_its_temporary_root_when_raw_files_are_missing(
        tmp_path, private_tmp):
    with pytest.raises(FileNotFoundError, match='not staged'):
        load_paper_dataset('ACM', shared=str(tmp_path / 'empty'))
    assert_cleaned(private_tmp)


def test_load_paper_dataset_removes_its_temporary_root_on_interrupt(tmp_path, private_tmp,
                                                                    monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(harness_data, 'load_dataset', interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_paper_dataset('ACM', shared=fake_shared(tmp_path))
    assert_cleaned(private_tmp)


def test_load_paper_dataset_on_the_shared_data_leaves_nothing(private_tmp):
    if not has_offline_copy('Cora'):
        pytest.skip(f'Cora is not in {SHARED_DATA}')
    data = load_paper_dataset('Cora')
    assert data.num_nodes == 2708
    assert_cleaned(private_tmp)
