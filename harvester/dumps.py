"""Resource and Change Dump packages: download, read the manifest, extract.

A package (a ZIP) is checked against its dump entry's length and hash, its
`manifest.xml` is parsed with the project reader, and each bitstream is read
from the member its `path` names and written, verified against the manifest
entry, to the place its URI maps to. Member paths are only ever looked up,
never used as output paths, and nothing is extracted wholesale.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx

from harvester.client import FetchError, Response
from harvester.concurrency import map_bounded
from harvester.mapping import RESERVED_PREFIX, UnsafePathError, member_name
from harvester.package_reader import MemberError, PackageReader
from harvester.report import Action, Outcome
from harvester.session import HarvestSession
from harvester.state import LocalCopy
from harvester.storage import (
    Expected,
    SizeLimitError,
    StoredFile,
    VerificationError,
    check,
    file_digests,
    write_verified,
)
from harvester.transfer import store_entry
from harvester.walk import record_failure
from sitemaps.protocol.reader import Document, ParsedEntry, ResourceSyncParseError, parse_document

MANIFEST_NAME = "manifest.xml"
WORK_PREFIX = f"{RESERVED_PREFIX}-work-"


@dataclass(frozen=True, slots=True)
class Package:
    """A downloaded, verified dump package."""

    url: str
    path: Path


@contextmanager
def work_directory(session: HarvestSession) -> Iterator[Path]:
    """A scratch folder for packages: inside the destination (same disk), or /tmp for dry runs."""
    if session.dry_run:
        with tempfile.TemporaryDirectory(prefix="resourcesync-") as name:
            yield Path(name)
        return
    path = Path(tempfile.mkdtemp(dir=session.destination, prefix=WORK_PREFIX))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def download_packages(
    session: HarvestSession,
    entries: Sequence[ParsedEntry],
    work: Path,
    *,
    aside: dict[str, Outcome] | None = None,
) -> list[Package]:
    """Fetch packages concurrently; failures are recorded (or set `aside`) and the rest
    returned in order."""
    session.progress.start("packages", len(entries))
    targets = [work / f"package-{number:05d}.zip" for number in range(len(entries))]
    with ThreadPoolExecutor(max_workers=session.config.concurrency) as pool:
        results = list(pool.map(partial(_download_package, session), entries, targets))
    packages = []
    for entry, target, result in zip(entries, targets, results, strict=True):
        if isinstance(result, StoredFile):
            session.report.bytes += result.length
            packages.append(Package(url=entry.loc, path=target))
        else:
            record_failure(session, aside, entry.loc, result)
        session.progress.advance()
    return packages


def read_manifest(
    session: HarvestSession,
    package: Package,
    capability: str,
    *,
    aside: dict[str, Outcome] | None = None,
) -> Document | None:
    """The package's manifest, or None (a failure recorded, or set `aside`) if it is
    missing or bad."""
    try:
        manifest = _parse_manifest(session, package)
    except KeyError:
        reason = f"the package has no {MANIFEST_NAME} at its root"
    except (zipfile.BadZipFile, zlib.error, ResourceSyncParseError, OSError) as error:
        reason = f"unusable package: {error}"
    else:
        if manifest.capability == capability:
            return manifest
        reason = f"manifest is a {manifest.capability}, not {capability}"
    record_failure(session, aside, package.url, reason)
    return None


def _parse_manifest(session: HarvestSession, package: Package) -> Document:
    with zipfile.ZipFile(package.path) as archive:
        info = archive.getinfo(MANIFEST_NAME)
        if info.file_size > session.config.max_document_bytes:
            raise ResourceSyncParseError("manifest.xml is larger than the document limit")
        with archive.open(info) as handle:
            return parse_document(handle, max_bytes=session.config.max_document_bytes)


def extract_members(
    session: HarvestSession,
    package: Package,
    entries: Sequence[ParsedEntry],
    *,
    aside: dict[str, Outcome] | None = None,
) -> set[str]:
    """Write each entry's bitstream from the package to its mapped place, verified; return
    the URIs it gave (written, or already current).

    Members are written by `concurrency` threads, each reading the package
    through its own handle: the cost per file is the file system's, as for
    downloads. Failures go into `aside` when given, unrecorded: the caller
    may still get those resources elsewhere.
    """
    record = partial(_record, session, aside)
    try:
        reader = PackageReader(package.path)
    except (zipfile.BadZipFile, OSError) as error:
        for entry in entries:
            record(Outcome(entry.loc, Action.FAILED, reason=f"unusable package: {error}"))
        return set()
    named = [(entry, _member(entry)) for entry in entries]
    shared = _shared(name for _, name in named)
    for entry, name in named:
        if name in shared:
            reason = f"member {name} is named by several entries: written for none"
            record(Outcome(entry.loc, Action.FAILED, reason=reason))
    alone = [entry for entry, name in named if name not in shared]
    given: set[str] = set()
    with reader:
        work = partial(_extract_one, session, reader)
        for _, (outcome, copy) in map_bounded(session.config.concurrency, alone, work):
            record(outcome, copy)
            if outcome.action is not Action.FAILED:
                given.add(outcome.uri)
    return given


def _record(
    session: HarvestSession,
    aside: dict[str, Outcome] | None,
    outcome: Outcome,
    copy: LocalCopy | None = None,
) -> None:
    if aside is None or outcome.action is not Action.FAILED:
        session.record(outcome, copy=copy)
        return
    aside[outcome.uri] = outcome
    session.progress.advance()


def _member(entry: ParsedEntry) -> str | None:
    try:
        return member_name(entry.path or "")
    except UnsafePathError:
        return None  # `_extract_one` says why


def _shared(names: Iterable[str | None]) -> set[str]:
    """Members several entries name. Each bitstream has its own path in a package; a
    member named again and again would let a small package fill the disk."""
    counts = Counter(name for name in names if name is not None)
    return {name for name, count in counts.items() if count > 1}


def _extract_one(
    session: HarvestSession, reader: PackageReader, entry: ParsedEntry
) -> tuple[Outcome, LocalCopy | None]:
    if not session.client.is_allowed(entry.loc):
        return Outcome(entry.loc, Action.FAILED, reason="the URI is not on an allowed host"), None
    try:
        name = member_name(entry.path or "")
    except UnsafePathError as error:
        return Outcome(entry.loc, Action.FAILED, reason=f"member path: {error}"), None
    return store_entry(session, entry, partial(_extract, session, reader, name, entry))


def _extract(
    session: HarvestSession,
    reader: PackageReader,
    name: str,
    entry: ParsedEntry,
    target: Path,
    expected: Expected,
) -> StoredFile:
    try:
        # The reader stops at the member's declared size and checks its CRC, and
        # write_verified stops at the listed length: a ZIP bomb cannot fill the disk.
        return write_verified(
            session.destination,
            target,
            reader.chunks(name),
            expected,
            session.config.hash_algorithms,
            modified=entry.lastmod,
            limit=session.config.max_resource_bytes,
            checked=session.folders,
        )
    except MemberError as error:
        raise VerificationError(str(error)) from error


def _download_package(
    session: HarvestSession, entry: ParsedEntry, target: Path
) -> StoredFile | str:
    download = ResumableDownload(session, entry, target)
    try:
        return session.client.fetch(entry.loc, download.consume, headers=download.headers)
    except (
        FetchError,
        VerificationError,
        SizeLimitError,
        UnsafePathError,
        OSError,
        httpx.HTTPError,
    ) as error:
        return str(error)
    finally:
        download.part.unlink(missing_ok=True)


class ResumableDownload:
    """A package streamed to disk; a retry after a broken transfer asks only for the rest.

    The bytes received stay in `<target>.part`; the next attempt sends
    `Range: bytes=<received>-` with `If-Range` (the first answer's ETag, else
    its Last-Modified), so a package replaced meanwhile comes whole again
    (200) instead of being spliced. The whole file is then checked against
    the dump entry's length and hashes before it takes the target's name.
    """

    def __init__(self, session: HarvestSession, entry: ParsedEntry, target: Path) -> None:
        self.session = session
        self.expected = Expected.from_entry(entry, session.config.hash_algorithms)
        self.limit = session.config.max_resource_bytes
        self.target = target
        self.part = target.with_name(target.name + ".part")
        self.validator: str | None = None

    def received(self) -> int:
        return self.part.stat().st_size if self.part.exists() else 0

    def headers(self) -> dict[str, str]:
        headers = {"Accept-Encoding": "identity"}
        received = self.received()
        if received and self.validator:
            headers["Range"] = f"bytes={received}-"
            headers["If-Range"] = self.validator
        return headers

    def consume(self, response: Response) -> StoredFile:
        resumed = response.status_code == 206 and _range_start(response) == self.received()
        if response.status_code == 206 and not resumed:
            raise VerificationError("the source answered with a range that was not asked for")
        if not resumed:
            etag = response.headers.get("ETag", "")
            strong = etag if etag and not etag.startswith("W/") else None
            self.validator = strong or response.headers.get("Last-Modified")
        if self.expected.length is not None and self.expected.length > self.limit:
            raise SizeLimitError(f"the source lists {self.expected.length} bytes, over", self.limit)
        with self.part.open("ab" if resumed else "wb") as out:
            length = out.tell()
            for chunk in response.iter_bytes():
                length += len(chunk)
                if length > self.limit:
                    raise SizeLimitError("larger than", self.limit)
                if self.expected.length is not None and length > self.expected.length:
                    raise VerificationError(
                        f"more than the listed length of {self.expected.length}"
                    )
                out.write(chunk)
        return self.finish()

    def finish(self) -> StoredFile:
        """Check the whole file, then give it the target's name."""
        algorithms = {*self.session.config.hash_algorithms, *self.expected.hashes}
        length, digests = file_digests(self.part, algorithms)
        try:
            check(self.expected, length, digests)
        except VerificationError:
            self.part.unlink(missing_ok=True)
            raise
        os.replace(self.part, self.target)
        return StoredFile(length=length, digests=digests, mtime_ns=self.target.stat().st_mtime_ns)


def _range_start(response: Response) -> int | None:
    """Where a 206 answer's bytes start (`Content-Range: bytes <start>-<end>/<size>`)."""
    unit, _, spec = response.headers.get("Content-Range", "").partition(" ")
    start = spec.partition("-")[0]
    return int(start) if unit == "bytes" and start.isdigit() else None
