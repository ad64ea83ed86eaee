"""Whether the process that holds a claim or a lease is gone.

A worker killed mid-run (kill -9, a worker timeout, SIGTERM in the middle of a
query) never lets go of what it holds. When it ran on this host, the next run
can see that its process is gone and take over at once, instead of waiting
for the hold to lapse. Another host's process is never taken for gone.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from pathlib import Path


@functools.cache
def this_host() -> str:
    """The host name, and where its pids mean the same processes: containers run with
    the host's network share its name but not its processes (their own pid namespace),
    and two machines may share a name (their boot ids differ)."""
    return f"{socket.gethostname()}@{_pid_space()}"


def _pid_space() -> str:
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # not Linux: the name alone
        return "-"
    return hashlib.sha256(f"{boot} {namespace}".encode()).hexdigest()[:12]


def is_gone(host: str, pid: str) -> bool:
    """Whether `pid` names a process of this host that no longer runs."""
    if host != this_host() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
