r"""Deprecated: the paper's settings moved to
:mod:`torch_geometric_regcn.datasets`; the training harness of the examples and
benchmarks lives outside the package, in the repository's :obj:`harness/`."""
from torch_geometric_regcn.utils.deprecation import moved

__getattr__ = moved(__name__, {
    name: f'torch_geometric_regcn.datasets.settings:{name}'
    for name in ('PAPER_SETTINGS', 'PaperSetting')})
