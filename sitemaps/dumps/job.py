"""What the dump steps of one regeneration run share, and how a package is written and stored."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import IO, TYPE_CHECKING, BinaryIO

from django.conf import settings
from django.db.models import QuerySet
from django.template.defaultfilters import filesizeformat
from django.utils import timezone

from sitemaps.models import DumpPackage, DumpState
from sitemaps.protocol.records import ChangeRecord, ResourceRecord
from sitemaps.storage import save_document
from sources.models import Change, Resource, ResourceSet

from .packaging import (
    BitstreamChanged,
    Item,
    Limits,
    Skipped,
    Written,
    reusable,
    write_package,
)
from .storage import open_stored, package_file, store_package
from .switch import DumpSwitch, recover

if TYPE_CHECKING:
    from sitemaps.regeneration import RegenerationRun

logger = logging.getLogger(__name__)

#: How many skipped resources a package row keeps (the count is always exact).
SKIPPED_KEPT = 200
#: Attempts at a package whose large files keep changing under the copy.
ATTEMPTS = 3
#: Resources looked up per query (SQLite takes a few thousand parameters at most).
LOOKUP_BATCH = 500


def readable_size(size: int) -> str:
    """'7.2 KB', '1.5 MB', as Django writes sizes (a plain space: this goes to logs too)."""
    return str(filesizeformat(size)).replace("\xa0", " ")


@dataclass
class DumpReport:
    """What the dump step of a run did, for the run's report, the admin and the logs."""

    packages_written: list[str] = field(default_factory=list)
    bytes_written: int = 0
    #: Bitstreams copied from a package's previous version, by package written.
    reused: dict[str, int] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    #: Change Dump versions left out because later changes had replaced their files.
    superseded: int = 0
    problem: str = ""

    def __str__(self) -> str:
        if self.problem:
            return f"dumps not built: {self.problem}"
        superseded = (
            f", {self.superseded} earlier version(s) replaced before the Change Dump took them"
            if self.superseded
            else ""
        )
        return (
            f"wrote {len(self.packages_written)} dump package(s) "
            f"({readable_size(self.bytes_written)}), {len(self.skipped)} resource(s) not packaged"
            f"{superseded}"
        )


