import warnings

import pytest
import torch
from torch_geometric.data import Data

from torch_geometric_regcn import SemanticGraph
from torch_geometric_regcn.distributed.row_partition import RowPartition
from torch_geometric_regcn.knn import (
    exact_knn_cosine,
    ivf_knn_cosine,
    knn_graph_cosine,
    normalize_rows,
    sharded_knn_cosine,
    spherical_kmeans,
)
from torch_geometric_regcn.knn.checks import EXACT_LIMIT, resolve_method


def _gaussian(n, d, seed):
    return torch.randn(n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def test_auto_is_exact_on_sparse_features_or_small_graphs():
    dense, sparse = torch.randn(3, 2), torch.eye(3).to_sparse()
    assert resolve_method('auto', dense, EXACT_LIMIT) == 'exact'
    assert resolve_method('auto', dense, EXACT_LIMIT + 1) == 'ivf'
    assert resolve_method('auto', sparse, EXACT_LIMIT + 1) == 'exact'
    assert resolve_method('ivf', dense, 10) == 'ivf'


def test_rejects_bad_arguments_without_a_process_group():
    x = _gaussian(20, 3, 0)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', DeprecationWarning)
        with pytest.raises(ValueError, match="'partition' is missing"):
            sharded_knn_cosine(x, 3, None, None)
        with pytest.raises(ValueError, match="'x' has 20 rows, but rank 0 owns 10"):
            sharded_knn_cosine(x, 3, RowPartition((0, 10), 0), None)
        with pytest.raises(ValueError, match="'k' must lie in"):
            sharded_knn_cosine(x, 20, RowPartition.even(20, 1), None)
        with pytest.raises(ValueError, match='needs dense features'):
            sharded_knn_cosine(x.to_sparse(), 3, RowPartition.even(20, 1), None,
                               method='ivf')
    with pytest.raises(ValueError, match="'x' has 20 rows, but rank 0 owns 10"):
        exact_knn_cosine(x, 3, partition=RowPartition((0, 10), 0))
    with pytest.raises(ValueError, match="'partition' is part 0 of 2"):
        knn_graph_cosine(x, 3, partition=RowPartition((0, 10, 20), 0))
    with pytest.raises(ValueError, match="initialised process group"):
        exact_knn_cosine(x, 3, group=object())
    with pytest.raises(ValueError, match="'k' must lie in \\[1, 19\\]"):
        exact_knn_cosine(x, 20)
    with pytest.raises(ValueError, match="'k' must be a positive integer"):
        knn_graph_cosine(x, 0)
    with pytest.raises(ValueError, match="'block_size' must be a positive integer"):
        exact_knn_cosine(x, 3, block_size=0)
    with pytest.raises(ValueError, match="'method' must be one of"):
        knn_graph_cosine(x, 3, method='hnsw')
    with pytest.raises(ValueError, match="'x' contains NaN"):
        exact_knn_cosine(torch.tensor([[1.0], [float('nan')], [2.0]]), 1)
    with pytest.raises(ValueError, match='needs dense features'):
        ivf_knn_cosine(x.to_sparse(), 3)


@pytest.mark.parametrize('option, value, message', [
    ('cells', 0, "'cells' must lie in \\[1, 20\\]"),
    ('cells', 21, "'cells' must lie in \\[1, 20\\]"),
    ('probes', 0, "'probes' must be a positive integer"),
    ('target_recall', 0.0, "'target_recall' must lie in \\(0.0, 1.0\\]"),
    ('target_recall', 1.5, "'target_recall' must lie in"),
    ('sample', 0, "'sample' must be a positive integer"),
    ('iterations', -1, "'iterations' must be a non-negative integer"),
])
def test_ivf_rejects_bad_options(option, value, message):
    with pytest.raises(ValueError, match=message):
        ivf_knn_cosine(_gaussian(20, 3, 0), 3, **{option: value})


def test_rejects_features_a_search_would_misread():
    x = _gaussian(20, 3, 0)
    # Complex features: the imaginary part would be dropped by a cast.
    for search in (exact_knn_cosine, knn_graph_cosine):
        with pytest.raises(TypeError, match="'x' must be real .* 'x.real'"):
            search(torch.complex(x, x.flip(0)), 3)
    # Sparse over rows, dense over columns (to_sparse(1)): one index row, not two.
    hybrid = x.to_sparse(1)
    with pytest.raises(ValueError, match="'x' is a hybrid sparse tensor"):
        exact_knn_cosine(hybrid, 3)
    # The meta device holds no values to search.
    with pytest.raises(ValueError, match="'x' is on the 'meta' device"):
        exact_knn_cosine(x.to('meta'), 3)
    with pytest.raises(TypeError, match="'generator' must be a torch.Generator"):
        spherical_kmeans(normalize_rows(x), 2, generator=0)
    # Rows that are not unit were clustered by dot product, into centroids of
    # norm up to 270 with iterations=0; zero rows (normalize_rows keeps them) pass.
    raw = x.clone()
    raw[1] = 0.0
    with pytest.raises(ValueError, match=r"row 0 of 'x' has norm .*normalize_rows"):
        spherical_kmeans(raw, 2)
    assert spherical_kmeans(normalize_rows(raw), 2).shape == (2, x.size(1))
    # The error for sparse 'x' names the entry points that search it.
    with pytest.raises(ValueError, match='exact_knn_cosine'):
        ivf_knn_cosine(x.to_sparse(), 3)


@pytest.mark.parametrize('layout', ['dense', 'sparse'])
def test_no_feature_columns_make_every_row_a_zero_row(layout):
    # Every similarity is 0 then: the k lowest other indices, as for zero rows.
    x = torch.zeros(6, 0, dtype=torch.float64)
    x = x.to_sparse() if layout == 'sparse' else x
    expected = torch.tensor([[1, 2], [0, 2], [0, 1], [0, 1], [0, 1], [0, 1]])
    assert torch.equal(exact_knn_cosine(x, 2), expected)
    assert normalize_rows(x).shape == (6, 0)


@pytest.mark.parametrize('n', [0, 1])
def test_a_graph_too_small_for_any_neighbour_says_so(n):
    # It read "'k' must lie in [1, -1]" for an empty graph.
    with pytest.raises(ValueError, match=f"at least 2 nodes.*got {n}"):
        knn_graph_cosine(torch.randn(n, 3), 1)


@pytest.mark.parametrize('dtype', [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_features_are_searched_in_float32(dtype):
    # They failed inside the finiteness check ("aminmax_cpu" not implemented).
    x = torch.randn(30, 6, generator=torch.Generator().manual_seed(0)).to(dtype)
    assert torch.equal(exact_knn_cosine(x, 3, progress=False),
                       exact_knn_cosine(x.float(), 3, progress=False))
    graph = SemanticGraph(3, progress=False)
    assert torch.equal(graph(Data(x=x, num_nodes=30)).semantic_edge_index,
                       graph(Data(x=x.float(), num_nodes=30)).semantic_edge_index)


def test_spherical_kmeans_takes_normalised_bfloat16_rows():
    # normalize_rows in bfloat16 (eps 7.8e-3) leaves norms 4e-3 from one: the
    # unit-row check (1e-3) refused the package's own normalisation.
    x = torch.randn(200, 64, generator=torch.Generator().manual_seed(0))
    assert spherical_kmeans(normalize_rows(x.bfloat16()), 4).shape == (4, 64)


def test_a_k_the_checks_accept_is_searched_as_its_int():
    # check_int accepted an integer 0-d tensor or a NumPy integer, but the search
    # went on with the object: a uint8 k = 255 wrapped in k + 1 (torch's size
    # error), a NumPy k failed in IVF after k-means (review s55/knn2).
    # Reference: the same search with int(k).
    import numpy as np

    from torch_geometric_regcn.knn import exact_knn_cosine, ivf_knn_cosine
    x = torch.randn(300, 8, generator=torch.Generator().manual_seed(0))
    expected = exact_knn_cosine(x, 255)
    assert torch.equal(exact_knn_cosine(x, torch.tensor(255, dtype=torch.uint8)), expected)
    gen = torch.Generator().manual_seed(1)
    expected = ivf_knn_cosine(x, 2, generator=gen)
    gen = torch.Generator().manual_seed(1)
    assert torch.equal(ivf_knn_cosine(x, np.array(2), generator=gen), expected)
