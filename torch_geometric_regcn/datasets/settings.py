r"""tsGCN's hyperparameters per dataset, from the paper's parameter table."""
from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class PaperSetting:
    r"""tsGCN's hyperparameters for one dataset, from the supplementary's
    parameter table: :math:`\alpha`, :math:`\beta` and :math:`p` with rank
    :math:`r = \lfloor N / p \rfloor` (:func:`~torch_geometric_regcn.paper_rank`).
    All datasets share learning rate 1e-2, weight decay 5e-4, 32 hidden units."""
    alpha: float
    beta: float
    p: int


#: The parameter table of the paper, by the names of
#: :func:`~torch_geometric_regcn.datasets.load_dataset` (ACM: the paper says
#: beta 0.9, the authors' code uses 2.0).
PAPER_SETTINGS: Dict[str, PaperSetting] = {
    'Cora': PaperSetting(1.0, 0.2, 16),
    'CiteSeer': PaperSetting(1.0, 0.4, 16),
    'PubMed': PaperSetting(1.0, 0.3, 2048),
    'ACM': PaperSetting(1.0, 0.9, 64),
    'BlogCatalog': PaperSetting(1.0, 0.5, 64),
    'CoraFull': PaperSetting(1.0, 0.1, 8),
    'Flickr': PaperSetting(1.0, 1.0, 64),
    'UAI': PaperSetting(1.0, 1.0, 16),
}
