import pytest
import torch

from torch_geometric_regcn.knn.top_k import RunningTopK, merge_top_k, top_k_lowest_index


def _reference(scores, k):
    """Each row's k best columns in the order (-score, column), ascending."""
    return [sorted(sorted(range(len(row)), key=lambda j: (-row[j], j))[:k])
            for row in scores.tolist()]


@pytest.mark.parametrize('levels', [3, 50, None])
def test_top_k_ties_go_to_the_lower_index(levels):
    # Few score levels make ties across the k-th place common (the mask
    # fallback); None gives distinct scores (the top-(k+1) fast path).
    scores = torch.randn(40, 30, generator=torch.Generator().manual_seed(2))
    if levels is not None:
        scores = (scores * levels / 4).round()
    scores[torch.arange(30), torch.arange(30)] = -float('inf')
    for k in (1, 5, 29):
        assert top_k_lowest_index(scores, k).tolist() == _reference(scores, k)


@pytest.mark.parametrize('levels', [3, None])
def test_running_top_k_over_blocks_is_the_top_k_of_the_whole_row(levels):
    # Column blocks of uneven widths (narrower than k too), merged in any
    # order, give the top-k of the full rows, ties to the lower column.
    gen = torch.Generator().manual_seed(4)
    scores = torch.randn(25, 41, generator=gen, dtype=torch.float64)
    if levels is not None:
        scores = (scores * levels).round()
    k, bounds = 6, [0, 3, 17, 17, 30, 41]
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1]):
        top = RunningTopK(25, k, 41, scores)
        for b in order:
            columns = torch.arange(bounds[b], bounds[b + 1])
            rows = slice(0, 12) if b == 3 else slice(None)  # rows may come in parts
            top.add(rows, scores[rows, columns], columns)
            if b == 3:
                top.add(slice(12, None), scores[12:, columns], columns)
        assert top.result().tolist() == _reference(scores, k)


@pytest.mark.parametrize('k', [6, 10, 20])
def test_merges_of_many_ties_keep_the_lower_columns(k):
    # Merges of 2k tied candidates: an unstable sort kept ties in order on
    # short rows only (k = 6 passed without stable=True, k = 10 did not).
    gen = torch.Generator().manual_seed(4)
    n = 8 * k
    scores = (torch.randn(30, n, generator=gen, dtype=torch.float64) * 2).round()
    top = RunningTopK(30, k, n, scores)
    for start in range(0, n, 2 * k + 1):
        columns = torch.arange(start, min(start + 2 * k + 1, n))
        top.add(slice(None), scores[:, columns], columns)
    assert top.result().tolist() == _reference(scores, k)


def test_one_block_needs_no_merge_and_merge_orders_by_score_then_index():
    scores = torch.tensor([[0.5, 0.9, 0.5, 0.1], [0.0, 0.0, 0.0, 1.0]])
    top = RunningTopK(2, 2, 4, scores, merges=False)
    top.add(slice(None), scores, torch.arange(4))
    assert top.result().tolist() == [[0, 1], [0, 3]]
    values, index = merge_top_k(torch.tensor([[0.5, 0.25]]), torch.tensor([[7, 3]]),
                                torch.tensor([[0.5, 0.75]]), torch.tensor([[2, 9]]), 3)
    assert index.tolist() == [[9, 2, 7]] and values.tolist() == [[0.75, 0.5, 0.5]]


@pytest.mark.parametrize('levels', [2, 6, None])
@pytest.mark.parametrize('columns', [720, 1031])
def test_wide_rows_take_the_grouped_path_with_the_same_ties(levels, columns):
    # Rows of at least 4 * 16 * (k + 1) columns go through the group maxima;
    # widths that are not a multiple of 16 leave columns over. Few score levels
    # make ties at the k-th place (of the group maxima and of the gathered
    # scores) common; zero rows tie everywhere; a row with one finite score
    # ties at -inf. The reference sorts every row in the order (-score, column).
    gen = torch.Generator().manual_seed(7)
    scores = torch.randn(48, columns, generator=gen)
    if levels is not None:
        scores = (scores * levels).round()
    scores[::9] = 0.0
    scores[5] = -float('inf')
    scores[5, columns - 1] = 1.0
    for k in (1, 4, 10):
        assert columns // 16 >= 4 * (k + 1)  # the grouped path
        assert top_k_lowest_index(scores, k).tolist() == _reference(scores, k)


def _keyed_reference(scores, k, key):
    """Each row's k best columns in the order (-score, key), as column indices, ascending."""
    return [sorted(sorted(range(len(row)), key=lambda j: (-row[j], key[j]))[:k])
            for row in scores.tolist()]


@pytest.mark.parametrize('columns', [30, 1031])  # the top-(k+1) and the grouped paths
def test_tie_keys_order_equal_scores_in_place_of_the_column(columns):
    gen = torch.Generator().manual_seed(8)
    scores = (torch.randn(40, columns, generator=gen) * 2).round()  # ties at most k-th places
    key = torch.randperm(columns, generator=gen)
    for k in (1, 5, 10):
        expected = _keyed_reference(scores, k, key.tolist())
        assert top_k_lowest_index(scores, k, key).tolist() == expected
        if k == 5:  # the keys decide: the column order gives other sets
            assert top_k_lowest_index(scores, k).tolist() != expected


def test_keyed_running_top_k_merges_blocks_by_key_and_returns_the_columns():
    # The candidates' keys are a permutation of the columns (a shard's original node
    # indices); blocks in any order give the (-score, key) top-k of the whole rows.
    gen = torch.Generator().manual_seed(9)
    n, k, bounds = 41, 6, [0, 3, 17, 17, 30, 41]
    scores = (torch.randn(25, n, generator=gen, dtype=torch.float64) * 2).round()
    key = torch.randperm(n, generator=gen)
    for order in ([0, 1, 2, 3, 4], [4, 2, 0, 3, 1]):
        top = RunningTopK(25, k, n, scores, keyed=True)
        for b in order:
            columns = torch.arange(bounds[b], bounds[b + 1])
            top.add(slice(None), scores[:, columns], columns, key[columns])
        assert top.result().tolist() == _keyed_reference(scores, k, key.tolist())
    with pytest.raises(ValueError, match=r"RunningTopK\(keyed=True\) takes 'keys'"):
        top.add(slice(None), scores[:, :3], torch.arange(3))
    with pytest.raises(ValueError, match=r"RunningTopK\(keyed=False\) takes no 'keys'"):
        RunningTopK(25, k, n, scores).add(slice(None), scores[:, :3], torch.arange(3),
                                          key[:3])
