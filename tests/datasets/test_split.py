r"""The tsGCN paper's random split:
:func:`~torch_geometric_regcn.datasets.split.paper_split`."""
import pytest
import torch
from torch_geometric.data import Data

from torch_geometric_regcn.datasets import contextual_sbm, paper_split


def test_paper_split_sizes_and_reproducibility():
    data = contextual_sbm(2000, num_classes=5, seed=0)
    first = paper_split(data.clone(), seed=3)
    again = paper_split(data.clone(), seed=3)
    other = paper_split(data.clone(), seed=4)
    assert int(first.train_mask.sum()) == 100
    assert torch.bincount(first.y[first.train_mask]).tolist() == [20] * 5
    assert int(first.val_mask.sum()) == 500 and int(first.test_mask.sum()) == 1000
    assert not bool((first.train_mask & first.val_mask).any() |
                    (first.val_mask & first.test_mask).any() |
                    (first.train_mask & first.test_mask).any())
    assert torch.equal(first.test_mask, again.test_mask)
    assert not torch.equal(first.test_mask, other.test_mask)
    with pytest.raises(ValueError, match='lower them'):
        paper_split(data.clone(), num_val=1000, num_test=1000)


def test_paper_split_on_uai(load):
    data = load('UAI')[0][0]
    sizes = torch.bincount(data.y)
    assert sizes.min() < 20  # UAI has classes of fewer than 20 nodes
    split = paper_split(data.clone(), seed=1)
    train, val, test = split.train_mask, split.val_mask, split.test_mask
    assert int(train.sum()) == int(sizes.clamp(max=20).sum()) == 367
    assert int(val.sum()) == 500 and int(test.sum()) == 1000
    assert not (train & val).any() and not (train & test).any() and not (val & test).any()
    assert torch.equal(torch.bincount(data.y[train], minlength=19), sizes.clamp(max=20))
    again = paper_split(data.clone(), seed=1)
    for key in ('train_mask', 'val_mask', 'test_mask'):
        assert torch.equal(again[key], split[key])
    assert not torch.equal(paper_split(data.clone(), seed=2).train_mask, train)


def test_every_class_gives_its_training_nodes_and_the_rest_is_drawn_once():
    # Reference: counted per class by hand. Class 2 has fewer nodes than asked for.
    y = torch.tensor([0] * 10 + [1] * 7 + [2] * 2 + [3] * 5)
    data = paper_split(Data(y=y, num_nodes=24), num_train_per_class=3, num_val=6, num_test=7,
                       seed=5)
    train, val, test = data.train_mask, data.val_mask, data.test_mask
    assert torch.bincount(y[train], minlength=4).tolist() == [3, 3, 2, 3]
    assert int(val.sum()) == 6 and int(test.sum()) == 7
    assert int(train.int().add(val.int()).add(test.int()).max()) == 1  # disjoint
    assert all(m.dtype == torch.bool and m.shape == y.shape for m in (train, val, test))


@pytest.mark.parametrize('data', [Data(y=torch.arange(60) % 3, num_nodes=61),
                                  Data(x=torch.randn(61, 2), y=torch.arange(60) % 3)],
                         ids=['num_nodes', 'x'])
def test_labels_must_cover_the_stated_nodes(data):
    # Only data.x was compared: a graph of 61 nodes got masks of 60 entries.
    with pytest.raises(ValueError, match=r"'data.y' has 60 labels for the 61 nodes of 'data'"):
        paper_split(data, num_train_per_class=2, num_val=5, num_test=5)
