r"""The datasets by name: :func:`~torch_geometric_regcn.datasets.load_dataset`,
on the paper's files in ``../shared/data`` (Table 2) and a synthetic CoraFull."""
import os
import os.path as osp
import pickle
import zipfile

import numpy as np
import pytest
import torch
from torch_geometric.utils import contains_self_loops, is_undirected

from harness.data import SHARED_LAYOUT
from torch_geometric_regcn.datasets import ACM, DATASETS, PAPER_SETTINGS, UAI, load_dataset

# Table 2 of the paper: nodes, classes, features, edges. The paper counts edges as
# (stored adjacency entries) / 2, duplicates and self loops included.
TABLE2 = {
    'Cora': (2708, 7, 1433, 5429),
    'CiteSeer': (3327, 6, 3703, 4732),
    'PubMed': (19717, 3, 500, 44338),
    'ACM': (3025, 3, 1870, 13128),
    'BlogCatalog': (5196, 6, 8189, 171743),
    'Flickr': (7575, 9, 12047, 239738),
    'UAI': (3067, 19, 4973, 28311),
}

# Undirected edges as loaded (edge_index.size(1) / 2): duplicates and self loops dropped.
# They differ from Table 2 where the raw files hold such entries:
LOADED_EDGES = {
    'Cora': 5278,  # 10,858 entries hold 302 duplicates: 10,556 remain
    'CiteSeer': 4552,  # 248 self-loop entries (124 nodes, listed twice) and 112 duplicates
    'PubMed': 44324,  # 6 self-loop entries (3 nodes, listed twice) and 22 duplicates
    'ACM': 13128,
    'BlogCatalog': 171743,
    'Flickr': 239738,
    'UAI': 28308,  # 6 self-loop lines in uai.edge
}


def raw_entries(name: str, root: str) -> int:
    """Stored adjacency entries in the raw files: what the paper halves."""
    dst = SHARED_LAYOUT[name][0][1]
    if name in ('Cora', 'CiteSeer', 'PubMed'):
        with open(osp.join(root, dst, 'raw', f'ind.{name.lower()}.graph'), 'rb') as f:
            graph = pickle.load(f, encoding='latin1')
        return sum(len(neighbours) for neighbours in graph.values())
    if name in ('BlogCatalog', 'Flickr'):
        with open(osp.join(root, dst, 'raw', 'edgelist.txt'), 'rb') as f:
            return sum(1 for line in f if line.strip())
    cls = ACM if name == 'ACM' else UAI
    with zipfile.ZipFile(osp.join(root, dst)) as z:
        text = z.read(f'{cls.prefix}/{cls.edge_file}')
    return sum(1 for line in text.splitlines() if line.strip())


@pytest.mark.parametrize('name', list(TABLE2))
def test_table2_statistics(load, name):
    dataset, root = load(name)
    data = dataset[0]
    nodes, classes, features, paper_edges = TABLE2[name]
    assert len(dataset) == 1
    assert data.num_nodes == nodes
    assert dataset.num_classes == classes == int(data.y.max()) + 1
    assert data.y.dtype == torch.long and data.y.min() == 0
    assert data.x.size() == (nodes, features) and data.x.dtype == torch.float
    # The paper's count, reproduced from the raw files.
    assert raw_entries(name, root) == 2 * paper_edges
    # Ours: undirected, no duplicates, no self loops.
    edge_index = data.edge_index
    assert edge_index.dtype == torch.long
    assert is_undirected(edge_index, num_nodes=nodes)
    assert not contains_self_loops(edge_index)
    assert torch.unique(edge_index, dim=1).size(1) == edge_index.size(1)
    assert edge_index.size(1) == 2 * LOADED_EDGES[name]


def test_sparse_features_of_flickr(load):
    x = load('Flickr')[0][0].x
    assert x.layout == torch.sparse_csr and x.values().numel() == 182517


def test_names_are_case_insensitive(load):
    dataset, root = load('CiteSeer')  # processed already: only the lookup is timed
    again = load_dataset('citeseer', root)
    assert type(again) is type(dataset) and osp.isdir(osp.join(root, 'CiteSeer', 'processed'))
    assert torch.equal(again[0].edge_index, dataset[0].edge_index)


def test_unknown_name():
    with pytest.raises(ValueError, match='known.*Cora, CiteSeer, PubMed.*UAI'):
        load_dataset('Reddit', '.')
    assert set(DATASETS) == set(TABLE2) | {'CoraFull'}


def test_corafull_code_path_on_a_synthetic_npz(tmp_path):
    sp = pytest.importorskip('scipy.sparse')
    # The layout PyG's CoraFull reads from <root>/cora/raw/cora.npz (torch_geometric.io.read_npz):
    # CSR pieces of the attribute and adjacency matrices, and the labels.
    attr = sp.csr_matrix(np.array([[1, 0, 0, 2], [0, 1, 0, 0], [0, 0, 1, 0],
                                   [1, 1, 0, 0], [0, 0, 0, 1]], dtype=np.float32))
    adj = sp.csr_matrix((np.ones(4, dtype=np.float32), ([0, 1, 2, 3], [1, 2, 2, 4])),
                        shape=(5, 5))  # directed, with a self loop (2, 2)
    os.makedirs(tmp_path / 'cora' / 'raw')
    np.savez(tmp_path / 'cora' / 'raw' / 'cora.npz',
             attr_data=attr.data, attr_indices=attr.indices, attr_indptr=attr.indptr,
             attr_shape=np.array(attr.shape), adj_data=adj.data, adj_indices=adj.indices,
             adj_indptr=adj.indptr, adj_shape=np.array(adj.shape),
             labels=np.array([0, 1, 1, 2, 0]))
    dataset = load_dataset('CoraFull', str(tmp_path))
    data = dataset[0]
    assert type(dataset).__name__ == 'CoraFull' and dataset.num_classes == 3
    assert data.x.tolist() == (attr.toarray() > 0).astype(np.float32).tolist()
    assert data.y.tolist() == [0, 1, 1, 2, 0]
    assert data.edge_index.tolist() == [[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]]


def test_paper_settings_cover_the_eight_datasets():
    assert sorted(PAPER_SETTINGS) == sorted(DATASETS)
    assert PAPER_SETTINGS['PubMed'].p == 2048


@pytest.mark.parametrize('name', ['ACM', 'Cora'])
def test_force_reload_reaches_every_loader(load, name):
    # A pre_transform whose repr equals the processed one's (PyG's only check) is applied
    # again with force_reload=True, through our loaders (ACM) and PyG's (Cora).
    _, root = load(name)

    def mark(data):
        data.mark = torch.tensor([5])
        return data

    data = load_dataset(name, root, pre_transform=mark, force_reload=True)[0]
    assert data.mark.tolist() == [5]
    assert 'mark' not in load_dataset(name, root, force_reload=True)[0]
