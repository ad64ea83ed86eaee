"""Writes: apply the harvester's events to the snapshot and the change log.

A request is applied in one transaction, in batches, so memory stays flat
and nothing is half-applied. The commit is the acknowledgement; the
Elasticsearch mirror and document regeneration follow it, as receivers of
`sources.signals.events_ingested`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from sitemaps.protocol.constants import ChangeType

from .bulk import BulkWriter, keys_by_uri, known_event_ids
from .events import Event
from .models import Change, Resource, ResourceSet
from .ordering import LocationClock
from .signals import events_ingested

MAX_REPORTED_ERRORS = 100
#: `datetime` under another name, for ChangeRow, whose `datetime` field hides it.
Instant = datetime
#: The `ln` column: each link as `LinkData.as_json()` gives it.
StoredLinks = list[dict[str, object]]


class ResourceRow(NamedTuple):
    """A `Resource` row as ingestion writes it; field names are the model's (BulkWriter)."""

    resource_set: int
    uri: str
    location_type: str
    location_value: str
    length: int | None
    md5: str
    sha256: str
    mime: str
    lastmod: datetime | None
    ln: StoredLinks
    timestamp: datetime


class ChangeRow(NamedTuple):
    """A `Change` row as ingestion appends it; field names are the model's (BulkWriter)."""

    resource_set: int
    resource_key: int | None
    change: str
    location_type: str
    location_value: str
    uri: str
    length: int | None
    md5: str
    sha256: str
    mime: str
    lastmod: Instant | None
    ln: StoredLinks
    datetime: Instant
    timestamp: Instant
    event_id: str
    indexed: bool


@dataclass(frozen=True, slots=True)
class EventError:
    """Why one event was refused; `index` counts from 0 in request order."""

    index: int
    field: str
    message: str


#: An event and its position in the request (for the error that names it).
Indexed = tuple[int, Event]


class LocationsChanged(Exception):
    """The set's url_prefix or resource_root_dir changed after the events were resolved
    with the old ones: nothing was applied, and sent again they resolve with the new."""


class EventsRejected(Exception):
    """At least one event was invalid, so none was applied."""

    def __init__(self, errors: list[EventError]) -> None:
        super().__init__(f"{len(errors)} invalid event(s)")
        self.errors = errors


@dataclass(slots=True)
class IngestResult:
    received_at: datetime = field(repr=False)
    #: The datetime of the first undated event: receipt, or later (`ingest_events`).
    dated_from: datetime = field(repr=False)
    accepted: int = 0
    created: int = 0
    updated: int = 0
    deleted: int = 0
    duplicates: int = 0

    def counts(self) -> dict[str, int]:
        """The response body: how many events were accepted and how."""
        data = asdict(self)
        del data["received_at"], data["dated_from"]
        return data


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


def open_change_list_start(*, resource_set: ResourceSet) -> datetime | None:
    """Where the open Change List starts (call under the set's lock); None before the first.

    An earlier change would fall into a closed list, or before the first one,
    and never be published. Sets from before the start of the first list was
    recorded fall back to that list's row.
    """
    if resource_set.accepts_changes_since is not None:
        return resource_set.accepts_changes_since
    first = resource_set.change_list_pages.order_by("number").values_list("since", flat=True)
    return first.first()


def _check_locations(resource_set: ResourceSet) -> None:
    """Under the set's lock: the events were resolved with the set's current locations.

    Otherwise they would store URIs under a prefix the set just left, after
    `sources.re_resolve` moved every other row.
    """
    current = ResourceSet.objects.filter(pk=resource_set.pk).values_list(
        "url_prefix", "resource_root_dir"
    )
    if current.get() != (resource_set.url_prefix, resource_set.resource_root_dir):
        raise LocationsChanged(
            f"The url_prefix or resource_root_dir of {resource_set} changed while the "
            "events were applied; nothing was applied. Send them again."
        )


def _last_change_id(resource_set: ResourceSet) -> int:
    newest = Change.objects.filter(resource_set=resource_set).order_by("-id").values("id").first()
    return newest["id"] if newest else 0


