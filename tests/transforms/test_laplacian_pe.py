"""LaplacianEigenPE against dense numpy.linalg.eigh and scipy's eigsh of PyG's
own Laplacian, on connected, disconnected and weighted graphs."""
import os.path as osp
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse.linalg as sla
import torch
from torch_geometric.data import Data
from torch_geometric.transforms import AddLaplacianEigenvectorPE
from torch_geometric.utils import get_laplacian, to_scipy_sparse_matrix, to_undirected

from harness.data import SHARED_DATA, has_offline_copy
from tests.conftest import CUDA
from torch_geometric_regcn import LaplacianEigenPE
from torch_geometric_regcn.datasets import contextual_sbm
from torch_geometric_regcn.linalg import laplacian_eigenpairs, normalized_adjacency
from torch_geometric_regcn.linalg.laplacian_spectrum import SIGN_TIE

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def connected_piece(size, gen, chords=1.0):
    """A ring of `size` nodes plus random chords: connected."""
    ring = torch.arange(size)
    edges = [torch.stack([ring, (ring + 1) % size])] if size > 2 else \
        [torch.tensor([[0], [1]])]
    if size > 3 and chords > 0:
        edges.append(torch.randint(0, size, (2, int(chords * size)), generator=gen))
    return torch.cat(edges, dim=1)


def components_graph(sizes, isolated=0, seed=0, weighted=False):
    """Undirected graph made of connected pieces of the given sizes plus
    `isolated` nodes without edges, nodes shuffled; returns (data, labels)
    with labels[i] = the piece of node i (-1 when isolated)."""
    gen = torch.Generator().manual_seed(seed)
    parts, labels, offset = [], [], 0
    for index, size in enumerate(sizes):
        parts.append(connected_piece(size, gen) + offset)
        labels += [index] * size
        offset += size
    n = offset + isolated
    labels += [-1] * isolated
    perm = torch.randperm(n, generator=gen)
    edge_index = perm[torch.cat(parts, dim=1)]
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    labels_out = torch.empty(n, dtype=torch.long)
    labels_out[perm] = torch.tensor(labels)
    data = Data(edge_index=to_undirected(edge_index, num_nodes=n), num_nodes=n)
    if weighted:
        w = torch.rand(n, n, generator=gen, dtype=torch.float64) + 0.1
        w = w + w.T
        data.edge_weight = w[data.edge_index[0], data.edge_index[1]]
    return data, labels_out


def laplacian(data, dtype=torch.float64):
    """PyG's own symmetric normalised Laplacian of `data`, as scipy CSR."""
    weight = data.edge_weight if 'edge_weight' in data else None
    index, value = get_laplacian(data.edge_index, None if weight is None else weight.to(dtype),
                                 normalization='sym', num_nodes=data.num_nodes, dtype=dtype)
    return to_scipy_sparse_matrix(index, value, data.num_nodes).tocsr()


def sin_angle(a, b):
    """The sine of the largest principal angle between the column spaces."""
    return float(np.sin(scipy.linalg.subspace_angles(a, b).max()))


def quality(lap, pe):
    """Rayleigh quotients, largest residual and orthonormality error of `pe`."""
    pe = np.asarray(pe, dtype=np.float64)
    image = lap @ pe
    rayleigh = np.einsum('ij,ij->j', pe, image) / np.einsum('ij,ij->j', pe, pe)
    residual = np.linalg.norm(image - pe * rayleigh, axis=0).max()
    orthogonality = np.abs(pe.T @ pe - np.eye(pe.shape[1])).max()
    return rayleigh, residual, orthogonality


def check_signs(pe):
    magnitude = pe.abs()
    first = (magnitude >= SIGN_TIE * magnitude.max(dim=0).values).to(torch.uint8).argmax(dim=0)
    assert bool((pe.gather(0, first[None]) > 0).all())


