"""A smoke run of examples/learnable.py: tsGCN learning alpha and beta on a
small synthetic graph, offline, on the validation loss and on the training
loss."""
import os
import os.path as osp
import re
import subprocess
import sys

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))


@pytest.mark.slow
@pytest.mark.parametrize('objective', ['validation', 'training'])
def test_learnable_example_trains_and_moves_the_coefficients(objective):
    # One thread: on a busy machine, two OpenMP threads on these small sparse
    # products are several times slower than one.
    out = subprocess.run([sys.executable, 'examples/learnable.py', '--nodes', '1600', '--epochs',
                          '12', '--objective', objective], cwd=REPO, capture_output=True,
                         text=True, timeout=300, env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    start = next(line for line in lines if line.startswith('start'))
    end = next(line for line in lines if line.startswith('epoch  12'))
    pattern = r'layer (\d): alpha ([\d.]+), beta ([\d.]+)'
    assert re.findall(pattern, start) == [('1', '1.000', '0.200'), ('2', '1.000', '0.200')]
    moved = re.findall(pattern, end)
    assert [layer for layer, _, _ in moved] == ['1', '2']
    assert all(float(a) > 0 and float(b) > 0 for _, a, b in moved)
    assert any((a, b) != ('1.000', '0.200') for _, a, b in moved)  # they were trained
    assert 'test accuracy at the best validation epoch' in out.stdout
