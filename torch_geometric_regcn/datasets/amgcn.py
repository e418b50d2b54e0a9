r"""The ACM and UAI attributed graphs in the format of the AM-GCN repository."""
import os
import zipfile
from typing import Callable, Optional, Union

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import remove_self_loops, to_undirected

from torch_geometric_regcn.datasets.processed_files import (
    SafeInMemoryDataset,
)

AMGCN_URL = 'https://github.com/zhumeiqiBUPT/AM-GCN'


def _read_table(archive: zipfile.ZipFile, member: str, dtype: type) -> np.ndarray:
    r"""Parses the whitespace-separated (spaces or tabs) text matrix
    :obj:`member` of :obj:`archive` without unpacking it to disk."""
    import pandas as pd  # its C parser is far faster than np.loadtxt on these big files

    try:
        with archive.open(member) as f:
            frame = pd.read_csv(f, sep=r'\s+', header=None, dtype=dtype)
        table = frame.to_numpy(copy=True)  # pandas >= 3 hands out read-only views
    except KeyError:
        raise ValueError(f"'{archive.filename}' has no member '{member}' "
                         f"(it holds {sorted(archive.namelist())})") from None
    except ValueError as e:  # a ragged row with an integer dtype, or a non-number
        raise ValueError(f"'{member}' in '{archive.filename}' is not a matrix of "
                         f"numbers: {e}") from None
    if np.issubdtype(table.dtype, np.floating) and np.isnan(table).any():
        raise ValueError(f"'{member}' in '{archive.filename}' has rows of unequal length "
                         f"or missing values")
    if np.issubdtype(table.dtype, np.floating) and not np.isfinite(table).all():
        raise ValueError(f"'{member}' in '{archive.filename}' has infinite values (or "
                         f"values beyond {np.dtype(dtype).name})")
    return table


def read_amgcn_zip(path: str, prefix: str, edge_file: str) -> Data:
    r"""Reads one AM-GCN dataset archive into a :class:`~torch_geometric.data.Data`
    object: the dense 0/1 feature matrix :obj:`{prefix}/{prefix}.feature`
    (one row per node), the 0-based labels :obj:`{prefix}/{prefix}.label`
    (one per line) and the edge list :obj:`{prefix}/{edge_file}` (``u v`` per
    line). Members are read straight from the zip file.

    The returned :obj:`edge_index` is undirected and coalesced (sorted, no
    duplicates) with self loops removed; :obj:`x` is :obj:`torch.float32` and
    :obj:`y` is :obj:`torch.int64`.

    Args:
        path (str): The path of the zip file.
        prefix (str): The folder inside the zip file, *e.g.*, :obj:`"acm"`.
        edge_file (str): The name of the edge list inside :obj:`prefix`,
            *e.g.*, :obj:`"acm_PAP.edge"`.
    """
    if not zipfile.is_zipfile(path):
        raise ValueError(f"'{path}' is not a zip archive (a Git LFS pointer, or a page saved "
                         f"by a failed download?); get the file of that name from "
                         f"{AMGCN_URL} and put it, unchanged, there")
    with zipfile.ZipFile(path) as archive:
        x = _read_table(archive, f'{prefix}/{prefix}.feature', np.float32)
        y = _read_table(archive, f'{prefix}/{prefix}.label', np.int64)
        edges = _read_table(archive, f'{prefix}/{edge_file}', np.int64)

    num_nodes = x.shape[0]
    if y.shape != (num_nodes, 1):
        raise ValueError(f"expected one label per line for the {num_nodes} feature rows of "
                         f"'{path}' (got a {y.shape[0]} x {y.shape[1]} label table)")
    if y.size and y.min() < 0:
        raise ValueError(f"'{prefix}/{prefix}.label' in '{path}' holds negative labels (min "
                         f"{y.min()}); class ids must be 0..C-1")
    if edges.ndim != 2 or edges.shape[1] != 2:
        raise ValueError(f"expected 'u v' per line in '{prefix}/{edge_file}' "
                         f"(got {edges.shape[1]} columns)")
    if edges.size and (edges.min() < 0 or edges.max() >= num_nodes):
        raise ValueError(f"'{prefix}/{edge_file}' has node ids in [{edges.min()}, "
                         f"{edges.max()}], outside [0, {num_nodes - 1}]")

    edge_index = torch.from_numpy(np.ascontiguousarray(edges.T))
    edge_index, _ = remove_self_loops(edge_index)
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)  # also coalesces
    return Data(x=torch.from_numpy(x), edge_index=edge_index,
                y=torch.from_numpy(y.reshape(-1)))


