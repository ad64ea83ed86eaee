"""Changes are dated in the order they are applied.

A Change List lists changes by datetime, and a destination applies them in
that order, keeping a location's last change, then resumes from the newest
datetime it applied (resync does, and so does the portal's own harvester). So
no change may be dated before one a destination could already have read: an
event dated before the set's latest change (committed by an earlier request)
is dated at its receipt instead, and would otherwise be listed among changes
already published, where a resuming destination never looks.

Within one request, whose changes are committed (and published) together, an
event keeps its own datetime unless that puts it before an earlier event of
its location in the same request: the list would then end with a state the
snapshot does not have (a `deleted` listed after the `created` that followed
it), so such an event is refused, and an undated one is dated no earlier.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Max

from .models import Change


class LocationClock:
    """What one request's datetimes are checked against, read under the set's lock."""

    def __init__(self, resource_set_id: int) -> None:
        changes = Change.objects.filter(resource_set_id=resource_set_id)
        #: The newest change before this request: every change it makes is dated no earlier.
        self.committed: datetime | None = changes.aggregate(latest=Max("datetime"))["latest"]
        self.latest: dict[str, datetime] = {}

    def earliest(self, uri: str) -> datetime | None:
        """The earliest datetime the location's next change in this request may have."""
        return self.latest.get(uri)

    def record(self, uri: str, moment: datetime) -> None:
        self.latest[uri] = moment
