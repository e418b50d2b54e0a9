r"""The heterophilous graphs of Platonov et al. (ICLR 2023) with their ten
official splits: PyG's :class:`~torch_geometric.datasets.HeterophilousGraphDataset`
for the five it covers, :class:`HeterophilousNpzDataset` for the others."""
import os
import os.path as osp
import zipfile
from typing import Callable, Dict, NamedTuple, Optional, Union

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import coalesce, to_undirected

from torch_geometric_regcn.datasets.processed_files import SafeInMemoryDataset

HETEROPHILOUS_URL = 'https://github.com/yandex-research/heterophilous-graphs'


class HeterophilousInfo(NamedTuple):
    r"""What a heterophilous dataset is scored by, and how its edges read."""
    #: :obj:`"accuracy"`, or :obj:`"roc_auc"` for the two-class sets (class 1
    #: is the positive one, as the authors score it).
    metric: str
    #: Whether :obj:`edge_index` is directed (:obj:`edge_index[0]` is the
    #: source, :obj:`edge_index[1]` the target, as the file stores them) or
    #: holds both directions of every edge.
    directed: bool


#: The heterophilous datasets :func:`load_dataset` knows, by the name as PyG
#: normalises it (lower case, :obj:`"-"` read as :obj:`"_"`), with the metric
#: of the paper of Platonov et al. (ICLR 2023) and whether the graph is
#: directed. The first five are read by PyG's
#: :class:`~torch_geometric.datasets.HeterophilousGraphDataset`, the others by
#: :class:`HeterophilousNpzDataset`.
HETEROPHILOUS: Dict[str, HeterophilousInfo] = {
    'roman_empire': HeterophilousInfo('accuracy', False),
    'amazon_ratings': HeterophilousInfo('accuracy', False),
    'minesweeper': HeterophilousInfo('roc_auc', False),
    'tolokers': HeterophilousInfo('roc_auc', False),
    'questions': HeterophilousInfo('roc_auc', False),
    'chameleon_filtered': HeterophilousInfo('accuracy', False),
    'chameleon_filtered_directed': HeterophilousInfo('accuracy', True),
    'squirrel_filtered': HeterophilousInfo('accuracy', False),
    'squirrel_filtered_directed': HeterophilousInfo('accuracy', True),
    'actor': HeterophilousInfo('accuracy', False),
}

# The names PyG 2.8.1's HeterophilousGraphDataset accepts (after its normalisation).
_PYG_NAMES = ('roman_empire', 'amazon_ratings', 'minesweeper', 'tolokers', 'questions')

#: The names :class:`HeterophilousNpzDataset` reads (PyG has no loader for them).
NPZ_NAMES = tuple(name for name in HETEROPHILOUS if name not in _PYG_NAMES)

_ARRAYS = ('node_features', 'node_labels', 'edges', 'train_masks', 'val_masks', 'test_masks')


def normalize_name(name: str) -> str:
    r"""The key of :obj:`name` in :obj:`HETEROPHILOUS`, as PyG normalises
    it: lower case, with :obj:`"-"` read as :obj:`"_"`
    (:obj:`"Roman-empire"` is :obj:`"roman_empire"`)."""
    return name.lower().replace('-', '_')


