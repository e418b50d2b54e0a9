r"""The random split of the tsGCN paper."""
import torch
from torch import Tensor
from torch_geometric.data import Data

from torch_geometric_regcn.utils.validation import check_int, check_seed


def _labels(data: Data) -> Tensor:
    r"""The labels of :obj:`data`, one per node, checked."""
    if not isinstance(data, Data):
        raise TypeError(f"'data' must be a torch_geometric.data.Data graph with labels "
                        f"'data.y' (got {type(data).__name__})")
    y = data.y if 'y' in data else None
    if y is None:
        raise ValueError("'data.y' is missing: paper_split draws training nodes per class "
                         "and needs one class label per node; set 'data.y' to a tensor of "
                         "class ids 0..C-1")
    if not isinstance(y, Tensor):
        raise TypeError(f"'data.y' must be a tensor of class ids (got "
                        f"{type(y).__name__}); use torch.as_tensor(data.y)")
    if y.is_floating_point() or y.is_complex() or y.dtype == torch.bool:
        raise TypeError(f"'data.y' must hold integer class ids (got dtype {y.dtype}); "
                        f"use 'data.y.long()' if its values are whole numbers")
    if not (y.dim() == 1 or (y.dim() == 2 and y.size(1) == 1)):
        raise ValueError(f"'data.y' must hold one label per node, shape [N] or [N, 1] (got "
                         f"{list(y.shape)}); multi-label targets have no per-class split")
    # The graph's node count where it states one (num_nodes, or data.x's rows);
    # PyG would guess it from edge_index with a warning otherwise.
    num_nodes = data.num_nodes if 'num_nodes' in data or 'x' in data else None
    if num_nodes is not None and num_nodes != y.size(0):
        raise ValueError(f"'data.y' has {y.size(0)} labels for the {num_nodes} nodes of "
                         f"'data'; give every node one label")
    y = y.view(-1).cpu()
    if y.numel() > 0 and int(y.min()) < 0:
        raise ValueError(f"'data.y' holds negative labels (min {int(y.min())}); class ids "
                         f"must be 0..C-1. A negative label often marks an unlabelled node: "
                         f"drop those nodes (data.subgraph) before splitting")
    return y


def paper_split(data: Data, num_train_per_class: int = 20, num_val: int = 500,
                num_test: int = 1000, seed: int = 0) -> Data:
    r"""Adds :obj:`train_mask`, :obj:`val_mask` and :obj:`test_mask` as in the
    tsGCN paper: :obj:`num_train_per_class` random labelled nodes per class
    (all of a smaller class), then :obj:`num_val` validation and
    :obj:`num_test` test nodes drawn at random from the rest. Reproducible for
    a given :obj:`seed`; :obj:`data` is modified in place and returned,
    its masks replaced if it has some (e.g. Planetoid's public split): writing
    them is this function's purpose.

    Args:
        data (torch_geometric.data.Data): The graph; :obj:`data.y` holds one
            integer class id in :obj:`0..C-1` per node.
        num_train_per_class (int, optional): Training nodes per class, at
            least 1. (default: :obj:`20`)
        num_val (int, optional): Validation nodes. (default: :obj:`500`)
        num_test (int, optional): Test nodes. (default: :obj:`1000`)
        seed (int, optional): The random seed. (default: :obj:`0`)

    Counts and the seed may be NumPy integers. Missing, non-integer,
    multi-label or negative labels, a :obj:`bool` or negative count, and
    :obj:`num_val + num_test` beyond the nodes left after training raise an
    error that names the argument; :obj:`data` is then left unchanged.
    """
    num_train_per_class = check_int('num_train_per_class', num_train_per_class)
    num_val = check_int('num_val', num_val, minimum=0)
    num_test = check_int('num_test', num_test, minimum=0)
    seed = check_seed(seed)
    y = _labels(data)
    n = y.numel()
    if num_val + num_test > n:
        raise ValueError(f"'num_val' + 'num_test' = {num_val} + {num_test} exceeds the "
                         f"graph's {n} nodes; lower them")
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
