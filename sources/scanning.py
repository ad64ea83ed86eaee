"""Scan a set's folder and record what changed through the ingestion service.

The folder generator (`sources.generators.filesystem`) says what differs
between `resource_root_dir` and the set's Resource rows; the events go to
`ingest_events`, the same service the API uses, in batches of their own
transactions, so a long first scan never holds the set's write lock for long
and a scan cut short is completed by the next one. The set's state is read
once per scan (URI, length, lastmod), for the resources under `url_prefix`:
resources posted elsewhere are neither compared nor deleted.
"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from django.conf import settings
from django.core.cache import cache
from django.db import connection

from journal.models import RunKind
from journal.recording import record_run

from .bulk import concrete_field
from .events import Event
from .generators.filesystem import (
    FolderComparison,
    KnownResource,
    Skipped,
    epoch_microseconds,
    walk_folder,
)
from .models import Resource, ResourceSet
from .services import EventsRejected, LocationsChanged, ingest_events

logger = logging.getLogger(__name__)

_STATE_COLUMNS = ("resource_set", "uri", "length", "lastmod", "location_type", "location_value")
#: Events per ingestion transaction.
SCAN_BATCH_SIZE = 5000
#: A scheduled scan holds its set this long at most (a crashed worker lets go then).
SCAN_LOCK_SECONDS = 3600


class ScanError(Exception):
    """The set cannot be scanned; the message says why."""


@dataclass
class ScanReport:
    created: int = 0
    updated: int = 0
    deleted: int = 0
    unchanged: int = 0
    hashed: int = 0
    bytes_hashed: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    seconds: float = 0.0

    def __str__(self) -> str:
        return (
            f"{self.created} created, {self.updated} updated, {self.deleted} deleted, "
            f"{self.unchanged} unchanged; read {self.hashed} file(s) "
            f"({self.bytes_hashed} bytes); {len(self.skipped)} skipped; {self.seconds:.2f}s"
        )


def known_state(resource_set: ResourceSet) -> dict[str, KnownResource]:
    """The recorded state of the set's resources the folder can hold, by URI.

    One raw query, lastmod read as microseconds since the epoch: a rescan of a
    million files is mostly this read and the walk, and a datetime per row (the
    ORM's converter, or parsing) would cost more than the walk.
    """
    quote = connection.ops.quote_name
    column = {name: quote(concrete_field(Resource, name).column) for name in _STATE_COLUMNS}
    lastmod_us = _epoch_microseconds_sql(column["lastmod"])
    sql = (
        f"SELECT {column['uri']}, {column['length']}, {lastmod_us or column['lastmod']}, "  # noqa: S608
        f"{column['location_type']}, {column['location_value']} "
        f"FROM {quote(Resource._meta.db_table)} "
        f"WHERE {column['resource_set']} = %s"
    )
    prefix = resource_set.url_prefix.rstrip("/") + "/"
    known: dict[str, KnownResource] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [resource_set.pk])
        while rows := cursor.fetchmany(10_000):
            known.update((row[0], row) for row in rows if row[0].startswith(prefix))
    if not lastmod_us:  # another database: its datetimes, converted here
        for uri, (_, length, moment, location_type, location_value) in known.items():
            lastmod = epoch_microseconds(moment)  # type: ignore[arg-type]
            known[uri] = (uri, length, lastmod, location_type, location_value)
    return known


def _epoch_microseconds_sql(column: str) -> str:
    """SQL for a lastmod column as integer microseconds since the epoch; "" if unknown here."""
    if connection.vendor == "postgresql":
        return f"(EXTRACT(EPOCH FROM {column}) * 1000000)::bigint"
    if connection.vendor == "sqlite":  # naive UTC text "YYYY-MM-DD HH:MM:SS[.ffffff]"
        # The seconds without the fraction (strftime rounds to milliseconds: .9999 would
        # count as the next second); %% escapes the placeholder.
        seconds = f"CAST(strftime('%%s', substr({column}, 1, 19)) AS INTEGER)"
        return f"({seconds} * 1000000 + CAST(substr({column} || '000000', 21, 6) AS INTEGER))"
    return ""


def _batches(events: Iterable[Event], size: int) -> Iterator[list[Event]]:
    iterator = iter(events)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _ingest(resource_set: ResourceSet, events: Iterable[Event], report: ScanReport) -> None:
    for batch in _batches(events, SCAN_BATCH_SIZE):
        try:
            result = ingest_events(resource_set=resource_set, events=batch)
        except EventsRejected as error:
            details = "; ".join(f"{e.field}: {e.message}" for e in error.errors[:5])
            raise ScanError(f"{resource_set}: the events were refused: {details}") from error
        except LocationsChanged as error:
            raise ScanError(
                f"{resource_set}: its url_prefix or resource_root_dir changed during the scan; "
                "the batches before this one were applied: scan again to record the rest"
            ) from error
        report.created += result.created
        report.updated += result.updated
        report.deleted += result.deleted


def scan_folder(*, resource_set: ResourceSet) -> ScanReport:
    """Record what differs between the set's folder and its resources; report it.

    The one place a scan runs (the command, `--watch` and the beat task), so the
    journal records every scan here.
    """
    with record_run(kind=RunKind.SCAN, resource_set=resource_set) as journal:
        report = _scan(resource_set)
        journal.count(events=report.created + report.updated + report.deleted)
        journal.detail = {"report": str(report)}
    return report


def _scan(resource_set: ResourceSet) -> ScanReport:
    started = time.monotonic()
    root = resource_set.resource_root_dir
    if not root or not os.path.isdir(root):
        raise ScanError(f"{resource_set}: resource_root_dir {root!r} is not a folder")
    known = known_state(resource_set)
    comparison = FolderComparison(known)
    report = ScanReport()
    walker = walk_folder(root, resource_set.url_prefix, comparison.files)
    # Deletions are known once the walk is done: chained, a rescan's few events are one batch.
    events = itertools.chain(comparison.changes(walker), comparison.deletions())
    _ingest(resource_set, events, report)
    report.unchanged = comparison.unchanged
    report.hashed, report.bytes_hashed = comparison.hashed, comparison.bytes_hashed
    report.skipped = comparison.skipped
    report.seconds = time.monotonic() - started
    for item in report.skipped:
        logger.warning("%s: skipped %s: %s", resource_set, item.rel_path, item.reason)
    logger.info("Scanned %s: %s", resource_set, report)
    return report


def scan_listed_sets() -> str:
    """Scan each `provider/set` of RESOURCESYNC_SCAN_SETS, skipping one a scan still holds."""
    lines = []
    for path in settings.RESOURCESYNC_SCAN_SETS:
        provider, _, slug = path.partition("/")
        resource_set = ResourceSet.objects.filter(provider__slug=provider, slug=slug).first()
        if resource_set is None:
            lines.append(f"{path}: no such set")
            continue
        lock = f"resourcesync:scan:{resource_set.pk}"
        if not cache.add(lock, "held", timeout=SCAN_LOCK_SECONDS):
            lines.append(f"{path}: a scan is still running")
            continue
        try:
            lines.append(f"{path}: {scan_folder(resource_set=resource_set)}")
        except ScanError as error:
            lines.append(str(error))
        finally:
            cache.delete(lock)
    return "\n".join(lines)
