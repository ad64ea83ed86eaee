"""A location's changes are dated in the order they are applied.

A Change List lists changes by datetime, and a destination applies them in
that order, keeping a location's last change. A change dated before an earlier
change of its location would be listed first, and the list would end with a
state the snapshot no longer has (a `deleted` listed after the `created` that
followed it). So ingestion refuses an event dated before its location's latest
change, and dates an undated one no earlier than it.

Only events dated before the set's latest change need a lookup, and that
lookup reads only the changes after them: the set's window index, from the
event's datetime on (never before the open Change List).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db.models import Max

from .models import Change


class LocationClock:
    """The latest change datetime of the locations one request touches, under the set's lock."""

    def __init__(self, resource_set_id: int) -> None:
        self.resource_set_id = resource_set_id
        changes = Change.objects.filter(resource_set_id=resource_set_id)
        self.set_latest: datetime | None = changes.aggregate(latest=Max("datetime"))["latest"]
        self.latest: dict[str, datetime] = {}

    def look_up(self, moments: Iterable[tuple[str, datetime]]) -> None:
        """Read the stored latest change of each location dated before the set's latest."""
        if self.set_latest is None:
            return
        newest = self.set_latest
        early = [(uri, at) for uri, at in moments if at < newest and uri not in self.latest]
        if not early:
            return
        since = min(moment for _, moment in early)
        later = Change.objects.filter(
            resource_set_id=self.resource_set_id,
            datetime__gt=since,
            uri__in={uri for uri, _ in early},
        )
        for row in later.values("uri").annotate(latest=Max("datetime")):
            self.latest[row["uri"]] = row["latest"]

    def earliest(self, uri: str) -> datetime | None:
        """The earliest datetime the location's next change may have (None: any)."""
        return self.latest.get(uri)

    def record(self, uri: str, moment: datetime) -> None:
        self.latest[uri] = moment
        if self.set_latest is None or moment > self.set_latest:
            self.set_latest = moment
