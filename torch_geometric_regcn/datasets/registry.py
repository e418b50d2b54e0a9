r"""One entry point to the eight datasets of the tsGCN paper and the
heterophilous graphs of Platonov et al. (ICLR 2023)."""
import difflib
import os
import os.path as osp
from typing import Callable, Optional, Union

from torch_geometric.data import InMemoryDataset
from torch_geometric.datasets import (
    AttributedGraphDataset,
    CitationFull,
    CoraFull,
    HeterophilousGraphDataset,
    Planetoid,
)
from torch_geometric.io import fs

from torch_geometric_regcn.datasets.amgcn import ACM, UAI
from torch_geometric_regcn.datasets.heterophilous import (
    HETEROPHILOUS,
    NPZ_NAMES,
    HeterophilousNpzDataset,
    normalize_name,
)
from torch_geometric_regcn.datasets.processed_files import (
    raw_files,
    record_raw_files,
    vet_processed,
)
from torch_geometric_regcn.utils.validation import as_root, check_callable, check_flag

#: The names :func:`load_dataset` knows, in the order of the paper's Table 2.
DATASETS = ('Cora', 'CiteSeer', 'PubMed', 'ACM', 'BlogCatalog', 'CoraFull', 'Flickr', 'UAI')

# The folder below the root and the processed data file of PyG's loaders (PyG 2.8.1);
# HeterophilousGraphDataset's is '{name}/processed/data.pt'.
_PYG_PROCESSED = {
    'Cora': ('Cora', 'data.pt'),
    'CiteSeer': ('CiteSeer', 'data.pt'),
    'PubMed': ('PubMed', 'data.pt'),
    'CoraFull': ('cora', 'data_undirected.pt'),
    'BlogCatalog': ('blogcatalog', 'data.pt'),
    'Flickr': ('flickr', 'data.pt'),
}


