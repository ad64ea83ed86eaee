"""Whether the process that holds a claim or a lease is gone.

A worker killed mid-run (kill -9, a worker timeout, SIGTERM in the middle of a
query) never lets go of what it holds. When it ran on this host, the next run
can see that its process is gone and take over at once, instead of waiting
for the hold to lapse. Another host's process is never taken for gone.
"""

from __future__ import annotations

import os
import socket


def this_host() -> str:
    return socket.gethostname()


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
