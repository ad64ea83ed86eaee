"""Take a set's regeneration lease and stop inside `Lease.holding()`, as a paused run would.

For tests/integration/test_faults.py: prints "holding" once inside, then sleeps.

    python tests/integration/hold_lease.py provider/set
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    import django

    django.setup()
    from django.utils import timezone

    from sitemaps import lease
    from sources.models import ResourceSet

    provider, slug = sys.argv[1].split("/")
    resource_set = ResourceSet.objects.get(provider__slug=provider, slug=slug)
    held = lease.acquire(resource_set, timezone.now())
    assert held is not None
    with held.holding():
        print("holding", flush=True)
        time.sleep(120)


if __name__ == "__main__":
    main()