def ingest_events(
    *,
    resource_set: ResourceSet,
    events: Iterable[Event | EventError],
    batch_size: int | None = None,
) -> IngestResult:
    """Apply events in order, all or nothing; raise EventsRejected on bad input.

    `events` may be a stream: invalid items (EventError) are collected and
    every remaining event is still checked, so the client gets all errors.
    After the commit, `events_ingested` tells who listens (indexing, regeneration).
    """
    with transaction.atomic():
        received_at = resource_set_lock(resource_set=resource_set)
        _check_locations(resource_set)
        since = open_change_list_start(resource_set=resource_set)
        # A list closed in the future (lists did, at a change dated within the
        # clock skew, before such changes were dated at receipt): a receipt time
        # never falls inside it.
        dated_from = max(received_at, since) if since else received_at
        result = IngestResult(received_at=received_at, dated_from=dated_from)
        ResourceSet.objects.filter(pk=resource_set.pk).update(changed_at=received_at)
        after_change_id = _last_change_id(resource_set)
        batch_size = batch_size or settings.INGEST_BATCH_SIZE
        clock = LocationClock(resource_set.pk)
        errors = _apply_in_batches(resource_set, events, since, result, batch_size, clock)
        if errors:
            raise EventsRejected(errors)
        if result.accepted:
            _announce(resource_set, after_change_id)
    return result


def _apply_in_batches(
    resource_set: ResourceSet,
    events: Iterable[Event | EventError],
    since: datetime | None,
    result: IngestResult,
    batch_size: int,
    clock: LocationClock,
) -> list[EventError]:
    """Apply until the first error, then only collect errors; return them."""
    errors: list[EventError] = []
    seen_ids: set[str] = set()
    batch: list[Indexed] = []
    for index, item in enumerate(events):
        error = item if isinstance(item, EventError) else _before(item, since, result, index)
        if error is not None:
            errors.append(error)
            if len(errors) >= MAX_REPORTED_ERRORS:
                break
            continue
        if errors or not isinstance(item, Event):
            continue
        if item.id:
            if item.id in seen_ids:
                result.duplicates += 1
                continue
            seen_ids.add(item.id)
        batch.append((index, item))
        if len(batch) >= batch_size:
            _apply_batch(resource_set, batch, result, clock)
            batch = []
    if batch and not errors:
        _apply_batch(resource_set, batch, result, clock)
    return errors


def _before(
    event: Event, since: datetime | None, result: IngestResult, index: int
) -> EventError | None:
    """An error if the event is dated before the open Change List (and not at receipt)."""
    moment = _sent_datetime(event, result)
    if moment is None or since is None or moment >= since:
        return None
    message = (
        f"is before {since.isoformat()}, when the open change list starts; "
        "closed change lists cannot change."
    )
    return EventError(index, "datetime", message)


def _announce(resource_set: ResourceSet, after_change_id: int) -> None:
    """Send `events_ingested` once the transaction commits; a failing receiver is logged."""
    set_id, last_change_id = resource_set.pk, _last_change_id(resource_set)

    def send() -> None:
        events_ingested.send_robust(
            sender=ResourceSet,
            resource_set_id=set_id,
            after_change_id=after_change_id,
            last_change_id=last_change_id,
        )

    transaction.on_commit(send)


def _apply_batch(
    resource_set: ResourceSet, events: list[Indexed], result: IngestResult, clock: LocationClock
) -> None:
    ids = [event.id for _, event in events if event.id]
    if ids:
        known = known_event_ids(resource_set.pk, ids)
        if known:
            result.duplicates += sum(1 for _, event in events if event.id in known)
            events = [(index, event) for index, event in events if event.id not in known]
    # Each segment touches a URI at most once, so its writes are independent.
    segment: list[Indexed] = []
    uris: set[str] = set()
    for index, event in events:
        if event.uri in uris:
            _apply_segment(resource_set, segment, result, clock)
            segment, uris = [], set()
        segment.append((index, event))
        uris.add(event.uri)
    if segment:
        _apply_segment(resource_set, segment, result, clock)


def _moments(events: list[Indexed], result: IngestResult, clock: LocationClock) -> list[datetime]:
    """Each event's datetime (sources.ordering): its own, or its receipt time, one
    microsecond apart in request order (so Change Lists can split between two events).

    Dated at receipt: an undated event; one dated at or past its receipt (the sender's
    clock runs fast: kept, a list would close in the future); and one dated before the
    set's latest change (kept, destinations that already read past it would miss it).
    No event is dated before the set's latest change, nor before an earlier event of its
    location in the request (one its sender dated so is refused).
    """
    moments: list[datetime] = []
    for position, (index, event) in enumerate(events):
        own = _kept_datetime(event, result, clock)
        moment = own or result.dated_from + timedelta(microseconds=result.accepted + position)
        if own is None and clock.committed is not None:  # a receipt behind a change dated
            moment = max(moment, clock.committed)  # ahead (older versions kept those)
        earliest = clock.earliest(event.uri)
        if earliest is not None and moment < earliest:
            if own is not None:
                raise EventsRejected([_out_of_order(index, earliest)])
            moment = earliest
        clock.record(event.uri, moment)
        moments.append(moment)
    return moments


