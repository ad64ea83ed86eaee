"""Pure planning of change notification payloads: records in, consecutive payloads out.

A payload has no index, so a large interval is sent as several payloads of
at most 50,000 entries (and 50 MB) each, cut where the `datetime` changes so
that consecutive payloads cover consecutive, non-overlapping intervals.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sitemaps.protocol.builders import build_change_notification, change_entry
from sitemaps.protocol.constants import MAX_DOCUMENT_BYTES, MAX_ENTRIES_PER_DOCUMENT
from sitemaps.protocol.records import ChangeRecord

ONE_MICROSECOND = timedelta(microseconds=1)
#: Room left in each payload for the XML declaration, the root and its links.
HEADER_ALLOWANCE = 4096

Sized = tuple[ChangeRecord, int]


@dataclass(frozen=True, slots=True)
class ChangePayload:
    content: bytes
    since: datetime
    until: datetime
    entries: int


def notification_interval(
    previous_until: datetime | None, earliest: datetime, latest: datetime
) -> tuple[datetime, datetime]:
    """[from, until] of the next payload for new changes dated `earliest`..`latest`.

    It starts just after the previous payload. A change dated at or before the
    previous `until` (a client sent an old `datetime`) pulls `from` back to it:
    the payload then overlaps the previous one rather than leave the change out.
    """
    since = earliest
    if previous_until is not None and earliest > previous_until:
        since = previous_until + ONE_MICROSECOND
    return since, max(latest, since)


def change_payloads(
    records: Iterable[ChangeRecord],
    *,
    since: datetime,
    until: datetime,
    capability_list_url: str | None = None,
    max_entries: int = MAX_ENTRIES_PER_DOCUMENT,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> list[ChangePayload]:
    """The payloads for every change in [since, until], oldest first (none without changes)."""
    chunks = split_chunks(records, max_entries=max_entries, max_bytes=max_bytes - HEADER_ALLOWANCE)
    payloads: list[ChangePayload] = []
    start = since
    for position, chunk in enumerate(chunks):
        last = position == len(chunks) - 1
        end = until if last else chunk[-1][0].datetime
        content = build_change_notification(
            (record for record, _ in chunk),
            since=start,
            until=end,
            capability_list_url=capability_list_url,
        )
        payloads.append(ChangePayload(content, start, end, len(chunk)))
        if not last:
            following = chunks[position + 1][0][0].datetime
            start = end + ONE_MICROSECOND if following > end else end
    return payloads


def split_chunks(
    records: Iterable[ChangeRecord], *, max_entries: int, max_bytes: int
) -> list[list[Sized]]:
    """Records in chunks under both limits, each cut after the last change of a `datetime`
    when it can be (a chunk of one single instant is cut where it is full)."""
    chunks: list[list[Sized]] = []
    current: list[Sized] = []
    size = 0
    for record in records:
        entry_size = len(change_entry(record))
        if current and (len(current) >= max_entries or size + entry_size > max_bytes):
            head, current = cut_at_instant(current)
            chunks.append(head)
            size = sum(item_size for _, item_size in current)
        current.append((record, entry_size))
        size += entry_size
    if current:
        chunks.append(current)
    return chunks


def cut_at_instant(chunk: list[Sized]) -> tuple[list[Sized], list[Sized]]:
    """Split a full chunk before its trailing run of changes sharing the last `datetime`."""
    last = chunk[-1][0].datetime
    position = len(chunk)
    while position > 0 and chunk[position - 1][0].datetime == last:
        position -= 1
    if position == 0:
        return chunk, []
    return chunk[:position], chunk[position:]
