"""Choosing which changes an incremental run applies.

Rules (spec §4 and harvesting workflow 002): a document or package is read if
its [from, until] interval intersects the requested range (an open interval,
with no `until`, reaches the present); a change counts if its `datetime` lies
in the range, both ends inclusive; and only the latest change per resource is
applied. A change without `datetime` (allowed, as in the spec's Example 19)
cannot be placed in time: it counts, since its document is known to overlap
the range, and ranks by its position in the document.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from sitemaps.protocol.reader import ParsedEntry

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Change(Generic[S]):
    """A change entry with where it came from (a list URL, a package) and its position."""

    entry: ParsedEntry
    origin: S
    position: int

    @property
    def uri(self) -> str:
        """The resource changed."""
        return self.entry.loc

    @property
    def kind(self) -> str:
        """created, updated or deleted."""
        return self.entry.change or "updated"


def intersects(
    start: dt.datetime | None,
    end: dt.datetime | None,
    range_from: dt.datetime,
    range_until: dt.datetime,
) -> bool:
    """Whether [start, end] overlaps [range_from, range_until]; None means unbounded."""
    return (start is None or start <= range_until) and (end is None or end >= range_from)


def in_range(entry: ParsedEntry, range_from: dt.datetime, range_until: dt.datetime) -> bool:
    """Whether the change happened within the range, bounds included."""
    return entry.datetime is None or range_from <= entry.datetime <= range_until


def latest_changes(
    changes: Iterable[Change[S]], range_from: dt.datetime, range_until: dt.datetime
) -> list[Change[S]]:
    """The latest in-range change per resource, in the order those changes happened."""
    latest: dict[str, Change[S]] = {}
    for change in changes:
        if not in_range(change.entry, range_from, range_until):
            continue
        current = latest.get(change.uri)
        if current is None or _is_later(change, current):
            latest[change.uri] = change
    return sorted(latest.values(), key=lambda change: change.position)


def _is_later(candidate: Change[S], current: Change[S]) -> bool:
    first, second = candidate.entry.datetime, current.entry.datetime
    if first is not None and second is not None and first != second:
        return first > second
    return candidate.position > current.position
