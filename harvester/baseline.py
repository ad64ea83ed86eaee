"""Baseline synchronization: copy everything the source holds now.

Per harvesting workflow 002: a Resource Dump (plain, or an index flattened to
all its packages) is preferred when advertised, and then the Resource List
fills what the dump left out or failed to give (a member that does not match
its manifest is fetched from its URI, with a warning; a package that cannot be
used is only a warning once the list was read whole and none of its fetches failed);
otherwise the Resource List (plain, or an index flattened to all its parts) is
downloaded entry by entry.
The sync point returned is the snapshot's `at` (its start, spec §4), where the
next incremental run picks up.

A live source changes while it is read: a listed resource may be deleted or
updated before its GET. Such a resource (an HTTP 404 or 410, or bytes that
differ from the listing) is not a failure of the baseline: it is recorded as
unsettled, and the incremental run from `at` applies the change that explains
it (or fails it, if the source lists none).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harvester.dumps import (
    Package,
    download_packages,
    extract_members,
    read_manifest,
    work_directory,
)
from harvester.report import Outcome
from harvester.session import HarvestSession
from harvester.transfer import download_resources
from harvester.unlisted import listed_paths, remove_unlisted
from harvester.walk import HarvestError, list_documents, list_parts
from sitemaps.protocol.constants import Capability
from sitemaps.protocol.reader import Document, ParsedEntry


@dataclass(slots=True)
class Dumped:
    """What a Resource Dump gave: its time, the URIs it gave, and the members and packages
    that failed, unrecorded while a Resource List may still make up for them (each is
    taken out once something did)."""

    at: dt.datetime | None = None
    held: frozenset[str] = frozenset()
    unextracted: dict[str, Outcome] = field(default_factory=dict)
    #: Packages that could not be used at all, by URL: what they held is unknown.
    unread: dict[str, Outcome] = field(default_factory=dict)


def run_baseline(session: HarvestSession, capabilities: dict[str, str]) -> dt.datetime | None:
    """Copy the whole source; return the snapshot time it reflects."""
    if not session.dry_run:
        session.state.unsettled.clear()  # this baseline supersedes the last one
    listing = capabilities.get(Capability.RESOURCE_LIST)
    if session.config.use_dumps and Capability.RESOURCE_DUMP in capabilities:
        dumped = baseline_from_dump(session, capabilities[Capability.RESOURCE_DUMP], listing)
        if listing is None:
            return dumped.at
        # A dump may leave listed resources out (a source packages what it can read) or
        # fail to give them: the list is the inventory, and the rest is fetched.
        return earliest([dumped.at, baseline_from_list(session, listing, dumped=dumped)])
    if listing is not None:
        return baseline_from_list(session, listing)
    raise HarvestError("the Capability List advertises neither a Resource List nor a Resource Dump")


def baseline_from_list(
    session: HarvestSession, url: str, *, dumped: Dumped | None = None
) -> dt.datetime | None:
    """Download every resource of the Resource List, part by part if it is an index,
    but those a dump gave."""
    dumped = dumped or Dumped()
    snapshots: list[dt.datetime | None] = []
    listed: set[PurePosixPath] = set()
    failed_before, whole = session.report.failed, False
    session.defer_changes = True
    try:
        for document, part in list_parts(session, url, Capability.RESOURCE_LIST):
            missing = [e for e in document.entries if e.loc not in dumped.held]
            note_refetched(session, missing, dumped.unextracted)
            download_resources(session, missing, phase=f"download{part}")
            snapshots.append(document.at)
            if session.config.delete_unlisted:
                listed |= listed_paths(session, document.entries)
        whole = session.report.failed == failed_before  # every part read, every GET done
    finally:
        session.defer_changes = False
        settle_dump(session, dumped, list_whole=whole)
    if session.config.delete_unlisted:
        remove_unlisted(session, listed)
    return earliest(snapshots)


def note_refetched(
    session: HarvestSession, entries: Sequence[ParsedEntry], unextracted: dict[str, Outcome]
) -> None:
    """Warn of each listed resource the dump failed to give: the list fetches it instead,
    and that fetch's outcome is the one counted."""
    for entry in entries:
        if (failed := unextracted.pop(entry.loc, None)) is not None:
            session.report.warnings.append(
                f"{entry.loc}: not taken from the Resource Dump ({failed.reason}); "
                "fetched from its URI"
            )


