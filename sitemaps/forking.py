"""Forked worker processes for CPU-bound document building.

Building a page is pure Python, so several are built at once in forked
children that inherit the run's state. Forking needs care: no open database
connection may be shared with a child, a daemonic process (a Celery prefork
worker) may not have children, and a child must not outlive a parent that
was killed.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

from django.db import connection, connections

#: prctl(2) option: the signal a process gets when the thread that forked it dies.
PR_SET_PDEATHSIG = 1
#: mallopt(3) parameter: blocks at least this large get a mapping of their own.
M_MMAP_THRESHOLD = -3
#: glibc's default threshold (128 KiB); setting it also stops it from growing.
MMAP_THRESHOLD_BYTES = 128 * 1024


def can_fork() -> bool:
    """From the main thread of a process that may have children, outside a transaction.

    A child inherits every lock another thread held at the fork (SQLite's
    among them), so a run in a threaded server's request thread (runserver,
    gunicorn's gthread) builds in process: forked beside busy request threads,
    a builder could wait for ever. Our own threads (heartbeats) pause or lock
    around a fork. A daemonic process (a Celery prefork worker) may not have
    children, and a child could not see the parent's uncommitted transaction.
    """
    return (
        threading.current_thread() is threading.main_thread()
        and not multiprocessing.current_process().daemon
        and not connection.in_atomic_block
    )


def _glibc(name: str) -> Any:
    """glibc's function `name` on Linux; None elsewhere or where the C library lacks it."""
    if not sys.platform.startswith("linux"):
        return None
    return getattr(ctypes.CDLL(None), name, None)


def map_large_buffers() -> None:
    """Give each large buffer (a page, a search response) a mapping freed whole.

    glibc raises its mmap threshold to the size of every large block freed:
    after the first 14 MiB page or 3 MiB Elasticsearch response, the next
    ones came from the heap, where small objects then pinned the freed space.
    A full run of 100,000 kept 25-45 MiB more than it used (bench/README.md).
    Fixed at its default, the threshold no longer grows. It is set in the
    process, so forked builders inherit it; elsewhere than Linux's glibc, nothing.
    """
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def release_free_memory() -> None:
    """Hand the allocator's free heap pages back to the system before forking.

    A regenerating process with a long history (a bench's load and indexing,
    a worker's earlier runs) keeps freed heap resident. A forked builder's
    allocations land in those free chunks, so each touched page is copied:
    a full run of 1,000,000 peaked at 204-219 MiB in the bench's process and
    170-174 MiB in a fresh one (bench/README.md). Released pages come back to a builder as new zero
    pages, counted once. Elsewhere than Linux's glibc, nothing.
    """
    malloc_trim = _glibc("malloc_trim")
    if malloc_trim is not None:
        malloc_trim(0)


def die_with_parent(parent_pid: int) -> None:
    """Make this child die when `parent_pid` does, so a killed run leaves no builder behind."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    else:
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:  # it died before we asked
        os._exit(1)


def _watch_parent(parent_pid: int) -> None:
    """Where prctl is missing: exit once the child has been handed to another parent."""
    while os.getppid() == parent_pid:
        time.sleep(1)
    os._exit(1)


def _start_child(parent_pid: int, initializer: Callable[..., None] | None, initargs: tuple) -> None:
    die_with_parent(parent_pid)
    if initializer is not None:
        initializer(*initargs)


@contextmanager
def forked_pool(
    workers: int, initializer: Callable[..., None] | None = None, initargs: tuple = ()
) -> Iterator[ProcessPoolExecutor]:
    """A pool of `workers` forked children (forked at the first submit).

    The parent's connections are closed first: each child opens its own; its
    free heap is released, so children do not copy it. The parent's objects
    are frozen out of the collector meanwhile, so a child's collections never
    write to (and so copy) the pages it shares with the parent. On the way
    out, work not yet started is cancelled and the children joined.
    """
    connections.close_all()
    map_large_buffers()
    release_free_memory()
    gc.freeze()
    pool = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_start_child,
        initargs=(os.getpid(), initializer, initargs),
    )
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        gc.unfreeze()
