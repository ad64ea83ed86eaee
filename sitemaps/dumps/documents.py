"""`resourcedump.xml` and `changedump.xml`: a dump, or a dump index once it needs several.

They list every package with its length, hashes and a `contents` link to
the served copy of its manifest, and are rewritten whole whenever a package
changes (they hold one entry per package, so they stay small). A package that
replaces a listed version is switched in the same transaction as a dump
already stored with it (`store_dump_with`), so the dump never describes
another version than its URL serves, whatever fails in between.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from django.utils import timezone

from sitemaps import links, publishing
from sitemaps.models import ChangePackage, DumpDocument, DumpPackage, ResourcePackage
from sitemaps.protocol.builders import (
    ChangeDumpPackage,
    ChangeListPart,
    ResourceDumpPackage,
    ResourceListPart,
    build_change_dump,
    build_change_dump_index,
    build_resource_dump,
    build_resource_dump_index,
)
from sitemaps.storage import delete_document, save_document

if TYPE_CHECKING:
    from .job import DumpJob

RESOURCE_DUMP = DumpDocument.Kind.RESOURCE_DUMP
CHANGE_DUMP = DumpDocument.Kind.CHANGE_DUMP
P = TypeVar("P", bound=DumpPackage)


def resource_dump_entry(package: ResourcePackage) -> ResourceDumpPackage:
    resource_set, kind, number = package.resource_set, package.kind, package.number
    return ResourceDumpPackage(
        loc=links.package_url(resource_set, kind, number),
        length=package.size,
        md5=package.md5,
        sha256=package.sha256,
        at=package.at,
        completed=package.completed,
        manifest_url=links.manifest_url(resource_set, kind, number),
    )


def change_dump_entry(package: ChangePackage) -> ChangeDumpPackage:
    resource_set, kind, number = package.resource_set, package.kind, package.number
    return ChangeDumpPackage(
        loc=links.package_url(resource_set, kind, number),
        length=package.size,
        md5=package.md5,
        sha256=package.sha256,
        since=package.since,
        until=package.until,
        manifest_url=links.manifest_url(resource_set, kind, number),
    )


@dataclass(frozen=True, slots=True)
class StoredDump:
    """A dump document's new version, stored; its row still names the previous one."""

    document: DumpDocument
    previous: str
    name: str
    etag: str
    size: int
    entries: int


def store_dump_with(job: DumpJob, package: DumpPackage) -> list[StoredDump]:
    """The package's dump as it is with this new version of `package` (saved with it).

    The dump gives each package's length and hashes, and the package's URL serves its
    row's version: a dump rewritten after the row would, if the disk filled in between
    (or a crash came), keep describing another version than the URL serves.
    """
    if isinstance(package, ResourcePackage):
        resources = ResourcePackage.objects.filter(resource_set=job.resource_set)
        return _store_all(job, RESOURCE_DUMP, *_resource_dump(job, _with(package, resources)))
    assert isinstance(package, ChangePackage)
    changes = ChangePackage.objects.filter(resource_set=job.resource_set)
    return _store_all(job, CHANGE_DUMP, *_change_dump(job, _with(package, changes)))


def _with(package: P, rows: Iterable[P]) -> list[P]:
    """`rows` with `package`, not yet saved, in place of its row."""
    return [package if row.pk == package.pk else row for row in rows]


def point_at(job: DumpJob, stored: list[StoredDump]) -> None:
    """Point the rows at their stored versions and publish them (in the run's `holding`)."""
    for version in stored:  # parts before their index
        document = version.document
        document.storage_name, document.etag = version.name, version.etag
        document.entries, document.size = version.entries, version.size
        document.generated_at = timezone.now()
        document.save()
        publishing.publish(job.resource_set, document)


def retire(stored: list[StoredDump]) -> None:
    """Retire the versions `point_at` replaced."""
    for version in stored:
        if version.previous and version.previous != version.name:
            delete_document(version.previous)


def write_resource_dump(job: DumpJob, packages: Iterable[ResourcePackage]) -> None:
    _write(job, RESOURCE_DUMP, *_resource_dump(job, packages))


def write_change_dump(job: DumpJob, packages: Iterable[ChangePackage]) -> None:
    _write(job, CHANGE_DUMP, *_change_dump(job, packages))


Parts = tuple[list, Callable[[list, str | None], bytes], Callable[[list[str]], bytes]]


