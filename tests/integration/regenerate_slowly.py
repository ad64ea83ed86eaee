"""`manage.py regenerate`, with every Resource List page built slowly.

For tests/integration/test_faults.py, which kills it mid-run. Only page
building is slowed (PAGE_DELAY seconds before each page, in whichever process
builds it); the command, the lease, the heartbeat and the forked builders are
the real ones. CPU_COUNT pretends to that many CPUs, so builders are forked
on any machine.

    python tests/integration/regenerate_slowly.py provider/set [--full]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from sitemaps import regeneration

    build = regeneration.build_resource_list
    delay = float(os.environ.get("PAGE_DELAY", "1"))

    def slow_build(*args, **kwargs):
        time.sleep(delay)
        return build(*args, **kwargs)

    regeneration.build_resource_list = slow_build
    if "CPU_COUNT" in os.environ:
        os.cpu_count = lambda: int(os.environ["CPU_COUNT"])
    call_command("regenerate", *sys.argv[1:])


if __name__ == "__main__":
    main()