def settle_dump(session: HarvestSession, dumped: Dumped, *, list_whole: bool) -> None:
    """Record the dump's failures no list made up for: members it did not name, and failed
    packages unless it was read whole and none of its fetches failed (what such a package
    held is unknown, and the list is the inventory; a resource gone or changed when
    fetched is settled later, as in a baseline from the list alone)."""
    for outcome in dumped.unextracted.values():
        session.report.add(outcome)
    for outcome in dumped.unread.values():
        if not list_whole:
            session.report.add(outcome)
            continue
        session.report.warnings.append(
            f"{outcome.uri}: not taken from the Resource Dump ({outcome.reason}); "
            "the Resource List stood in for it (read whole, no fetch failed)"
        )


def baseline_from_dump(session: HarvestSession, url: str, listing: str | None) -> Dumped:
    """Download every package of the Resource Dump and extract what its manifests list.
    With a `listing` to follow, failures are left to it, and the list removes what
    neither names; without one they stand."""
    unread: dict[str, Outcome] = {}
    documents = read_dump_documents(session, url, unread if listing is not None else None)
    dumped, manifests = extract_dump(session, documents, unread)
    if listing is None:
        settle_dump(session, dumped, list_whole=False)
        if session.config.delete_unlisted:
            held = [entry for manifest in manifests for entry in manifest.entries]
            remove_unlisted(session, listed_paths(session, held))
    return dumped


def read_dump_documents(
    session: HarvestSession, url: str, unread: dict[str, Outcome] | None
) -> list[Document]:
    """The Resource Dump's documents. With a list to stand in (`unread` given), one that
    cannot be read, the top one too, is set aside there instead of failing the run."""
    return list(list_documents(session, url, Capability.RESOURCE_DUMP, aside=unread))


def extract_dump(
    session: HarvestSession, documents: list[Document], unread: dict[str, Outcome]
) -> tuple[Dumped, list[Document]]:
    """Download every package and extract its members, failures set aside (in `unread`
    for whole packages): what the dump gave, and the manifests read."""
    unextracted: dict[str, Outcome] = {}
    given: set[str] = set()
    with work_directory(session) as work:
        entries = [entry for document in documents for entry in document.entries]
        manifests = read_packages(session, entries, work, unread)
        session.progress.start("extract", sum(len(m.entries) for _, m in manifests))
        for package, manifest in manifests:
            given |= extract_members(session, package, manifest.entries, aside=unextracted)
    note_given_elsewhere(session, unextracted, given)
    at = earliest([document.at for document in documents])
    return Dumped(at, frozenset(given), unextracted, unread), [m for _, m in manifests]


def read_packages(
    session: HarvestSession,
    entries: list[ParsedEntry],
    work: Path,
    unread: dict[str, Outcome],
    kind: str = Capability.RESOURCE_DUMP_MANIFEST,
) -> list[tuple[Package, Document]]:
    """Download the dump's packages `entries` name and read each one's manifest (of
    capability `kind`); failures go to `unread`."""
    packages = download_packages(session, entries, work, aside=unread)
    return [(p, m) for p in packages if (m := read_manifest(session, p, kind, aside=unread))]


def note_given_elsewhere(
    session: HarvestSession, unextracted: dict[str, Outcome], given: set[str]
) -> None:
    """A URI in several manifests that failed in one and was given by another is no
    failure (nor fetched again); its bad member is still worth a warning."""
    for uri in [uri for uri in unextracted if uri in given]:
        failed = unextracted.pop(uri)
        session.report.warnings.append(
            f"{uri}: a member of one Resource Dump package failed ({failed.reason}); "
            "taken from another package that holds it"
        )


def earliest(snapshots: list[dt.datetime | None]) -> dt.datetime | None:
    """The earliest `at`: each part of an index starts later than the whole run began."""
    times = [at for at in snapshots if at is not None]
    return min(times) if times else None