def load_dataset(name: str, root: Union[str, os.PathLike], transform: Optional[Callable] = None,
                 pre_transform: Optional[Callable] = None,
                 force_reload: bool = False) -> InMemoryDataset:
    r"""Returns one of the datasets of the tsGCN paper (Table 2), or one of
    the heterophilous graphs of :obj:`HETEROPHILOUS`, by name
    (case-insensitive, :obj:`"-"` read as :obj:`"_"`, so :obj:`"Citeseer"`,
    :obj:`"pubmed"` and :obj:`"Roman-empire"` work too):

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
    * The keys of :obj:`HETEROPHILOUS`, in :obj:`{root}/{name}/` (raw file
      :obj:`{name}/raw/{name}.npz`): :obj:`"roman_empire"`,
      :obj:`"amazon_ratings"`, :obj:`"minesweeper"`, :obj:`"tolokers"`,
      :obj:`"questions"` through PyG's
      :class:`~torch_geometric.datasets.HeterophilousGraphDataset` (which
      downloads a missing file), the others through
      :class:`HeterophilousNpzDataset` (which says where to get it). Their
      :obj:`train_mask`, :obj:`val_mask` and :obj:`test_mask` are the ten
      official splits, :obj:`[N, 10]`; :func:`paper_split` is not applied
      (calling it would replace them by one random split). The metric and
      whether the graph is directed are in :obj:`HETEROPHILOUS`.

    Every :obj:`edge_index` of the paper's datasets is undirected, without
    duplicates or self loops, so it counts each undirected edge twice (the
    heterophilous ones: see :func:`read_heterophilous_npz`). Where the raw files hold
    duplicate edges or self loops (Cora, CiteSeer, PubMed, UAI, CoraFull),
    the number of undirected edges is therefore lower than in the paper's
    Table 2, which counts every stored adjacency entry; see
    :obj:`docs/datasets.md`.

    The paper splits every dataset at random:
    :func:`~torch_geometric_regcn.datasets.paper_split` adds its split
    (Planetoid's public split, of the same sizes, is one fixed split, not
    the paper's). A missing raw file is downloaded where PyG can (Planetoid,
    CoraFull, AttributedGraphDataset); ACM and UAI raise an error saying
    where to get it. Planetoid and CoraFull need :obj:`scipy`,
    AttributedGraphDataset needs :obj:`scipy` and :obj:`pandas`, ACM and
    UAI need :obj:`pandas`.

    Processed files are never unpickled with :obj:`weights_only=False` by
    this function: PyG 2.8.1 reads :obj:`processed/pre_transform.pt` and
    :obj:`pre_filter.pt` that way and retries :obj:`processed/*.pt` so when
    :obj:`torch.load(weights_only=True)` refuses a class, so a file planted
    in :obj:`root` could run code. The dataset's processed data file and
    these two are therefore checked with :obj:`torch.load(weights_only=True)`
    (memory-mapped) before the loader opens them; one that fails is not opened,
    a warning names it, and the dataset is processed again from its raw
    files, which overwrites it. A :obj:`pre_transform` that stores objects of
    its own classes needs them allowlisted with
    :obj:`torch.serialization.add_safe_globals`.

    Args:
        name (str): The dataset, one of :obj:`DATASETS` or a key of
            :obj:`HETEROPHILOUS`.
        root (str or os.PathLike): Root directory; the dataset's folder is
            created below it. For Planetoid, CoraFull and
            AttributedGraphDataset it is PyG that reads the files there
            (ACM and UAI only load them with :obj:`weights_only=True`); the
            check above guards the processed files, not the raw ones those
            loaders parse, or a file replaced while they run: only point
            :obj:`root` at folders you trust.
        transform (callable, optional): A function/transform applied to the
            :class:`~torch_geometric.data.Data` object on every access.
            (default: :obj:`None`)
        pre_transform (callable, optional): A function/transform applied once
            before the processed data is saved to disk. PyG tells a changed
            :obj:`pre_transform` from the one the processed file was made with
            by its :obj:`repr` only, in which every plain function reads
            :obj:`<function>` and many transforms omit their arguments: pass
            :obj:`force_reload=True` whenever it changes. (default: :obj:`None`)
        force_reload (bool, optional): Whether to process the dataset again
            from its raw files, overwriting the processed ones.
            (default: :obj:`False`)
    """
    known = (*DATASETS, *HETEROPHILOUS)
    if not isinstance(name, str):
        raise TypeError(f"'name' must be a string, one of {list(known)} (got "
                        f"{type(name).__name__} {name!r})")
    lowered = {normalize_name(known_name): known_name for known_name in known}
    canonical = lowered.get(normalize_name(name))
    if canonical is None:
        close = difflib.get_close_matches(normalize_name(name), list(lowered), n=1)
        hint = f"; did you mean '{lowered[close[0]]}'?" if close else ''
        raise ValueError(f"unknown dataset '{name}'; known (case-insensitive, '-' as '_'): "
                         f"{', '.join(known)}{hint}")
    root = as_root(root)
    check_callable('transform', transform)
    check_callable('pre_transform', pre_transform)
    force_reload = check_flag('force_reload', force_reload)
    if canonical in NPZ_NAMES:  # ours, like ACM and UAI, check their processed files
        return HeterophilousNpzDataset(root, canonical, transform=transform,
                                       pre_transform=pre_transform, force_reload=force_reload)
    if canonical in ('ACM', 'UAI'):
        cls = ACM if canonical == 'ACM' else UAI
        return cls(root, transform=transform, pre_transform=pre_transform,
                   force_reload=force_reload)

    # PyG's loaders: check their processed folder before they open it.
    folder, file = _PYG_PROCESSED.get(canonical, (canonical, 'data.pt'))
    folder = osp.join(osp.expanduser(fs.normpath(root)), folder)
    processed_dir, raw_dir = osp.join(folder, 'processed'), osp.join(folder, 'raw')
    before = raw_files(raw_dir)  # compared with the record, and after the load
    force_reload = vet_processed(processed_dir, [file], force_reload, raw_dir, before)
    dataset = _pyg_dataset(canonical, root, transform, pre_transform, force_reload)
    record_raw_files(processed_dir, raw_dir, before)
    return dataset


def _pyg_dataset(canonical: str, root: str, transform: Optional[Callable],
                 pre_transform: Optional[Callable], force_reload: bool) -> InMemoryDataset:
    r"""The dataset :obj:`canonical` through PyG's loader of it."""
    if canonical in ('Cora', 'CiteSeer', 'PubMed'):
        # Planetoid names its folder after the string as given: pass the exact spelling.
        return Planetoid(root, canonical, transform=transform, pre_transform=pre_transform,
                         force_reload=force_reload)
    if canonical == 'CoraFull':
        if not force_reload:
            return CoraFull(root, transform=transform, pre_transform=pre_transform)
        # CoraFull takes no force_reload; its base class, which it calls with 'cora', does.
        dataset = CoraFull.__new__(CoraFull)
        CitationFull.__init__(dataset, root, 'cora', transform=transform,
                              pre_transform=pre_transform, force_reload=True)
        return dataset
    if canonical in HETEROPHILOUS:  # the five of PyG's HeterophilousGraphDataset
        return HeterophilousGraphDataset(root, canonical, transform=transform,
                                         pre_transform=pre_transform, force_reload=force_reload)
    # Not torch_geometric.datasets.Flickr, which is GraphSAINT's 89,250-node graph.
    return AttributedGraphDataset(root, canonical, transform=transform,
                                  pre_transform=pre_transform, force_reload=force_reload)
