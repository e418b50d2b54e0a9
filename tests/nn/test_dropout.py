import pytest
import torch

from torch_geometric_regcn.nn.dropout import dropout


@pytest.mark.parametrize('layout', ['coo', 'csr'])
def test_sparse_dropout_is_dense_dropout_of_the_stored_entries(layout):
    x = torch.rand(200, 100, dtype=torch.float64) + 0.5
    x[torch.rand(200, 100) < 0.9] = 0
    sparse = x.to_sparse() if layout == 'coo' else x.to_sparse_csr()
    assert dropout(sparse, 0.5, training=False) is sparse
    assert dropout(sparse, 0.0, training=True) is sparse
    out = dropout(sparse, 0.4, training=True)
    assert out.layout == sparse.layout
    out = out.to_dense()
    kept = out != 0
    assert not bool((kept & (x == 0)).any())  # zeros stay zero
    torch.testing.assert_close(out[kept], x[kept] / 0.6)  # survivors rescaled by 1/(1-p)
    # Kept fraction ~ Binomial(n, 0.6)/n, n ~ 2000: 5 standard deviations is ±0.055.
    fraction = float(kept.sum()) / float((x != 0).sum())
    assert abs(fraction - 0.6) < 0.055


def test_dense_is_torch_dropout_and_bad_layout_is_explained():
    x = torch.rand(5, 4)
    torch.manual_seed(0)
    expected = torch.nn.functional.dropout(x, 0.3, True)
    torch.manual_seed(0)
    assert torch.equal(dropout(x, 0.3, True), expected)
    with pytest.raises(ValueError, match='to_sparse_csr'):
        dropout(x.to_sparse_csc(), 0.3, True)
