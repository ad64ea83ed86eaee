"""Write one dump package: checked bitstreams, then `manifest.xml`, in constant memory.

A package is first planned from metadata alone (`plan_package`): the records'
lengths and rendered manifest entries say where it must close (bitstreams,
package bytes, manifest bytes), so nothing written ever has to be undone.
`write_package` then streams each bitstream into a ZIP on disk:

- from the package it replaces, when that one already holds the same bytes
  (same path, hash and length: it was checked when it was packaged). This is
  why an update rebuilds one package quickly, and how a Change Dump keeps the
  bytes of an older version after its file was overwritten;
- otherwise from the generator (`open_resource`), checked against the
  record's length and hashes before it goes in. A file that differs is left
  out of the package and its manifest and reported (`Skipped`), never
  packaged wrong.

No Django here except the generator passed in; the callers store the file.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import zipfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import IO, BinaryIO

from sitemaps.protocol.reader import ResourceSyncParseError, parse_document
from sources.generators.base import ChangeRecord, ResourceRecord, ResourceUnreadable

MANIFEST_NAME = "manifest.xml"
COMPRESSION = {"stored": zipfile.ZIP_STORED, "deflated": zipfile.ZIP_DEFLATED}
#: Files up to this size are read whole and checked before they go in; larger ones
#: are hashed in a first pass, so memory stays bounded by this.
SMALL_FILE_BYTES = 8 * 1024 * 1024
CHUNK_SIZE = 1024 * 1024
#: Room left in a package and its manifest for the manifest's header and footer.
MANIFEST_FRAME_BYTES = 2048
#: ZIP timestamps cannot be older than this.
ZIP_EPOCH = dt.datetime(1980, 1, 1, tzinfo=dt.UTC)
#: The last instant a ZIP (DOS) timestamp holds: its year is 7 bits from 1980.
ZIP_END = dt.datetime(2107, 12, 31, 23, 59, 58, tzinfo=dt.UTC)

Record = ResourceRecord | ChangeRecord


@dataclass(frozen=True, slots=True)
class Item:
    """One manifest entry: a record and its bitstream's path in the ZIP ("" for a deletion)."""

    record: Record
    path: str


@dataclass(frozen=True, slots=True)
class Limits:
    """Where a package closes: bitstreams (manifest entries), ZIP bytes, manifest bytes."""

    entries: int
    package_bytes: int
    manifest_bytes: int


@dataclass(frozen=True, slots=True)
class Skipped:
    """A resource (or change) the package could not hold, and why."""

    uri: str
    reason: str
    #: The record left out: whether a later change explains it is the caller's to ask.
    record: Record | None = field(default=None, compare=False)


@dataclass
class Written:
    """What went into a package."""

    manifest: bytes
    packaged: list[Item] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    reused: int = 0

    @property
    def bitstreams(self) -> int:
        return sum(1 for item in self.packaged if item.path)


class BitstreamChanged(Exception):
    """A large file changed between its check and its copy: the package is written again."""

    def __init__(self, item: Item) -> None:
        super().__init__(f"{item.record.uri} changed while it was packaged")
        self.item = item


def member_name(path: str) -> str:
    """The ZIP member of a manifest `path` (which starts with `/`)."""
    return path[1:]


def _estimated_bytes(item: Item) -> int:
    """An upper bound of what the item adds to the ZIP (headers, data, a little deflate growth)."""
    if not item.path:
        return 0
    length = item.record.length or 0
    return length + length // 1000 + 2 * len(item.path.encode()) + 160


@dataclass(frozen=True, slots=True)
class Planned:
    """The items of one package; `following` is the first item left for the next one."""

    items: list[Item]
    has_more: bool
    following: Item | None = None


def plan_package(items: Iterable[Item], limits: Limits, render: Callable[[Item], bytes]) -> Planned:
    """The leading items that fit one package; `has_more` when it closed on a limit.

    The first item always goes in: a resource larger than the package limit
    gets a package of its own. The item after the last one is consumed.
    """
    chosen: list[Item] = []
    manifest = size = MANIFEST_FRAME_BYTES
    for item in items:
        entry = len(render(item))
        cost = _estimated_bytes(item)
        if chosen and (
            len(chosen) >= limits.entries
            or manifest + entry > limits.manifest_bytes
            or size + cost + entry > limits.package_bytes
        ):
            return Planned(chosen, has_more=True, following=item)
        chosen.append(item)
        manifest += entry
        size += cost + entry
    return Planned(chosen, has_more=False)