def check_against_dense(data, k, pe, gap_tol=1e-3):
    """Eigenvalues to 1e-6 against numpy's dense eigh of PyG's Laplacian, the
    subspace where the k-th eigenvalue is separated from the next."""
    lap = laplacian(data)
    values, vectors = np.linalg.eigh(lap.toarray())
    rayleigh, residual, orthogonality = quality(lap, pe)
    assert np.abs(rayleigh - values[1:k + 1]).max() < 1e-6
    assert residual < 1e-5 and orthogonality < 1e-8
    # Compare the span of the eigenvectors above the first eigenvalue gap
    # (degenerate eigenvalues, such as the zeros of a disconnected graph, have
    # no unique basis) and below the cut, when the cut has a gap.
    if values[k + 1] - values[k] > gap_tol:
        low = int(np.searchsorted(values, values[0] + gap_tol))
        if low <= k:
            assert sin_angle(pe.numpy()[:, low - 1:], vectors[:, low:k + 1]) < 1e-5
    return values


@pytest.mark.parametrize('sizes, isolated, k', [
    ([60], 0, 6),  # small: dense
    ([400], 0, 8),  # one component above DENSE_THRESHOLD: block Lanczos
    ([300, 120, 40, 40, 12, 2], 7, 10),  # both solvers, two equal-size pieces, isolated nodes
])
def test_eigenpairs_match_dense_eigh(sizes, isolated, k):
    data, _ = components_graph(sizes, isolated, seed=1)
    transform = LaplacianEigenPE(k, dtype=torch.float64)
    pe = transform(data.clone()).laplacian_eigenvector_pe
    assert pe.shape == (data.num_nodes, k) and pe.dtype == torch.float64
    check_against_dense(data, k, pe)
    check_signs(pe)
    pairs = transform.eigenpairs(data)
    assert torch.equal(pairs.eigenvectors, pe)
    assert bool((pairs.eigenvalues.diff() >= 0).all())


def test_lanczos_matches_scipy_eigsh():
    data = contextual_sbm(num_nodes=2500, avg_degree=6, seed=3)
    k = 12
    lap = laplacian(data)
    values, vectors = sla.eigsh(lap, k + 2, which='SA', tol=1e-12,
                                v0=np.ones(data.num_nodes))
    order = np.argsort(values)
    values, vectors = values[order], vectors[:, order]
    pairs = LaplacianEigenPE(k).eigenpairs(data)
    assert pairs.converged and pairs.iterations > 0  # the Lanczos path ran
    assert np.abs(pairs.eigenvalues.numpy() - values[1:k + 1]).max() < 1e-6
    rayleigh, residual, orthogonality = quality(lap, pairs.eigenvectors)
    assert np.abs(rayleigh - values[1:k + 1]).max() < 1e-6
    assert residual < 1e-5 and orthogonality < 1e-8
    assert values[k + 1] - values[k] > 1e-3  # the cut has a gap: the subspace is unique
    assert sin_angle(pairs.eigenvectors.numpy(), vectors[:, 1:k + 1]) < 1e-4
    check_signs(pairs.eigenvectors)


def test_disconnected_graph_with_isolated_nodes_where_pyg_fails():
    # 30 pieces (and 10 isolated nodes): the 9 smallest eigenvalues are all 0.
    sizes = [4 + 3 * (i % 9) for i in range(30)]
    data, labels = components_graph(sizes, isolated=10, seed=2)
    k = 8
    lap = laplacian(data)
    values = np.linalg.eigvalsh(lap.toarray())
    assert np.abs(values[:30]).max() < 1e-10 and values[30] > 1e-3
    pe = LaplacianEigenPE(k, dtype=torch.float64)(data.clone()).laplacian_eigenvector_pe
    rayleigh, residual, orthogonality = quality(lap, pe)
    assert np.abs(rayleigh).max() < 1e-12 and residual < 1e-12 and orthogonality < 1e-12
    # The documented basis of the kernel: pieces ordered by their lowest node,
    # the first skipped, then D^{1/2} 1_C / norm of the next ones.
    lowest = sorted(range(len(sizes)), key=lambda c: int((labels == c).nonzero()[0]))
    adjacency_degree = torch.zeros(data.num_nodes, dtype=torch.float64).index_add_(
        0, data.edge_index[0], torch.ones(data.edge_index.size(1), dtype=torch.float64))
    for column, piece in enumerate(lowest[1:k + 1]):
        expected = torch.where(labels == piece, adjacency_degree.sqrt(), 0.0)
        expected = expected / expected.norm()
        assert torch.allclose(pe[:, column], expected, atol=1e-12)

    # PyG's transform on the same graph: ARPACK either raises or returns
    # vectors that are not k orthonormal eigenvectors of the k smallest
    # non-trivial eigenvalues.
    failures = []
    for is_undirected in (False, True):
        try:
            out = AddLaplacianEigenvectorPE(k, is_undirected=is_undirected)(data.clone())
        except Exception as error:  # noqa: BLE001 - any failure is what is shown here
            failures.append(f'{type(error).__name__}: {error}')
            continue
        got, res, orth = quality(lap, out.laplacian_eigenvector_pe.double().numpy())
        if np.abs(np.sort(got) - values[1:k + 1]).max() > 1e-4 or res > 1e-3 or orth > 1e-3:
            failures.append(f'is_undirected={is_undirected}: eigenvalues {np.round(got, 4)}, '
                            f'orthonormality error {orth:.1e}')
    if not failures:
        pytest.skip("PyG's AddLaplacianEigenvectorPE succeeded on this graph with this "
                    "scipy/ARPACK; nothing to show")


