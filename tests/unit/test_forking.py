"""Forked page builders share the parent's memory instead of copying it."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sitemaps.forking import can_fork, forked_pool


def frozen_objects() -> int:
    return gc.get_freeze_count()


def test_a_forked_builder_inherits_the_parents_objects_frozen_out_of_its_collector():
    """Else its collections touch (and so copy) every shared page: 70 MiB at 1,000,000."""
    with forked_pool(1) as pool:
        in_child = pool.submit(frozen_objects).result()
    assert in_child > 0


def test_the_parent_collects_its_objects_again_once_the_builders_are_gone():
    with forked_pool(1) as pool:
        pool.submit(frozen_objects).result()
    assert gc.get_freeze_count() == 0


def test_a_run_in_a_server_thread_builds_its_pages_in_process():
    """A fork copies other threads' locks held at that moment (SQLite's among them):
    a builder forked beside a threaded server's request threads could hang for ever."""
    answers = []
    thread = threading.Thread(target=lambda: answers.append(can_fork()))
    thread.start()
    thread.join()
    assert answers == [False]


def test_a_run_in_the_main_thread_may_fork():
    assert can_fork()


class MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2`: `hblkhd` is the bytes held in mapped blocks."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def mapped_bytes() -> int:
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    return libc.mallinfo2().hblkhd


def mapped_after_a_larger_block_was_freed() -> int:
    """How much of a 4 MiB buffer glibc maps, once an 8 MiB one was freed."""
    first = bytearray(8 * MIB)
    del first
    before = mapped_bytes()
    second = bytearray(4 * MIB)
    grown = mapped_bytes() - before
    del second
    return grown


MIB = 2**20


def in_fresh_process(probe: str) -> list[str]:
    """What `probe` prints, run in a new interpreter with the project's settings."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "resourcesync_portal.settings"}
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.split()


#: Run in a fresh interpreter: a process with a long history (this one) has
#: free heap chunks large enough to serve the probe's buffer whatever the threshold.
FRESH_PROCESS_PROBE = """
import django
django.setup()
from sitemaps.forking import forked_pool
from tests.unit.test_forking import mapped_after_a_larger_block_was_freed
with forked_pool(1) as pool:
    print(pool.submit(mapped_after_a_larger_block_was_freed).result())
"""


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="glibc only")
def test_a_builders_large_buffers_are_mapped_so_freeing_them_returns_the_memory():
    """Else glibc serves them from the heap after the first large free, and small
    objects pin it: a full Elasticsearch run of 100,000 kept 45 MiB more."""
    assert int(in_fresh_process(FRESH_PROCESS_PROBE)[-1]) >= 4 * MIB


def resident_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


#: A parent with a history: 80 MiB of small blocks freed between live ones
#: (which keep the heap from shrinking at its top), as a bench's or worker's
#: earlier work leaves it. Prints its resident size, then again inside the pool.
FREED_HEAP_PROBE = """
import django
django.setup()
from sitemaps.forking import forked_pool
from tests.unit.test_forking import resident_mib
blocks = [bytes(1000) + str(n).encode() for n in range(80_000)]
kept = blocks[::40]
del blocks
print(resident_mib())
with forked_pool(1) as pool:
    print(resident_mib())
    pool.submit(resident_mib).result()
"""


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "malloc_trim"), reason="glibc only")
def test_the_parents_freed_heap_is_released_before_builders_are_forked():
    """Else each builder's allocations land in it and copy its pages: a full
    Elasticsearch run at 1,000,000 peaked 9-19 MiB higher from such a process."""
    before, in_pool = (float(line) for line in in_fresh_process(FREED_HEAP_PROBE)[-2:])
    assert before - in_pool >= 50
