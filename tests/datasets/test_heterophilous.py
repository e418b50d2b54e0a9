r"""The heterophilous graphs of Platonov et al. by name:
:func:`~torch_geometric_regcn.datasets.load_dataset` on the authors' files in
``../shared/data/heterophilous`` (each read again with NumPy as the
reference) and on tiny synthetic files in the same layout."""
import os
import os.path as osp
import warnings

import numpy as np
import pytest
import torch
from torch_geometric.datasets import HeterophilousGraphDataset

from harness.data import HETEROPHILOUS_OFFLINE, OFFLINE, SHARED_DATA, SHARED_LAYOUT, offline_root
from tests.datasets.test_processed_files import Planted
from torch_geometric_regcn.datasets import (
    HETEROPHILOUS,
    HeterophilousNpzDataset,
    load_dataset,
)
from torch_geometric_regcn.datasets.heterophilous import NPZ_NAMES, read_heterophilous_npz

SHARED = osp.join(SHARED_DATA, 'heterophilous')
needs_shared = pytest.mark.skipif(not osp.isdir(SHARED),
                                  reason=f'the heterophilous datasets are not in {SHARED}')

# ../shared/data/README.md, section heterophilous/ (and the authors' paper): nodes, edges as
# stored in the file, features, classes. The directed files store 13,584 and 65,718 edges.
TABLE = {
    'minesweeper': (10000, 39402, 7, 2),
    'chameleon_filtered': (890, 8854, 2325, 5),
    'squirrel_filtered': (2223, 46998, 2089, 5),
    'chameleon_filtered_directed': (890, 13584, 2325, 5),
    'squirrel_filtered_directed': (2223, 65718, 2089, 5),
    'actor': (7600, 26659, 932, 5),
}


@pytest.fixture(scope='module')
def staged(tmp_path_factory):
    """Loads each staged dataset once per module, from its own copy in a
    temporary root: returns (dataset, the raw arrays read with NumPy, root)."""
    cache = {}

    def get(name: str):
        if name not in cache:
            root = str(tmp_path_factory.mktemp(name))
            offline_root(name, root)
            with np.load(osp.join(root, name, 'raw', f'{name}.npz')) as raw:
                arrays = {key: raw[key] for key in raw.files}
            cache[name] = (load_dataset(name, root), arrays, root)
        return cache[name]

    return get


def pairs(edge_index: torch.Tensor) -> set:
    return set(map(tuple, edge_index.t().tolist()))