class AMGCNDataset(SafeInMemoryDataset):
    r"""Base class of the single-graph datasets that the `"AM-GCN: Adaptive
    Multi-channel Graph Convolutional Networks" <https://arxiv.org/abs/2007.02265>`_
    paper (KDD 2020) ships as zip files in the :obj:`data/` folder of its
    `repository <https://github.com/zhumeiqiBUPT/AM-GCN>`_.

    The zip file is expected, unchanged, at :obj:`{root}/{name}/raw/{zip_name}`;
    processed data goes to :obj:`{root}/{name}/processed/`. Nothing is
    downloaded: :meth:`download` raises an error that says where to get the
    file and where to put it.

    Subclasses set :obj:`name` (the folder under :obj:`root`),
    :obj:`zip_name`, :obj:`prefix` (the folder inside the zip) and
    :obj:`edge_file` (the edge list inside :obj:`prefix`).

    Processed files are only read with :obj:`torch.load(weights_only=True)`,
    which refuses to unpickle code. PyG 2.8.1 itself reads
    :obj:`processed/pre_transform.pt` and :obj:`pre_filter.pt` with
    :obj:`weights_only=False` and retries :obj:`processed/data.pt` so when a
    class is refused, so a file planted in :obj:`root` could run code. Here
    these three files are checked first: one that does not load safely is
    not opened, a warning names it, and the dataset is processed
    again from the raw zip file, which overwrites it. A :obj:`pre_transform`
    that stores objects of its own classes therefore needs them allowlisted
    with :obj:`torch.serialization.add_safe_globals`. Only point :obj:`root`
    at folders you trust all the same.
    """
    name: str
    zip_name: str
    prefix: str
    edge_file: str

    def __init__(self, root: Union[str, os.PathLike], transform: Optional[Callable] = None,
                 pre_transform: Optional[Callable] = None,
                 force_reload: bool = False) -> None:
        super().__init__(root, transform, pre_transform, force_reload)

    @property
    def raw_file_names(self) -> str:
        return self.zip_name

    @property
    def processed_file_names(self) -> str:
        return 'data.pt'

    def download(self) -> None:
        raise FileNotFoundError(
            f"{self.__class__.__name__}: '{self.raw_paths[0]}' is missing and is not "
            f"downloaded automatically. Get '{self.zip_name}' from the 'data/' folder of "
            f"{AMGCN_URL} and put it, unchanged, at that path")

    def process(self) -> None:
        data = read_amgcn_zip(self.raw_paths[0], self.prefix, self.edge_file)
        if self.pre_transform is not None:
            data = self.pre_transform(data)
        self.save([data], self.processed_paths[0])

    def __repr__(self) -> str:
        return f'{self.__class__.__name__}()'


class ACM(AMGCNDataset):
    r"""The ACM paper graph from the `"AM-GCN: Adaptive Multi-channel Graph
    Convolutional Networks" <https://arxiv.org/abs/2007.02265>`_ paper,
    as used in the tsGCN paper: papers linked when they share an author
    (the paper-author-paper graph of HAN), bag-of-words features of the
    keywords, and three classes (Database, Wireless Communication, Data
    Mining).

    Reads :obj:`acm/acm.feature`, :obj:`acm/acm.label` and
    :obj:`acm/acm_PAP.edge` from :obj:`{root}/ACM/raw/acm.zip` (AM-GCN's
    :obj:`data/acm.zip`). :obj:`edge_index` is made undirected and coalesced
    and self loops are removed; the file lists both directions of each edge
    and has none, so nothing is lost.

    Args:
        root (str or os.PathLike): Root directory; the zip file lies in
            :obj:`{root}/ACM/raw/`. Processed files found there are only
            loaded with :obj:`torch.load(weights_only=True)` (see
            :class:`AMGCNDataset`); still, only point :obj:`root` at folders
            you trust.
        transform (callable, optional): A function/transform that takes in a
            :class:`~torch_geometric.data.Data` object and returns a
            transformed version, applied on every access.
            (default: :obj:`None`)
        pre_transform (callable, optional): Like :obj:`transform`, but applied
            once before the data is saved to disk. (default: :obj:`None`)
        force_reload (bool, optional): Whether to re-process the dataset.
            (default: :obj:`False`)

    **STATS:** 3,025 nodes, 26,256 directed edges (13,128 undirected),
    1,870 features, 3 classes.
    """
    name = 'ACM'
    zip_name = 'acm.zip'
    prefix = 'acm'
    edge_file = 'acm_PAP.edge'


class UAI(AMGCNDataset):
    r"""The UAI2010 web-page graph from the `"AM-GCN: Adaptive Multi-channel
    Graph Convolutional Networks" <https://arxiv.org/abs/2007.02265>`_ paper,
    as used in the tsGCN paper: 3,067 web pages with binary word features
    in 19 classes.

    Reads :obj:`uai/uai.feature`, :obj:`uai/uai.label` and
    :obj:`uai/uai.edge` from :obj:`{root}/UAI/raw/uai.zip` (AM-GCN's
    :obj:`data/uai.zip`). :obj:`edge_index` is made undirected and coalesced
    and self loops are removed: the file's 56,622 lines hold 6 self-loop
    lines, so 56,616 directed edges (28,308 undirected) remain, where the
    paper counts 56,622 / 2 = 28,311.

    Args:
        root (str or os.PathLike): Root directory; the zip file lies in
            :obj:`{root}/UAI/raw/`. Processed files found there are only
            loaded with :obj:`torch.load(weights_only=True)` (see
            :class:`AMGCNDataset`); still, only point :obj:`root` at folders
            you trust.
        transform (callable, optional): A function/transform that takes in a
            :class:`~torch_geometric.data.Data` object and returns a
            transformed version, applied on every access.
            (default: :obj:`None`)
        pre_transform (callable, optional): Like :obj:`transform`, but applied
            once before the data is saved to disk. (default: :obj:`None`)
        force_reload (bool, optional): Whether to re-process the dataset.
            (default: :obj:`False`)

    **STATS:** 3,067 nodes, 56,616 directed edges (28,308 undirected),
    4,973 features, 19 classes.
    """
    name = 'UAI'
    zip_name = 'uai.zip'
    prefix = 'uai'
    edge_file = 'uai.edge'
