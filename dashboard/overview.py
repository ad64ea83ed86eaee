"""What the dashboard shows: every set's state and the last 30 days of activity.

Every figure is one aggregate query, whatever the number of sets: per-set
counts are correlated subqueries, and the charts group the change log by
day or hour of receipt over the `change_received` index (timestamp, set,
change), so a big change log is read only inside the window, from the index.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import Any
from urllib.parse import urlencode

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce, TruncDate, TruncHour
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.safestring import SafeString

from journal.liveness import close_abandoned_runs
from journal.models import Run, RunKind
from sitemaps.protocol.constants import ChangeType
from sitemaps.selectors import annotated, with_regeneration_status
from sources.models import Change, Resource, ResourceSet

from . import charts

DAYS = 30
#: The durations chart shows this many of the newest regenerations.
DURATION_RUNS = 60
CHANGE_COLOURS = {
    ChangeType.CREATED: "#2e7d32",
    ChangeType.UPDATED: "#1565c0",
    ChangeType.DELETED: "#c62828",
}


class ReceiptDay(TruncDate):
    """TruncDate; on SQLite a substring of the stored UTC text, not a Python call per row."""

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        sql, params = compiler.compile(self.lhs)
        return f"substr({sql}, 1, 10)", params


class ReceiptHour(TruncHour):
    """TruncHour; on SQLite a substring of the stored UTC text, not a Python call per row."""

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, list[Any]]:
        sql, params = compiler.compile(self.lhs)
        return f"substr({sql}, 1, 13) || ':00:00'", params


def local_time(moment: dt.datetime) -> str:
    """As the admin shows times: DATETIME_FORMAT, to the second, with the zone."""
    return date_format(timezone.localtime(moment), "DATETIME_FORMAT")


def start_of_today(now: dt.datetime) -> dt.datetime:
    return timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)


def published_text(resource_set: ResourceSet) -> str:
    """Its pages and, when it has any, its dump packages; counts by `with_regeneration_status`."""
    lists = annotated(resource_set, "resource_pages")
    changes = annotated(resource_set, "change_pages")
    dumps = annotated(resource_set, "resource_dump_packages")
    change_dumps = annotated(resource_set, "change_dump_packages")
    text = f"{lists} resource list, {changes} change list pages"
    if dumps or change_dumps:
        text += f"; {dumps} resource dump, {change_dumps} change dump packages"
    return text


def sets_overview(now: dt.datetime) -> list[ResourceSet]:
    """Sets with resources, changes today, pending changes, `published` (pages and packages)
    and `last_run` (a Run or None).

    Two queries, whatever the number of sets.
    """
    close_abandoned_runs()  # a killed run's line says failed, not running
    sets = list(_sets_with_counts(now))
    # `last_run_id` is annotated by _sets_with_counts; `last_run` is set here.
    run_ids = [getattr(s, "last_run_id", None) for s in sets]
    runs = Run.objects.in_bulk([run_id for run_id in run_ids if run_id is not None])
    for resource_set, run_id in zip(sets, run_ids, strict=True):
        resource_set.last_run = runs.get(run_id)  # type: ignore[attr-defined]
        resource_set.published = published_text(resource_set)  # type: ignore[attr-defined]
    return sets


def _sets_with_counts(now: dt.datetime) -> QuerySet[ResourceSet]:
    resources = (
        Resource.objects.filter(resource_set=OuterRef("pk"))
        .order_by()
        .values("resource_set")
        .annotate(n=Count("*"))
        .values("n")
    )
    today = (
        Change.objects.filter(resource_set=OuterRef("pk"), timestamp__gte=start_of_today(now))
        .order_by()
        .values("resource_set")
        .annotate(n=Count("*"))
        .values("n")
    )
    sets = ResourceSet.objects.select_related("provider", "regeneration_state").annotate(
        resource_count=Coalesce(Subquery(resources, output_field=IntegerField()), 0),
        changes_today=Coalesce(Subquery(today, output_field=IntegerField()), 0),
        last_run_id=Subquery(
            Run.objects.filter(resource_set=OuterRef("pk"), kind=RunKind.REGENERATION)
            .order_by("-started_at")
            .values("pk")[:1]
        ),
    )
    return with_regeneration_status(sets)


def changes_by_day(
    since: dt.datetime, resource_set: ResourceSet | None = None
) -> dict[dt.date, dict[str, int]]:
    """Changes received per day and change type, since a moment."""
    changes = Change.objects.filter(timestamp__gte=since)
    if resource_set is not None:
        changes = changes.filter(resource_set=resource_set)
    rows = (
        changes.annotate(day=ReceiptDay("timestamp"))
        .values("day", "change")
        .annotate(n=Count("*"))
        .order_by()
    )
    days: dict[dt.date, dict[str, int]] = defaultdict(dict)
    for row in rows:
        days[row["day"]][row["change"]] = row["n"]
    return days


def changes_by_hour(
    since: dt.datetime, resource_set: ResourceSet | None = None
) -> dict[dt.datetime, int]:
    """Changes received per hour since a moment: the ingest rate."""
    changes = Change.objects.filter(timestamp__gte=since)
    if resource_set is not None:
        changes = changes.filter(resource_set=resource_set)
    rows = changes.annotate(hour=ReceiptHour("timestamp")).values("hour").annotate(n=Count("*"))
    return {row["hour"]: row["n"] for row in rows.order_by()}


def last_days(now: dt.datetime, days: int = DAYS) -> list[dt.date]:
    today = timezone.localtime(now).date()
    return [today - dt.timedelta(days=back) for back in range(days - 1, -1, -1)]


def changes_chart(now: dt.datetime, resource_set: ResourceSet | None = None) -> SafeString:
    """Stacked bars: changes received per day, by type, over the last 30 days."""
    days = last_days(now)
    counts = changes_by_day(start_of_today(now) - dt.timedelta(days=DAYS - 1), resource_set)
    series = [
        charts.Series(
            name=change.value,
            values=[counts.get(day, {}).get(change, 0) for day in days],
            colour=colour,
        )
        for change, colour in CHANGE_COLOURS.items()
    ]
    return charts.bar_chart(
        [day.isoformat() for day in days],
        series,
        title=f"Changes received per day, last {DAYS} days",
        unit="changes",
    )


def ingest_chart(now: dt.datetime, resource_set: ResourceSet | None = None) -> SafeString:
    """A line: changes received per hour over the last 30 days (the ingest rate)."""
    first = start_of_today(now) - dt.timedelta(days=DAYS - 1)
    hours = [first + dt.timedelta(hours=n) for n in range(DAYS * 24)]
    counts = changes_by_hour(first, resource_set)
    values = [counts.get(hour, 0) for hour in hours]
    return charts.line_chart(
        [f"{timezone.localtime(hour):%Y-%m-%d %H:00 %Z}" for hour in hours],
        values,
        title=f"Ingest rate: changes received per hour, last {DAYS} days",
        unit="changes/hour",
    )


def durations_chart(resource_set: ResourceSet | None = None) -> SafeString:
    """Bars: how long each of the newest regenerations took, failed ones in red."""
    runs = Run.objects.filter(kind=RunKind.REGENERATION, finished_at__isnull=False)
    if resource_set is not None:
        runs = runs.filter(resource_set=resource_set)
    newest = list(
        runs.order_by("-started_at").only("started_at", "finished_at", "outcome", "target")[
            :DURATION_RUNS
        ]
    )[::-1]
    seconds = [run.duration.total_seconds() if run.duration else 0.0 for run in newest]
    return charts.bar_chart(
        [f"{local_time(run.started_at)} {run.target}" for run in newest],
        [charts.Series(name="seconds", values=seconds, colour="#6a1b9a")],
        title=f"Regeneration durations, last {DURATION_RUNS} runs",
        unit="s",
        highlight=[run.outcome == "failed" for run in newest],
        highlight_label="failed",
    )


def set_links(resource_set: ResourceSet, now: dt.datetime) -> dict[str, str]:
    """Admin lists filtered to one set: its changes (all, pending, today), resources and runs.

    Pending needs the set annotated by `with_regeneration_status`.
    """
    where = f"?resource_set__id__exact={resource_set.pk}"
    today = start_of_today(now)
    tomorrow = today + dt.timedelta(days=1)
    through = resource_set.regeneration_through  # type: ignore[attr-defined]
    return {
        "changes": reverse("admin:sources_change_changelist") + where,
        "pending": reverse("admin:sources_change_changelist") + f"{where}&id__gt={through}",
        # As the admin's own "Today" filter spells it: aware datetimes.
        "changes_today": reverse("admin:sources_change_changelist")
        + f"{where}&{urlencode({'timestamp__gte': today, 'timestamp__lt': tomorrow})}",
        "resources": reverse("admin:sources_resource_changelist") + where,
        "runs": reverse("admin:journal_run_changelist") + where,
        "set": reverse("admin:sources_resourceset_change", args=[resource_set.pk]),
    }


def dashboard_context(now: dt.datetime | None = None) -> dict[str, Any]:
    """Everything the dashboard template shows."""
    now = now or timezone.now()
    sets = sets_overview(now)
    return {
        "set_rows": [(resource_set, set_links(resource_set, now)) for resource_set in sets],
        "changes_chart": changes_chart(now),
        "ingest_chart": ingest_chart(now),
        "durations_chart": durations_chart(),
        "runs_url": reverse("admin:journal_run_changelist"),
    }
