r"""The normalised incidence matrix of an undirected graph: the graph gradient
of the non-quadratic regularisers."""
from typing import NamedTuple, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.utils import coalesce

from torch_geometric_regcn.linalg.adjoint_product import adjoint_matmul
from torch_geometric_regcn.utils.validation import check_edge_index


class Incidence(NamedTuple):
    r"""A normalised incidence matrix :math:`\mathbf{B}` with one row per
    undirected edge :math:`e = \{i, j\}`, :math:`i < j`:
    :math:`(\mathbf{B}\mathbf{X})_e = c^{\mathrm{src}}_e \mathbf{x}_i -
    c^{\mathrm{dst}}_e \mathbf{x}_j` (see :func:`normalized_incidence`)."""
    #: the smaller node of each edge, :obj:`[E']`
    src: Tensor
    #: the larger node of each edge, :obj:`[E']`
    dst: Tensor
    #: :math:`c^{\mathrm{src}}_e`, :obj:`[E']`
    src_coef: Tensor
    #: :math:`c^{\mathrm{dst}}_e`, :obj:`[E']`
    dst_coef: Tensor
    #: the number of nodes :math:`N`
    num_nodes: int
    #: the graph's weight :math:`w_{ij}` of each edge, :obj:`[E']` (:obj:`None`
    #: where the caller built the rows from coefficients alone)
    weight: Optional[Tensor] = None
    #: the coefficients without the factor :math:`\sqrt{w_e}`, the rows'
    #: degree normalisations :math:`1/\sqrt{d_i}` and :math:`1/\sqrt{d_j}`,
    #: :obj:`[E']` each (:obj:`None` where the caller built the rows from
    #: coefficients alone): through them the weights enter the quadratic
    #: forms linearly, so their gradient is exact also at :math:`w_e = 0`
    src_norm: Optional[Tensor] = None
    dst_norm: Optional[Tensor] = None
    #: :math:`\mathbf{B}_0` and :math:`\mathbf{B}_0^{\top}` (the rows
    #: without the weights, or those of the coefficients where the caller
    #: built the rows from coefficients alone) as sparse CSR matrices
    #: :obj:`[E', N]` and :obj:`[N, E']`, built by :meth:`with_csr` where the
    #: coefficients want no gradient: the products of :math:`\mathbf{B}_0`
    #: are then one sparse product each, forward and backward
    csr: Optional[Tuple[Tensor, Tensor]] = None

    @property
    def num_edges(self) -> int:
        r"""The number of rows :math:`E'` (undirected edges)."""
        return self.src.numel()

    def gradient(self, x: Tensor) -> Tensor:
        r""":math:`\mathbf{B}\mathbf{X}`, one row per edge, :obj:`[E', F]`.
        Cost: :math:`O(E' F)`."""
        if self.csr is not None and self.weight is None:
            return adjoint_matmul(self.csr[0], self.csr[1], x)
        return (self.src_coef.unsqueeze(-1) * x.index_select(0, self.src)
                - self.dst_coef.unsqueeze(-1) * x.index_select(0, self.dst))

    def divergence(self, z: Tensor) -> Tensor:
        r""":math:`\mathbf{B}^{\top}\mathbf{Z}` for one row of :obj:`z` per edge,
        :obj:`[N, F]`. Cost: :math:`O(E' F)`."""
        if self.csr is not None and self.weight is None:
            return adjoint_matmul(self.csr[1], self.csr[0], z)
        out = z.new_zeros((self.num_nodes,) + tuple(z.shape[1:]))
        out = out.index_add(0, self.src, self.src_coef.unsqueeze(-1) * z)
        return out.index_add(0, self.dst, -self.dst_coef.unsqueeze(-1) * z)

    def split(self) -> Tuple['Incidence', Optional[Tensor]]:
        r"""The incidence matrix without the weights, :math:`\mathbf{B}_0`,
        and the weights :math:`\mathbf{w}` :obj:`[E']`, with :math:`\mathbf{B}
        = \mathrm{diag}(\sqrt{\mathbf{w}})\,\mathbf{B}_0`; :obj:`(self, None)`
        for rows built from coefficients alone."""
        if self.src_norm is None or self.dst_norm is None or self.weight is None:
            return self, None
        return Incidence(self.src, self.dst, self.src_norm, self.dst_norm, self.num_nodes,
                         csr=self.csr), self.weight

    def with_csr(self) -> 'Incidence':
        r"""This incidence matrix with :attr:`csr` built, where the
        coefficients of :math:`\mathbf{B}_0` want no gradient (else as it is:
        the index operations of the products differentiate them). Cost: one
        stable sort of the :math:`2E'` entries by node."""
        src_coef, dst_coef = ((self.src_coef, self.dst_coef) if self.src_norm is None
                              or self.dst_norm is None else (self.src_norm, self.dst_norm))
        if self.csr is not None or src_coef.requires_grad or dst_coef.requires_grad:
            return self
        edges, n = self.num_edges, self.num_nodes
        node = torch.stack([self.src, self.dst], dim=1).reshape(-1)  # entry 2e + side
        value = torch.stack([src_coef, -dst_coef], dim=1).reshape(-1).detach()
        crow = torch.arange(0, 2 * edges + 1, 2, device=node.device)
        matrix = torch.sparse_csr_tensor(crow, node, value, (edges, n), check_invariants=False)
        order = torch.sort(node, stable=True).indices  # by node, then by edge
        counts = torch.bincount(node, minlength=n)
        crow_t = torch.zeros(n + 1, dtype=torch.long, device=node.device)
        torch.cumsum(counts, 0, out=crow_t[1:])
        adjoint = torch.sparse_csr_tensor(crow_t, order // 2, value[order], (n, edges),
                                          check_invariants=False)
        return self._replace(csr=(matrix, adjoint))

    def scaled(self, weight: Optional[Tensor]) -> Tuple['Incidence', Optional[Tensor]]:
        r""":math:`\mathbf{B}_0` and the edge weights :math:`\mathbf{w} \odot
        \mathbf{u}` (:obj:`weight` :math:`\mathbf{u}`, :obj:`[E']` or
        :obj:`[E', F]`; :obj:`None` for ones) of :math:`\mathbf{B}^{\top}
        \mathrm{diag}(\mathbf{u})\mathbf{B} = \mathbf{B}_0^{\top}
        \mathrm{diag}(\mathbf{w} \odot \mathbf{u})\mathbf{B}_0`: a solver that
        applies the same form many times takes them once and calls
        :meth:`weighted_laplacian` of :math:`\mathbf{B}_0`."""
        base, w = self.split()
        if w is None:
            return base, weight
        if weight is None:
            return base, w
        return base, w.view((-1,) + (1,) * (weight.dim() - 1)) * weight

    def weighted_laplacian(self, y: Tensor, weight: Optional[Tensor] = None) -> Tensor:
        r""":math:`\mathbf{B}^{\top}\mathrm{diag}(\mathbf{u})\mathbf{B}\mathbf{Y}`
        for edge weights :obj:`weight` :math:`\mathbf{u}` :obj:`[E']` or
        :obj:`[E', F]` (one per column; :obj:`None`: ones), :obj:`[N, F]`,
        computed as :math:`\mathbf{B}_0^{\top}\mathrm{diag}(\mathbf{w} \odot
        \mathbf{u})\mathbf{B}_0\mathbf{Y}`, linear in the graph's weights (the
        square root in :math:`\mathbf{B}` has no derivative at zero). Cost:
        :math:`O(E' F)`."""
        base, scale = self.scaled(weight)
        d = base.gradient(y)
        if scale is not None:
            d = (scale if scale.dim() == 2 else scale.unsqueeze(-1)) * d
        return base.divergence(d)

    def weighted_diagonal(self, weight: Tensor) -> Tensor:
        r"""The diagonal of :math:`\mathbf{B}^{\top}\mathrm{diag}(\mathbf{w})
        \mathbf{B}` for edge weights :obj:`weight` :obj:`[E']` or
        :obj:`[E', F]` (one diagonal per column), :obj:`[N]` or :obj:`[N, F]`,
        linear in the graph's weights as :meth:`weighted_laplacian`."""
        base, scale = self.scaled(weight)
        shape = (-1,) + (1,) * (weight.dim() - 1)
        out = weight.new_zeros((self.num_nodes,) + tuple(weight.shape[1:]))
        out = out.index_add(0, self.src, base.src_coef.square().view(shape) * scale)
        return out.index_add(0, self.dst, base.dst_coef.square().view(shape) * scale)


