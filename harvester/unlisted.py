"""`harvest --delete`: remove local copies the source no longer lists, as resync's --delete.

Only after a baseline that read the whole listing: with a part missing, every
file it lists would look unlisted, so nothing is removed and a warning says why.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

from harvester.audit import local_files
from harvester.mapping import UnsafePathError, resource_path
from harvester.report import Action, Outcome
from harvester.session import HarvestSession
from harvester.storage import remove_copy
from sitemaps.protocol.reader import ParsedEntry


def listed_paths(session: HarvestSession, entries: Iterable[ParsedEntry]) -> set[PurePosixPath]:
    """Where the listed resources live under the destination."""
    paths = set()
    for entry in entries:
        try:
            target = resource_path(session.destination, entry.loc)
        except UnsafePathError:
            continue
        paths.add(PurePosixPath(target.relative_to(session.destination).as_posix()))
    return paths


def remove_unlisted(session: HarvestSession, listed: set[PurePosixPath]) -> None:
    """Delete every local file no listed resource maps to (or say what would go, dry)."""
    if session.report.failures:
        session.report.warnings.append(
            "--delete: nothing removed, because part of the listing could not be read"
        )
        return
    if not session.destination.is_dir():
        return
    unlisted = [path for path in local_files(session.destination) if path not in listed]
    uris = {record.path: uri for uri, record in session.state.resources.items()}
    session.progress.start("delete unlisted", len(unlisted))
    for path in unlisted:
        uri = uris.get(str(path), str(path))
        session.record(remove_one(session, path, uri), forget=True)


def remove_one(session: HarvestSession, path: PurePosixPath, uri: str) -> Outcome:
    if session.dry_run:
        return Outcome(uri, Action.DELETED, reason="no longer listed")
    try:
        removed = remove_copy(session.destination, session.destination / path)
    except (UnsafePathError, OSError) as error:
        return Outcome(uri, Action.FAILED, reason=str(error))
    return Outcome(uri, Action.DELETED if removed else Action.SKIPPED, reason="no longer listed")
