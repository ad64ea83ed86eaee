"""`record_run`: how every kind of run writes its line in the journal.

Use it around the whole run, so a run that raises is recorded too::

    from journal.recording import record_run
    from journal.models import RunKind

    with record_run(kind=RunKind.EXPORT, resource_set=resource_set) as run:
        ...
        run.count(pages=written, bytes=size)   # add counts as they are known
        run.detail["zip"] = str(path)           # anything a person may want later
        if problems:
            run.fail(f"{len(problems)} file(s) skipped")   # ends failed, without raising

For a harvest of another source, pass `target=<its URL>` and no set.

It costs one INSERT when the run starts and one UPDATE when it ends, and
from a thread one UPDATE per heartbeat (every tenth of
RESOURCESYNC_JOURNAL_SILENCE_SECONDS, 60 s by default) while it runs, so a
run killed without a chance to record its end is found out
(`journal.liveness`). The journal never stops a run: when the database cannot take the line (say, a
harvester on a host whose database was never migrated) it logs a warning and
the run goes on unrecorded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from sources.models import ResourceSet

from . import liveness
from .models import COUNTS, Outcome, Run

logger = logging.getLogger(__name__)

#: Longer errors are cut; the log has the rest.
MAX_ERROR_LENGTH = 10_000


@contextmanager
def record_run(
    *, kind: str, resource_set: ResourceSet | None = None, target: str = ""
) -> Iterator[Run]:
    """Record one run: its start now, its end (outcome, counts, error) when the block exits."""
    run = _start(kind, resource_set, target)
    try:
        with ExitStack() as beating:
            if run.pk is not None and liveness.can_beat_in_thread():
                interval = liveness.heartbeat_interval()
                beating.enter_context(liveness.RunHeartbeat(run.pk, interval))
            yield run
    except BaseException as error:  # interrupted runs too (Ctrl-C, a time limit)
        run.fail(f"{type(error).__name__}: {error}")
        raise
    finally:
        _finish(run)


def _start(kind: str, resource_set: ResourceSet | None, target: str) -> Run:
    run = Run(
        kind=kind,
        resource_set=resource_set,
        target=target or (resource_set.path if resource_set is not None else ""),
        started_at=timezone.now(),
        host=liveness.host_name(),
        pid=os.getpid(),
        process_start=liveness.process_start(os.getpid()),
    )
    try:
        with transaction.atomic():  # a savepoint inside a caller's transaction
            run.save(force_insert=True)
    except DatabaseError as error:
        logger.warning("The journal could not record a %s run of %s: %s", kind, run.target, error)
        run.pk = None
    return run


def _finish(run: Run) -> None:
    run.finished_at = timezone.now()
    if run.outcome == Outcome.RUNNING:
        run.outcome = Outcome.SUCCEEDED
    if run.pk is None:
        return
    fields = {name: getattr(run, name) for name in COUNTS}
    try:
        with transaction.atomic():
            Run.objects.filter(pk=run.pk).update(
                finished_at=run.finished_at,
                outcome=run.outcome,
                error=run.error[:MAX_ERROR_LENGTH],
                detail=run.detail,
                **fields,
            )
    except DatabaseError as error:
        logger.warning("The journal could not record the end of %s: %s", run, error)


def prune_runs(*, days: int | None = None) -> int:
    """Delete runs that started before the retention period; how many. 0 days keeps all."""
    if days is None:
        days = settings.RESOURCESYNC_JOURNAL_RETENTION_DAYS
    if days <= 0:
        return 0
    cutoff = timezone.now() - timedelta(days=days)
    deleted, _ = Run.objects.filter(started_at__lt=cutoff).delete()
    return deleted