def weight_sqrt(weight: Tensor) -> Tensor:
    r""":math:`\sqrt{w}` of edge weights :math:`w \geq 0`, with a zero gradient
    (not an infinite or NaN one) at :math:`w = 0`, an edge weighted or masked
    to zero. The true derivative is infinite there, so a result whose
    gradient in :math:`w` must be exact at zero keeps :math:`w` out of the
    square root (:meth:`Incidence.split`)."""
    return torch.where(weight > 0, weight.clamp_min(torch.finfo(weight.dtype).tiny).sqrt(),
                       torch.zeros_like(weight))


def _symmetric_entries(edge_index: Tensor, edge_weight: Tensor,
                       num_nodes: int) -> Tuple[Tensor, Tensor]:
    r"""The entries with duplicates summed, after checking that they are
    symmetric (every :math:`(i, j, a)` matched by a :math:`(j, i, a')`, with
    :math:`|a - a'|` at most 8 units of rounding of the largest value):
    :func:`normalized_incidence` reads the upper triangle and the diagonal,
    and would silently build another matrix. Two sorts of the entries."""
    forward_index, forward = coalesce(edge_index, edge_weight, num_nodes)
    reverse_index, reverse = coalesce(edge_index.flip(0), edge_weight.detach(), num_nodes)
    largest = float(forward.detach().abs().max()) if forward.numel() else 0.0
    bound = 8 * torch.finfo(forward.dtype).eps * largest
    if not (torch.equal(forward_index, reverse_index)
            and bool(((forward.detach() - reverse).abs() <= bound).all())):
        raise ValueError("normalized_incidence needs the symmetric entries of a renormalised "
                         "adjacency (an entry (i, j) without an equal (j, i)); build them with "
                         "normalized_adjacency, which symmetrises the graph")
    return forward_index, forward


