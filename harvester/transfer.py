"""Getting resources into the destination and out of it.

Downloads run in a thread pool sized by `concurrency`; each worker maps the
URI, skips a copy that is already right, or writes a verified new one, and
returns an outcome that the session's thread records. A failed transfer leaves
the previous copy in place.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

import httpx

from harvester.client import FetchError
from harvester.concurrency import map_bounded
from harvester.mapping import UnsafePathError, resource_path
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
    regular_file_stat,
    remove_copy,
    write_verified,
)
from sitemaps.protocol.reader import ParsedEntry

#: Lowest mirror priority, used when a duplicate link gives none (spec: absent = 999999).
LOWEST_PRIORITY = 999_999

Writer = Callable[[Path, Expected], StoredFile]
Result = tuple[Outcome, LocalCopy | None]


def download_resources(
    session: HarvestSession, entries: Sequence[ParsedEntry], *, phase: str = "download"
) -> None:
    """GET every entry concurrently; copies that already match are skipped."""
    session.progress.start(phase, len(entries))
    work = partial(download_one, session)
    for _, (outcome, copy) in map_bounded(session.config.concurrency, entries, work):
        session.record(outcome, copy=copy)


def download_one(session: HarvestSession, entry: ParsedEntry) -> Result:
    """Fetch one resource from its URI, falling back to its mirrors in priority order."""

    def write(target: Path, expected: Expected) -> StoredFile:
        errors: list[Exception] = []
        for url in candidate_urls(session, entry):
            try:
                return session.client.fetch(
                    url,
                    lambda response: write_verified(
                        session.destination,
                        target,
                        response.iter_bytes(),
                        expected,
                        session.config.hash_algorithms,
                        modified=entry.lastmod,
                        limit=session.config.max_resource_bytes,
                        checked=session.folders,
                    ),
                    headers={"Accept-Encoding": "identity"},
                )
            except (FetchError, VerificationError, httpx.HTTPError) as error:
                errors.append(error)
            # SizeLimitError is not caught: a mirror is no smaller.
        raise combined_error(entry, errors)

    return store_entry(session, entry, write)


def combined_error(entry: ParsedEntry, errors: list[Exception]) -> Exception:
    """One error for every URL tried: gone or different only if every one said so."""
    if len(errors) == 1:
        return errors[0]
    reason = "; ".join(map(str, errors)) or "the URL is not on an allowed host"
    if errors and all(isinstance(error, FetchError) and error.gone for error in errors):
        return FetchError(entry.loc, reason, status=404)
    if errors and all(
        isinstance(error, VerificationError) or (isinstance(error, FetchError) and error.gone)
        for error in errors
    ):
        return VerificationError(reason)
    return FetchError(entry.loc, reason)


def store_entry(session: HarvestSession, entry: ParsedEntry, write: Writer) -> Result:
    """Map, skip if current, else write through `write`; never raises for one resource."""
    try:
        target = resource_path(session.destination, entry.loc, session.folders)
        current = current_copy(session, entry, target)
        if current is not None:
            return Outcome(entry.loc, Action.SKIPPED), current
        if session.dry_run:
            return Outcome(entry.loc, Action.DOWNLOADED, bytes=entry.length or 0), None
        expected = Expected.from_entry(entry, session.config.hash_algorithms)
        stored = write(target, expected)
    except (UnsafePathError, VerificationError, SizeLimitError, FetchError, OSError) as error:
        return Outcome(entry.loc, failed_action(session, error), reason=str(error)), None
    record = LocalCopy(
        path=target.relative_to(session.destination).as_posix(),
        length=stored.length,
        digests=stored.digests,
        mtime_ns=stored.mtime_ns,
        lastmod=entry.lastmod,
    )
    return Outcome(entry.loc, Action.DOWNLOADED, bytes=stored.length), record


def failed_action(session: HarvestSession, error: Exception) -> Action:
    """FAILED, unless a baseline reading a live source may leave it to the incremental run."""
    if session.defer_changes:
        if isinstance(error, FetchError) and error.gone:
            return Action.GONE
        if isinstance(error, VerificationError):
            return Action.CHANGED
    return Action.FAILED


def current_copy(session: HarvestSession, entry: ParsedEntry, target: Path) -> LocalCopy | None:
    """The record of the local copy if it already matches the entry, else None.

    With a listed digest we compare digests (from the state when the file is
    untouched since we wrote it, else by hashing it). Without one, a copy
    counts as current only if we wrote it for the same lastmod and length.
    """
    info = regular_file_stat(target)
    if info is None or (entry.length is not None and info.st_size != entry.length):
        return None
    expected = Expected.from_entry(entry, session.config.hash_algorithms)
    known = session.state.resources.get(entry.loc)
    untouched = known is not None and (known.length, known.mtime_ns) == (
        info.st_size,
        info.st_mtime_ns,
    )
    if not expected.hashes:
        if untouched and known is not None and entry.lastmod and known.lastmod == entry.lastmod:
            return known
        return None
    if untouched and known is not None and set(expected.hashes) <= set(known.digests):
        length, digests = known.length, known.digests
    else:
        length, digests = file_digests(target, session.config.hash_algorithms)
    try:
        check(expected, length, digests)
    except VerificationError:
        return None
    return LocalCopy(
        path=target.relative_to(session.destination).as_posix(),
        length=length,
        digests=digests,
        mtime_ns=info.st_mtime_ns,
        lastmod=entry.lastmod,
    )


def delete_resources(session: HarvestSession, uris: Sequence[str]) -> None:
    """Remove the copies of deleted resources (unless the configuration keeps them)."""
    session.progress.start("delete", len(uris))
    for uri in uris:
        outcome = delete_one(session, uri)
        gone = outcome.action is Action.DELETED or (
            outcome.action is Action.SKIPPED and session.config.delete
        )
        session.record(outcome, forget=gone)


def delete_one(session: HarvestSession, uri: str) -> Outcome:
    """Remove one copy; a copy that is already gone counts as skipped."""
    if not session.config.delete:
        return Outcome(uri, Action.SKIPPED, reason="deletion disabled by configuration")
    if not session.client.is_allowed(uri):
        # Never fetched from there, so no copy of ours: a hostile source could otherwise
        # name any file whose first folder looks like a host name.
        return Outcome(uri, Action.SKIPPED, reason="not on an allowed host: nothing of ours")
    try:
        target = resource_path(session.destination, uri)
        if session.dry_run:
            exists = regular_file_stat(target) is not None
            return Outcome(uri, Action.DELETED if exists else Action.SKIPPED)
        removed = remove_copy(session.destination, target)
    except (UnsafePathError, OSError) as error:
        return Outcome(uri, Action.FAILED, reason=str(error))
    return Outcome(uri, Action.DELETED if removed else Action.SKIPPED)


def candidate_urls(session: HarvestSession, entry: ParsedEntry) -> list[str]:
    """The entry's URI, then its `duplicate` mirrors by priority, on allowed hosts only."""
    mirrors = sorted(entry.links_with("duplicate"), key=lambda link: link.pri or LOWEST_PRIORITY)
    urls = [entry.loc, *(link.href for link in mirrors)]
    return [url for url in dict.fromkeys(urls) if session.client.is_allowed(url)]