def write_npz(root, name, num_nodes=6, edges=((0, 1), (1, 2), (2, 0), (3, 4), (4, 3)),
              features=np.float32, num_splits=3, seed=0):
    """A tiny file in the authors' layout at <root>/<name>/raw/<name>.npz;
    returns its arrays."""
    rng = np.random.default_rng(seed)
    order = np.stack([rng.permutation(num_nodes) for _ in range(num_splits)])
    masks = [np.zeros((num_splits, num_nodes), dtype=bool) for _ in range(3)]
    for k, perm in enumerate(order):  # half train, a quarter val, the rest test
        for mask, part in zip(masks, np.split(perm, [num_nodes // 2, 3 * num_nodes // 4])):
            mask[k, part] = True
    arrays = dict(node_features=rng.standard_normal((num_nodes, 3)).astype(features),
                  node_labels=np.arange(num_nodes, dtype=np.int64) % 2,
                  edges=np.array(edges, dtype=np.int64).reshape(-1, 2),
                  train_masks=masks[0], val_masks=masks[1], test_masks=masks[2])
    os.makedirs(osp.join(root, name, 'raw'), exist_ok=True)
    np.savez(osp.join(root, name, 'raw', f'{name}.npz'), **arrays)
    return arrays


def assert_matches(data, arrays, directed):
    """data is the file's graph: x, y and the masks ([N, K], the file's
    transposed) equal; edge_index is the stored edges (directed) or them and
    their reverses (undirected), each pair once."""
    assert data.x.dtype == torch.float32 and data.y.dtype == torch.int64
    assert torch.equal(data.x, torch.from_numpy(arrays['node_features'].astype(np.float32)))
    assert torch.equal(data.y, torch.from_numpy(arrays['node_labels']))
    for part in ('train', 'val', 'test'):
        mask = getattr(data, f'{part}_mask')
        assert mask.dtype == torch.bool
        assert torch.equal(mask, torch.from_numpy(arrays[f'{part}_masks'].T.copy()))
    stored = set(map(tuple, arrays['edges'].tolist()))
    expected = stored if directed else stored | {(j, i) for i, j in stored}
    assert data.edge_index.dtype == torch.long
    assert pairs(data.edge_index) == expected
    assert data.edge_index.size(1) == len(expected)  # no pair twice


@needs_shared
@pytest.mark.parametrize('name', HETEROPHILOUS_OFFLINE)
def test_staged_datasets_equal_their_files(staged, name):
    dataset, arrays, _ = staged(name)
    data = dataset[0]
    nodes, stored_edges, features, classes = TABLE[name]
    assert len(dataset) == 1 and data.num_nodes == nodes
    assert data.x.shape == (nodes, features) and dataset.num_classes == classes
    assert arrays['edges'].shape == (stored_edges, 2)
    assert data.train_mask.shape == (nodes, 10)
    assert_matches(data, arrays, directed=name.endswith('_directed'))
    # What docs/datasets.md states of the files: no row stored twice; the undirected
    # files store each edge one way and hold no self loops; a split's masks are
    # disjoint and cover every node.
    stored = set(map(tuple, arrays['edges'].tolist()))
    assert len(stored) == stored_edges
    if not name.endswith('_directed'):
        assert all(i != j and (j, i) not in stored for i, j in stored)
    masks = [arrays[f'{part}_masks'].astype(np.int64) for part in ('train', 'val', 'test')]
    assert (sum(masks) == 1).all()
    # The loader PyG has where it has one, ours elsewhere.
    expected = HeterophilousGraphDataset if name == 'minesweeper' else HeterophilousNpzDataset
    assert type(dataset) is expected
    # The authors' rule (their datasets.py): ROC-AUC for two classes, accuracy otherwise.
    info = HETEROPHILOUS[name]
    assert info.metric == ('roc_auc' if classes == 2 else 'accuracy')
    assert info.directed == name.endswith('_directed')


@needs_shared
@pytest.mark.parametrize('name', ['chameleon_filtered', 'squirrel_filtered'])
def test_directed_files_are_the_undirected_graphs_with_directions(staged, name):
    r"""What the loaders return for the two versions: the same nodes, features,
    labels and splits; the directed graph, symmetrised and without its self
    loops (50 and 140 in the files), is the undirected one. The directed
    edge_index is not symmetrised: most pairs are stored one way only."""
    undirected = staged(name)[0][0]
    directed = staged(f'{name}_directed')[0][0]
    for key in ('x', 'y', 'train_mask', 'val_mask', 'test_mask'):
        assert torch.equal(directed[key], undirected[key])
    one_way = pairs(directed.edge_index)
    loops = {(i, j) for i, j in one_way if i == j}
    assert len(loops) == {'chameleon_filtered': 50, 'squirrel_filtered': 140}[name]
    assert (one_way | {(j, i) for i, j in one_way}) - loops == pairs(undirected.edge_index)
    both_ways = {(i, j) for i, j in one_way if i != j and (j, i) in one_way}
    assert len(both_ways) // 2 == {'chameleon_filtered': 4680, 'squirrel_filtered': 18580}[name]
    assert len(one_way - loops - both_ways) > 0  # not symmetrised


@needs_shared
def test_processed_files_are_reused(staged, monkeypatch):
    for name, cls in (('actor', HeterophilousNpzDataset),
                      ('minesweeper', HeterophilousGraphDataset)):
        dataset, _, root = staged(name)
        path = osp.join(root, name, 'processed', 'data.pt')
        stamp = os.stat(path).st_mtime_ns

        def fail(self):
            raise AssertionError(f'{self.name} was processed again')

        monkeypatch.setattr(cls, 'process', fail)
        again = load_dataset(name.upper(), root)
        assert os.stat(path).st_mtime_ns == stamp
        assert torch.equal(again[0].edge_index, dataset[0].edge_index)


@pytest.mark.parametrize('name', ['roman_empire', 'amazon_ratings', 'minesweeper', 'tolokers',
                                  'questions'])
def test_pyg_names_load_offline_through_pyg(tmp_path, name):
    arrays = write_npz(tmp_path, name, edges=((0, 1), (1, 0), (1, 2), (5, 4)))
    dataset = load_dataset(name.replace('_', '-').title(), str(tmp_path))  # 'Roman-Empire'
    assert type(dataset) is HeterophilousGraphDataset and dataset.name == name
    assert_matches(dataset[0], arrays, directed=False)
    # Our reader processes an undirected file as PyG's class does.
    ours = read_heterophilous_npz(osp.join(tmp_path, name, 'raw', f'{name}.npz'), False)
    for key in ('x', 'y', 'edge_index', 'train_mask', 'val_mask', 'test_mask'):
        assert torch.equal(ours[key], dataset[0][key])


def test_our_names_on_synthetic_files(tmp_path):
    edges = ((0, 1), (1, 2), (2, 2), (4, 3), (0, 1))  # a self loop and a repeated edge
    for name, directed in (('chameleon_filtered', False), ('chameleon_filtered_directed', True)):
        arrays = write_npz(tmp_path, name, edges=edges, features=np.float64)
        dataset = load_dataset(name.upper(), str(tmp_path))  # 'CHAMELEON_FILTERED'
        assert type(dataset) is HeterophilousNpzDataset and dataset.name == name
        assert dataset.directed is directed
        assert_matches(dataset[0], arrays, directed)
        # edge_index[0] -> edge_index[1] as stored, sorted; the self loop kept, the repeat once.
        if directed:
            assert dataset[0].edge_index.tolist() == [[0, 1, 2, 4], [1, 2, 2, 3]]
    assert type(load_dataset('Chameleon-Filtered', str(tmp_path))) is HeterophilousNpzDataset


def test_transform_and_pre_transform_pass_through(tmp_path):
    write_npz(tmp_path, 'actor')
    write_npz(tmp_path, 'questions')
    calls = []

    def pre_transform(data):
        calls.append(1)
        data.tag = torch.tensor([7])
        return data

    def transform(data):
        data.seen = torch.tensor([1])
        return data

    for name in ('actor', 'questions'):
        data = load_dataset(name, str(tmp_path), transform=transform,
                            pre_transform=pre_transform)[0]
        assert data.tag.tolist() == [7] and data.seen.tolist() == [1]
    assert len(calls) == 2
    with pytest.raises(TypeError, match='transform'):
        load_dataset('actor', str(tmp_path), transform='not callable')


def test_unknown_name_suggests_the_close_one():
    with pytest.raises(ValueError, match="did you mean 'chameleon_filtered'"):
        load_dataset('chameleon-filterd', '.')
    with pytest.raises(ValueError, match="did you mean 'roman_empire'"):
        load_dataset('RomanEmpire', '.')
    with pytest.raises(ValueError, match='must be one of'):
        HeterophilousNpzDataset('.', 'minesweeper')  # PyG's class loads that one


def test_missing_raw_file_raises_before_anything_else(tmp_path):
    # A planted processed file is not even looked at: no warning, nothing written.
    os.makedirs(tmp_path / 'actor' / 'processed')
    torch.save(Planted(), tmp_path / 'actor' / 'processed' / 'data.pt')
    before = sorted(p for p in tmp_path.rglob('*'))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        with pytest.raises(FileNotFoundError, match=r"actor/raw/actor\.npz' is missing.*"
                           r"'data/' folder of https://github\.com/yandex-research/"
                           r"heterophilous-graphs"):
            load_dataset('actor', str(tmp_path))
        with pytest.raises(FileNotFoundError, match='squirrel_filtered_directed.npz'):
            load_dataset('squirrel_filtered_directed', str(tmp_path / 'empty'))
    assert sorted(p for p in tmp_path.rglob('*')) == before


@pytest.mark.parametrize('name', ['actor', 'tolokers'])
def test_a_planted_processed_file_is_not_opened(tmp_path, name):
    arrays = write_npz(tmp_path, name)
    load_dataset(name, str(tmp_path))
    torch.save(Planted(), tmp_path / name / 'processed' / 'data.pt')
    with pytest.warns(UserWarning, match='data.pt.*processed again'):
        data = load_dataset(name, str(tmp_path))[0]
    assert_matches(data, arrays, directed=False)


def test_malformed_files_name_the_array(tmp_path):
    write_npz(tmp_path, 'actor', edges=((0, 6),))
    with pytest.raises(ValueError, match=r"'edges' in .* outside \[0, 5\]"):
        load_dataset('actor', str(tmp_path))
    path = osp.join(tmp_path, 'squirrel_filtered', 'raw', 'squirrel_filtered.npz')
    arrays = write_npz(tmp_path, 'squirrel_filtered')
    arrays['val_masks'] = arrays['val_masks'].astype(np.int64)
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="'val_masks' .* must be boolean"):
        load_dataset('squirrel_filtered', str(tmp_path))
    del arrays['node_labels']
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=r"lacks \['node_labels'\]"):
        read_heterophilous_npz(path, directed=False)


def test_constants():
    assert set(NPZ_NAMES) | {'roman_empire', 'amazon_ratings', 'minesweeper', 'tolokers',
                             'questions'} == set(HETEROPHILOUS)
    assert {name for name, info in HETEROPHILOUS.items() if info.metric == 'roc_auc'} == \
        {'minesweeper', 'tolokers', 'questions'}  # the paper's two-class sets
    # The harness stages the six offline sets and leaves the paper's list as it was.
    assert all(SHARED_LAYOUT[name] == [(f'heterophilous/{name}/raw/{name}.npz',
                                        f'{name}/raw/{name}.npz')]
               for name in HETEROPHILOUS_OFFLINE)
    assert set(HETEROPHILOUS_OFFLINE) <= set(HETEROPHILOUS)
    assert OFFLINE == ['Cora', 'CiteSeer', 'PubMed', 'ACM', 'BlogCatalog', 'Flickr', 'UAI']


def test_a_file_that_is_no_npz_says_where_to_get_it(tmp_path):
    # A Git LFS pointer in the raw file's place: np.load would advise unpickling it.
    os.makedirs(tmp_path / 'actor' / 'raw')
    (tmp_path / 'actor' / 'raw' / 'actor.npz').write_text(
        'version https://git-lfs.github.com/spec/v1\noid sha256:0\nsize 1\n')
    with pytest.raises(ValueError, match=r"actor\.npz' is not an \.npz archive.*"
                       r"yandex-research/heterophilous-graphs"):
        load_dataset('actor', str(tmp_path))


def test_force_reload_applies_a_changed_pre_transform(tmp_path):
    # PyG compares pre_transforms by repr, in which every plain function reads '<function>':
    # only force_reload processes the raw file again.
    arrays = write_npz(tmp_path, 'actor')

    def double(data):
        data.x = 2 * data.x
        return data

    def triple(data):
        data.x = 3 * data.x
        return data

    x = torch.from_numpy(arrays['node_features'])
    assert torch.equal(load_dataset('actor', str(tmp_path), pre_transform=double)[0].x, 2 * x)
    assert torch.equal(load_dataset('actor', str(tmp_path), pre_transform=triple,
                                    force_reload=True)[0].x, 3 * x)
    with pytest.raises(TypeError, match="'force_reload' must be True or False"):
        load_dataset('actor', str(tmp_path), force_reload='yes')


@pytest.mark.parametrize('name', ['actor', 'tolokers'])  # our reader, and PyG's class
def test_a_changed_raw_file_is_processed_again(tmp_path, name):
    # processed/ was reused whatever raw/ held since it was made: a replaced
    # file loaded as the old graph, silently. Reference: the new file's arrays.
    write_npz(tmp_path, name, num_nodes=6)
    assert load_dataset(name, str(tmp_path))[0].num_nodes == 6
    arrays = write_npz(tmp_path, name, num_nodes=8, seed=1)
    with pytest.warns(UserWarning, match=rf"raw files changed since: {name}\.npz\): the "
                                         r"dataset is processed again"):
        data = load_dataset(name, str(tmp_path))[0]
    assert_matches(data, arrays, directed=False)
    processed = tmp_path / name / 'processed' / 'data.pt'
    stamp = os.stat(processed).st_mtime_ns
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # unchanged: read, not processed again
        assert_matches(load_dataset(name, str(tmp_path))[0], arrays, directed=False)
    assert os.stat(processed).st_mtime_ns == stamp
    # A folder processed without a record (an older version) is processed once more.
    os.remove(tmp_path / name / 'processed' / 'raw_files.json')
    assert_matches(load_dataset(name, str(tmp_path))[0], arrays, directed=False)
    assert os.stat(processed).st_mtime_ns != stamp
    assert (tmp_path / name / 'processed' / 'raw_files.json').is_file()


def test_a_downloaded_raw_file_is_recorded_and_not_processed_again(tmp_path, monkeypatch):
    # The raw files were listed before PyG's download, so the file it wrote
    # read as a change: no record, and the next load processed the dataset (and
    # ran its pre_transform) again (review s55/pe_cache). Reference: the
    # processed file's modification time and the pre_transform's calls.
    def download(self):  # what download_url writes, offline
        write_npz(tmp_path, 'tolokers', num_nodes=7)

    monkeypatch.setattr(HeterophilousGraphDataset, 'download', download)
    calls = []

    def count(data):
        calls.append(1)
        return data

    load_dataset('tolokers', str(tmp_path), pre_transform=count)
    assert (tmp_path / 'tolokers' / 'processed' / 'raw_files.json').is_file()
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        assert load_dataset('tolokers', str(tmp_path), pre_transform=count)[0].num_nodes == 7
    assert len(calls) == 1
