"""Pure builders: records and URLs in, ResourceSync document bytes out.

Nothing here queries a database or reads settings; every URL arrives as an
argument, so the same rows always give the same bytes and the builders can be
tested without Django. All XML goes through `sitemaps.protocol.writer`.

Large documents (Resource Lists, Change Lists, manifests) fill one page at a
time under both sitemap limits and report where they stopped, so the caller
can start the next page from that record's key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from io import BytesIO
from typing import Generic, TypeVar

from sitemaps.protocol.constants import (
    MAX_DOCUMENT_BYTES,
    MAX_ENTRIES_PER_DOCUMENT,
    Capability,
    ChangeType,
    w3c_datetime,
)
from sitemaps.protocol.records import (
    ChangeRecord,
    Link,
    ResourceBatch,
    ResourceRecord,
    batched,
)
from sitemaps.protocol.writer import (
    Attributes,
    DocumentWriter,
    Entry,
    hash_value,
    render_document,
    resource_url,
    resource_urls,
)

RecordT = TypeVar("RecordT")
#: A streamed page reaches its output in chunks of about this size: small beside
#: a 15 MB page, large enough that writing, hashing and compressing them cost
#: no more than doing it once, and below glibc's mmap threshold (128 KiB,
#: `forking.map_large_buffers`), so the buffer is reused from the heap: at 256 KiB
#: each chunk was mapped anew and faulted in, 120,000 of a full run's 130,000
#: minor faults at 1,000,000 (bench/README.md).
STREAM_CHUNK_BYTES = 64 * 1024

_CHANGES = frozenset(ChangeType)
_URLSET = DocumentWriter("urlset")


class DocumentTooLarge(ValueError):
    """An entry, or a document that cannot be split, exceeds the sitemap limits."""


# Paging under the 50,000-entry and 50 MB limits


class PageBuilder:
    """Collects pre-rendered entries between a header and a footer under both limits.

    `add()` refuses an entry that would break either limit, so the caller closes
    the page there and carries the entry over to the next one. Entries go
    straight into one growing buffer, which `close()` hands over without a
    copy: a 15 MB page costs 15 MB, not 50,000 small objects and their join.
    With `out`, the page is streamed instead: `fill()` hands `out` the buffer
    every STREAM_CHUNK_BYTES and `close()` the rest, so a page costs one chunk
    (its content is then empty; `size` says how long it is).
    """

    def __init__(
        self,
        header: bytes,
        footer: bytes,
        *,
        max_entries: int = MAX_ENTRIES_PER_DOCUMENT,
        max_bytes: int = MAX_DOCUMENT_BYTES,
        out: Callable[[bytes], object] | None = None,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.entries = 0
        self.size = len(header) + len(footer)
        if self.size > max_bytes:
            raise DocumentTooLarge(f"header and footer alone exceed {max_bytes} bytes")
        self._buffer = BytesIO()
        self._buffer.write(header)
        self._footer = footer
        self._out = out
        # `fill` hands the buffer over once the page reaches this size (never without `out`).
        self._flush_at = len(header) + STREAM_CHUNK_BYTES if out is not None else max_bytes + 1

    @property
    def full(self) -> bool:
        """True once no further entry may be added, whatever its size."""
        return self.entries >= self.max_entries

    def add(self, entry: bytes) -> bool:
        """Append `entry` if the page stays within both limits; False means close the page."""
        if self.entries >= self.max_entries or self.size + len(entry) > self.max_bytes:
            return False
        self._buffer.write(entry)
        self.size += len(entry)
        self.entries += 1
        return True

    def extend(self, kept: bytes, entries: int) -> bool:
        """Append `entries` entries this writer rendered before (a previous version's); False
        if they would break a limit."""
        if self.entries + entries > self.max_entries or self.size + len(kept) > self.max_bytes:
            return False
        self._buffer.write(kept)
        self.size += len(kept)
        self.entries += entries
        return True

    def fill(
        self, records: Iterable[RecordT], render: Callable[[RecordT], bytes]
    ) -> DocumentPage[RecordT]:
        """Render and `add()` records until they run out or a limit is reached, then close."""
        return self._finish(*self._fill(records, render))

    def fill_batches(self, batches: Iterable[ResourceBatch]) -> DocumentPage[ResourceRecord]:
        """`fill()` from a generator's batches: a batch the writer wrote whole goes in at once.

        A batch it could not write, or that would break a limit, is rendered
        record by record, so the page closes exactly where `fill()` would.
        """
        last: ResourceRecord | None = None
        has_more = False
        for batch in batches:
            written = resource_urls(batch.columns) if batch.columns is not None else None
            if (
                written is not None
                and self.entries + batch.size <= self.max_entries
                and self.size + len(written) <= self.max_bytes
            ):
                self._write(written, batch.size)
                last = batch.last
                continue
            added = self._fill(batch.records(), resource_url)
            last, has_more = added[0] or last, added[1]
            if has_more:
                break
        return self._finish(last, has_more)

    def _write(self, entries: bytes, count: int) -> None:
        """Append `count` entries rendered together, handing the buffer to `out` when due."""
        self._buffer.write(entries)
        self.size += len(entries)
        self.entries += count
        if self.size >= self._flush_at:
            self._flush()
            self._flush_at = self.size + STREAM_CHUNK_BYTES

    def _finish(self, last: RecordT | None, has_more: bool) -> DocumentPage[RecordT]:
        """Close the page and say where it stopped in the record stream."""
        return DocumentPage(
            content=self.close(),
            entries=self.entries,
            last_record=last,
            has_more=has_more,
            size=self.size,
        )

    def _fill(
        self, records: Iterable[RecordT], render: Callable[[RecordT], bytes]
    ) -> tuple[RecordT | None, bool]:
        """Render and append records until they run out or a limit is reached.

        Returns the last record added and whether one was left over. The loop
        keeps its counters in locals: it runs once per entry of million-entry
        lists.
        """
        write, entries, size = self._buffer.write, self.entries, self.size
        max_entries, max_bytes, flush_at = self.max_entries, self.max_bytes, self._flush_at
        last: RecordT | None = None
        has_more = False
        for record in records:
            if entries >= max_entries:
                has_more = True
                break
            entry = render(record)
            if size + len(entry) > max_bytes:
                if not entries:
                    raise DocumentTooLarge(
                        f"one entry of {len(entry)} bytes cannot fit in a {max_bytes}-byte page"
                    )
                has_more = True
                break
            write(entry)
            size += len(entry)
            entries += 1
            last = record
            if size >= flush_at:
                self._flush()
                flush_at = size + STREAM_CHUNK_BYTES
        self.entries, self.size, self._flush_at = entries, size, flush_at
        return last, has_more

    def close(self) -> bytes:
        """The finished document (empty when streamed to `out`); `size` is its exact length."""
        self._buffer.write(self._footer)
        if self._out is None:
            return self._buffer.getvalue()
        self._flush()
        return b""

    def _flush(self) -> None:
        """Hand what the buffer holds to `out` and empty it."""
        assert self._out is not None
        self._out(self._buffer.getvalue())
        self._buffer.seek(0)
        self._buffer.truncate()


@dataclass(frozen=True, slots=True)
class DocumentPage(Generic[RecordT]):
    """One finished document and where it stopped in the record stream.

    `has_more` is True when the page closed on a limit while records remained;
    the next page then starts after `last_record` (the records after it, which
    this page may already have read from the iterator, are not in it). `size`
    is the document's length, also when it was streamed and `content` is empty.
    """

    content: bytes
    entries: int
    last_record: RecordT | None
    has_more: bool
    size: int


def fill_page(
    page: PageBuilder, records: Iterable[RecordT], render: Callable[[RecordT], bytes]
) -> DocumentPage[RecordT]:
    """Render records into `page` until they run out or a limit is reached."""
    return page.fill(records, render)


def _single_page(header: bytes, footer: bytes, entries: Iterable[bytes], what: str) -> bytes:
    """A document that may not be split (an index, a notification): too big is an error."""
    page = PageBuilder(header, footer)
    for entry in entries:
        if not page.add(entry):
            raise DocumentTooLarge(f"{what} exceeds the sitemap limits and cannot be split")
    return page.close()


# Entries


def link_attributes(link: Link) -> Attributes:
    """`rs:ln` attributes of a record's link; an empty mime leaves `type` out."""
    return {"rel": link.rel, "href": link.href, "type": link.mime}


def resource_entry(record: ResourceRecord, *, path: str = "") -> bytes:
    """A Resource List entry (or, with `path`, a Resource Dump Manifest entry)."""
    if not path:
        return resource_url(record)
    return _URLSET.resource_entry(
        record.uri,
        w3c_datetime(record.lastmod),
        hash=hash_value(record.md5, record.sha256),
        length=f"{record.length}",
        type=record.mime,
        path=path,
        links=record.links,  # Link is a (rel, href, mime) triple
    )


def change_entry(record: ChangeRecord, *, path: str = "") -> bytes:
    """A Change List or notification entry (or, with `path`, a Change Dump Manifest entry)."""
    if record.change not in _CHANGES:
        raise ValueError(f"change must be created, updated or deleted, not {record.change!r}")
    md = {
        "change": record.change,
        "datetime": w3c_datetime(record.datetime),
        "hash": hash_value(record.md5, record.sha256),
        "length": "" if record.length is None else str(record.length),
        "type": record.mime,
        "path": path,
    }
    lastmod = None if record.lastmod is None else w3c_datetime(record.lastmod)
    links = [link_attributes(link) for link in record.links] if record.links else ()
    return _URLSET.entry(record.uri, lastmod, md, links)


def _links(*pairs: tuple[str, str | None]) -> list[Attributes]:
    """Root links from (rel, href) pairs, skipping those without an href."""
    return [{"rel": rel, "href": href} for rel, href in pairs if href]


def _time(value: datetime | None) -> str:
    return "" if value is None else w3c_datetime(value)


def _check_snapshot(at: datetime, completed: datetime | None) -> None:
    if completed is not None and completed < at:
        raise ValueError(f"completed {completed} is before at {at}")


def _check_window(since: datetime, until: datetime | None) -> None:
    if until is not None and until < since:
        raise ValueError(f"until {until} is before from {since}")


def _change_order_check(
    since: datetime, until: datetime | None, *, after: datetime | None = None
) -> Callable[[ChangeRecord], None]:
    """A check refusing changes out of order or outside [since, until] (checklist 5 and 6);
    `after`: the datetime of the change before the first one checked."""
    previous = since if after is None else after

    def check(record: ChangeRecord) -> None:
        nonlocal previous
        if record.datetime < previous:
            raise ValueError(
                f"change {record.key} at {record.datetime} is out of order or before from {since}"
            )
        if until is not None and record.datetime > until:
            raise ValueError(f"change {record.key} at {record.datetime} is after until {until}")
        previous = record.datetime

    return check


# Resource List and its index


def resource_list_frame(
    *,
    at: datetime,
    capability_list_url: str,
    completed: datetime | None = None,
    index_url: str | None = None,
) -> tuple[bytes, bytes]:
    """A Resource List's header (declaration, root, its `rs:md` and links) and footer."""
    _check_snapshot(at, completed)
    writer = DocumentWriter("urlset")
    header = writer.start(
        {
            "capability": Capability.RESOURCE_LIST,
            "at": w3c_datetime(at),
            "completed": _time(completed),
        },
        _links(("up", capability_list_url), ("index", index_url)),
    )
    return header, writer.end()


def build_resource_list(
    resources: Iterable[ResourceRecord] | Iterable[ResourceBatch],
    *,
    at: datetime,
    capability_list_url: str,
    completed: datetime | None = None,
    index_url: str | None = None,
    max_entries: int = MAX_ENTRIES_PER_DOCUMENT,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    out: Callable[[bytes], object] | None = None,
) -> DocumentPage[ResourceRecord]:
    """A Resource List, or one part of it under `index_url`, filled to the limits.

    `resources` are records, or a generator's batches of them. With `out`
    its bytes are streamed there as they are rendered (see `PageBuilder`).
    """
    header, footer = resource_list_frame(
        at=at, capability_list_url=capability_list_url, completed=completed, index_url=index_url
    )
    page = PageBuilder(header, footer, max_entries=max_entries, max_bytes=max_bytes, out=out)
    return page.fill_batches(batched(resources))


def build_resource_entries(
    resources: Iterable[ResourceRecord] | Iterable[ResourceBatch],
    *,
    max_entries: int,
    max_bytes: int,
) -> DocumentPage[ResourceRecord]:
    """A run of Resource List entries alone, to be joined into a page with `join_parts`."""
    page = PageBuilder(b"", b"", max_entries=max_entries, max_bytes=max_bytes)
    return page.fill_batches(batched(resources))


def join_parts(
    frame: tuple[bytes, bytes],
    parts: list[DocumentPage[RecordT]],
    *,
    max_entries: int,
    max_bytes: int,
) -> DocumentPage[RecordT] | None:
    """One page of consecutive runs of entries inside a (header, footer) frame.

    None when a run stopped on a limit or together they break one: the page
    is then built whole, where the limits decide where it ends.
    """
    header, footer = frame
    entries = sum(part.entries for part in parts)
    size = len(header) + len(footer) + sum(len(part.content) for part in parts)
    if any(part.has_more for part in parts) or entries > max_entries or size > max_bytes:
        return None
    last = next((p.last_record for p in reversed(parts) if p.last_record is not None), None)
    content = b"".join([header, *(part.content for part in parts), footer])
    return DocumentPage(
        content=content, entries=entries, last_record=last, has_more=False, size=size
    )


@dataclass(frozen=True, slots=True)
class ResourceListPart:
    """One Resource List under an index, with the snapshot times of that part."""

    loc: str
    at: datetime
    completed: datetime | None = None


def build_resource_list_index(
    parts: Iterable[ResourceListPart],
    *,
    at: datetime,
    capability_list_url: str,
    completed: datetime | None = None,
) -> bytes:
    """A Resource List Index: same capability as its parts; at/completed cover the whole run."""
    return _snapshot_index(
        Capability.RESOURCE_LIST, parts, at, completed, capability_list_url, "a Resource List Index"
    )


def _snapshot_index(
    capability: Capability,
    parts: Iterable[ResourceListPart],
    at: datetime,
    completed: datetime | None,
    capability_list_url: str,
    name: str,
) -> bytes:
    """An index of snapshot documents (Resource Lists or Resource Dumps), each with at/completed."""
    _check_snapshot(at, completed)
    writer = DocumentWriter("sitemapindex")
    header = writer.start(
        {"capability": capability, "at": w3c_datetime(at), "completed": _time(completed)},
        _links(("up", capability_list_url)),
    )
    entries = (
        writer.entry(part.loc, md={"at": w3c_datetime(part.at), "completed": _time(part.completed)})
        for part in parts
    )
    return _single_page(header, writer.end(), entries, name)


# Change List and its index


def build_change_list(
    changes: Iterable[ChangeRecord],
    *,
    since: datetime,
    capability_list_url: str,
    until: datetime | None = None,
    index_url: str | None = None,
    max_entries: int = MAX_ENTRIES_PER_DOCUMENT,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> DocumentPage[ChangeRecord]:
    """A Change List from `since` (rs:md from); `until` only when the list is closed.

    Changes must come oldest first and fall within [since, until].
    """
    page = _change_list_page(since, until, capability_list_url, index_url, max_entries, max_bytes)
    return page.fill(changes, _checked_change_entry(since, since, until))


def append_change_list(
    kept: bytes,
    kept_entries: int,
    changes: Iterable[ChangeRecord],
    *,
    since: datetime,
    last: datetime,
    capability_list_url: str,
    index_url: str | None = None,
    max_entries: int = MAX_ENTRIES_PER_DOCUMENT,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> DocumentPage[ChangeRecord] | None:
    """The open Change List again: the entries of its previous version (`kept`, from
    `change_list_entries`), then `changes`, which must come after `last`, its last datetime.

    The same bytes as `build_change_list` over all of them; None when the kept
    entries alone break a limit. `last_record` is None when no change was added.
    """
    page = _change_list_page(since, None, capability_list_url, index_url, max_entries, max_bytes)
    if not page.extend(kept, kept_entries):
        return None
    return page.fill(changes, _checked_change_entry(since, last, None))


def change_list_entries(document: bytes) -> bytes:
    """The entries of a Change List this module wrote: what lies between its header and
    its end tag (the header's values are escaped, so its first `<url>` starts them)."""
    end = DocumentWriter("urlset").end()
    if not document.endswith(end):
        raise ValueError("not a whole urlset document")
    start = document.find(b"<url>")
    return b"" if start < 0 else document[start : -len(end)]


def _change_list_page(
    since: datetime,
    until: datetime | None,
    capability_list_url: str,
    index_url: str | None,
    max_entries: int,
    max_bytes: int,
) -> PageBuilder:
    """An empty Change List page: its header (from, until, links) and end tag."""
    _check_window(since, until)
    writer = DocumentWriter("urlset")
    header = writer.start(
        {"capability": Capability.CHANGE_LIST, "from": w3c_datetime(since), "until": _time(until)},
        _links(("up", capability_list_url), ("index", index_url)),
    )
    return PageBuilder(header, writer.end(), max_entries=max_entries, max_bytes=max_bytes)


def _checked_change_entry(
    since: datetime, after: datetime, until: datetime | None
) -> Callable[[ChangeRecord], bytes]:
    """Render a Change List entry, refusing changes out of order (none before `after`)."""
    check_order = _change_order_check(since, until, after=after)

    def render(record: ChangeRecord) -> bytes:
        check_order(record)
        return change_entry(record)

    return render


@dataclass(frozen=True, slots=True)
class ChangeListPart:
    """One Change List under an index; `until` is None while that list is open."""

    loc: str
    since: datetime
    until: datetime | None = None


def build_change_list_index(
    parts: Iterable[ChangeListPart],
    *,
    since: datetime,
    capability_list_url: str,
    until: datetime | None = None,
    archives_url: str | None = None,
) -> bytes:
    """A Change List Index; parts oldest first, closed parts with `until`, open ones without.

    `archives_url` names the Change List Archive holding the older lists.
    """
    _check_window(since, until)
    writer = DocumentWriter("sitemapindex")
    header = writer.start(
        {"capability": Capability.CHANGE_LIST, "from": w3c_datetime(since), "until": _time(until)},
        _links(("up", capability_list_url), ("archives", archives_url)),
    )

    entries: list[bytes] = []
    previous: ChangeListPart | None = None
    for part in parts:
        if previous is not None:
            if previous.until is None:
                raise ValueError(f"only the newest Change List may be open: {previous.loc}")
            if part.since < previous.since:
                raise ValueError(f"Change List Index parts must be oldest first: {part.loc}")
        elif part.since < since:
            raise ValueError(f"part {part.loc} starts before the index's from {since}")
        _check_window(part.since, part.until)
        md = {"from": w3c_datetime(part.since), "until": _time(part.until)}
        entries.append(writer.entry(part.loc, md=md))
        previous = part
    return _single_page(header, writer.end(), entries, "a Change List Index")


# Capability List and Source Description


@dataclass(frozen=True, slots=True)
class CapabilityEntry:
    """One capability a set publishes: its document (or notification topic) and extra links.

    A notification topic carries `Link(rel="hub", href=<hub>)`.
    """

    capability: str
    loc: str
    links: tuple[Link, ...] = ()


def build_capability_list(
    capabilities: Iterable[CapabilityEntry],
    *,
    source_description_url: str,
    describedby_url: str | None = None,
) -> bytes:
    """A Capability List: one entry per capability, in the order given (checklist 10)."""
    entries: list[Entry] = []
    seen: set[str] = set()
    for item in capabilities:
        if not item.capability:
            raise ValueError(f"capability missing for {item.loc}")
        if item.capability in seen:
            raise ValueError(f"capability {item.capability!r} listed twice")
        seen.add(item.capability)
        links = [link_attributes(link) for link in item.links]
        entries.append(Entry(item.loc, md={"capability": item.capability}, links=links))
    return render_document(
        "urlset",
        {"capability": Capability.CAPABILITY_LIST},
        _links(("up", source_description_url), ("describedby", describedby_url)),
        entries,
    )


@dataclass(frozen=True, slots=True)
class CapabilityListRef:
    """A Capability List as the Source Description lists it."""

    loc: str
    describedby_url: str | None = None


def build_source_description(
    capability_lists: Iterable[CapabilityListRef],
    *,
    describedby_url: str | None = None,
) -> bytes:
    """The Source Description: one entry per Capability List, no lastmod (checklist 13)."""
    entries = [
        Entry(
            item.loc,
            md={"capability": Capability.CAPABILITY_LIST},
            links=_links(("describedby", item.describedby_url)),
        )
        for item in capability_lists
    ]
    return render_document(
        "urlset",
        {"capability": Capability.DESCRIPTION},
        _links(("describedby", describedby_url)),
        entries,
    )


# Dumps and their manifests

_CONTENTS_TYPE = "application/xml"


@dataclass(frozen=True, slots=True)
class ResourceDumpPackage:
    """One ZIP of a Resource Dump; length and hashes describe the ZIP's bytes."""

    loc: str
    length: int
    md5: str = ""
    sha256: str = ""
    mime: str = "application/zip"
    lastmod: datetime | None = None
    at: datetime | None = None
    completed: datetime | None = None
    manifest_url: str | None = None


@dataclass(frozen=True, slots=True)
class ChangeDumpPackage:
    """One ZIP of a Change Dump, holding every change in [since, until]."""

    loc: str
    length: int
    md5: str = ""
    sha256: str = ""
    mime: str = "application/zip"
    lastmod: datetime | None = None
    since: datetime | None = None
    until: datetime | None = None
    manifest_url: str | None = None


def _package_links(manifest_url: str | None) -> list[Attributes]:
    """The optional `contents` link from a dump entry to its manifest copy."""
    if not manifest_url:
        return []
    return [{"rel": "contents", "href": manifest_url, "type": _CONTENTS_TYPE}]


def _package_entry(package: ResourceDumpPackage | ChangeDumpPackage, times: Attributes) -> Entry:
    """A dump entry: its window or snapshot times first, then hash, length and type."""
    return Entry(
        package.loc,
        None if package.lastmod is None else w3c_datetime(package.lastmod),
        {
            **times,
            "hash": hash_value(package.md5, package.sha256),
            "length": str(package.length),
            "type": package.mime,
        },
        _package_links(package.manifest_url),
    )


def build_resource_dump(
    packages: Iterable[ResourceDumpPackage],
    *,
    at: datetime,
    capability_list_url: str,
    completed: datetime | None = None,
    index_url: str | None = None,
) -> bytes:
    """A Resource Dump: one entry per ZIP package."""
    _check_snapshot(at, completed)
    entries = (
        _package_entry(package, {"at": _time(package.at), "completed": _time(package.completed)})
        for package in packages
    )
    return render_document(
        "urlset",
        {
            "capability": Capability.RESOURCE_DUMP,
            "at": w3c_datetime(at),
            "completed": _time(completed),
        },
        _links(("up", capability_list_url), ("index", index_url)),
        entries,
    )


def build_change_dump(
    packages: Iterable[ChangeDumpPackage],
    *,
    since: datetime,
    capability_list_url: str,
    until: datetime | None = None,
    index_url: str | None = None,
) -> bytes:
    """A Change Dump: one entry per ZIP package, oldest first."""
    _check_window(since, until)
    entries = (
        _package_entry(package, {"from": _time(package.since), "until": _time(package.until)})
        for package in packages
    )
    return render_document(
        "urlset",
        {"capability": Capability.CHANGE_DUMP, "from": w3c_datetime(since), "until": _time(until)},
        _links(("up", capability_list_url), ("index", index_url)),
        entries,
    )


def build_resource_dump_index(
    parts: Iterable[ResourceListPart],
    *,
    at: datetime,
    capability_list_url: str,
    completed: datetime | None = None,
) -> bytes:
    """A Resource Dump Index (by analogy with a Resource List Index): one entry per dump."""
    return _snapshot_index(
        Capability.RESOURCE_DUMP, parts, at, completed, capability_list_url, "a Resource Dump Index"
    )


def build_change_dump_index(
    parts: Iterable[ChangeListPart], *, since: datetime, capability_list_url: str
) -> bytes:
    """A Change Dump Index (by analogy with a Change List Index): dumps oldest first."""
    writer = DocumentWriter("sitemapindex")
    header = writer.start(
        {"capability": Capability.CHANGE_DUMP, "from": w3c_datetime(since)},
        _links(("up", capability_list_url)),
    )
    entries = (
        writer.entry(part.loc, md={"from": w3c_datetime(part.since), "until": _time(part.until)})
        for part in parts
    )
    return _single_page(header, writer.end(), entries, "a Change Dump Index")


def _check_path(path: str) -> None:
    """A manifest path is the bitstream's place in the ZIP: leading `/`, no trailing `/`."""
    if not path.startswith("/") or path.endswith("/") or len(path) < 2:
        raise ValueError(f"manifest path must start with '/' and name a file, not {path!r}")


def build_resource_dump_manifest(
    items: Iterable[tuple[ResourceRecord, str]],
    *,
    at: datetime,
    capability_list_url: str,
    completed: datetime | None = None,
    max_entries: int = MAX_ENTRIES_PER_DOCUMENT,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> DocumentPage[tuple[ResourceRecord, str]]:
    """The `manifest.xml` of one Resource Dump package: (record, path in the ZIP) pairs."""
    _check_snapshot(at, completed)

    def render(item: tuple[ResourceRecord, str]) -> bytes:
        record, path = item
        _check_path(path)
        return resource_entry(record, path=path)

    writer = DocumentWriter("urlset")
    header = writer.start(
        {
            "capability": Capability.RESOURCE_DUMP_MANIFEST,
            "at": w3c_datetime(at),
            "completed": _time(completed),
        },
        _links(("up", capability_list_url)),
    )
    page = PageBuilder(header, writer.end(), max_entries=max_entries, max_bytes=max_bytes)
    return fill_page(page, items, render)


def build_change_dump_manifest(
    items: Iterable[tuple[ChangeRecord, str]],
    *,
    since: datetime,
    capability_list_url: str,
    until: datetime | None = None,
    max_entries: int = MAX_ENTRIES_PER_DOCUMENT,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> DocumentPage[tuple[ChangeRecord, str]]:
    """The `manifest.xml` of one Change Dump package: (change, path) pairs, oldest first.

    Deleted changes have no bitstream, so their path must be empty; others need one.
    """
    _check_window(since, until)
    check_order = _change_order_check(since, until)

    def render(item: tuple[ChangeRecord, str]) -> bytes:
        record, path = item
        check_order(record)
        if record.change == ChangeType.DELETED:
            if path:
                raise ValueError(f"deleted change {record.key} cannot have a path")
        else:
            _check_path(path)
        return change_entry(record, path=path)

    writer = DocumentWriter("urlset")
    header = writer.start(
        {
            "capability": Capability.CHANGE_DUMP_MANIFEST,
            "from": w3c_datetime(since),
            "until": _time(until),
        },
        _links(("up", capability_list_url)),
    )
    page = PageBuilder(header, writer.end(), max_entries=max_entries, max_bytes=max_bytes)
    return fill_page(page, items, render)


# Notifications


def build_change_notification(
    changes: Iterable[ChangeRecord],
    *,
    since: datetime,
    until: datetime,
    capability_list_url: str | None = None,
) -> bytes:
    """A change notification payload: `from` and `until` are both mandatory.

    Payloads have no index, so one that exceeds the limits is an error: send
    the interval as several consecutive payloads instead.
    """
    _check_window(since, until)
    check_order = _change_order_check(since, until)

    def render(record: ChangeRecord) -> bytes:
        check_order(record)
        return change_entry(record)

    writer = DocumentWriter("urlset")
    header = writer.start(
        {
            "capability": Capability.CHANGE_NOTIFICATION,
            "from": w3c_datetime(since),
            "until": w3c_datetime(until),
        },
        _links(("up", capability_list_url)),
    )
    return _single_page(header, writer.end(), map(render, changes), "a change notification")


@dataclass(frozen=True, slots=True)
class FrameworkChange:
    """A capability document created, updated or deleted; `index_url` if it sits under one."""

    loc: str
    capability: str
    change: str
    datetime: datetime
    index_url: str | None = None


def build_framework_notification(
    changes: Iterable[FrameworkChange], *, up_url: str | None = None
) -> bytes:
    """A framework notification payload: `change` and `capability` on every entry.

    Never about an index (spec §10): an index's parts are announced with
    `rs:ln rel="index"` instead, so an index capability here is a caller's bug.
    """
    entries = []
    for item in changes:
        if item.change not in _CHANGES:
            raise ValueError(f"change must be created, updated or deleted, not {item.change!r}")
        if not item.capability:
            raise ValueError(f"capability missing for {item.loc}")
        md = {
            "capability": item.capability,
            "change": item.change,
            "datetime": w3c_datetime(item.datetime),
        }
        entries.append(Entry(item.loc, md=md, links=_links(("index", item.index_url))))
    return render_document(
        "urlset",
        {"capability": Capability.FRAMEWORK_NOTIFICATION},
        _links(("up", up_url)),
        entries,
    )
