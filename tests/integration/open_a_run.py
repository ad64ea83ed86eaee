"""Open a journal run and wait inside it, for a test to kill this process.

For tests/integration/test_journal_liveness.py: the run is the real
`record_run`; the process prints "open" once the run is recorded, then
sleeps until it is killed.

    python tests/integration/open_a_run.py TARGET
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    import django

    django.setup()
    from journal.models import RunKind
    from journal.recording import record_run

    with record_run(kind=RunKind.SCAN, target=sys.argv[1]):
        print("open", flush=True)
        time.sleep(3600)


if __name__ == "__main__":
    main()
