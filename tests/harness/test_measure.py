import mmap
import os
import sys

import numpy as np
import pytest
import torch

from harness.measure import MIB, THREAD_VARIABLES, PeakMeter, machine_info, run_isolated

LINUX = pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')


@LINUX
def test_peak_meter_sees_a_transient_allocation():
    meter = PeakMeter().start()
    # 64 MiB of fresh pages, every one touched: mapped directly, so that no
    # allocator setting (harness.training.keep_freed_memory, which an earlier
    # test may have applied to this process) serves it from resident heap.
    block = mmap.mmap(-1, 64 * 2**20)
    pages = np.frombuffer(block, dtype=np.uint8)
    pages[:] = 1
    held = meter.stop()  # while it is alive the high-water mark is at least the RSS
    del pages
    block.close()  # unmapped before stop(): only the high-water mark remembers it
    freed = meter.stop()
    assert meter.exact
    assert 60 <= held < 200
    if freed < 60:
        # Seen in some full-suite runs on this project's VMs, not reproduced in
        # isolation: the kernel dropped the unmapped block from VmHWM. Then a
        # peak freed before stop() is lost, which the benchmarks must know.
        pytest.xfail(f'the kernel did not keep the high-water mark of a freed mapping '
                     f'({freed:.0f} MiB after {held:.0f} MiB held)')
    assert freed < 200


@LINUX
def test_peak_meter_does_not_count_what_was_held_before_start():
    held = np.ones(64 * 2**20 // 8)
    meter = PeakMeter(trim=True).start()
    assert meter.base >= held.nbytes
    assert meter.stop() < 32
    assert held[0] == 1.0


def child_report(name):
    """Run in a spawned process: what the process sees."""
    return {'threads': torch.get_num_threads(),
            'env': {var: os.environ.get(var) for var in THREAD_VARIABLES + (name,)},
            'pid': os.getpid()}


def child_fails():
    raise RuntimeError('boom')


@pytest.mark.slow
def test_run_isolated_pins_threads_in_a_fresh_process():
    before = dict(os.environ)
    got = run_isolated(1, child_report, 'REGCN_TEST_VARIABLE',
                       env={'REGCN_TEST_VARIABLE': 'set'})
    assert got['pid'] != os.getpid()
    assert got['threads'] == 1
    assert got['env'] == {**{var: '1' for var in THREAD_VARIABLES},
                          'REGCN_TEST_VARIABLE': 'set'}
    assert dict(os.environ) == before  # the parent's environment is restored
    assert run_isolated(1, child_fails) == {'error': 'RuntimeError: boom'}


def test_machine_info_describes_this_machine():
    info = machine_info(3)
    assert info['threads'] == 3 and info['cpu_count'] == os.cpu_count()
    assert info['torch'] == torch.__version__ and info['ram_gib'] > 0
    assert MIB == 2**20