class DumpJob:
    """The run's clock, generator and limits, as the dump writers need them."""

    def __init__(self, run: RegenerationRun) -> None:
        self.run = run
        self.resource_set = run.resource_set
        self.generator = run.generator
        self.at, self.now, self.full = run.at, run.now, run.full
        self.capabilities = run.capabilities
        self.capability_list_url = run.capability_list_url
        self.directory = run.directory
        self.watermark = run.watermark
        self.limits = Limits(
            entries=run.capabilities.entries_per_document,
            package_bytes=settings.RESOURCESYNC_DUMP_PACKAGE_BYTES,
            manifest_bytes=run.max_bytes,
        )
        self.compression = settings.RESOURCESYNC_DUMP_COMPRESSION
        self.state, _ = DumpState.objects.get_or_create(resource_set=self.resource_set)
        self.report = DumpReport()
        recover(self.resource_set)
        self.switch = DumpSwitch(self.resource_set, run.lease)

    def new_changes(self) -> QuerySet[Change]:
        """Changes the dumps do not reflect yet and the generator can already show."""
        return Change.objects.filter(
            resource_set=self.resource_set,
            id__gt=self.state.through_change_id,
            id__lte=self.watermark,
        )

    def complete_through(self, until: datetime) -> bool:
        return self.run.complete_through(until)

    def open_bitstream(self, record: ResourceRecord | ChangeRecord) -> BinaryIO:
        return self.generator.open_resource(self.resource_set, record)

    def progress(self) -> None:
        """A heartbeat between packages (it also stops a run that lost its lease)."""
        self.run.progress(remaining=0)

    def write(
        self,
        package: DumpPackage,
        items: list[Item],
        build_manifest: Callable[[list[Item]], bytes],
        *,
        reuse: Iterable[str] = (),
    ) -> Written:
        """Write and store one package (and its manifest copy) beside the served version;
        the run's switch serves it, with the dump documents that list it.

        `reuse`: storage names of the packages it replaces, whose checked
        bitstreams are copied instead of read again. When none of the items
        could be packaged, the package is written empty (`write_empty`).
        """
        with package_file(self.directory) as handle:
            written = self._write_attempts(handle, items, build_manifest, list(reuse))
            if not written.packaged:
                self.write_empty(package, skipped=written.skipped)
                self.progress()
                return written
            stored = store_package(handle, self.directory, package.public_name)
        manifest_name, manifest_etag = save_document(
            self.directory, package.manifest_public_name, written.manifest
        )
        self.switch.stage([stored.name, manifest_name])
        replaced = {package.storage_name, package.manifest_name}
        package.storage_name, package.etag, package.size = stored.name, stored.etag, stored.size
        package.md5, package.sha256 = stored.md5, stored.sha256
        package.manifest_name, package.manifest_etag = manifest_name, manifest_etag
        package.manifest_size = len(written.manifest)
        package.entries, package.generated_at = written.bitstreams, timezone.now()
        self.note_left_out(package, written.skipped)
        self.switch.save(package, replaced=replaced)
        self.record(package, stored.size, written)
        return written

    def write_empty(self, package: DumpPackage, skipped: list[Skipped] | None = None) -> None:
        """A package with nothing to hold has no ZIP (an empty manifest is not valid XML
        Sitemap): the row keeps its range, the dump does not list it. `skipped`: what it
        could not hold (every item left out), which the set's page still shows."""
        replaced = {package.storage_name, package.manifest_name}
        package.storage_name = package.etag = package.md5 = package.sha256 = ""
        package.manifest_name = package.manifest_etag = ""
        package.size = package.manifest_size = package.entries = 0
        package.generated_at = timezone.now()
        self.note_left_out(package, skipped or [])
        self.switch.save(package, replaced=replaced)

    def _write_attempts(
        self,
        handle: BinaryIO,
        items: list[Item],
        build_manifest: Callable[[list[Item]], bytes],
        reuse: list[str],
    ) -> Written:
        leave_out: frozenset[str] = frozenset()
        for _ in range(ATTEMPTS):
            handle.seek(0)
            handle.truncate()
            try:
                with reusable(_openers(reuse)) as previous:
                    return write_package(
                        handle,
                        items,
                        open_bitstream=self.open_bitstream,
                        build_manifest=build_manifest,
                        reuse=previous,
                        compression=self.compression,
                        manifest_time=self.now,
                        leave_out=leave_out,
                    )
            except BitstreamChanged as changed:
                leave_out |= {changed.item.path}
        raise RuntimeError(f"files kept changing while {len(leave_out)} were packaged")

    def record(self, package: DumpPackage, size: int, written: Written) -> None:
        self.report.packages_written.append(package.public_name)
        self.report.bytes_written += size
        self.report.reused[package.public_name] = written.reused
        self.progress()

    def note_left_out(self, package: DumpPackage, skipped: list[Skipped]) -> None:
        """Keep on the package (and report) what it could not hold: faults apart from
        earlier versions that later changes replaced, which need no mending."""
        gone = superseded_versions(self.resource_set, skipped)
        faults = [one for one in skipped if not _change_in(one, gone)]
        package.skipped = [vars_of(s) for s in faults[:SKIPPED_KEPT]]
        package.skipped_count = len(faults)
        package.superseded_count = len(skipped) - len(faults)
        self.report.skipped.extend(faults)
        self.report.superseded += package.superseded_count
        for one in faults[:10]:
            logger.warning("%s: %s not packaged: %s", self.resource_set, one.uri, one.reason)

    def remove(self, package: DumpPackage) -> None:
        """A package that is no longer needed: its row goes at the switch, its links after
        the dumps that listed it, its files are retired."""
        self.switch.remove(package)


def superseded_versions(resource_set: ResourceSet, skipped: list[Skipped]) -> set[int]:
    """Keys of the skipped changes whose resource has changed again since (its row gone,
    or holding other bytes): a later change overwrote or deleted their file before any
    package took it, and that change, not this one, says what the resource is now. Such
    a version is lost to the Change Dump for good, and it matters only to a destination
    that wants every version; a change whose resource still holds it is a file out of
    step with its latest record, a fault."""
    changes = [one.record for one in skipped if isinstance(one.record, ChangeRecord)]
    keys = sorted({change.resource_key for change in changes})
    now: dict[int, tuple[int | None, str, str]] = {}
    for start in range(0, len(keys), LOOKUP_BATCH):
        rows = Resource.objects.filter(
            resource_set=resource_set, pk__in=keys[start : start + LOOKUP_BATCH]
        ).values_list("pk", "length", "md5", "sha256")
        now.update((pk, _bytes_of(length, md5, sha256)) for pk, length, md5, sha256 in rows)
    return {
        change.key
        for change in changes
        if now.get(change.resource_key) != _bytes_of(change.length, change.md5, change.sha256)
    }


def _bytes_of(
    length: int | None, md5: str | None, sha256: str | None
) -> tuple[int | None, str, str]:
    return length, (md5 or "").lower(), (sha256 or "").lower()


def _change_in(skipped: Skipped, keys: set[int]) -> bool:
    return isinstance(skipped.record, ChangeRecord) and skipped.record.key in keys


def vars_of(skipped: Skipped) -> dict[str, str]:
    return {"uri": skipped.uri, "reason": skipped.reason}


def _openers(names: list[str]) -> list[Callable[[], IO[bytes]]]:
    """Openers of the stored packages to reuse bitstreams from."""
    return [partial(open_stored, name) for name in names if name]
