r"""How the benchmarks measure: the peak resident memory of a call, a function
run in a fresh spawned process with a pinned number of threads, and the
description of the machine that the reports print."""
import ctypes
import datetime
import gc
import multiprocessing
import os
import platform
import resource
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional

import numpy as np
import scipy
import torch
import torch_geometric

MIB = 2.0**20

#: The environment variables that set the thread pools of OpenMP and the BLAS
#: libraries; they are read once, when a process loads them.
THREAD_VARIABLES = ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS')

#: What "peak Δ" in the reports means (the measurement of :class:`PeakMeter`).
PEAK_DELTA = ('Peak Δ = peak resident set size during the measured call minus the resident '
              'set size just before it (kernel high-water mark reset through '
              '/proc/self/clear_refs), so inputs already loaded (the operator, the features) '
              'are not counted.')


def _status_kib(field: str) -> Optional[int]:
    r"""A field of ``/proc/self/status`` in KiB, or :obj:`None` off Linux."""
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(field + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_bytes() -> int:
    r"""The resident set size of this process (its peak where the current one
    is not available)."""
    kib = _status_kib('VmRSS')
    if kib is not None:
        return kib * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def release_free_heap() -> bool:
    r"""Hands the heap memory that is free back to the operating system
    (glibc's ``malloc_trim``), so that the resident set size is what is live.
    Returns whether it could (:obj:`False` where the C library is not glibc)."""
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    malloc_trim(0)
    return True


class PeakMeter:
    r"""Peak resident set size above the one at :meth:`start`, in MiB.

    On Linux the kernel's high-water mark is reset first
    (``/proc/self/clear_refs``), so a peak reached while loading inputs cannot
    hide the measured one; elsewhere it falls back to ``ru_maxrss``, which is
    a lower bound in that case. With :obj:`trim`, :meth:`start` also calls
    :func:`release_free_heap`, so the baseline holds only live memory.

    Example::

        meter = PeakMeter().start()
        work()
        mib = meter.stop()
    """

    def __init__(self, trim: bool = False):
        self.trim = trim
        self.exact = False
        self.base = 0  #: resident set size (bytes) at :meth:`start`

    def start(self) -> 'PeakMeter':
        r"""Collects garbage, resets the high-water mark and records the
        baseline."""
        gc.collect()
        if self.trim:
            release_free_heap()
        self.exact = False
        try:
            with open('/proc/self/clear_refs', 'w') as f:
                f.write('5')
            self.exact = _status_kib('VmHWM') is not None
        except OSError:
            pass
        self.base = rss_bytes()
        return self

    def stop(self) -> float:
        r"""The peak since :meth:`start` above the baseline, in MiB."""
        if self.exact:
            peak = _status_kib('VmHWM') * 1024
        else:
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return max(peak - self.base, 0) / MIB


def _init_child(threads: int) -> None:
    torch.set_num_threads(threads)


def run_isolated(threads: int, fn: Callable, *args, env: Optional[Dict[str, str]] = None):
    r"""Runs ``fn(*args)`` in a freshly spawned process with :obj:`threads`
    torch, OpenMP and BLAS threads and returns its result, or
    ``{'error': ...}`` if the process failed (e.g. was killed for memory) or
    :obj:`fn` raised. :obj:`env` sets further environment variables of the
    child (e.g. glibc's allocator settings). :obj:`fn` must be importable by
    name (a module-level function)."""
    try:
        with child_environment(threads, env):
            ctx = multiprocessing.get_context('spawn')
            with ProcessPoolExecutor(1, mp_context=ctx, initializer=_init_child,
                                     initargs=(threads,)) as pool:
                return pool.submit(fn, *args).result()
    except BrokenProcessPool as e:
        return {'error': f'process died ({e})'}
    except Exception as e:  # noqa: BLE001 - report, do not abort the whole benchmark
        return {'error': f'{type(e).__name__}: {e}'}


@contextmanager
def child_environment(threads: int, env: Optional[Dict[str, str]] = None) -> Iterator[None]:
    r"""Sets :obj:`threads` torch, OpenMP and BLAS threads (and :obj:`env`) in
    the environment that processes spawned inside the block inherit (their
    libraries read it when they load), then restores the caller's."""
    variables = {var: str(threads) for var in THREAD_VARIABLES}
    variables.update(env or {})
    saved = {var: os.environ.get(var) for var in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value


def warning_messages(caught: Iterable[Any]) -> List[str]:
    r"""The distinct messages (up to the first ``;``) of the warnings that
    :func:`warnings.catch_warnings(record=True)` caught, without torch's
    note that sparse CSR support is in beta."""
    return sorted({str(w.message).split(';')[0] for w in caught
                   if 'beta' not in str(w.message)})


def load_average() -> str:
    r"""The 1, 5 and 15 minute load averages, or ``'n/a'``."""
    try:
        return ' '.join(f'{x:.2f}' for x in os.getloadavg())
    except OSError:
        return 'n/a'


def processor_name() -> str:
    r"""The CPU's model name (``/proc/cpuinfo``, else
    :func:`platform.processor`; empty if neither says)."""
    cpu = platform.processor() or ''
    try:
        with open('/proc/cpuinfo') as f:
            cpu = next((ln.split(':', 1)[1].strip() for ln in f if ln.startswith('model name')),
                       cpu)
    except OSError:
        pass
    return cpu


def machine_info(threads) -> Dict[str, Any]:
    r"""The CPU, its count, the RAM, the load average, the platform and the
    versions of Python and the libraries measured; :obj:`threads` is recorded
    as given."""
    cpu = processor_name()
    try:
        mem = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30
    except (ValueError, OSError, AttributeError):
        mem = float('nan')
    return {
        'cpu': cpu, 'cpu_count': os.cpu_count(), 'ram_gib': mem, 'load': load_average(),
        'threads': threads, 'python': platform.python_version(), 'torch': torch.__version__,
        'torch_geometric': torch_geometric.__version__, 'scipy': scipy.__version__,
        'numpy': np.__version__, 'platform': platform.platform(),
    }


def describe_machine(threads: int, isolated: Optional[bool] = True) -> str:
    r"""One paragraph for a report: the machine, the library versions, the
    threads of every measurement (each in a fresh spawned process if
    :obj:`isolated`, all in the report's own process if :obj:`False`, as the
    report says if :obj:`None`), the load average and the date."""
    info = machine_info(threads)
    where = {True: 'Every measurement ran in a fresh spawned process with',
             False: 'Every measurement ran in this one process with',
             None: 'Each process (where each part ran: below) had'}[isolated]
    return (f"Machine: {info['cpu']}, {info['cpu_count']} CPUs, {info['ram_gib']:.1f} GiB RAM; "
            f"{info['platform']}. Python {info['python']}, torch {info['torch']}, "
            f"torch_geometric {info['torch_geometric']}, scipy {info['scipy']}, "
            f"numpy {info['numpy']}. {where} "
            f"{threads} torch/BLAS thread(s) (`--threads`). Load average at start: "
            f"{info['load']}. Date: {datetime.date.today().isoformat()}.")
