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
from django.utils import timezone

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
    first_change_id: int | None = field(default=None, repr=False)
    last_change_id: int | None = field(default=None, repr=False)

    def counts(self) -> dict[str, int]:
        """The response body: how many events were accepted and how."""
        data = asdict(self)
        del data["first_change_id"], data["last_change_id"], data["received_at"]
        return data


#: Called after commit with (resource_set_id, first_change_id, last_change_id).
after_ingest_hooks: list[Callable[[int, int, int], None]] = []


def resource_set_lock(*, resource_set: ResourceSet) -> datetime:
    """Serialise writers of one set and return the time taken under the lock.

    Ingestion and change-list rotation both take it, so a change can never
    land in a list that was closed meanwhile.
    """
    now = timezone.now()
    ResourceSet.objects.filter(pk=resource_set.pk).update(changed_at=now)
    locked = ResourceSet.objects.select_for_update().only("accepts_changes_since").get(
        pk=resource_set.pk
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
        batch: list[Event] = []
        for index, item in enumerate(events):
            if isinstance(item, EventError):
                errors.append(item)
                if len(errors) >= MAX_REPORTED_ERRORS:
                    break
                continue
            if not errors and item.datetime and resource_set.accepts_changes_since:
                if item.datetime < resource_set.accepts_changes_since:
                    errors.append(
                        EventError(
                            index,
                            "datetime",
                            "is before "
                            f"{resource_set.accepts_changes_since.isoformat()}, when the open "
                            "change list starts; closed change lists cannot change.",
                        )
                    )
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
        first, last = result.first_change_id, result.last_change_id
        if first is not None and last is not None:
            for hook in after_ingest_hooks:
                transaction.on_commit(
                    lambda hook=hook: hook(resource_set.pk, first, last), robust=True
                )
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


def _apply_segment(resource_set: ResourceSet, events: list[Event], result: IngestResult) -> None:
    received_at = result.received_at
    existing = dict(
        Resource.objects.filter(
            resource_set=resource_set, uri__in=[event.uri for event in events]
        ).values_list("uri", "id")
    )
    upserts: list[Resource] = []
    deletes: list[int] = []
    logged: list[tuple[Event, str, Resource | int | None]] = []
    for event in events:
        key = existing.get(event.uri)
        if event.change == ChangeType.DELETED:
            if key is not None:
                deletes.append(key)
            logged.append((event, ChangeType.DELETED, key))
            continue
        row = Resource(
            resource_set=resource_set,
            location_type=event.location_type,
            location_value=event.location_value,
            uri=event.uri,
            length=event.length,
            md5=event.md5,
            sha256=event.sha256,
            mime=event.mime,
            lastmod=event.lastmod,
            ln=[link.as_json() for link in event.links],
            timestamp=received_at,
        )
        upserts.append(row)
        logged.append((event, ChangeType.UPDATED if key else ChangeType.CREATED, row))
    if deletes:
        Resource.objects.filter(pk__in=deletes).delete()
    if upserts:
        Resource.objects.bulk_create(
            upserts,
            update_conflicts=True,
            unique_fields=["resource_set", "uri"],
            update_fields=RESOURCE_UPDATE_FIELDS,
        )
    rows = []
    for event, applied, target in logged:
        rows.append(
            Change(
                resource_set=resource_set,
                resource_key=target.pk if isinstance(target, Resource) else target,
                change=applied,
                location_type=event.location_type,
                location_value=event.location_value,
                uri=event.uri,
                length=event.length,
                md5=event.md5,
                sha256=event.sha256,
                mime=event.mime,
                lastmod=event.lastmod,
                ln=[link.as_json() for link in event.links],
                # Receipt time, one microsecond apart in request order, so
                # change lists can split anywhere between two events.
                datetime=event.datetime or received_at + timedelta(microseconds=result.accepted),
                timestamp=received_at,
                event_id=event.id,
            )
        )
        setattr(result, applied, getattr(result, applied) + 1)
        result.accepted += 1
    Change.objects.bulk_create(rows)
    if result.first_change_id is None:
        result.first_change_id = rows[0].pk
    result.last_change_id = rows[-1].pk