def _kept_datetime(event: Event, result: IngestResult, clock: LocationClock) -> datetime | None:
    """The event's own datetime, or None where it is dated at receipt (`_moments`)."""
    own = _sent_datetime(event, result)
    if own is None or (clock.committed is not None and own < clock.committed):
        return None
    return own


def _sent_datetime(event: Event, result: IngestResult) -> datetime | None:
    """The datetime the sender gave, unless none or one at or past the receipt (its clock
    runs fast): both are dated at receipt."""
    own = event.datetime
    return None if own is None or own >= result.received_at else own


def _out_of_order(index: int, earliest: datetime) -> EventError:
    message = (
        f"is before {earliest.isoformat()}, the datetime of this location's latest change; "
        "a location's changes must be dated in the order they happen."
    )
    return EventError(index, "datetime", message)


#: An update finds its row by (set, URI), so it never changes either.
_resources = BulkWriter(Resource, ResourceRow, fixed=("resource_set", "uri"))
_changes = BulkWriter(Change, ChangeRow)


def _keys(resource_set: ResourceSet, uris: list[str]) -> dict[str, int]:
    return keys_by_uri(resource_set.pk, uris)


def _links(event: Event) -> StoredLinks:
    return [link.as_json() for link in event.links]


def _resource_row(set_id: int, event: Event, ln: StoredLinks, received_at: datetime) -> ResourceRow:
    return ResourceRow(
        resource_set=set_id,
        uri=event.uri,
        location_type=event.location_type,
        location_value=event.location_value,
        length=event.length,
        md5=event.md5,
        sha256=event.sha256,
        mime=event.mime,
        lastmod=event.lastmod,
        ln=ln,
        timestamp=received_at,
    )


def _change_row(
    set_id: int,
    event: Event,
    applied: str,
    key: int | None,
    ln: StoredLinks,
    moment: datetime,
    received_at: datetime,
) -> ChangeRow:
    return ChangeRow(
        resource_set=set_id,
        resource_key=key,
        change=applied,
        location_type=event.location_type,
        location_value=event.location_value,
        uri=event.uri,
        length=event.length,
        md5=event.md5,
        sha256=event.sha256,
        mime=event.mime,
        lastmod=event.lastmod,
        ln=ln,
        datetime=moment,
        timestamp=received_at,
        event_id=event.id,
        indexed=False,
    )


def _apply_segment(
    resource_set: ResourceSet, indexed: list[Indexed], result: IngestResult, clock: LocationClock
) -> None:
    """Apply events that each touch a different URI: a few statements in all."""
    moments = _moments(indexed, result, clock)
    events = [event for _, event in indexed]
    set_id, received_at = resource_set.pk, result.received_at
    existing = _keys(resource_set, [event.uri for event in events])
    inserts: list[ResourceRow] = []
    updates: list[ResourceRow] = []
    update_keys: list[int] = []
    deletes: list[int] = []
    applied_types = []
    links = [_links(event) for event in events]  # shared by the resource and the change row
    for event, ln in zip(events, links, strict=True):
        key = existing.get(event.uri)
        if event.change == ChangeType.DELETED:
            applied_types.append(ChangeType.DELETED)
            if key is not None:
                deletes.append(key)
        elif key is None:
            applied_types.append(ChangeType.CREATED)
            inserts.append(_resource_row(set_id, event, ln, received_at))
        else:
            applied_types.append(ChangeType.UPDATED)
            updates.append(_resource_row(set_id, event, ln, received_at))
            update_keys.append(key)
    if deletes:
        Resource.objects.filter(pk__in=deletes).delete()
    _resources.update(updates, update_keys)
    _resources.insert(inserts)
    if inserts:
        existing.update(_keys(resource_set, [row.uri for row in inserts]))
    rows = []
    for event, applied, ln, moment in zip(events, applied_types, links, moments, strict=True):
        key = existing.get(event.uri)
        rows.append(_change_row(set_id, event, applied, key, ln, moment, received_at))
        setattr(result, applied, getattr(result, applied) + 1)
        result.accepted += 1
    _changes.insert(rows)