def read_heterophilous_npz(path: str, directed: bool) -> Data:
    r"""Reads one dataset file of the authors' repository (:obj:`data/` of
    https://github.com/yandex-research/heterophilous-graphs) into a
    :class:`~torch_geometric.data.Data` object.

    The file holds :obj:`node_features` :obj:`[N, F]`, :obj:`node_labels`
    :obj:`[N]`, :obj:`edges` :obj:`[E, 2]` (source, target) and the boolean
    :obj:`train_masks`, :obj:`val_masks`, :obj:`test_masks` of :obj:`K`
    splits, :obj:`[K, N]`. It is read without unpickling
    (:obj:`allow_pickle=False`).

    Returns :obj:`x` (:obj:`torch.float32`), :obj:`y` (:obj:`torch.int64`),
    :obj:`train_mask`, :obj:`val_mask`, :obj:`test_mask` (:obj:`torch.bool`,
    :obj:`[N, K]`: the file's masks transposed, split :obj:`k` is column
    :obj:`k`) and :obj:`edge_index`, coalesced (sorted by source, then
    target; a repeated edge kept once):

    * undirected (:obj:`directed=False`): every stored edge in both
      directions (:func:`~torch_geometric.utils.to_undirected`), as PyG's
      :class:`~torch_geometric.datasets.HeterophilousGraphDataset` does;
    * directed: the stored edges, :obj:`edge_index[0] -> edge_index[1]` for
      each :obj:`(source, target)` row of :obj:`edges`.

    Self loops are kept in both cases, as the authors' code keeps them.

    Args:
        path (str): The :obj:`.npz` file.
        directed (bool): Whether the stored edges are directed.
    """
    if not zipfile.is_zipfile(path):  # np.load would suggest unpickling it
        raise ValueError(f"'{path}' is not an .npz archive (a Git LFS pointer, or a page saved "
                         f"by a failed download?); get the file of that name from "
                         f"{HETEROPHILOUS_URL} (folder data/) and put it, unchanged, there")
    with np.load(path, allow_pickle=False) as raw:
        missing = [key for key in _ARRAYS if key not in raw.files]
        if missing:
            raise ValueError(f"'{path}' lacks {missing} (it holds {sorted(raw.files)}); "
                             f"expected the layout of {HETEROPHILOUS_URL} (folder data/)")
        arrays = {key: raw[key] for key in _ARRAYS}
    x, y, edges = arrays['node_features'], arrays['node_labels'], arrays['edges']
    if x.ndim != 2:
        raise ValueError(f"'node_features' in '{path}' must be [N, F] (got shape {x.shape})")
    num_nodes = x.shape[0]
    if y.shape != (num_nodes,) or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"'node_labels' in '{path}' must hold one integer class per node, "
                         f"[{num_nodes}] (got shape {y.shape}, dtype {y.dtype})")
    if edges.ndim != 2 or edges.shape[1] != 2 or not np.issubdtype(edges.dtype, np.integer):
        raise ValueError(f"'edges' in '{path}' must be integer (source, target) rows, [E, 2] "
                         f"(got shape {edges.shape}, dtype {edges.dtype})")
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        raise ValueError(f"'edges' in '{path}' has node ids in [{edges.min()}, "
                         f"{edges.max()}], outside [0, {num_nodes - 1}]")
    masks = {}
    for part in ('train', 'val', 'test'):
        mask = arrays[f'{part}_masks']
        if (mask.dtype != np.bool_ or mask.ndim != 2 or mask.shape[1] != num_nodes
                or mask.shape != arrays['train_masks'].shape):
            raise ValueError(f"'{part}_masks' in '{path}' must be boolean [K, {num_nodes}] "
                             f"like 'train_masks' {arrays['train_masks'].shape} (got shape "
                             f"{mask.shape}, dtype {mask.dtype})")
        masks[f'{part}_mask'] = torch.from_numpy(np.ascontiguousarray(mask.T))

    edge_index = torch.from_numpy(np.ascontiguousarray(edges.T, dtype=np.int64))
    if directed:
        edge_index = coalesce(edge_index, num_nodes=num_nodes)
    else:
        edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    return Data(x=torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)),
                edge_index=edge_index,
                y=torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)), **masks)


