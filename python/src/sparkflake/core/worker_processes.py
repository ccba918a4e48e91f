"""Worker processes that die with the process that started them.

A pool worker forked by a build inherits the build's open files (the staging archive
among them) and waits on the pool's pipe, whose write end the other forked workers hold
open too: when the build is killed outright (SIGKILL, the OOM killer) nothing closes it,
and the workers stay behind holding deleted files. Each worker therefore asks the kernel
to SIGKILL it when its parent dies (``prctl(PR_SET_PDEATHSIG)``, Linux) and checks that the
parent did not die before the request took effect.
"""

from __future__ import annotations

import ctypes
import os
import signal
from concurrent.futures import ProcessPoolExecutor

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent(parent_pid: int) -> None:
    """In a child: be killed when the parent exits. The signal follows the thread that
    forked us, so the pool must be created by a thread that outlives it (``with`` in
    the caller's own thread)."""
    if _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # the parent died between fork and prctl
        os._exit(1)


def worker_pool(max_workers: int) -> ProcessPoolExecutor:
    """A process pool whose workers die with this process."""
    return ProcessPoolExecutor(max_workers=max_workers, initializer=die_with_parent, initargs=(os.getpid(),))
