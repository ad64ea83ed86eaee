"""The beat schedule, run by the web server itself when there is no broker.

With CELERY_TASK_ALWAYS_EAGER (the embedded default: no CELERY_BROKER_URL) no
`celery beat` runs, so a set's runs happened only when events arrived: a run
that failed (SQLite busy under a large request) waited for the next event, and
a Change List never rotated on time. `manage.py runserver` then runs
CELERY_BEAT_SCHEDULE in a thread of its own, each task run as a worker would
run it (`resourcesync_portal/management/commands/runserver.py`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from django.db import close_old_connections

from .celery import app

logger = logging.getLogger(__name__)

#: How often the thread looks for due tasks.
TICK_SECONDS = 1.0


class EmbeddedBeat:
    """Which tasks of a schedule (timedelta intervals) are due, and running them."""

    def __init__(self, schedule: Mapping[str, Mapping[str, Any]], *, now: float) -> None:
        self.every = {
            entry["task"]: entry["schedule"].total_seconds() for entry in schedule.values()
        }
        self.next_at = {task: now + seconds for task, seconds in self.every.items()}

    def tick(self, *, now: float) -> list[str]:
        """Run every task due at `now` (a monotonic time); the names of those run."""
        due = [task for task, at in self.next_at.items() if now >= at]
        for task in due:
            self.next_at[task] = now + self.every[task]
            run_task(task)
        return due


def run_task(name: str) -> None:
    """Apply one task here; a failure is logged, and the next tick goes on."""
    try:
        app.tasks[name]()  # the task's body, as a worker runs it, without a line per run
    except Exception:
        logger.exception("Embedded beat: %s failed", name)


def start(schedule: Mapping[str, Mapping[str, Any]]) -> threading.Thread:
    """Run the schedule in a daemon thread for as long as the process lives."""
    beat = EmbeddedBeat(schedule, now=time.monotonic())

    def loop() -> None:
        while True:
            time.sleep(TICK_SECONDS)
            beat.tick(now=time.monotonic())
            close_old_connections()  # this thread's, as a request's end closes a request's

    thread = threading.Thread(target=loop, name="embedded-beat", daemon=True)
    thread.start()
    logger.info("No broker: the beat schedule runs in this process (%d tasks)", len(beat.every))
    return thread
