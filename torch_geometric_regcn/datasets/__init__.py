r"""The eight datasets of the paper's Table 2, its random split and
hyperparameters, the heterophilous graphs of Platonov et al. with their
official splits, and a synthetic graph that needs no download (see
``docs/datasets.md``)."""
from torch_geometric_regcn.datasets.amgcn import ACM, UAI
from torch_geometric_regcn.datasets.csbm import contextual_sbm, contextual_sbm_shard
from torch_geometric_regcn.datasets.heterophilous import (
    HETEROPHILOUS,
    HeterophilousInfo,
    HeterophilousNpzDataset,
)
from torch_geometric_regcn.datasets.registry import DATASETS, load_dataset
from torch_geometric_regcn.datasets.settings import PAPER_SETTINGS, PaperSetting
from torch_geometric_regcn.datasets.split import paper_split

__all__ = ['ACM', 'DATASETS', 'HETEROPHILOUS', 'HeterophilousInfo', 'HeterophilousNpzDataset',
           'PAPER_SETTINGS', 'UAI', 'PaperSetting', 'contextual_sbm', 'contextual_sbm_shard',
           'load_dataset', 'paper_split']
