"""The command-line entry points of ``examples/`` and ``benchmarks/`` run inside
the test process, as ``python -m NAME ARGS`` runs them but without a new
interpreter, whose import of torch and PyG alone costs several seconds per
run. The scripts a user starts by their path (``python examples/csbm.py``) and
what needs a fresh process (thread pinning, torchrun, import isolation) keep
their subprocesses."""
import contextlib
import importlib
import io
import sys
from typing import NamedTuple, Optional

import torch


class Outcome(NamedTuple):
    """What the command ended with: its exit status and what it printed."""
    code: int
    stdout: str
    stderr: str


def run_module(name: str, *argv: str, threads: Optional[int] = None) -> Outcome:
    """Runs ``main()`` of module `name` with the command line `argv`.

    ``sys.argv[0]`` is the module's file, so ``argparse`` names the program as
    it does under ``python -m``. A ``SystemExit`` (``--help``, a refused
    argument) becomes the exit status; any other exception propagates, as the
    traceback it would print. `threads` pins torch's threads for the run (the
    ``OMP_NUM_THREADS`` of a subprocess); the previous count is restored."""
    module = importlib.import_module(name)
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_argv, saved_threads = sys.argv, torch.get_num_threads()
    sys.argv = [module.__file__, *argv]
    code = 0
    try:
        if threads is not None:
            torch.set_num_threads(threads)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                module.main()
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        sys.argv = saved_argv
        torch.set_num_threads(saved_threads)
    return Outcome(code, stdout.getvalue(), stderr.getvalue())