def _zip_time(value: dt.datetime | None) -> tuple[int, int, int, int, int, int]:
    """A ZIP timestamp (UTC, two-second precision) from a record's lastmod, within the
    years a ZIP can date (the manifest keeps the exact lastmod)."""
    value = min(max(value.astimezone(dt.UTC), ZIP_EPOCH), ZIP_END) if value else ZIP_EPOCH
    return (value.year, value.month, value.day, value.hour, value.minute, value.second)


def _zip_info(name: str, when: dt.datetime | None, compression: int, size: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_zip_time(when))
    info.compress_type = compression
    info.external_attr = 0o644 << 16
    info.file_size = size
    return info


def _hashers(record: Record) -> dict[str, hashlib._Hash]:
    wanted = {"md5": record.md5, "sha256": record.sha256}
    return {
        name: hashlib.new(name, usedforsecurity=False) for name, value in wanted.items() if value
    }


def _mismatch(record: Record, hashers: dict[str, hashlib._Hash]) -> str | None:
    """Which digest of the bytes read differs from the record, if any."""
    for name, hasher in hashers.items():
        if hasher.hexdigest() != getattr(record, name).lower():
            return f"its file's {name} differs from the record (changed since its last event?)"
    return None


class PreviousPackage:
    """The package being replaced: bitstreams it holds, as its manifest lists them."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.archive = zipfile.ZipFile(handle)
        with self.archive.open(MANIFEST_NAME) as manifest:
            document = parse_document(manifest)
        self.held = {
            entry.path: (entry.length, entry.hash.get("md5"), entry.hash.get("sha-256"))
            for entry in document.entries
            if entry.path
        }

    def holds(self, item: Item) -> bool:
        """Whether it holds this item's bytes: same path, length and digests."""
        record = item.record
        listed = self.held.get(item.path)
        return listed == (record.length, record.md5 or None, record.sha256 or None)

    def copy(self, item: Item, archive: zipfile.ZipFile, compression: int) -> None:
        source = self.archive.getinfo(member_name(item.path))
        info = _zip_info(source.filename, item.record.lastmod, compression, source.file_size)
        with self.archive.open(source) as reader, archive.open(info, "w") as writer:
            shutil.copyfileobj(reader, writer, CHUNK_SIZE)


class Reuse:
    """The packages being replaced, whose checked bitstreams can be copied over."""

    def __init__(self, packages: list[PreviousPackage]) -> None:
        self.packages = packages

    def holder(self, item: Item) -> PreviousPackage | None:
        return next((package for package in self.packages if package.holds(item)), None)


@contextmanager
def reusable(openers: Iterable[Callable[[], IO[bytes]]]) -> Iterator[Reuse]:
    """The packages these open, skipping any that is missing or unusable."""
    with ExitStack() as stack:
        packages = []
        for open_file in openers:
            try:
                handle = stack.enter_context(open_file())
                packages.append(PreviousPackage(handle))
            except (zipfile.BadZipFile, KeyError, ResourceSyncParseError, OSError):
                continue
        yield Reuse(packages)


def _size(handle: BinaryIO) -> int | None:
    try:
        return os.fstat(handle.fileno()).st_size
    except (AttributeError, OSError, ValueError):
        return None


def _add_from_file(
    archive: zipfile.ZipFile, item: Item, handle: BinaryIO, compression: int
) -> str | None:
    """Copy a checked file into the ZIP; the reason it was left out, or None."""
    record = item.record
    size = _size(handle)
    if size is not None and size != record.length:
        return f"its file has {size} bytes, the record says {record.length}"
    info = _zip_info(member_name(item.path), record.lastmod, compression, record.length or 0)
    head = handle.read(SMALL_FILE_BYTES + 1)
    if len(head) > SMALL_FILE_BYTES:
        return _add_large(archive, info, item, handle, head)
    if len(head) != record.length:
        return f"its file has {len(head)} bytes, the record says {record.length}"
    hashers = _hashers(record)
    for hasher in hashers.values():
        hasher.update(head)
    reason = _mismatch(record, hashers)
    if reason is None:
        archive.writestr(info, head)
    return reason


