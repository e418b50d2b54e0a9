r"""The safe reading of processed files: :mod:`torch_geometric_regcn.datasets.processed_files`
(the planted-file attacks through the datasets are in ``tests/reliability/test_datasets.py``)."""
import os.path as osp

import pytest
import torch

from torch_geometric_regcn.datasets.processed_files import (
    load_error,
    safe_torch_load,
    unsafe_files,
    vet_processed,
)


class Planted:
    """An object of a class that torch.load(weights_only=True) does not allowlist."""


def test_safe_torch_load_reads_tensors_and_refuses_other_objects(tmp_path):
    tensors = {'x': torch.arange(6.0).view(2, 3), 'y': torch.tensor([1, 0])}
    torch.save(tensors, tmp_path / 'data.pt')
    loaded = safe_torch_load(str(tmp_path / 'data.pt'), mmap=True)
    assert loaded.keys() == tensors.keys()
    assert all(torch.equal(loaded[k], tensors[k]) for k in tensors)
    torch.save(Planted(), tmp_path / 'object.pt')
    with pytest.raises(Exception) as info:
        safe_torch_load(str(tmp_path / 'object.pt'))
    reason = load_error(info.value)
    assert 'weights_only=False' not in reason and 'Planted' in reason


def test_unsafe_files_lists_the_refused_and_unreadable_files_only(tmp_path):
    torch.save(torch.zeros(3), tmp_path / 'good.pt')
    torch.save(Planted(), tmp_path / 'object.pt')
    (tmp_path / 'junk.pt').write_bytes(b'not a torch file')
    found = unsafe_files(str(tmp_path), ['good.pt', 'object.pt', 'junk.pt', 'absent.pt'])
    assert [path for path, _ in found] == [osp.join(tmp_path, 'object.pt'),
                                           osp.join(tmp_path, 'junk.pt')]
    assert 'Planted' in found[0][1]
    assert found[1][1] and 'weights_only=False' not in found[1][1]  # a reason, not ''


def test_vet_processed_forces_a_reload_where_a_file_is_refused(tmp_path):
    torch.save(torch.zeros(3), tmp_path / 'data.pt')
    assert vet_processed(str(tmp_path), ['data.pt'], force_reload=False) is False
    assert vet_processed(str(tmp_path), ['data.pt'], force_reload=True) is True
    torch.save(Planted(), tmp_path / 'pre_transform.pt')  # PyG's record
    with pytest.warns(UserWarning, match='pre_transform.pt.*processed again'):
        assert vet_processed(str(tmp_path), ['data.pt'], force_reload=False) is True
