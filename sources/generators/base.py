"""The generator interface: where ResourceSync entries come from.

A generator yields the rows a document needs, in a stable key order, so the
document layer can page with keysets and never with OFFSET. Backends differ
only in where they read (the database, Elasticsearch, a folder); they must
yield identical records for the same data.

A backend that reads a copy of the database also keeps that copy: its write
hooks (index, reconcile, how far it can see) do nothing here, so callers
never ask which backend is active.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, BinaryIO, ClassVar

from django.core.exceptions import ImproperlyConfigured

from sitemaps.protocol.records import ChangeRecord, ResourceBatch, ResourceRecord, record_batches

if TYPE_CHECKING:
    from sources.models import ResourceSet

#: Records fetched per round trip; large enough to amortise, small enough to stream.
DEFAULT_BATCH_SIZE = 5000


@dataclass
class ReconcileReport:
    """What `reconcile` found missing or stale in a backend's copy, and fixed."""

    changes_indexed: int = 0
    resources_indexed: int = 0
    resources_removed: int = 0
    changes_removed: int = 0
    changes_reindexed: int = 0
    sets: list[str] = field(default_factory=list)
    #: Said instead of the figures when the backend keeps no copy at all.
    note: str = ""

    def __str__(self) -> str:
        if self.note:
            return self.note
        return (
            f"indexed {self.changes_indexed} pending change(s); "
            f"re-indexed {self.resources_indexed} resource(s) and "
            f"{self.changes_reindexed} change(s); removed {self.resources_removed} stale "
            f"resource(s) and {self.changes_removed} stale change(s)"
        )


class ResourceUnreadable(Exception):
    """The portal cannot read a resource's bytes (for a dump); the message says why."""


class BaseGenerator:
    """Base class of every generator backend; hooks state their contract.

    Read hooks must be implemented. Write hooks do nothing by default: right
    for a backend that reads the database rows themselves.
    """

    #: Short name used in settings and in the admin.
    name: ClassVar[str] = "base"

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        """Take the options of the backend's settings entry; a subclass pops its own first."""
        unknown = sorted(params or {})
        if unknown:
            raise ImproperlyConfigured(f"{type(self).__name__} has no option {', '.join(unknown)}.")

    # Write side: how the backend keeps up with the database.

    def needs_indexing(self, resource_set_id: int) -> bool:
        """Whether committed changes of the set wait for `index_pending`; none by default."""
        return False

    def index_pending(self, resource_set_id: int | None = None) -> int:
        """Make committed changes (of one set, or all) visible to this backend; how many.

        A run that leaves a set to another run holding it sends
        `sources.signals.indexing_turned_away`, so that a later one follows.
        """
        return 0

    def reconcile(self, resource_sets: Iterable[ResourceSet] | None = None) -> ReconcileReport:
        """Repair what the backend's copy lost or kept too long; say what was fixed."""
        return ReconcileReport(note=f"nothing to do, the {self.name} generator keeps no copy")

    def rebuild(self) -> str:
        """Rebuild the backend's copy with its current mappings, without downtime; say what."""
        return f"nothing to rebuild, the {self.name} generator keeps no copy"

    def check_copy(self, timeout: float) -> bool:
        """Raise if the copy the backend keeps is down or unhealthy; False if it keeps none."""
        return False

    def unavailable(self, timeout: float = 5.0) -> str | None:
        """Why the copy the backend keeps cannot be used now (no answer within `timeout`
        seconds), naming it and where, in one line for an operator; None when it can, or
        when the backend keeps none."""
        return None

    def visible_through(self, resource_set: ResourceSet) -> int:
        """The highest change id this backend shows, with every change before it."""
        from django.db.models import Max

        from sources.models import Change

        changes = Change.objects.filter(resource_set=resource_set)
        return changes.aggregate(newest=Max("id"))["newest"] or 0

    # Read side: what documents are built from.

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

    def iter_resource_batches(
        self,
        resource_set: ResourceSet,
        *,
        after: int | None = None,
        through: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ResourceBatch]:
        """`iter_resources` in batches, for Resource Lists; columns where the backend reads them.

        The default batches the records and gives no columns: the writer then
        writes them one by one.
        """
        records = self.iter_resources(
            resource_set, after=after, through=through, batch_size=batch_size
        )
        return record_batches(records, batch_size)

    def iter_changes(
        self,
        resource_set: ResourceSet,
        *,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        after: tuple[dt.datetime, int] | None = None,
        through: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ChangeRecord]:
        """Yield changes with since <= datetime <= until, oldest first.

        Order is (datetime, key); `after` resumes strictly after that pair;
        `through`: only changes whose key is at most that.
        """
        raise NotImplementedError

    def count_resources(self, resource_set: ResourceSet) -> int:
        """How many resources the set holds now."""
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
        from sources.resource_files import open_resource_file, under_prefix_uri

        return open_resource_file(resource_set, under_prefix_uri(resource_set, record))