def normalized_incidence(edge_index: Tensor, edge_weight: Tensor, num_nodes: int,
                         self_loops: bool = True) -> Incidence:
    r"""The normalised incidence matrix of the graph whose renormalised
    adjacency :math:`\hat{\mathbf{A}} = \tilde{\mathbf{D}}^{-1/2}(\mathbf{A} +
    \mathbf{I})\tilde{\mathbf{D}}^{-1/2}` has the symmetric entries
    :obj:`(edge_index, edge_weight)` (with every diagonal entry
    :math:`1/\tilde{d}_i`, as
    :func:`~torch_geometric_regcn.linalg.normalized_adjacency` builds it).
    The weights of the graph and the degrees are read back from it,
    :math:`\tilde{d}_i = 1/\hat{a}_{ii}` and :math:`w_{ij} =
    \hat{a}_{ij}\sqrt{\tilde{d}_i\tilde{d}_j}`, and each undirected edge
    :math:`\{i, j\}` becomes one row

    .. math::
        (\mathbf{B}\mathbf{X})_e = \sqrt{w_{ij}}\left(\frac{\mathbf{x}_i}
        {\sqrt{d_i}} - \frac{\mathbf{x}_j}{\sqrt{d_j}}\right),

    with :math:`d = \tilde{d}` if :obj:`self_loops` (ElasticGNN's
    normalisation: then :math:`\mathbf{B}^{\top}\mathbf{B} = \mathbf{I} -
    \hat{\mathbf{A}} = \tilde{\mathbf{L}}`, the Laplacian of the paper's
    regularisers) and :math:`d = \tilde{d} - 1 = \sum_j w_{ij}` otherwise
    (pGNN's, the degree without the self loop, summed from the
    :math:`w_{ij}`). Self loops give no row: a node's
    difference with itself is zero.

    Args:
        edge_index (torch.Tensor): The entries of :math:`\hat{\mathbf{A}}`,
            symmetric, :obj:`[2, nnz]`.
        edge_weight (torch.Tensor): Their values, :obj:`[nnz]`.
        num_nodes (int): The number of nodes :math:`N`.
        self_loops (bool, optional): Normalise by the degree with the unit
            self loop. (default: :obj:`True`)

    Returns: an :class:`Incidence` in the dtype of :obj:`edge_weight`.
    Raises :class:`ValueError` where a node lacks its positive diagonal entry
    (the input is then not a renormalised adjacency), and for the inputs
    :func:`~torch_geometric_regcn.utils.validation.check_edge_index` refuses
    (indices out of range or not integers, weights that are negative or not
    finite), and where the entries are not symmetric; duplicate entries are
    summed. Cost: :math:`O(\mathrm{nnz} \log \mathrm{nnz})` (two sorts), a
    few synchronisations.
    """
    check_edge_index(edge_index, num_nodes, edge_weight)
    edge_index, edge_weight = _symmetric_entries(edge_index, edge_weight, num_nodes)
    row, col = edge_index[0], edge_index[1]
    loop = row == col
    inv_degree = torch.zeros(num_nodes, dtype=edge_weight.dtype, device=edge_weight.device)
    inv_degree[row[loop]] = edge_weight[loop]  # 1 / d~_i
    if num_nodes and not bool((inv_degree > 0).all()):
        raise ValueError("normalized_incidence needs the entries of a renormalised adjacency "
                         "A^ = D~^-1/2 (A + I) D~^-1/2, whose every diagonal entry 1/d~_i is "
                         "positive (build them with normalized_adjacency)")
    upper = row < col
    src, dst, value = row[upper], col[upper], edge_weight[upper]
    scale = inv_degree.rsqrt()  # sqrt(d~_i)
    weight = value * scale[src] * scale[dst]  # w_ij
    if self_loops:
        norm = inv_degree.sqrt()  # 1 / sqrt(d~_i)
    else:
        degree = torch.zeros_like(inv_degree).index_add(0, src, weight).index_add(0, dst, weight)
        norm = torch.where(degree > 0, degree.clamp_min(torch.finfo(degree.dtype).tiny).rsqrt(),
                           torch.zeros_like(degree))
    root = weight_sqrt(weight)
    src_norm, dst_norm = norm[src], norm[dst]
    return Incidence(src, dst, root * src_norm, root * dst_norm, num_nodes, weight, src_norm,
                     dst_norm)
