"""Every Python block of README.md runs as written (in order, in one
interpreter), from a folder where ``data/Planetoid/Cora`` holds an offline
copy of Cora's raw files, so a README snippet cannot break unnoticed."""
import os.path as osp
import re
import subprocess
import sys

import pytest

from harness.data import REPO, has_offline_copy, offline_root

README = osp.join(REPO, 'README.md')


def python_blocks() -> list:
    with open(README, encoding='utf-8') as f:
        return re.findall(r'^```python\n(.*?)^```', f.read(), flags=re.S | re.M)


def test_readme_has_python_blocks():
    assert len(python_blocks()) >= 2


@pytest.mark.slow
@pytest.mark.skipif(not has_offline_copy('Cora'), reason='Cora is not in ../shared/data')
def test_readme_python_blocks_run(tmp_path):
    offline_root('Cora', str(tmp_path / 'data' / 'Planetoid'))
    script = '\n'.join(python_blocks())
    out = subprocess.run([sys.executable, '-c', script], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
