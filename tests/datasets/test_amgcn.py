r"""The AM-GCN zip format of :mod:`torch_geometric_regcn.datasets.amgcn`, on toy zips."""
import os
import os.path as osp
import zipfile

import pytest
import torch

from torch_geometric_regcn.datasets import ACM, UAI
from torch_geometric_regcn.datasets.amgcn import AMGCNDataset


def write_amgcn_zip(path, feature: str, label: str, edges: str, edge_file='toy.edge'):
    with zipfile.ZipFile(path, 'w') as z:
        z.writestr('toy/toy.feature', feature)
        z.writestr('toy/toy.label', label)
        z.writestr(f'toy/{edge_file}', edges)


class Toy(AMGCNDataset):
    name, zip_name, prefix, edge_file = 'Toy', 'toy.zip', 'toy', 'toy.edge'


def test_amgcn_format_on_a_toy_zip(tmp_path):
    os.makedirs(tmp_path / 'Toy' / 'raw')
    # Tab-separated features (as in uai.feature), a one-direction edge, a self loop
    # and a duplicate.
    write_amgcn_zip(tmp_path / 'Toy' / 'raw' / 'toy.zip', '1\t0\t1\n0\t0\t1\n1\t1\t0\n0\t1\t0\n',
                    '0\n2\n1\n2\n', '0 1\n1 0\n1 2\n2 2\n3 1\n3 1\n')
    data = Toy(str(tmp_path))[0]
    assert data.x.dtype == torch.float32 and data.y.dtype == torch.int64
    assert data.x.tolist() == [[1, 0, 1], [0, 0, 1], [1, 1, 0], [0, 1, 0]]
    assert data.y.tolist() == [0, 2, 1, 2]
    assert data.edge_index.tolist() == [[0, 1, 1, 1, 2, 3], [1, 0, 2, 3, 1, 1]]
    assert osp.isfile(tmp_path / 'Toy' / 'processed' / 'data.pt')


@pytest.mark.parametrize('label, edges, match', [
    ('0\n1\n', '0 1\n', 'one label per line'),
    ('0\n1\n2\n', '0 3\n', r'outside \[0, 2\]'),
    ('0\n1\n2\n', '0 1 2\n', "'u v' per line"),
])
def test_amgcn_format_errors(tmp_path, label, edges, match):
    os.makedirs(tmp_path / 'Toy' / 'raw')
    write_amgcn_zip(tmp_path / 'Toy' / 'raw' / 'toy.zip', '1 0\n0 1\n1 1\n', label, edges)
    with pytest.raises(ValueError, match=match):
        Toy(str(tmp_path))


@pytest.mark.parametrize('feature, label, match', [
    ('1 0\n0 inf\n1 1\n', '0\n1\n2\n', 'infinite values'),
    ('1 0\n0 1e999\n1 1\n', '0\n1\n2\n', 'infinite values'),
    ('1 0\n0 1\n1 1\n', '0\n-1\n2\n', 'negative labels'),
])
def test_amgcn_non_finite_features_and_negative_labels(tmp_path, feature, label, match):
    os.makedirs(tmp_path / 'Toy' / 'raw')
    write_amgcn_zip(tmp_path / 'Toy' / 'raw' / 'toy.zip', feature, label, '0 1\n')
    with pytest.raises(ValueError, match=match):
        Toy(str(tmp_path))


def test_amgcn_missing_member(tmp_path):
    os.makedirs(tmp_path / 'Toy' / 'raw')
    write_amgcn_zip(tmp_path / 'Toy' / 'raw' / 'toy.zip', '1 0\n', '0\n', '0 0\n', 'other.edge')
    with pytest.raises(ValueError, match="no member 'toy/toy.edge'"):
        Toy(str(tmp_path))


@pytest.mark.parametrize('cls, zip_name', [(ACM, 'acm.zip'), (UAI, 'uai.zip')])
def test_missing_zip_says_where_to_get_it(tmp_path, cls, zip_name):
    with pytest.raises(FileNotFoundError, match=f'{zip_name}.*zhumeiqiBUPT/AM-GCN'):
        cls(str(tmp_path))


def test_a_file_that_is_no_zip_says_where_to_get_it(tmp_path):
    os.makedirs(tmp_path / 'Toy' / 'raw')
    (tmp_path / 'Toy' / 'raw' / 'toy.zip').write_text('<html>Not Found</html>')
    with pytest.raises(ValueError, match=r"toy\.zip' is not a zip archive.*zhumeiqiBUPT/AM-GCN"):
        Toy(str(tmp_path))