def test_edgeless_graph_returns_unit_vectors():
    data = Data(edge_index=torch.empty(2, 0, dtype=torch.long), num_nodes=6)
    pe = LaplacianEigenPE(3)(data).laplacian_eigenvector_pe
    assert torch.equal(pe, torch.eye(6)[:, 1:4])


def test_self_loops_duplicates_and_zero_weights_as_pyg():
    data, _ = components_graph([80, 30], isolated=3, seed=4)
    # A self loop and an edge of weight zero (between the two pieces) change nothing.
    extra = torch.tensor([[0, 1, 2], [0, 1, 2]])
    bridge = torch.tensor([[int(data.edge_index[0, 0])], [int(data.edge_index[0, -1])]])
    edge_index = torch.cat([data.edge_index, extra, bridge, bridge.flip(0)], dim=1)
    weight = torch.cat([torch.ones(data.edge_index.size(1) + 3, dtype=torch.float64),
                        torch.zeros(2, dtype=torch.float64)])
    messy = Data(edge_index=edge_index, edge_weight=weight, num_nodes=data.num_nodes)
    a = LaplacianEigenPE(5)(messy).laplacian_eigenvector_pe
    b = LaplacianEigenPE(5, dtype=torch.float64)(data).laplacian_eigenvector_pe
    assert torch.allclose(a, b, atol=1e-10)
    check_against_dense(messy, 5, a)


def test_edge_weights():
    data, _ = components_graph([350, 50], isolated=2, seed=5, weighted=True)
    pe = LaplacianEigenPE(7)(data.clone()).laplacian_eigenvector_pe
    assert pe.dtype == torch.float64  # the dtype of data.edge_weight, as PyG
    check_against_dense(data, 7, pe)
    unweighted = LaplacianEigenPE(7)(Data(edge_index=data.edge_index,
                                          num_nodes=data.num_nodes)).laplacian_eigenvector_pe
    assert not torch.allclose(unweighted.double(), pe, atol=1e-3)


def test_directed_graph_is_symmetrised_and_is_undirected_changes_nothing():
    data, _ = components_graph([300, 20], isolated=2, seed=6)
    directed = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    one_way = Data(edge_index=directed, num_nodes=data.num_nodes)
    expected = LaplacianEigenPE(6)(data.clone()).laplacian_eigenvector_pe
    for is_undirected in (False, True):
        for graph in (data, one_way):
            out = LaplacianEigenPE(6, is_undirected=is_undirected)(graph.clone())
            assert torch.allclose(out.laplacian_eigenvector_pe, expected, atol=1e-5)


