import os.path as osp

import pytest

from benchmarks.accuracy import CELLS, cell_key, epochs_of, open_cells, record_key


def test_cell_keys_are_the_former_file_names():
    assert cell_key('Cora', 'tsGCN (LM)', 3, 500, 'public') == 'Cora__tsGCN_LM__e500__public__3'
    assert cell_key('ACM', 'GNN-HF', 0, 500) == 'ACM__GNN-HF__e500__0'
    old = {'dataset': 'UAI', 'method': 'tsGCN (inv)', 'seed': 9, 'epochs': 500}  # no 'split'
    assert record_key(old) == 'UAI__tsGCN_inv__e500__9'
    assert epochs_of('tsGCN-t', None) == epochs_of('tsGCN', None) and epochs_of('GCN', 7) == 7


@pytest.mark.skipif(not osp.exists(CELLS), reason='no stored cells')
def test_stored_cells_load_once_each():
    cells = open_cells()  # raises on a key stored twice
    assert len(cells) > 0
    for record in cells:
        assert {'dataset', 'method', 'seed', 'acc', 'f1', 'epochs'} <= set(record)
