"""The folder generator: a set's `resource_root_dir` as the source of its events.

Seed 004's file-system generator, split as the seed splits it: `walk_folder`
is its ResourceGenerator (what the folder holds now: path, size, mtime) and
`folder_changes` its ChangeGenerator (what differs from the state the portal
last recorded). The changes become ordinary events for
`sources.services.ingest_events` (see `sources.scanning`), so a scanned set
has one change log and its documents come from the configured generator
like any other set's.

Size and mtime are compared first; only a file that looks changed (or is
new) is read, once, for both digests. A rescan of unchanged files therefore
reads no file content. Location rules are seed 001's: every path is a
`rel_path` under the root; symlinks that leave the root, files that are not
regular or cannot be read, and names no URL can carry are skipped and
reported, never published.
"""

from __future__ import annotations

import hashlib
import itertools
import mimetypes
import os
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import attrgetter

from sitemaps.protocol.uris import loc_problem
from sitemaps.protocol.writer import escape_text
from sources.events import Event
from sources.locations import LocationError, resolve_location
from sources.models import ChangeType, LocationType

try:  # libmagic, where installed, knows what an extension does not say
    import magic  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the machine
    magic = None

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_CHUNK = 1024 * 1024
DEFAULT_MIME = "application/octet-stream"


#: What the portal last recorded for a resource, the state a scan compares with:
#: (uri, length, lastmod as microseconds since the epoch, location_type, location_value).
#: A plain tuple, as the database returns it: a rescan holds one per resource and
#: compares it with `stat`, so nothing is built for a file unchanged.
KnownResource = tuple[str, int, int, str, str]


@dataclass(frozen=True, slots=True)
class FoundFile:
    """A regular file under the root, new or changed, as `stat` shows it (nothing read yet).

    `before` is what was recorded under its name, if anything.
    """

    path: str
    rel_path: str
    uri: str
    size: int
    mtime_us: int
    before: KnownResource | None = None

    @property
    def lastmod(self) -> datetime:
        return _EPOCH + timedelta(microseconds=self.mtime_us)


@dataclass(frozen=True, slots=True)
class Skipped:
    """Something under the root that is not published, and why.

    `uri` is set when the name is publishable but the file could not be read
    right now: a resource already published under it is kept, not deleted.
    """

    rel_path: str
    reason: str
    uri: str = ""