@pytest.mark.parametrize('nodes', [200, 400])  # the dense solve, and Lanczos
def test_the_weights_scale_does_not_matter(nodes):
    # L is the same for weights c w: with c = 2^-1060 (exact, deep in float64's
    # subnormals) the products of degrees underflowed, the dense path gave an
    # encoding 1e-5 off and the Lanczos path refused its own 'degree' (review
    # s55/pe_cache). Reference: the encoding of w, solved alike; both are
    # deterministic, so they agree to the rounding of the division by the
    # largest weight (exact: a power of two) and of the solve (1e-12 allows the
    # Lanczos residual 1e-13 over the gap).
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, nodes, (2, 8 * nodes), generator=gen)
    weight = torch.randint(1, 9, (edge_index.size(1),), generator=gen).double()
    expected = LaplacianEigenPE(4)(Data(edge_index=edge_index, edge_weight=weight,
                                        num_nodes=nodes)).laplacian_eigenvector_pe
    for scale in (2.0**-1060, 2.0**1000):
        got = LaplacianEigenPE(4)(Data(edge_index=edge_index, edge_weight=weight * scale,
                                       num_nodes=nodes)).laplacian_eigenvector_pe
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_dtypes(dtype):
    data, _ = components_graph([320, 60], isolated=4, seed=7)
    reference = LaplacianEigenPE(6, dtype=torch.float64)(data.clone()).laplacian_eigenvector_pe
    # The dtype of data.edge_weight, as PyG; the solve runs in float64 in both cases.
    weighted = data.clone()
    weighted.edge_weight = torch.ones(data.edge_index.size(1), dtype=dtype)
    pe = LaplacianEigenPE(6)(weighted).laplacian_eigenvector_pe
    assert pe.dtype == dtype
    assert torch.allclose(pe.double(), reference, atol=10 * torch.finfo(dtype).eps)
    # The default dtype without edge weights, and the dtype argument.
    assert LaplacianEigenPE(6)(data.clone()).laplacian_eigenvector_pe.dtype == torch.float32
    assert LaplacianEigenPE(6, dtype=dtype)(data.clone()).laplacian_eigenvector_pe.dtype == dtype
    check_signs(pe)


def test_attr_name_none_concatenates_to_x():
    data = contextual_sbm(num_nodes=300, num_features=5, seed=1)
    x = data.x.clone()
    out = LaplacianEigenPE(4, attr_name=None)(data.clone())
    assert out.x.shape == (300, 9) and 'laplacian_eigenvector_pe' not in out
    assert torch.equal(out.x[:, :5], x)
    pe = LaplacianEigenPE(4)(data.clone()).laplacian_eigenvector_pe
    assert torch.equal(out.x[:, 5:], pe)
    bare = Data(edge_index=data.edge_index, num_nodes=300)
    assert torch.equal(LaplacianEigenPE(4, attr_name=None)(bare).x, pe)
    named = LaplacianEigenPE(4, attr_name='pe')(data.clone())
    assert torch.equal(named.pe, pe)
    # A float64 x gets the float64 encoding (it was rounded to float32 first: 1e-8 off)
    wide = data.clone()
    wide.x = wide.x.double()
    exact = LaplacianEigenPE(4, dtype=torch.float64)(data.clone()).laplacian_eigenvector_pe
    assert torch.equal(LaplacianEigenPE(4, attr_name=None)(wide).x[:, 5:], exact)



def test_an_x_the_encoding_cannot_join_is_refused_before_the_solve():
    # An integer x (atom types) truncated the encoding to zeros; an x of other rows failed
    # after the solve with a raw torch error.
    data = contextual_sbm(num_nodes=300, num_features=5, seed=1)
    for x, error, match in [
            (torch.randint(0, 9, (300,)), TypeError, r"'data.x' is torch.int64.*attr_name="),
            (torch.randn(300, 2, 3), ValueError, r"'data.x' must be a dense \[num_nodes\]"),
            (torch.randn(299, 5), ValueError, r"'data.x' must be a dense.*num_nodes=300")]:
        graph = Data(x=x, edge_index=data.edge_index, num_nodes=300)
        with pytest.raises(error, match=match):
            LaplacianEigenPE(4, attr_name=None)(graph)


@pytest.mark.parametrize('name', ['pe_index', 'pe_batch', 'edge_index_pe'])
def test_names_that_pyg_batching_offsets_are_refused(name):
    # Batch.from_data_list concatenated 'pe_index' along its last dimension and added 1 to
    # the second graph's 'pe_batch'.
    with pytest.raises(ValueError, match=rf"'attr_name' would make LaplacianEigenPE write "
                                         rf"'data.{name}', which PyG's batching reads as an "
                                         rf"index"):
        LaplacianEigenPE(2, attr_name=name)

