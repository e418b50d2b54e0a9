"""A smoke run of examples/distributed.py under torchrun: two gloo processes on
this machine, a small synthetic graph, a few epochs."""
import os
import os.path as osp
import re
import subprocess
import sys

import pytest
import torch.distributed as dist

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


@pytest.mark.slow
@pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                    reason='torch.distributed with the gloo backend is not available in this '
                           'torch build')
def test_distributed_example_trains_on_two_ranks():
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'TQDM_DISABLE': '1'}
    env.pop('CUDA_VISIBLE_DEVICES', None)
    out = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone',
                          '--nproc_per_node=2', 'examples/distributed.py', '--nodes', '4000',
                          '--epochs', '3', '--factor-rank', '16', '--threads', '1',
                          '--timeout', '60'],
                         cwd=REPO, capture_output=True, text=True, timeout=85, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert '2 ranks, 4,000 nodes, 64 features, 5 classes' in out.stdout
    losses = [float(x) for x in re.findall(r'epoch +\d+  loss ([\d.]+)', out.stdout)]
    assert len(losses) == 3 and losses[-1] < losses[0]  # rank 0 only prints
    for stage in ('graph shard', 'semantic kNN graph', 'low-rank factors',
                  '3 training epochs'):
        assert stage in out.stdout
    assert re.search(r'final loss [\d.]+; accuracy [\d.]+ on the [\d,]+ training nodes',
                     out.stdout)
