import numpy as np
import scipy.sparse as sp
import torch

from harness.operators import benchmark_graphs, synthetic_operator


def test_synthetic_operator_is_saved_as_built(tmp_path):
    said = []
    graphs = benchmark_graphs(said.append, str(tmp_path), 600, probe=200, skip_pubmed=True)
    assert said[0] == 'PubMed: skipped (--skip-pubmed).' and said[1].startswith('Synthetic:')
    assert [g.name for g in graphs] == ['Synthetic 0k'] and graphs[0].num_nodes == 600
    graph = synthetic_operator(600, probe=200)  # the same graph, built again
    dense = graph.op.to_dense().numpy()
    assert graph.op.dtype == torch.float32 and np.allclose(dense, dense.T)
    np.testing.assert_array_equal(sp.load_npz(graphs[0].op_path).toarray(), dense)
    saved = torch.load(graphs[0].data_path)
    assert sorted(saved) == ['edge_index', 'train_mask', 'x', 'y']
    for name, value in saved.items():
        assert torch.equal(value, graph.data[name])
    assert 0.02 < float(saved['train_mask'].float().mean()) < 0.08  # 5 % of the nodes
