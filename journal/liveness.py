"""Whether a run is still alive, so a killed one is not shown as running forever.

A process killed with SIGKILL, by the OOM killer, with a lost Celery worker
or a reboot cannot record its end. So each run records who runs it (host,
pid and when the kernel started that process) and, while it runs, a
heartbeat every tenth of `RESOURCESYNC_JOURNAL_SILENCE_SECONDS`.
`close_abandoned_runs` marks a running run failed ("process ended without
recording an outcome") when its process is gone from this host (pid dead or
reused) or, wherever it ran, when its last sign of life is older than that
limit. Its end stays empty: when it died is not known. Should a run so
marked still be alive after all (its heartbeats could not be written), its
own end overwrites the mark.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, connections
from django.utils import timezone

from resourcesync_portal import processes

from .models import Outcome, Run

logger = logging.getLogger(__name__)

GONE = "process ended without recording an outcome"
#: Heartbeats per silence limit: a few may fail (a busy database) before a run looks dead.
BEATS_PER_LIMIT = 10
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")

# A beat holds this lock from its first query to closing its connection, and a
# fork waits for it: a forked child (a page builder) never inherits the
# heartbeat's connection or a lock taken inside the database driver.
_beating = threading.Lock()
os.register_at_fork(
    before=_beating.acquire,
    after_in_parent=_beating.release,
    after_in_child=_beating.release,
)


def silence_limit() -> timedelta:
    """How long a running run may go without a sign of life before it counts as abandoned."""
    return timedelta(seconds=settings.RESOURCESYNC_JOURNAL_SILENCE_SECONDS)


def host_name() -> str:
    """The host name, and which machine and pid namespace its pids belong to."""
    return processes.this_host()


def process_start(pid: int) -> str:
    """When the kernel started `pid` ("boot id/clock ticks"), so a reused pid is told apart.

    "" where /proc cannot say (not Linux), and for a zombie: it has ended.
    """
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
        boot = _BOOT_ID.read_text().strip()
    except OSError:
        return ""
    fields = status.rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    if fields[0] == "Z":
        return ""
    return f"{boot}/{fields[19]}"


def process_alive(pid: int, started: str) -> bool:
    """Whether the process that recorded (pid, start) still runs on this host."""
    if started:
        return process_start(pid) == started
    try:  # no start time recorded: the pid alone (a reused one looks alive)
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def can_beat_in_thread() -> bool:
    """Whether a second connection sees the run and may write beside this one.

    Not inside a transaction (nobody else sees the run before it ends), and not
    on in-memory SQLite, whose shared cache fails a writer at once instead of waiting.
    """
    if connection.in_atomic_block:
        return False
    return not (connection.vendor == "sqlite" and connection.is_in_memory_db())  # type: ignore[attr-defined]


class RunHeartbeat:
    """Writes the run's `heartbeat_at` from a thread until the run ends; one UPDATE a beat."""

    def __init__(self, run_pk: int, interval: float) -> None:
        self.run_pk = run_pk
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="journal-heartbeat", daemon=True)

    def __enter__(self) -> RunHeartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def beat(self) -> None:
        with _beating:
            try:
                Run.objects.filter(pk=self.run_pk, finished_at__isnull=True).update(
                    heartbeat_at=timezone.now()
                )
            except Exception as error:  # e.g. SQLite busy: the next beat may pass; never die
                logger.warning("Journal heartbeat of run %s failed: %s", self.run_pk, error)
            finally:
                connections.close_all()  # this thread's connection only

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()


def heartbeat_interval() -> float:
    return silence_limit().total_seconds() / BEATS_PER_LIMIT


def why_abandoned(run: Run, *, host: str, silent_since: datetime) -> str:
    """The error to record for a running run that is no longer alive; "" if it may be."""
    if run.host == host and run.pid is not None and not process_alive(run.pid, run.process_start):
        return f"{GONE} (pid {run.pid} on {run.host} is gone)"
    last_sign_of_life = run.heartbeat_at or run.started_at
    if last_sign_of_life < silent_since:
        seen = timezone.localtime(last_sign_of_life)
        return f"{GONE} (no sign of life since {seen:%Y-%m-%d %H:%M:%S %Z})"
    return ""


def close_abandoned_runs(*, now: datetime | None = None) -> int:
    """Mark failed every running run whose process is gone or silent too long; how many.

    Cheap enough for every read of the journal: one query over the running
    runs (an index of their own), and a write only for a run found dead.
    """
    silent_since = (now or timezone.now()) - silence_limit()
    host = host_name()
    running = Run.objects.filter(outcome=Outcome.RUNNING).only(
        "started_at", "heartbeat_at", "host", "pid", "process_start"
    )
    closed = 0
    for run in running:
        error = why_abandoned(run, host=host, silent_since=silent_since)
        if error:
            closed += Run.objects.filter(pk=run.pk, outcome=Outcome.RUNNING).update(
                outcome=Outcome.FAILED, error=error
            )
    if closed:
        logger.warning("The journal marked %d run(s) failed: %s", closed, GONE)
    return closed
