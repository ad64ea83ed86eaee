"""Reads of the journal: recent runs, filtered as the `runs` command and the admin ask.

A read first marks failed the runs whose process is gone
(`journal.liveness.close_abandoned_runs`), so nobody is shown a killed run as running.
"""

from __future__ import annotations

from django.db.models import QuerySet

from sources.models import ResourceSet

from .liveness import close_abandoned_runs
from .models import Run, RunKind


def runs_recent(
    *, resource_set: ResourceSet | None = None, kind: str | None = None, limit: int = 20
) -> list[Run]:
    """The newest runs first, of one set and/or one kind."""
    close_abandoned_runs()
    runs: QuerySet[Run] = Run.objects.select_related("resource_set__provider")
    if resource_set is not None:
        runs = runs.filter(resource_set=resource_set)
    if kind is not None:
        runs = runs.filter(kind=kind)
    return list(runs[:limit])


def regeneration_runs(*, since, resource_set: ResourceSet | None = None) -> list[Run]:
    """Finished regenerations since a moment, oldest first (for the durations chart)."""
    runs = Run.objects.filter(
        kind=RunKind.REGENERATION, started_at__gte=since, finished_at__isnull=False
    )
    if resource_set is not None:
        runs = runs.filter(resource_set=resource_set)
    return list(runs.order_by("started_at").only("started_at", "finished_at", "outcome", "target"))
