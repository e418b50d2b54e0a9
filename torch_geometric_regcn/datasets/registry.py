r"""One entry point to the eight datasets of the tsGCN paper."""
from typing import Callable, Optional

from torch_geometric.data import InMemoryDataset
from torch_geometric.datasets import AttributedGraphDataset, CoraFull, Planetoid

from torch_geometric_regcn.datasets.amgcn import ACM, UAI

#: The names :func:`load_dataset` knows, in the order of the paper's Table 2.
DATASETS = ('Cora', 'CiteSeer', 'PubMed', 'ACM', 'BlogCatalog', 'CoraFull', 'Flickr', 'UAI')


def load_dataset(name: str, root: str, transform: Optional[Callable] = None,
                 pre_transform: Optional[Callable] = None) -> InMemoryDataset:
    r"""Returns one of the datasets of the tsGCN paper (Table 2) by name
    (case-insensitive, so :obj:`"Citeseer"` and :obj:`"pubmed"` work too):

    * :obj:`"Cora"`, :obj:`"CiteSeer"`, :obj:`"PubMed"`:
      :class:`~torch_geometric.datasets.Planetoid` in
      :obj:`{root}/{Cora,CiteSeer,PubMed}/`, with the public split as
      :obj:`train_mask`, :obj:`val_mask` and :obj:`test_mask`.
    * :obj:`"CoraFull"`: :class:`~torch_geometric.datasets.CoraFull` in
      :obj:`{root}/cora/` (raw file :obj:`cora/raw/cora.npz`).
    * :obj:`"BlogCatalog"`, :obj:`"Flickr"`:
      :class:`~torch_geometric.datasets.AttributedGraphDataset` in
      :obj:`{root}/{blogcatalog,flickr}/`. As PyG does, BlogCatalog's
      features come dense (5,196 x 8,189 float32, about 170 MB) and Flickr's
      as a sparse CSR tensor (7,575 x 12,047, 182,517 nonzeros; dense it
      would take about 365 MB).
      :class:`~torch_geometric_regcn.SemanticGraph` accepts sparse
      features; call :obj:`data.x.to_dense()` where a model needs dense ones.
    * :obj:`"ACM"`, :obj:`"UAI"`: :class:`ACM` and :class:`UAI` in
      :obj:`{root}/{ACM,UAI}/`.

    Every :obj:`edge_index` is undirected, without duplicates or self loops,
    so it counts each undirected edge twice. Where the raw files hold
    duplicate edges or self loops (Cora, CiteSeer, PubMed, UAI, CoraFull),
    the number of undirected edges is therefore lower than in the paper's
    Table 2, which counts every stored adjacency entry; see
    :obj:`docs/datasets.md`.

    Outside the splits of Planetoid, use
    :func:`~torch_geometric_regcn.datasets.paper_split` for the paper's
    split. A missing raw file is downloaded where PyG can (Planetoid,
    CoraFull, AttributedGraphDataset); ACM and UAI raise an error saying
    where to get it. Planetoid and CoraFull need :obj:`scipy`,
    AttributedGraphDataset needs :obj:`scipy` and :obj:`pandas`, ACM and
    UAI need :obj:`pandas`.

    Args:
        name (str): The dataset, one of :obj:`DATASETS`.
        root (str): Root directory; the dataset's folder is created below it.
        transform (callable, optional): A function/transform applied to the
            :class:`~torch_geometric.data.Data` object on every access.
            (default: :obj:`None`)
        pre_transform (callable, optional): A function/transform applied once
            before the processed data is saved to disk. (default: :obj:`None`)
    """
    if not isinstance(name, str):
        raise ValueError(f"'name' must be a string, one of {list(DATASETS)} (got {name!r})")
    canonical = {known.lower(): known for known in DATASETS}.get(name.lower())
    if canonical is None:
        raise ValueError(f"unknown dataset '{name}'; known (case-insensitive): "
                         f"{', '.join(DATASETS)}")
    if canonical in ('Cora', 'CiteSeer', 'PubMed'):
        # Planetoid names its folder after the string as given: pass the exact spelling.
        return Planetoid(root, canonical, transform=transform, pre_transform=pre_transform)
    if canonical == 'CoraFull':
        return CoraFull(root, transform=transform, pre_transform=pre_transform)
    if canonical in ('BlogCatalog', 'Flickr'):
        # Not torch_geometric.datasets.Flickr, which is GraphSAINT's 89,250-node graph.
        return AttributedGraphDataset(root, canonical, transform=transform,
                                      pre_transform=pre_transform)
    cls = ACM if canonical == 'ACM' else UAI
    return cls(root, transform=transform, pre_transform=pre_transform)