def test_deterministic_across_calls_and_seeds():
    data = contextual_sbm(num_nodes=1500, avg_degree=6, seed=2)
    k = 10
    first = LaplacianEigenPE(k)(data.clone()).laplacian_eigenvector_pe
    again = LaplacianEigenPE(k)(data.clone()).laplacian_eigenvector_pe
    assert torch.equal(first, again)
    values = np.linalg.eigvalsh(laplacian(data).toarray())
    assert np.diff(values[:k + 2]).min() > 1e-4  # simple eigenvalues: unique up to sign
    for seed in (1, 2):
        other = LaplacianEigenPE(k, seed=seed)(data.clone()).laplacian_eigenvector_pe
        assert (other - first).abs().max() < 1e-4
    # PyG draws the signs at random.
    torch.manual_seed(0)
    flips = [AddLaplacianEigenvectorPE(k, is_undirected=True)(data.clone())
             .laplacian_eigenvector_pe for _ in range(3)]
    assert any(not torch.allclose(f, flips[0], atol=1e-3) for f in flips[1:])


def test_not_converged_falls_back_to_dense_or_warns():
    data = contextual_sbm(num_nodes=1200, avg_degree=4, seed=5)
    k = 6
    expected = LaplacianEigenPE(k, dtype=torch.float64)(data.clone()).laplacian_eigenvector_pe
    starved = LaplacianEigenPE(k, tol=1e-18, max_iter=1, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter('error')  # the dense fallback warns nothing
        pe = starved(data.clone()).laplacian_eigenvector_pe
    check_against_dense(data, k, pe)
    assert (pe - expected).abs().max() < 1e-5
    starved.DENSE_FALLBACK = 100
    with pytest.warns(UserWarning, match='relative residual .* > tol=1e-18') as record:
        pe = starved(data.clone()).laplacian_eigenvector_pe
    assert pe.shape == (1200, k) and bool(pe.isfinite().all())
    # The warning points at the line that applied the transform, here.
    assert {w.filename for w in record} == {__file__}
    with pytest.warns(UserWarning, match='relative residual') as record:
        starved.eigenpairs(data.clone())
    assert {w.filename for w in record} == {__file__}


@pytest.mark.parametrize('k, error, match', [
    (0, ValueError, "'k' must be a positive integer"),
    (-2, ValueError, "'k' must be a positive integer"),
    (1.5, ValueError, "'k' must be a positive integer"),
    ('3', TypeError, "'k' must be an integer"),
])
def test_bad_k(k, error, match):
    with pytest.raises(error, match=match):
        LaplacianEigenPE(k)


def test_k_must_be_smaller_than_the_number_of_nodes():
    data, _ = components_graph([5], isolated=1)
    LaplacianEigenPE(5)(data.clone())
    with pytest.raises(ValueError, match="'k' must be smaller than the number of nodes"):
        LaplacianEigenPE(6)(data)


def test_other_arguments():
    with pytest.raises(ValueError, match="'tol'"):
        LaplacianEigenPE(3, tol=0.0)
    with pytest.raises(ValueError, match="'max_iter'"):
        LaplacianEigenPE(3, max_iter=0)
    with pytest.raises(ValueError, match="'seed'"):
        LaplacianEigenPE(3, seed=-1)
    with pytest.raises(TypeError, match="'dtype'"):
        LaplacianEigenPE(3, dtype=torch.int64)
    with pytest.raises(TypeError, match="'attr_name'"):
        LaplacianEigenPE(3, attr_name=3)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['which_one'\]"):
        LaplacianEigenPE(3, which_one='SA')
    with pytest.warns(UserWarning, match=r"ignores the ARPACK argument\(s\) \['ncv'\]"):
        LaplacianEigenPE(3, ncv=20)
    assert LaplacianEigenPE(3, tol=1e-5).tol == 1e-5  # PyG's eigsh keyword, read as ours
    with pytest.raises(ValueError, match="'edge_weight' must be non-negative"):
        LaplacianEigenPE(1)(Data(edge_index=torch.tensor([[0, 1], [1, 0]]),
                                 edge_weight=torch.tensor([-1.0, -1.0]), num_nodes=3))
    assert repr(LaplacianEigenPE(3)) == 'LaplacianEigenPE(k=3)'
    # Every argument the encoding depends on (PyG compares a pre_transform's
    # repr with the one saved beside a processed dataset).
    assert repr(LaplacianEigenPE(4, attr_name='pe', is_undirected=True, seed=7, tol=1e-2,
                                 max_iter=5, dtype=torch.float64)) == (
        "LaplacianEigenPE(k=4, attr_name='pe', is_undirected=True, seed=7, tol=0.01, "
        "max_iter=5, dtype=torch.float64)")


@pytest.mark.skipif(not has_offline_copy('PubMed'), reason=f'PubMed is not in {SHARED_DATA}')
def test_pubmed_matches_eigsh():
    from harness.graphs import load_pubmed
    data = load_pubmed()
    k = 16
    lap = laplacian(data)
    values, vectors = sla.eigsh(lap, k + 2, which='SA', tol=1e-10,
                                v0=np.ones(data.num_nodes))
    order = np.argsort(values)
    values, vectors = values[order], vectors[:, order]
    pairs = LaplacianEigenPE(k).eigenpairs(data)
    assert np.abs(pairs.eigenvalues.numpy() - values[1:k + 1]).max() < 1e-6
    assert sin_angle(pairs.eigenvectors.numpy(), vectors[:, 1:k + 1]) < 1e-3
    check_signs(pairs.eigenvectors)


@CUDA
def test_cuda_matches_cpu():
    data, _ = components_graph([600, 300, 40, 3], isolated=5, seed=8)
    k = 8
    cpu = LaplacianEigenPE(k, dtype=torch.float64)(data.clone()).laplacian_eigenvector_pe
    out = LaplacianEigenPE(k, dtype=torch.float64)(data.clone().to('cuda'))
    pe = out.laplacian_eigenvector_pe
    assert pe.device.type == 'cuda'
    assert (pe.cpu() - cpu).abs().max() < 1e-5
    check_against_dense(data, k, pe.cpu())
    again = LaplacianEigenPE(k, dtype=torch.float64)(data.clone().to('cuda'))
    assert torch.equal(again.laplacian_eigenvector_pe, pe)


def test_a_graph_on_the_meta_device_is_refused_naming_the_argument():
    data = Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]], device='meta'),
                num_nodes=3)
    with pytest.raises(ValueError, match="'edge_index' is on the 'meta' device"):
        LaplacianEigenPE(1)(data)
    # Only the weights on the meta device: named too (was torch's 'Cannot copy out').
    data = Data(edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
                edge_weight=torch.ones(4, device='meta'), num_nodes=3)
    with pytest.raises(ValueError, match="'edge_weight' is on the 'meta' device"):
        LaplacianEigenPE(1)(data)