class HeterophilousNpzDataset(SafeInMemoryDataset):
    r"""The heterophilous graphs of the `"A Critical Look at the Evaluation of
    GNNs under Heterophily: Are We Really Making Progress?"
    <https://arxiv.org/abs/2302.11640>`_ paper (ICLR 2023) that PyG's
    :class:`~torch_geometric.datasets.HeterophilousGraphDataset` does not
    load: :obj:`"chameleon_filtered"` and :obj:`"squirrel_filtered"`
    (Wikipedia pages without the duplicate nodes of the original Chameleon
    and Squirrel), their directed versions :obj:`"chameleon_filtered_directed"`
    and :obj:`"squirrel_filtered_directed"`, and :obj:`"actor"`, each with
    the paper's ten official splits. Names are read as PyG reads them
    (case-insensitive, :obj:`"-"` as :obj:`"_"`).

    The layout is PyG's: the authors' file, unchanged, at
    :obj:`{root}/{name}/raw/{name}.npz`, processed data in
    :obj:`{root}/{name}/processed/`. Nothing is downloaded: a missing file
    raises :class:`FileNotFoundError`, before any folder is made, saying
    where to get it (:obj:`data/` of
    https://github.com/yandex-research/heterophilous-graphs, MIT licence).
    See :func:`read_heterophilous_npz` for what is read and how the edges
    are stored: undirected sets get both directions of every edge, directed
    ones keep :obj:`edge_index[0] -> edge_index[1]` as the file stores them.
    The masks :obj:`train_mask`, :obj:`val_mask`, :obj:`test_mask` are
    :obj:`[N, 10]`; split :obj:`k` is column :obj:`k`. The attribute
    :obj:`directed` says which rule applies (as :obj:`HETEROPHILOUS` does).

    Processed files are only read with :obj:`torch.load(weights_only=True)`,
    as for :class:`~torch_geometric_regcn.datasets.ACM`: one that does not
    load so is not opened, a warning names it, and the dataset is processed
    again from its raw file.

    Args:
        root (str or os.PathLike): Root directory; the file lies in
            :obj:`{root}/{name}/raw/`. Only point :obj:`root` at folders you
            trust.
        name (str): The dataset, one of :obj:`NPZ_NAMES`.
        transform (callable, optional): A function/transform that takes in a
            :class:`~torch_geometric.data.Data` object and returns a
            transformed version, applied on every access.
            (default: :obj:`None`)
        pre_transform (callable, optional): Like :obj:`transform`, but applied
            once before the data is saved to disk. (default: :obj:`None`)
        force_reload (bool, optional): Whether to re-process the dataset.
            (default: :obj:`False`)

    **STATS** (edges: :obj:`edge_index.size(1)`; features; classes; metric
    accuracy for all):

    .. list-table::
        :header-rows: 1

        * - Name
          - #nodes
          - #edges
          - #features
          - #classes
        * - chameleon_filtered
          - 890
          - 17,708 (8,854 stored)
          - 2,325
          - 5
        * - chameleon_filtered_directed
          - 890
          - 13,584 (50 self loops)
          - 2,325
          - 5
        * - squirrel_filtered
          - 2,223
          - 93,996 (46,998 stored)
          - 2,089
          - 5
        * - squirrel_filtered_directed
          - 2,223
          - 65,718 (140 self loops)
          - 2,089
          - 5
        * - actor
          - 7,600
          - 53,318 (26,659 stored)
          - 932
          - 5
    """
    def __init__(self, root: Union[str, os.PathLike], name: str,
                 transform: Optional[Callable] = None,
                 pre_transform: Optional[Callable] = None,
                 force_reload: bool = False) -> None:
        if not isinstance(name, str) or normalize_name(name) not in NPZ_NAMES:
            raise ValueError(f"'name' must be one of {list(NPZ_NAMES)} (got {name!r}); "
                             f"PyG's HeterophilousGraphDataset loads {list(_PYG_NAMES)}")
        self.name = normalize_name(name)
        self.directed = HETEROPHILOUS[self.name].directed
        super().__init__(root, transform, pre_transform, force_reload)

    def check_raw(self, root: str) -> None:
        raw_path = osp.join(root, self.name, 'raw', self.raw_file_names)
        if not osp.isfile(raw_path):  # before PyG makes any folder
            self._missing(raw_path)

    @property
    def raw_file_names(self) -> str:
        return f'{self.name}.npz'

    @property
    def processed_file_names(self) -> str:
        return 'data.pt'

    def _missing(self, path: str) -> None:
        raise FileNotFoundError(
            f"{self.__class__.__name__}: '{path}' is missing and is not downloaded "
            f"automatically. Get '{self.name}.npz' from the 'data/' folder of "
            f"{HETEROPHILOUS_URL} and put it, unchanged, at that path")

    def download(self) -> None:
        self._missing(self.raw_paths[0])

    def process(self) -> None:
        data = read_heterophilous_npz(self.raw_paths[0], self.directed)
        if self.pre_transform is not None:
            data = self.pre_transform(data)
        self.save([data], self.processed_paths[0])

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}(name={self.name})'
