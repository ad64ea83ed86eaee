"""The embedded default: entries straight from the database rows."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from django.db.models import Max, Q

from sources.models import Change, Resource, ResourceSet

from .base import DEFAULT_BATCH_SIZE, BaseGenerator, ChangeRecord, ResourceRecord
from .records import change_record, resource_record

RESOURCE_FIELDS = ("id", "uri", "lastmod", "length", "md5", "mime", "sha256", "ln")
CHANGE_FIELDS = (
    "id",
    "resource_key",
    "uri",
    "change",
    "datetime",
    "lastmod",
    "length",
    "md5",
    "mime",
    "sha256",
    "ln",
)


def _window(since: datetime | None, until: datetime | None) -> Q:
    query = Q()
    if since is not None:
        query &= Q(datetime__gte=since)
    if until is not None:
        query &= Q(datetime__lte=until)
    return query


class DatabaseGenerator(BaseGenerator):
    name = "database"

    def iter_resources(
        self,
        resource_set: ResourceSet,
        *,
        after: int | None = None,
        through: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ResourceRecord]:
        rows = Resource.objects.filter(resource_set=resource_set)
        if through is not None:
            rows = rows.filter(id__lte=through)
        last = after if after is not None else 0
        while True:
            batch = list(rows.filter(id__gt=last).order_by("id").values(*RESOURCE_FIELDS)[:batch_size])
            for row in batch:
                row["key"] = row["id"]
                yield resource_record(row)
            if len(batch) < batch_size:
                return
            last = batch[-1]["id"]

    def iter_changes(
        self,
        resource_set: ResourceSet,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        after: tuple[datetime, int] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ChangeRecord]:
        rows = Change.objects.filter(_window(since, until), resource_set=resource_set)
        while True:
            page = rows
            if after is not None:
                moment, key = after
                page = rows.filter(Q(datetime__gt=moment) | Q(datetime=moment, id__gt=key))
            batch = list(page.order_by("datetime", "id").values(*CHANGE_FIELDS)[:batch_size])
            for row in batch:
                row["key"] = row["id"]
                yield change_record(row)
            if len(batch) < batch_size:
                return
            after = (batch[-1]["datetime"], batch[-1]["id"])

    def count_resources(self, resource_set: ResourceSet) -> int:
        return Resource.objects.filter(resource_set=resource_set).count()

    def count_changes(
        self,
        resource_set: ResourceSet,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        return Change.objects.filter(_window(since, until), resource_set=resource_set).count()

    def last_changed(self, resource_set: ResourceSet) -> datetime | None:
        return Change.objects.filter(resource_set=resource_set).aggregate(last=Max("datetime"))[
            "last"
        ]
