"""`resourcedump.xml` and `changedump.xml`: a dump, or a dump index once it needs several.

They list every package with its length, hashes and a `contents` link to
the served copy of its manifest, and are rewritten whole whenever a package
changes (they hold one entry per package, so they stay small), once per run:
the run's switch (`switch`) serves them with the packages they describe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from django.utils import timezone

from sitemaps import links
from sitemaps.models import ChangePackage, DumpDocument, ResourcePackage
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
from sitemaps.storage import save_document
from sources.models import ResourceSet

from .job import DumpJob

RESOURCE_DUMP = DumpDocument.Kind.RESOURCE_DUMP
CHANGE_DUMP = DumpDocument.Kind.CHANGE_DUMP


def resource_dump_entry(resource_set: ResourceSet, package: ResourcePackage) -> ResourceDumpPackage:
    """The package's entry (the set given, not read again per package)."""
    kind, number = package.kind, package.number
    return ResourceDumpPackage(
        loc=links.package_url(resource_set, kind, number),
        length=package.size,
        md5=package.md5,
        sha256=package.sha256,
        at=package.at,
        completed=package.completed,
        manifest_url=links.manifest_url(resource_set, kind, number),
    )


def change_dump_entry(resource_set: ResourceSet, package: ChangePackage) -> ChangeDumpPackage:
    """The package's entry (the set given, not read again per package)."""
    kind, number = package.kind, package.number
    return ChangeDumpPackage(
        loc=links.package_url(resource_set, kind, number),
        length=package.size,
        md5=package.md5,
        sha256=package.sha256,
        since=package.since,
        until=package.until,
        manifest_url=links.manifest_url(resource_set, kind, number),
    )


def write_resource_dump(job: DumpJob, packages: Iterable[ResourcePackage]) -> None:
    entries = [
        resource_dump_entry(job.resource_set, package)
        for package in packages
        if package.storage_name
    ]
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

    _write(job, RESOURCE_DUMP, entries, dump, index)


def write_change_dump(job: DumpJob, packages: Iterable[ChangePackage]) -> None:
    packages = [package for package in packages if package.storage_name]  # not the empty ones
    entries = [change_dump_entry(job.resource_set, package) for package in packages]
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

    _write(job, CHANGE_DUMP, entries, dump, index)


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
    """Store the dump, or its parts and their index, for the run's switch, which also
    withdraws the parts no longer needed."""
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
    existing = {
        document.number: document
        for document in DumpDocument.objects.filter(resource_set=resource_set, kind=kind)
    }
    for number, content in sorted(contents.items(), reverse=True):  # parts before their index
        document = existing.pop(number, None) or DumpDocument(
            resource_set=resource_set, kind=kind, number=number
        )
        _store(job, document, content, entries=counts[number])
    for surplus in existing.values():
        job.switch.withdraw(surplus)


def _store(job: DumpJob, document: DumpDocument, content: bytes, *, entries: int) -> None:
    """Store the document's new version; the run's switch points its row at it."""
    name, etag = save_document(job.directory, document.public_name, content)
    replaced = document.storage_name
    document.storage_name, document.etag = name, etag
    document.entries, document.size, document.generated_at = entries, len(content), timezone.now()
    job.switch.write(document, replaced=replaced)