def _add_large(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, item: Item, handle: BinaryIO, head: bytes
) -> str | None:
    """Hash first (nothing written if it differs), then copy while hashing again."""
    hashers = _hashers(item.record)
    length = 0
    chunk = head
    while chunk:
        length += len(chunk)
        for hasher in hashers.values():
            hasher.update(chunk)
        chunk = handle.read(CHUNK_SIZE)
    if length != item.record.length:
        return f"its file has {length} bytes, the record says {item.record.length}"
    reason = _mismatch(item.record, hashers)
    if reason is not None:
        return reason
    handle.seek(0)
    again = _hashers(item.record)
    with archive.open(info, "w", force_zip64=info.file_size > zipfile.ZIP64_LIMIT) as writer:
        while chunk := handle.read(CHUNK_SIZE):
            writer.write(chunk)
            for hasher in again.values():
                hasher.update(chunk)
    if _mismatch(item.record, again) is not None:
        raise BitstreamChanged(item)
    return None


OpenBitstream = Callable[[Record], BinaryIO]


def write_package(
    target: BinaryIO,
    items: Iterable[Item],
    *,
    open_bitstream: OpenBitstream,
    build_manifest: Callable[[list[Item]], bytes],
    reuse: Reuse | None = None,
    compression: str = "stored",
    manifest_time: dt.datetime | None = None,
    leave_out: frozenset[str] = frozenset(),
) -> Written:
    """Write the items' bitstreams and then their manifest into a ZIP at `target`.

    `leave_out`: paths to skip (a file that changed while a previous attempt
    copied it). Raises BitstreamChanged when a large file changes mid-copy.
    When every item is left out there is no manifest (`Written.manifest` empty)
    and the ZIP is not to be kept.
    """
    method = COMPRESSION[compression]
    written = Written(manifest=b"")
    seen: set[str] = set()
    with zipfile.ZipFile(target, "w", compression=method, allowZip64=True) as archive:
        for item in items:
            if not item.path:
                written.packaged.append(item)
                continue
            holder = reuse.holder(item) if reuse is not None and item.path not in seen else None
            if holder is not None:
                holder.copy(item, archive, method)
                written.reused += 1
                reason = None
            else:
                reason = _add_item(archive, item, open_bitstream, method, seen, leave_out)
            if reason is None:
                written.packaged.append(item)
                seen.add(item.path)
            else:
                written.skipped.append(Skipped(item.record.uri, reason, item.record))
        if not written.packaged:
            return written  # a manifest without <url> is no valid Sitemap: no package
        written.manifest = build_manifest(written.packaged)
        info = _zip_info(MANIFEST_NAME, manifest_time, method, len(written.manifest))
        archive.writestr(info, written.manifest)
    return written


def _add_item(
    archive: zipfile.ZipFile,
    item: Item,
    open_bitstream: OpenBitstream,
    compression: int,
    seen: set[str],
    leave_out: frozenset[str],
) -> str | None:
    """Put one bitstream in from its file; the reason it was left out, or None."""
    if item.path in seen:
        return f"another resource in the package has the path {item.path}"
    if item.path in leave_out:
        return "its file changed while it was being packaged"
    try:
        handle = open_bitstream(item.record)
    except ResourceUnreadable as error:
        return str(error)
    with handle:
        return _add_from_file(archive, item, handle, compression)


def file_digests(handle: BinaryIO) -> tuple[int, str, str]:
    """Length, md5 and sha-256 of a whole file, read in chunks from the start."""
    handle.seek(0)
    md5, sha256 = hashlib.md5(usedforsecurity=False), hashlib.sha256()
    length = 0
    while chunk := handle.read(CHUNK_SIZE):
        length += len(chunk)
        md5.update(chunk)
        sha256.update(chunk)
    return length, md5.hexdigest(), sha256.hexdigest()
