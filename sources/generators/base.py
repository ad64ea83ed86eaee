"""The generator interface: where ResourceSync entries come from.

A generator yields the rows a document needs, in a stable key order, so the
document layer can page with keysets and never with OFFSET. Backends differ
only in where they read (the database, Elasticsearch, a folder); they must
yield identical records for the same data.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar

from sitemaps.protocol.records import ChangeRecord, ResourceRecord

if TYPE_CHECKING:
    from sources.models import ResourceSet

#: Records fetched per round trip; large enough to amortise, small enough to stream.
DEFAULT_BATCH_SIZE = 5000


class ResourceUnreadable(Exception):
    """The portal cannot read a resource's bytes (for a dump); the message says why."""


class BaseGenerator:
    """Base class of every generator backend; hooks state their contract."""

    #: Short name used in settings and in the admin.
    name: ClassVar[str] = "base"
    #: True when the backend reads a mirror that lags the database (documents
    #: then wait until changes are indexed, so no page is written stale).
    reads_mirror: ClassVar[bool] = False

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        self.params = params or {}

    def iter_resources(
        self,
        resource_set: ResourceSet,
        *,
        after: int | None = None,
        through: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ResourceRecord]:
        """Yield the set's resources by ascending key, keys in (after, through]."""
        raise NotImplementedError

    def iter_changes(
        self,
        resource_set: ResourceSet,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        after: tuple[dt.datetime, int] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ChangeRecord]:
        """Yield changes with since <= datetime <= until, oldest first.

        Order is (datetime, key); `after` resumes strictly after that pair.
        """
        raise NotImplementedError

    def count_resources(self, resource_set: ResourceSet) -> int:
        """How many resources the set holds now."""
        raise NotImplementedError

    def count_changes(
        self,
        resource_set: ResourceSet,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
    ) -> int:
        """How many changes fall in [since, until]."""
        raise NotImplementedError

    def last_changed(self, resource_set: ResourceSet) -> dt.datetime | None:
        """The datetime of the set's newest change, or None if it has none."""
        raise NotImplementedError

    def open_resource(
        self, resource_set: ResourceSet, record: ResourceRecord | ChangeRecord
    ) -> BinaryIO:
        """Open the bytes of a resource (or of a change's resource) for a dump package.

        The default reads the file its URI names under the set's
        resource_root_dir; raises ResourceUnreadable when there is none. The
        caller checks the bytes against the record.
        """
        from sources.resource_files import open_resource_file

        return open_resource_file(resource_set, record.uri)