def mtime_datetime(mtime_ns: int) -> datetime:
    """An mtime as the aware datetime the database keeps (microseconds)."""
    return _EPOCH + timedelta(microseconds=mtime_ns // 1000)


def epoch_microseconds(moment: datetime) -> int:
    """A datetime (naive: UTC) as the microseconds since the epoch a KnownResource keeps."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)


#: The mtimes a lastmod can be (microseconds since the epoch): the years 1 to 9999.
_FIRST_US = epoch_microseconds(datetime.min)
_LAST_US = epoch_microseconds(datetime.max)


def guess_mime(path: str) -> str:
    """The standard library's guess from the name; libmagic's from the bytes if it has none."""
    guessed = mimetypes.guess_type(path, strict=False)[0]
    if guessed:
        return guessed
    if magic is not None:
        try:
            return magic.from_file(path, mime=True) or DEFAULT_MIME
        except Exception:  # libmagic failing is no reason to skip the file
            return DEFAULT_MIME
    return DEFAULT_MIME


def file_digests(path: str) -> tuple[str, str]:
    """md5 and SHA-256 of a file, read once in chunks."""
    md5 = hashlib.md5(usedforsecurity=False)
    sha256 = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            md5.update(chunk)
            sha256.update(chunk)
    return md5.hexdigest(), sha256.hexdigest()


_BY_NAME = attrgetter("name")


class FolderWalker:
    """Walks a root without following symlinked folders; yields FoundFile or Skipped.

    `known_files` maps rel_paths already published to what was recorded, and
    the walk takes out each name it finds: those names were checked when
    first found, so a rescan skips resolving them again, and a file whose size
    and mtime match is only counted (`unchanged`), never yielded. Every file
    costs one `stat`; what is left in `known_files` at the end was not found.
    """

    def __init__(
        self, root: str, url_prefix: str, known_files: dict[str, KnownResource] | None = None
    ) -> None:
        self.root = os.path.abspath(root)
        self.real_root = os.path.realpath(root)
        self.url_prefix = url_prefix
        self.known_files = known_files if known_files is not None else {}
        self.unchanged = 0

    def __iter__(self) -> Iterator[FoundFile | Skipped]:
        return self.walk(self.root, "")

    def walk(self, directory: str, prefix: str) -> Iterator[FoundFile | Skipped]:
        """Depth first in name order, with a stack of its own: a tree deeper than Python
        recurses (about 1,000 folders) failed the whole scan, every time."""
        folders = [self.listed(directory, prefix)]
        while folders:
            item = next(folders[-1], None)
            if item is None:
                folders.pop()
            elif isinstance(item, Skipped):
                yield item
            elif item[0].is_dir(follow_symlinks=False):
                folders.append(self.listed(item[0].path, item[1] + "/"))
            elif found := self.examine(*item):
                yield found

    def listed(self, directory: str, prefix: str) -> Iterator[tuple[os.DirEntry, str] | Skipped]:
        """A folder's entries with their rel_paths, by name; read when first asked for."""
        try:
            with os.scandir(directory) as entries:
                listed = sorted(entries, key=_BY_NAME)
        except OSError as error:
            # What was published from it stays until the folder can be read again.
            yield Skipped(
                prefix.rstrip("/") or ".",
                f"folder cannot be read: {error.strerror}",
                self.uri_prefix(prefix.rstrip("/")),
            )
            return
        for entry in listed:
            yield entry, prefix + entry.name

    def examine(self, entry: os.DirEntry, rel_path: str) -> FoundFile | Skipped | None:
        """One directory entry that is not a real folder; None for a known file unchanged.

        Runs once per file on every rescan: a name already published skips
        the name checks, and readability shows when a changed file is read.
        """
        if entry.is_symlink() and not self.inside(entry.path):
            return Skipped(self.shown(rel_path), "symlink leads outside the resource root")
        try:
            status = entry.stat()  # follows a symlink inside the root
        except FileNotFoundError:
            return Skipped(self.shown(rel_path), "broken symlink")
        except OSError as error:
            return Skipped(self.shown(rel_path), f"cannot be read: {error.strerror}")
        if not stat.S_ISREG(status.st_mode):
            reason = "symlinked folder not followed" if stat.S_ISDIR(status.st_mode) else ""
            return Skipped(self.shown(rel_path), reason or "not a regular file")
        mtime_us = status.st_mtime_ns // 1000
        before = self.known_files.pop(rel_path, None)
        if before is None:
            try:
                uri = self.new_uri(rel_path)
            except LocationError as error:
                return Skipped(self.shown(rel_path), f"name no URL can carry: {error}")
        else:
            uri, length, lastmod_us, _, _ = before
            if length == status.st_size and lastmod_us == mtime_us:
                self.unchanged += 1
                return None
        if not _FIRST_US <= mtime_us <= _LAST_US:  # a lastmod no database holds
            return Skipped(self.shown(rel_path), "modified outside the years 1 to 9999", uri)
        return FoundFile(entry.path, rel_path, uri, status.st_size, mtime_us, before)

    @staticmethod
    def shown(rel_path: str) -> str:
        """A name as a report can print it: undecodable bytes replaced, controls escaped."""
        text = rel_path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)

    def new_uri(self, rel_path: str) -> str:
        """The URI of a name not published yet, or LocationError saying why it cannot be."""
        try:
            rel_path.encode("utf-8")
        except UnicodeEncodeError:
            raise LocationError("is not UTF-8.") from None
        uri = self.uri(rel_path)
        try:
            escape_text(rel_path)
        except ValueError as error:
            raise LocationError(f"{error}.") from None
        if (problem := loc_problem(uri)) is not None:  # what the API refuses too
            raise LocationError(f"resolves to {uri!r}, which {problem}.")
        return uri

    def inside(self, path: str) -> bool:
        real = os.path.realpath(path)
        return real == self.real_root or real.startswith(self.real_root.rstrip(os.sep) + os.sep)

    def uri(self, rel_path: str) -> str:
        """The `<loc>` of a path found by walking (inside the root by construction)."""
        return resolve_location(LocationType.REL_PATH, rel_path, url_prefix=self.url_prefix)

    def uri_prefix(self, rel_folder: str) -> str:
        """The URI prefix (ending in `/`) of every file under a folder; "" if none can be."""
        try:
            return self.uri(f"{rel_folder}/x" if rel_folder else "x")[:-1]
        except LocationError:
            return ""


