"""The open Change List's next version: its previous version plus the changes after it.

Changes are appended to the log, nearly always in datetime order, so a run
usually finds the open list's previous version followed by a few new entries.
Rather than read and render every change of the list again, the previous
version's entries are kept as bytes (the one writer wrote them) and only the
changes after its last entry are read and rendered. That is done only when it
gives the bytes a full rewrite would, so the run rewrites the list instead when:

- the previous version is missing, unreadable, or not the row's (size, hash),
  or was written before its append base was recorded (older code);
- the set's URIs were resolved with another url_prefix or resource_root_dir
  since (`sources.re_resolve` moves the open list's rows in place), or the
  previous version holds a row read past its run's watermark (a mirror may
  have shown it as it was before the move);
- the change log's rows of the list, up to the greatest id in the result,
  outnumber its entries: a change that sorts before the last entry (an event
  dated earlier) or that the mirror did not show last time;
- the list reaches a limit (the rewrite closes it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import QuerySet

from sitemaps.protocol.builders import DocumentPage, append_change_list, change_list_entries
from sitemaps.protocol.records import ChangeRecord
from sources.models import Change, ResourceSet

from .models import ChangeListPage
from .storage import content_etag, document_storage

if TYPE_CHECKING:
    from .regeneration import RegenerationRun


class KeyTracker:
    """Change records passed through as they are, noting the greatest key, and the
    first and the latest datetimes read (after a full page, the latest is the first
    change that did not fit)."""

    def __init__(self, records: Iterable[ChangeRecord], max_key: int | None = None) -> None:
        self.records = records
        self.max_key = max_key
        self.first_datetime: datetime | None = None
        self.latest_datetime: datetime | None = None

    def __iter__(self) -> Iterator[ChangeRecord]:
        for record in self.records:
            if self.max_key is None or record.key > self.max_key:
                self.max_key = record.key
            if self.first_datetime is None:
                self.first_datetime = record.datetime
            self.latest_datetime = record.datetime
            yield record


@dataclass(frozen=True)
class BuiltChangeList:
    """A Change List version and its append base: its last entry and greatest change id."""

    page: DocumentPage[ChangeRecord]
    last_key: int | None
    last_datetime: datetime | None
    max_key: int | None
    #: Of the records read for it: the first's datetime and the latest's.
    first_read: datetime | None = None
    latest_read: datetime | None = None

    @classmethod
    def of(
        cls, page: DocumentPage[ChangeRecord], tracker: KeyTracker, previous: ChangeListPage
    ) -> BuiltChangeList:
        """The version `page`; with no record of its own, its last entry is `previous`'s."""
        last = page.last_record
        read = (tracker.first_datetime, tracker.latest_datetime)
        if last is None:
            return cls(page, previous.last_key, previous.last_datetime, tracker.max_key, *read)
        return cls(page, last.key, last.datetime, tracker.max_key, *read)


#: Bump when `change_entry` renders an entry differently: open lists written
#: before then are rewritten once instead of keeping old-format entries.
ENTRY_FORMAT = "1"


def resolved_with(resource_set: ResourceSet) -> str:
    """A digest of what the kept entries depend on: the entry format, and the
    url_prefix and resource_root_dir the set's URIs are resolved with now."""
    current = ResourceSet.objects.filter(pk=resource_set.pk).values_list(
        "url_prefix", "resource_root_dir"
    )
    url_prefix, root = current.get()
    return hashlib.sha256(f"{ENTRY_FORMAT}\n{url_prefix}\n{root}".encode()).hexdigest()[:32]


def append(
    run: RegenerationRun, page: ChangeListPage, index_url: str | None
) -> BuiltChangeList | None:
    """The open list `page` grown by the changes after its last entry; None: rewrite it."""
    kept = previous_entries(page, run.resolved_with)
    if kept is None or page.last_datetime is None or page.last_key is None:
        return None
    tail = KeyTracker(
        run.visible_changes(page.since, page.until, (page.last_datetime, page.last_key)),
        page.max_key,
    )
    result = append_change_list(
        kept,
        page.entries,
        tail,
        since=page.since,
        last=page.last_datetime,
        capability_list_url=run.capability_list_url,
        index_url=index_url,
        max_entries=run.capabilities.entries_per_document,
        max_bytes=run.max_bytes,
    )
    if result is None or result.has_more or tail.max_key is None:
        return None
    through = max(tail.max_key, run.watermark)
    if not holds_every_change(run.resource_set, page, through, result.entries):
        return None
    return BuiltChangeList.of(result, tail, page)


def previous_entries(page: ChangeListPage, resolved: str) -> bytes | None:
    """The entries of the open list's stored version, when a version may grow from them."""
    appendable = (
        page.until is None
        and page.entries > 0
        and page.storage_name
        and page.last_key is not None
        and page.max_key is not None
        and page.resolved_with == resolved
    )
    if not appendable:
        return None
    try:
        with document_storage().open(page.storage_name, "rb") as handle:
            content = handle.read()
    except OSError:
        return None
    if len(content) != page.size or content_etag(content) != page.etag:
        return None
    try:
        return change_list_entries(content)
    except ValueError:
        return None


def holds_every_change(
    resource_set: ResourceSet, page: ChangeListPage, through: int, entries: int
) -> bool:
    """Whether `entries` is the number of the log's changes in the open list's window
    with ids up to `through`.

    The version holds `entries` distinct changes, all among those (its ids are
    at most `through`), so equal counts mean it holds every one of them.
    """
    return changes_from_start(resource_set, page).filter(id__lte=through).count() == entries


def changes_from_start(resource_set: ResourceSet, page: ChangeListPage) -> QuerySet[Change]:
    """The log's changes from the list's start on (after `since_key` at its first instant)."""
    window = Change.objects.filter(resource_set=resource_set, datetime__gte=page.since)
    if page.since_key is not None:
        window = window.exclude(datetime=page.since, id__lte=page.since_key)
    return window
