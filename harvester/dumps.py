"""Resource and Change Dump packages: download, read the manifest, extract.

A package (a ZIP) is checked against its dump entry's length and hash, its
`manifest.xml` is parsed with the project reader, and each bitstream is read
from the member its `path` names and written, verified against the manifest
entry, to the place its URI maps to. Member paths are only ever looked up,
never used as output paths, and nothing is extracted wholesale.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import httpx

from harvester.client import FetchError
from harvester.mapping import RESERVED_PREFIX, UnsafePathError, member_name
from harvester.report import Action, Outcome
from harvester.session import HarvestSession
from harvester.storage import (
    CHUNK_SIZE,
    Expected,
    SizeLimitError,
    StoredFile,
    VerificationError,
    write_verified,
)
from harvester.transfer import store_entry
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
    session: HarvestSession, entries: Sequence[ParsedEntry], work: Path
) -> list[Package]:
    """Fetch packages concurrently; failures are recorded and the rest returned in order."""
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
            session.report.fail(entry.loc, result)
        session.progress.advance()
    return packages


def read_manifest(session: HarvestSession, package: Package, capability: str) -> Document | None:
    """The package's manifest, or None (recorded as a failure) if it is missing or bad."""
    try:
        with zipfile.ZipFile(package.path) as archive:
            info = archive.getinfo(MANIFEST_NAME)
            if info.file_size > session.config.max_document_bytes:
                raise ResourceSyncParseError("manifest.xml is larger than the document limit")
            with archive.open(info) as handle:
                manifest = parse_document(handle, max_bytes=session.config.max_document_bytes)
    except KeyError:
        session.report.fail(package.url, f"the package has no {MANIFEST_NAME} at its root")
        return None
    except (zipfile.BadZipFile, zlib.error, ResourceSyncParseError, OSError) as error:
        session.report.fail(package.url, f"unusable package: {error}")
        return None
    if manifest.capability != capability:
        session.report.fail(package.url, f"manifest is a {manifest.capability}, not {capability}")
        return None
    return manifest


def extract_members(
    session: HarvestSession, package: Package, entries: Sequence[ParsedEntry]
) -> None:
    """Write each entry's bitstream from the package to its mapped place, verified."""
    try:
        archive = zipfile.ZipFile(package.path)
    except (zipfile.BadZipFile, OSError) as error:
        for entry in entries:
            session.record(Outcome(entry.loc, Action.FAILED, reason=f"unusable package: {error}"))
        return
    with archive:
        for entry in entries:
            if not session.client.is_allowed(entry.loc):
                reason = "the URI is not on an allowed host"
                session.record(Outcome(entry.loc, Action.FAILED, reason=reason))
                continue
            try:
                name = member_name(entry.path or "")
            except UnsafePathError as error:
                session.record(Outcome(entry.loc, Action.FAILED, reason=f"member path: {error}"))
                continue
            outcome, copy = store_entry(
                session, entry, partial(_extract, session, archive, name, entry)
            )
            session.record(outcome, copy=copy)


def _extract(
    session: HarvestSession,
    archive: zipfile.ZipFile,
    name: str,
    entry: ParsedEntry,
    target: Path,
    expected: Expected,
) -> StoredFile:
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise VerificationError(f"the package has no member {name!r}") from None
    try:
        # zipfile stops at the member's declared size and checks its CRC, and
        # write_verified stops at the listed length: a ZIP bomb cannot fill the disk.
        with archive.open(info) as member:
            return write_verified(
                session.destination,
                target,
                iter(partial(member.read, CHUNK_SIZE), b""),
                expected,
                session.config.hash_algorithms,
                modified=entry.lastmod,
                limit=session.config.max_resource_bytes,
            )
    except (zipfile.BadZipFile, zlib.error, EOFError) as error:
        raise VerificationError(f"corrupt member {name!r}: {error}") from error
    except (NotImplementedError, RuntimeError) as error:
        # zipfile's words for an unsupported compression method and for encryption.
        raise VerificationError(f"cannot read member {name!r}: {error}") from error


def _download_package(
    session: HarvestSession, entry: ParsedEntry, target: Path
) -> StoredFile | str:
    expected = Expected.from_entry(entry, session.config.hash_algorithms)
    try:
        return session.client.fetch(
            entry.loc,
            lambda response: write_verified(
                target.parent,
                target,
                response.iter_bytes(),
                expected,
                session.config.hash_algorithms,
                limit=session.config.max_resource_bytes,
            ),
            headers={"Accept-Encoding": "identity"},
        )
    except (
        FetchError,
        VerificationError,
        SizeLimitError,
        UnsafePathError,
        OSError,
        httpx.HTTPError,
    ) as error:
        return str(error)