def _resource_dump(job: DumpJob, packages: Iterable[ResourcePackage]) -> Parts:
    """The Resource Dump's entries and how its documents are built from them."""
    entries = [resource_dump_entry(package) for package in packages if package.storage_name]
    completed = timezone.now()

    def dump(chunk: list[ResourceDumpPackage], index_url: str | None) -> bytes:
        return build_resource_dump(
            chunk,
            at=job.at,
            completed=completed,
            capability_list_url=job.capability_list_url,
            index_url=index_url,
        )

    def index(urls: list[str]) -> bytes:
        parts = [ResourceListPart(loc=url, at=job.at, completed=completed) for url in urls]
        return build_resource_dump_index(
            parts, at=job.at, completed=completed, capability_list_url=job.capability_list_url
        )

    return entries, dump, index


def _change_dump(job: DumpJob, packages: Iterable[ChangePackage]) -> Parts:
    """The Change Dump's entries and how its documents are built from them."""
    packages = [package for package in packages if package.storage_name]  # not the empty ones
    entries = [change_dump_entry(package) for package in packages]
    since = min([package.since for package in packages], default=job.now)
    size = job.limits.entries
    parts = _chunks(packages, size)
    untils = {
        chunk[0].loc: _part_until(part, last=part is parts[-1])
        for chunk, part in zip(_chunks(entries, size), parts, strict=True)
        if chunk
    }

    def dump(chunk: list[ChangeDumpPackage], index_url: str | None) -> bytes:
        start = chunk[0].since if chunk and chunk[0].since else since
        end = untils[chunk[0].loc] if chunk and index_url else None
        return build_change_dump(
            chunk,
            since=start,
            until=end,
            capability_list_url=job.capability_list_url,
            index_url=index_url,
        )

    def index(urls: list[str]) -> bytes:
        chunks = _chunks(entries, size)
        parts = [
            ChangeListPart(loc=url, since=chunk[0].since or since, until=untils[chunk[0].loc])
            for url, chunk in zip(urls, chunks, strict=True)
        ]
        return build_change_dump_index(
            parts, since=since, capability_list_url=job.capability_list_url
        )

    return entries, dump, index


def _part_until(part: list[ChangePackage], *, last: bool) -> datetime | None:
    """A part's `until`, in the index and in the part alike. The last part is open: it
    stands for the windows to come (a rotation without changes closes its last package's
    window, not the part). A part before it, all final, is closed at its last package's
    `until` for good: final packages are never rewritten and new ones go to a later part.
    Closed while last, a part reopened with the next package and closed at another instant."""
    if last or not all(package.final and package.until for package in part):
        return None
    return part[-1].until


def _chunks(entries: list, size: int) -> list[list]:
    return [entries[start : start + size] for start in range(0, len(entries), size)] or [[]]


def _write(
    job: DumpJob,
    kind: str,
    entries: list,
    dump: Callable[[list, str | None], bytes],
    index: Callable[[list[str]], bytes],
) -> None:
    """Store the dump, or its parts and their index, and retire parts no longer needed."""
    resource_set = job.resource_set
    stored = _store_all(job, kind, entries, dump, index)
    with job.run.lease.holding():
        point_at(job, stored)
    retire(stored)
    numbers = [version.document.number for version in stored]
    for stale in DumpDocument.objects.filter(resource_set=resource_set, kind=kind).exclude(
        number__in=numbers
    ):
        publishing.withdraw(resource_set, stale)
        stale.delete()
        delete_document(stale.storage_name)


def _store_all(
    job: DumpJob,
    kind: str,
    entries: list,
    dump: Callable[[list, str | None], bytes],
    index: Callable[[list[str]], bytes],
) -> list[StoredDump]:
    """Store the dump's documents (parts before their index); no row points at them yet."""
    resource_set = job.resource_set
    chunks = _chunks(entries, job.limits.entries)
    contents: dict[int, bytes] = {}
    if len(chunks) == 1:
        contents[0] = dump(chunks[0], None)
    else:
        top = links.dump_url(resource_set, kind)
        urls = [links.dump_part_url(resource_set, kind, n) for n in range(1, len(chunks) + 1)]
        contents.update({n: dump(chunk, top) for n, chunk in enumerate(chunks, start=1)})
        contents[0] = index(urls)
    counts = {0: len(entries) if len(chunks) == 1 else len(chunks)}
    counts.update({n: len(chunk) for n, chunk in enumerate(chunks, start=1)})
    stored = []
    for number, content in sorted(contents.items(), reverse=True):  # parts before their index
        document, _ = DumpDocument.objects.get_or_create(
            resource_set=resource_set, kind=kind, number=number
        )
        name, etag = save_document(job.directory, document.public_name, content)
        stored.append(
            StoredDump(document, document.storage_name, name, etag, len(content), counts[number])
        )
    return stored