@CUDA
def test_a_small_graph_on_cuda_gets_the_cpu_encoding_on_cuda():
    # At most DENSE_THRESHOLD nodes: solved on the CPU, so the same bits.
    path = torch.arange(11)
    edge_index = torch.cat([torch.stack([path, path + 1]), torch.stack([path + 1, path])], 1)
    data = Data(edge_index=edge_index, num_nodes=12)
    cpu = LaplacianEigenPE(3, dtype=torch.float64)(data.clone()).laplacian_eigenvector_pe
    pe = LaplacianEigenPE(3, dtype=torch.float64)(data.clone().to('cuda'))
    pe = pe.laplacian_eigenvector_pe
    assert pe.device.type == 'cuda' and torch.equal(pe.cpu(), cpu)


def example_accuracies(section):
    """The test accuracies the example lists in `section`, by input."""
    return {name: float(acc) for name, acc in
            re.findall(r'^  (\S.*?)\s+(\d\.\d{3})\b', section, re.MULTILINE)}


@pytest.mark.slow
def test_example_shows_that_the_encoding_carries_signal():
    """examples/laplacian_pe.py on an SBM whose classes are its 5 blocks and whose
    features are noise: an MLP is at chance on the features and far above it on
    either encoding; the trained MLP gets the same encoding from a second call."""
    out = subprocess.run([sys.executable, 'examples/laplacian_pe.py', '--nodes', '600',
                          '--epochs', '100'], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    head, trained, again = re.split(r'^MLP test accuracy.*$|^The same MLPs.*$', out.stdout,
                                    flags=re.MULTILINE)
    # The graph is connected: the example counts its components with scipy and prints them.
    assert '600 nodes,' in head and '1 connected component, 0 isolated nodes' in head
    assert 'widest gap after λ_4 ' in head  # 5 blocks: 4 eigenvectors span them
    acc = example_accuracies(trained)
    assert set(acc) == {'features (noise)', 'LaplacianEigenPE', 'features + LaplacianEigenPE',
                        "PyG's AddLaplacianEigenvectorPE"}
    # 200 test nodes: at chance (0.2) the accuracy's standard deviation is
    # sqrt(0.2 * 0.8 / 200) = 0.028, so 0.35 lies 5 deviations above it; the
    # encodings give 0.97 on this seed, the bound 0.8 leaves room for any CPU's
    # rounding of the training.
    assert acc['features (noise)'] < 0.35
    for name in ('LaplacianEigenPE', 'features + LaplacianEigenPE',
                 "PyG's AddLaplacianEigenvectorPE"):
        assert acc[name] > 0.8, (name, acc)
    # A second call gives the identical encoding, hence the identical accuracy.
    assert '(identical encoding: True)' in again
    assert example_accuracies(again)['LaplacianEigenPE'] == acc['LaplacianEigenPE']
    assert re.search(r'PyG\s+\d\.\d{3} \(\d of 8 columns flipped sign', again)


def test_example_describes_the_graph_it_encodes():
    """The example's description of a graph built by hand: components, isolated
    nodes (a self loop alone leaves a node isolated), a one-way edge counted
    once, and the eigenvalues 0 and 1 placed as docs/positional_encoding.md says."""
    from examples.laplacian_pe import describe_graph, explain_eigenvalues, graph_summary

    # Two triangles, a path 6-7-8, nodes 9, 10 (self loop only), 11 without
    # edges, and the edge 12 -> 13 given one way: 14 nodes, 9 undirected edges,
    # 7 components, 4 of them with edges, 3 isolated nodes.
    pairs = [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (6, 7), (7, 8)]
    edge_index = to_undirected(torch.tensor(pairs).t(), num_nodes=14)
    edge_index = torch.cat([edge_index, torch.tensor([[10, 12], [10, 13]])], dim=1)
    data = Data(edge_index=edge_index, num_nodes=14)
    num_edges, sizes, isolated = graph_summary(data)
    assert describe_graph(14, num_edges, sizes) == (
        '14 nodes, 9 undirected edges, 7 connected components (the largest has 3 nodes), '
        '3 isolated nodes')
    assert isolated.tolist() == [9, 10, 11]

    # k=3: the 3 components with edges beyond the first fill every column.
    pe = LaplacianEigenPE(3).eigenpairs(data)
    lines = explain_eigenvalues(pe.eigenvalues.tolist(), sizes, pe.eigenvectors, isolated)
    assert lines[0] == 'eigenvalues λ_1..λ_3: 0.0000 0.0000 0.0000'
    assert lines[1].startswith('λ_1..λ_3 = 0: each connected component with edges beyond '
                               'the first adds a zero (3 here)')
    assert lines[2].startswith('positions within components start at λ_4')
    assert lines[3].endswith('0 of them within the k columns, 3 with an all-zero encoding row')

    # k=6: then the eigenvalue 1 of the path (lowest node 6) and of the
    # isolated nodes 9 and 10 (ties go to the lowest node); the triangles' 1.5
    # and the isolated node 11 come later.
    pe = LaplacianEigenPE(6).eigenpairs(data)
    lines = explain_eigenvalues(pe.eigenvalues.tolist(), sizes, pe.eigenvectors, isolated)
    assert lines[0] == 'eigenvalues λ_1..λ_6: 0.0000 0.0000 0.0000 1.0000 1.0000 1.0000'
    assert len(lines) == 3 and lines[1].startswith('λ_1..λ_3 = 0')
    assert lines[2].endswith('2 of them within the k columns, 1 with an all-zero encoding row')


def test_moved_constants_keep_their_old_path():
    import torch_geometric_regcn.transforms.laplacian_pe as module
    with pytest.warns(DeprecationWarning, match='linalg.laplacian_spectrum.SIGN_TIE'):
        assert module.SIGN_TIE == SIGN_TIE


@pytest.mark.parametrize('sizes, isolated, weighted', [
    ([30], 0, False),  # connected: one dense eigh
    ([30], 0, True),
    ([20, 9, 2], 0, False),  # disconnected: component by component
    ([25], 3, False),  # isolated nodes: component by component
])
def test_small_graphs_match_the_component_wise_solve(sizes, isolated, weighted):
    data, _ = components_graph(sizes, isolated, seed=7, weighted=weighted)
    k = 6
    pairs = LaplacianEigenPE(k).eigenpairs(data)
    weight = data.edge_weight if weighted else None
    ei, w, degree = normalized_adjacency(data.edge_index, data.num_nodes, weight, torch.float64,
                                         self_loops=False, return_degree=True)
    reference = laplacian_eigenpairs(ei, w, degree, k)
    # The same eigh of the same matrix: identical with integer degrees, to the
    # last bits of the weighted degrees' sums otherwise (eigenvalues of norm
    # <= 2; the graphs' eigenvalues here are simple, vectors move by eps / gap).
    if weighted:
        torch.testing.assert_close(pairs.eigenvalues, reference.eigenvalues, atol=1e-13, rtol=0)
        torch.testing.assert_close(pairs.eigenvectors, reference.eigenvectors, atol=1e-9, rtol=0)
    else:
        assert torch.equal(pairs.eigenvalues, reference.eigenvalues)
        assert torch.equal(pairs.eigenvectors, reference.eigenvectors)
    pe = LaplacianEigenPE(k, dtype=torch.float64)(data.clone()).laplacian_eigenvector_pe
    assert torch.equal(pe, pairs.eigenvectors)
    check_against_dense(data, k, pe)
    check_signs(pe)


def test_small_graph_inputs_are_checked_before_the_dense_solve():
    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 5]]), num_nodes=4)
    with pytest.raises(ValueError, match=r"'edge_index' refers to nodes outside \[0, 3\]"):
        LaplacianEigenPE(2)(data)
    data = Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3,
                edge_weight=torch.tensor([1.0, float('nan')]))
    with pytest.raises(ValueError, match="edge_weight"):
        LaplacianEigenPE(1)(data)
    # Integer indices of any width give the same encoding.
    data, _ = components_graph([20], seed=3)
    narrow = Data(edge_index=data.edge_index.int(), num_nodes=data.num_nodes)
    assert torch.equal(LaplacianEigenPE(4)(narrow).laplacian_eigenvector_pe,
                       LaplacianEigenPE(4)(data).laplacian_eigenvector_pe)


def test_a_batch_of_several_graphs_is_refused():
    # The union's smallest pairs mix the graphs: a triangle's rows got the
    # path's kernel vector. PyG's transform does the same, silently.
    from torch_geometric.data import Batch
    path = Data(edge_index=torch.tensor([[0, 1, 1, 2, 2, 3], [1, 0, 2, 1, 3, 2]]), num_nodes=4)
    triangle = Data(edge_index=torch.tensor([[0, 1, 1, 2, 2, 0], [1, 0, 2, 1, 0, 2]]),
                    num_nodes=3)
    with pytest.raises(ValueError, match='got a Batch of 2 graphs'):
        LaplacianEigenPE(2)(Batch.from_data_list([path, triangle]))
    one = LaplacianEigenPE(2)(Batch.from_data_list([path]))  # a batch of one graph is a graph
    torch.testing.assert_close(one.laplacian_eigenvector_pe,
                               LaplacianEigenPE(2)(path).laplacian_eigenvector_pe)
