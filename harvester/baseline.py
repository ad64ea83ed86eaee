"""Baseline synchronization: copy everything the source holds now.

Per harvesting workflow 002: a Resource Dump (plain, or an index flattened to
all its packages) is preferred when advertised, and then the Resource List
fills what the dump left out or failed to give (a member that does not match
its manifest is fetched from its URI, with a warning); otherwise the Resource
List (plain, or an index flattened to all its parts) is downloaded entry by
entry.
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
from pathlib import PurePosixPath

from harvester.dumps import download_packages, extract_members, read_manifest, work_directory
from harvester.report import Outcome
from harvester.session import HarvestSession
from harvester.transfer import download_resources
from harvester.unlisted import listed_paths, remove_unlisted
from harvester.walk import HarvestError, list_documents
from sitemaps.protocol.constants import Capability
from sitemaps.protocol.reader import ParsedEntry


@dataclass(frozen=True, slots=True)
class Dumped:
    """What a Resource Dump gave: its time, the URIs it gave, and the members that
    failed, unrecorded while a Resource List may still give them."""

    at: dt.datetime | None = None
    held: frozenset[str] = frozenset()
    unextracted: dict[str, Outcome] = field(default_factory=dict)


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
    session.defer_changes = True
    try:
        for document in list_documents(session, url, Capability.RESOURCE_LIST):
            missing = [e for e in document.entries if e.loc not in dumped.held]
            note_refetched(session, missing, dumped.unextracted)
            download_resources(session, missing)
            snapshots.append(document.at)
            if session.config.delete_unlisted:
                listed |= listed_paths(session, document.entries)
    finally:
        session.defer_changes = False
        for outcome in dumped.unextracted.values():
            session.report.add(outcome)  # no list named it: the dump's failure stands
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


def baseline_from_dump(session: HarvestSession, url: str, listing: str | None) -> Dumped:
    """Download every package of the Resource Dump and extract what its manifest lists.
    With a `listing` to follow, failed members are left to it, and the list removes what
    neither names."""
    documents = list(list_documents(session, url, Capability.RESOURCE_DUMP))
    package_entries = [entry for document in documents for entry in document.entries]
    with work_directory(session) as work:
        packages = download_packages(session, package_entries, work)
        manifests = [
            (package, manifest)
            for package in packages
            if (manifest := read_manifest(session, package, Capability.RESOURCE_DUMP_MANIFEST))
        ]
        session.progress.start("extract", sum(len(m.entries) for _, m in manifests))
        unextracted: dict[str, Outcome] | None = {} if listing is not None else None
        for package, manifest in manifests:
            extract_members(session, package, manifest.entries, aside=unextracted)
    held = [entry for _, manifest in manifests for entry in manifest.entries]
    if session.config.delete_unlisted and listing is None:
        remove_unlisted(session, listed_paths(session, held))
    failed = unextracted or {}
    gave = frozenset(entry.loc for entry in held if entry.loc not in failed)
    return Dumped(earliest([document.at for document in documents]), gave, failed)


def earliest(snapshots: list[dt.datetime | None]) -> dt.datetime | None:
    """The earliest `at`: each part of an index starts later than the whole run began."""
    times = [at for at in snapshots if at is not None]
    return min(times) if times else None
