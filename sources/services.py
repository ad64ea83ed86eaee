"""Writes: apply the harvester's events to the snapshot and the change log.

A request is applied in one transaction, in batches, so memory stays flat
and nothing is half-applied. The commit is the acknowledgement; the
Elasticsearch mirror and document regeneration follow after commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from .bulk import BulkWriter, keys_by_uri
from .events import Event
from .models import Change, ChangeType, Resource, ResourceSet

MAX_REPORTED_ERRORS = 100
RESOURCE_UPDATE_FIELDS = [
    "location_type",
    "location_value",
    "length",
    "md5",
    "sha256",
    "mime",
    "lastmod",
    "ln",
    "timestamp",
]


@dataclass(frozen=True, slots=True)
class EventError:
    """Why one event was refused; `index` counts from 0 in request order."""

    index: int
    field: str
    message: str


class EventsRejected(Exception):
    """At least one event was invalid, so none was applied."""

    def __init__(self, errors: list[EventError]) -> None:
        super().__init__(f"{len(errors)} invalid event(s)")
        self.errors = errors


@dataclass(slots=True)
class IngestResult:
    received_at: datetime = field(repr=False)
    accepted: int = 0
    created: int = 0
    updated: int = 0
    deleted: int = 0
    duplicates: int = 0

    def counts(self) -> dict[str, int]:
        """The response body: how many events were accepted and how."""
        data = asdict(self)
        del data["received_at"]
        return data


#: Called after commit with the resource set's id (indexing, regeneration).
after_ingest_hooks: list[Callable[[int], None]] = []


def resource_set_lock(*, resource_set: ResourceSet) -> datetime:
    """Serialise writers of one set and return the time taken under the lock.

    Ingestion, change-list rotation and regeneration's snapshot time take it,
    so a change can never land in a list that was closed meanwhile.
    """
    # The no-op UPDATE takes SQLite's write lock; PostgreSQL locks the row.
    ResourceSet.objects.filter(pk=resource_set.pk).update(slug=F("slug"))
    locked = (
        ResourceSet.objects.select_for_update()
        .only("accepts_changes_since")
        .get(pk=resource_set.pk)
    )
    resource_set.accepts_changes_since = locked.accepts_changes_since
    return timezone.now()


def ingest_events(
    *,
    resource_set: ResourceSet,
    events: Iterable[Event | EventError],
    batch_size: int | None = None,
) -> IngestResult:
    """Apply events in order, all or nothing; raise EventsRejected on bad input.

    `events` may be a stream: invalid items (EventError) are collected and
    every remaining event is still validated, so the client gets all errors.
    """
    batch_size = batch_size or settings.INGEST_BATCH_SIZE
    result = IngestResult(received_at=timezone.now())
    errors: list[EventError] = []
    seen_ids: set[str] = set()
    with transaction.atomic():
        result.received_at = resource_set_lock(resource_set=resource_set)
        ResourceSet.objects.filter(pk=resource_set.pk).update(changed_at=result.received_at)
        batch: list[Event] = []
        for index, item in enumerate(events):
            if isinstance(item, EventError):
                errors.append(item)
                if len(errors) >= MAX_REPORTED_ERRORS:
                    break
                continue
            since = resource_set.accepts_changes_since
            if item.datetime and since and item.datetime < since:
                message = (
                    f"is before {since.isoformat()}, when the open change list starts; "
                    "closed change lists cannot change."
                )
                errors.append(EventError(index, "datetime", message))
                continue
            if errors:
                continue
            if item.id:
                if item.id in seen_ids:
                    result.duplicates += 1
                    continue
                seen_ids.add(item.id)
            batch.append(item)
            if len(batch) >= batch_size:
                _apply_batch(resource_set, batch, result)
                batch = []
        if errors:
            raise EventsRejected(errors)
        if batch:
            _apply_batch(resource_set, batch, result)
        if result.accepted:
            for hook in after_ingest_hooks:
                transaction.on_commit(lambda hook=hook: hook(resource_set.pk), robust=True)
    return result


def _apply_batch(resource_set: ResourceSet, events: list[Event], result: IngestResult) -> None:
    ids = [event.id for event in events if event.id]
    if ids:
        known = set(
            Change.objects.filter(resource_set=resource_set, event_id__in=ids).values_list(
                "event_id", flat=True
            )
        )
        if known:
            result.duplicates += sum(1 for event in events if event.id in known)
            events = [event for event in events if event.id not in known]
    # Each segment touches a URI at most once, so its writes are independent.
    segment: list[Event] = []
    uris: set[str] = set()
    for event in events:
        if event.uri in uris:
            _apply_segment(resource_set, segment, result)
            segment, uris = [], set()
        segment.append(event)
        uris.add(event.uri)
    if segment:
        _apply_segment(resource_set, segment, result)


_resources = BulkWriter(Resource, ["resource_set", "uri", *RESOURCE_UPDATE_FIELDS])
_changes = BulkWriter(
    Change,
    [
        "resource_set",
        "resource_key",
        "change",
        "location_type",
        "location_value",
        "uri",
        "length",
        "md5",
        "sha256",
        "mime",
        "lastmod",
        "ln",
        "datetime",
        "timestamp",
        "event_id",
        "indexed",
    ],
)


def _keys(resource_set: ResourceSet, uris: list[str]) -> dict[str, int]:
    return keys_by_uri(resource_set.pk, uris)


def _apply_segment(resource_set: ResourceSet, events: list[Event], result: IngestResult) -> None:
    """Apply events that each touch a different URI: a few statements in all."""
    received_at = result.received_at
    set_id = resource_set.pk
    existing = _keys(resource_set, [event.uri for event in events])
    inserts, updates, update_keys, deletes = [], [], [], []
    applied_types = []
    for event in events:
        key = existing.get(event.uri)
        if event.change == ChangeType.DELETED:
            applied_types.append(ChangeType.DELETED)
            if key is not None:
                deletes.append(key)
            continue
        values = [
            event.location_type,
            event.location_value,
            event.length,
            event.md5,
            event.sha256,
            event.mime,
            event.lastmod,
            [link.as_json() for link in event.links],
            received_at,
        ]
        if key is None:
            applied_types.append(ChangeType.CREATED)
            inserts.append([set_id, event.uri, *values])
        else:
            applied_types.append(ChangeType.UPDATED)
            updates.append([set_id, event.uri, *values])
            update_keys.append(key)
    if deletes:
        Resource.objects.filter(pk__in=deletes).delete()
    _resources.update(updates, update_keys)
    _resources.insert(inserts)
    if inserts:
        existing.update(_keys(resource_set, [row[1] for row in inserts]))
    rows = []
    for event, applied in zip(events, applied_types, strict=True):
        # Receipt time, one microsecond apart in request order, so change
        # lists can split anywhere between two events.
        moment = event.datetime or received_at + timedelta(microseconds=result.accepted)
        rows.append(
            [
                set_id,
                existing.get(event.uri),
                applied,
                event.location_type,
                event.location_value,
                event.uri,
                event.length,
                event.md5,
                event.sha256,
                event.mime,
                event.lastmod,
                [link.as_json() for link in event.links],
                moment,
                received_at,
                event.id,
                False,
            ]
        )
        setattr(result, applied, getattr(result, applied) + 1)
        result.accepted += 1
    _changes.insert(rows)
