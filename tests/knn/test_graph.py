import warnings

import pytest
import torch
from torch_geometric.utils import coalesce

from tests.conftest import brute_force, clustered
from tests.knn.test_exact import ties
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.knn import (
    exact_knn_cosine,
    ivf_knn_cosine,
    knn_graph_cosine,
    sharded_knn_cosine,
    sharded_knn_graph_cosine,
)


def test_knn_graph_cosine_is_symmetric_brute_force():
    x = torch.randn(40, 5, generator=torch.Generator().manual_seed(6))
    assert torch.equal(coalesce(knn_graph_cosine(x, 3)), brute_force(x, 3))


@pytest.mark.parametrize('method', ['exact', 'ivf'])
def test_one_part_is_the_graph_of_the_neighbours(method):
    # The symmetrised edges of exact_knn_cosine (or ivf_knn_cosine with its
    # defaults and the same generator), coalesced; partition=None is one part.
    x = clustered(n=400)
    gens = [torch.Generator().manual_seed(3) for _ in range(3)]
    if method == 'exact':
        col = exact_knn_cosine(x, 4, progress=False)
    else:
        col = ivf_knn_cosine(x, 4, generator=gens[0], progress=False)
    row = torch.arange(400).repeat_interleave(4)
    edges = torch.cat([torch.stack([row, col.view(-1)]), torch.stack([col.view(-1), row])], 1)
    expected = coalesce(edges, num_nodes=400)
    assert torch.equal(knn_graph_cosine(x, 4, method=method, generator=gens[1],
                                        progress=False), expected)
    assert torch.equal(knn_graph_cosine(x, 4, method=method, generator=gens[2],
                                        progress=False, partition=RowPartition.even(400, 1)),
                       expected)


def test_deprecated_sharded_names_are_the_one_process_search():
    x = ties(300, 5)
    part = RowPartition.even(300, 1)
    with pytest.warns(DeprecationWarning, match="call 'torch_geometric_regcn.knn.exact_knn"):
        got = sharded_knn_cosine(x, 4, part, None, block_size=7)
    assert torch.equal(got, exact_knn_cosine(x, 4, progress=False))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        assert torch.equal(sharded_knn_cosine(x.to_sparse(), 4, part, None),
                           exact_knn_cosine(x.to_sparse(), 4, progress=False))
        gens = [torch.Generator().manual_seed(2) for _ in range(2)]
        assert torch.equal(sharded_knn_cosine(x, 4, part, None, method='ivf',
                                              generator=gens[0]),
                           ivf_knn_cosine(x, 4, generator=gens[1], progress=False))
    with pytest.warns(DeprecationWarning, match="call 'torch_geometric_regcn.knn.knn_graph"):
        graph = sharded_knn_graph_cosine(x, 4, part, None)
    assert torch.equal(graph, knn_graph_cosine(x, 4, progress=False))
