r"""The random split of the tsGCN paper."""
import torch
from torch import Tensor
from torch_geometric.data import Data


def paper_split(data: Data, num_train_per_class: int = 20, num_val: int = 500,
                num_test: int = 1000, seed: int = 0) -> Data:
    r"""Adds :obj:`train_mask`, :obj:`val_mask` and :obj:`test_mask` as in the
    tsGCN paper: :obj:`num_train_per_class` random labelled nodes per class
    (all of a smaller class), then :obj:`num_val` validation and
    :obj:`num_test` test nodes drawn at random from the rest. Reproducible for
    a given :obj:`seed`; :obj:`data` is modified in place and returned."""
    y: Tensor = data.y.view(-1).cpu()
    n = y.numel()
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=gen)
    train = torch.zeros(n, dtype=torch.bool)
    for c in y.unique().tolist():
        members = perm[y[perm] == c]
        train[members[:num_train_per_class]] = True
    rest = perm[~train[perm]]
    if num_val + num_test > rest.numel():
        raise ValueError(f"only {rest.numel()} unlabelled nodes remain for num_val={num_val} "
                         f"and num_test={num_test}; lower them")
    val = torch.zeros(n, dtype=torch.bool).index_fill_(0, rest[:num_val], True)
    test = torch.zeros(n, dtype=torch.bool).index_fill_(0, rest[num_val:num_val + num_test], True)
    device = data.y.device
    data.train_mask, data.val_mask, data.test_mask = train.to(device), val.to(device), \
        test.to(device)
    return data
