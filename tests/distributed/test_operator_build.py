r"""tsGCN's operator S built on 2 gloo ranks by chunks of rows (a handful of
entries per chunk, so rows longer than a chunk and chunks without a halo
column occur): each rank's rows are the single-process S's rows to the bit
(the same sums in the same order, the halo's degrees fetched), and the
matrix built from CSR rows (ShardedMatrix.from_rows) is the one built from
its (edge_index, values) pairs, entry for entry."""
import torch

from tests.distributed.launch import requires_gloo, run_ranks

pytestmark = requires_gloo


def _graph():
    from tests.conftest import messy_graph
    generator = torch.Generator().manual_seed(5)
    edge_index = messy_graph(num_nodes=50, num_edges=300, seed=6)
    weight = torch.rand(edge_index.size(1), generator=generator, dtype=torch.float64) + 0.05
    semantic = torch.stack([torch.arange(50).repeat_interleave(3),
                            torch.randint(0, 50, (150,), generator=generator)])
    return edge_index, weight, semantic


def _build(rank, world_size):
    import torch.distributed as dist

    from torch_geometric_regcn.distributed import RowPartition
    from torch_geometric_regcn.linalg import ShardedMatrix, graph_operator
    from torch_geometric_regcn.regularizers import GraphOperators, tsgcn_adjacency
    graph_operator.CHUNK_ENTRIES = 5
    edge_index, weight, semantic = _graph()
    part = RowPartition.even(50, world_size, rank)
    mine = (edge_index[0] >= part.start) & (edge_index[0] < part.end)
    own = (semantic[0] >= part.start) & (semantic[0] < part.end)
    graph = GraphOperators(50, edge_index[:, mine], weight[mine], torch.float64,
                           semantic_edge_index=semantic[:, own], partition=part,
                           group=dist.group.WORLD)
    s = tsgcn_adjacency(graph, 1.0, 0.4)
    coo = s.local.to_sparse_coo().coalesce()
    glob = torch.cat([torch.arange(part.start, part.end), s.plan.halo])
    pairs = ShardedMatrix(torch.stack([coo.indices()[0] + part.start, glob[coo.indices()[1]]]),
                          coo.values(), part, dist.group.WORLD)
    return {'rows': s.dense_rows(), 'halo': s.plan.halo, 'local': s.local,
            'pairs_local': pairs.local, 'pairs_halo': pairs.plan.halo,
            'bounds': (part.start, part.end)}


@requires_gloo
def test_sharded_operator_rows_are_the_single_process_rows_to_the_bit():
    from torch_geometric_regcn.regularizers import GraphOperators, tsgcn_adjacency
    edge_index, weight, semantic = _graph()
    whole = tsgcn_adjacency(GraphOperators(50, edge_index, weight, torch.float64,
                                           semantic_edge_index=semantic), 1.0, 0.4).to_dense()
    for out in run_ranks(_build, 2, timeout=120):
        start, end = out['bounds']
        assert torch.equal(out['rows'], whole[start:end])
        assert out['halo'].numel() > 0
        assert torch.equal(out['halo'], out['pairs_halo'])
        for name in ('crow_indices', 'col_indices', 'values'):
            assert torch.equal(getattr(out['local'], name)(),
                               getattr(out['pairs_local'], name)())
