r"""The global mean of a row-sharded loss:
:func:`~torch_geometric_regcn.distributed.training.global_mean` in a single process
(the multi-process run is checked against it in ``test_pipeline.py``)."""
import pytest
import torch
import torch.nn.functional as F

from torch_geometric_regcn.distributed import global_mean


def test_without_a_group_it_is_the_mean_and_its_gradient():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(12, 4, dtype=torch.float64, generator=gen, requires_grad=True)
    y = torch.randint(0, 4, (12,), generator=gen)
    mask = torch.arange(12) % 3 != 0
    loss = global_mean(F.cross_entropy(logits[mask], y[mask], reduction='sum'),
                       int(mask.sum()), None)
    (grad,) = torch.autograd.grad(loss, logits)
    reference = F.cross_entropy(logits[mask], y[mask])  # PyTorch's own mean
    (ref_grad,) = torch.autograd.grad(reference, logits)
    # sum / count against the library mean: a few float64 roundings apart.
    torch.testing.assert_close(loss, reference, atol=1e-15, rtol=1e-14)
    torch.testing.assert_close(grad, ref_grad, atol=1e-15, rtol=1e-14)


def test_no_labelled_node_anywhere_is_an_error():
    with pytest.raises(ValueError, match="every 'local_count' is zero"):
        global_mean(torch.zeros((), dtype=torch.float64), 0, None)
