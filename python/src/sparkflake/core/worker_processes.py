"""Worker processes that die with the process that started them.

A pool worker forked by a build inherits the build's open files (the staging archive
among them) and waits on the pool's pipe, whose write end the other forked workers hold
open too: when the build is killed outright (SIGKILL, the OOM killer) nothing closes it,
and the workers stay behind holding deleted files. Each worker therefore asks the kernel
to SIGKILL it when its parent dies (``prctl(PR_SET_PDEATHSIG)``, Linux) and checks that the
parent did not die before the request took effect.

Work is handed to the pool with SIGINT and SIGTERM held (``WorkerPool.submit``, which
``map`` calls too): the CLI raises an interrupt wherever the main thread is, and one raised
inside ``ProcessPoolExecutor.submit`` can leave a work item recorded but never queued; the
pool's ``shutdown`` then waits for it forever (a SIGTERM'd fixture build hung so in
``test_build_signals``: the main thread in ``shutdown``, the manager thread idle, the workers
waiting for work). The workers forked inside that hold take the signals back.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import ParamSpec, TypeVar

from .interrupts import HELD, interrupts_held

_P = ParamSpec("_P")
_T = TypeVar("_T")

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent(parent_pid: int) -> None:
    """In a child: be killed when the parent exits. The signal follows the thread that
    forked us, so the pool must be created by a thread that outlives it (``with`` in
    the caller's own thread)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD)  # forked inside ``WorkerPool.submit``'s hold
    if _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # the parent died between fork and prctl
        os._exit(1)


class WorkerPool(ProcessPoolExecutor):
    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        with interrupts_held():
            return super().submit(fn, *args, **kwargs)


def worker_pool(max_workers: int) -> WorkerPool:
    """A process pool whose workers die with this process, and whose work is handed over
    whole whatever interrupt arrives meanwhile (see the module docstring)."""
    return WorkerPool(max_workers=max_workers, initializer=die_with_parent, initargs=(os.getpid(),))