def walk_folder(
    root: str, url_prefix: str, known_files: dict[str, KnownResource] | None = None
) -> FolderWalker:
    """What the folder holds now (seed 004's ResourceGenerator for a folder)."""
    return FolderWalker(root, url_prefix, known_files)


def _event(change: str, found: FoundFile, md5: str, sha256: str) -> Event:
    return Event(
        change=change,
        location_type=LocationType.REL_PATH,
        location_value=found.rel_path,
        uri=found.uri,
        length=found.size,
        md5=md5,
        sha256=sha256,
        mime=guess_mime(found.path),
        lastmod=found.lastmod,
    )


class FolderComparison:
    """What differs between the folder and the known state (seed 004's ChangeGenerator).

    The known resources (`known`, by URI) are split: `files`, those recorded
    by rel_path, for the walker to take out by name as it finds them, and
    `others` (posted with another location), matched by URI. What is left in
    both once the walk is done was not found.

    `changes(walker)` yields created and updated events; a file whose size
    and mtime match the known state is not read. `deletions()`, once the walk
    is done, yields a deleted event for each known resource not found nor
    kept. A file or folder that could not be read keeps what was published
    from it (`kept`: a file's URI, or a folder's URI prefix ending in `/`).
    """

    def __init__(self, known: Mapping[str, KnownResource]) -> None:
        self.known = known
        self.files: dict[str, KnownResource] = {}
        self.others: dict[str, KnownResource] = {}
        for uri, resource in known.items():
            _, _, _, location_type, name = resource
            if location_type == LocationType.REL_PATH and name not in self.files:
                self.files[name] = resource
            else:
                self.others[uri] = resource
        self.kept: list[str] = []
        self.skipped: list[Skipped] = []
        self.unchanged = 0
        self.hashed = 0
        self.bytes_hashed = 0

    def changes(self, walker: FolderWalker) -> Iterator[Event]:
        """Events for the new and changed files the walker finds (it counts the unchanged)."""
        for item in walker:
            if isinstance(item, Skipped):
                self.skip(item)
                continue
            before = item.before or self.found_by_uri(item.uri)
            if before is not None and before[1:3] == (item.size, item.mtime_us):
                self.unchanged += 1
                continue
            try:
                md5, sha256 = file_digests(item.path)
            except OSError as error:
                self.skip(Skipped(item.rel_path, f"cannot be read: {error.strerror}", item.uri))
                continue
            self.hashed += 1
            self.bytes_hashed += item.size
            change = ChangeType.CREATED if before is None else ChangeType.UPDATED
            yield _event(change, item, md5, sha256)
        self.unchanged += walker.unchanged

    def found_by_uri(self, uri: str) -> KnownResource | None:
        """A resource recorded under this URI but not this name (another location, say); taken
        out of what is left to delete."""
        before = self.known.get(uri)
        if before is None:
            return None
        name = before[4]
        if self.files.get(name) is before:
            del self.files[name]
        else:
            self.others.pop(uri, None)
        return before

    def skip(self, item: Skipped) -> None:
        self.skipped.append(item)
        if item.uri:
            self.kept.append(item.uri)

    def is_kept(self, uri: str) -> bool:
        return any(uri.startswith(k) if k.endswith("/") else uri == k for k in self.kept)

    def deletions(self) -> Iterator[Event]:
        """Deleted events, at their recorded location, for what the folder no longer has."""
        for uri, _, _, location_type, location_value in itertools.chain(
            self.files.values(), self.others.values()
        ):
            if self.is_kept(uri):
                continue
            yield Event(
                change=ChangeType.DELETED,
                location_type=location_type,
                location_value=location_value,
                uri=uri,
            )
