"""Incremental synchronization: apply the changes made in a time range.

Per harvesting workflow 002: a Change Dump is preferred when advertised (only
packages whose interval intersects the range are fetched, and the changes of a
package that cannot be used, or of a member that fails, are taken from the
Change List for that package's interval, with a warning); otherwise the
Change List is read (a plain list, or those parts of an index whose interval
intersects the range). Changes are kept when their `datetime` is within the
range, bounds included, and only the latest change per resource is applied:
created/updated are downloaded (or extracted) and verified, deleted removed.
The newest `datetime` applied is returned: it is as far as the source's
documents vouch for, in the source's own clock, so the next run starts there.

Resources a baseline found gone or changed when it fetched them are settled by
the change applied to them; one with no change listed in the range is a
failure (the source's listing was wrong, or its change is not published yet),
so the sync point stays and the next run looks again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

from harvester.changes import Change, intersects, latest_changes
from harvester.dumps import (
    Package,
    download_packages,
    extract_members,
    read_manifest,
    work_directory,
)
from harvester.report import Outcome
from harvester.session import HarvestSession
from harvester.transfer import delete_resources, download_resources
from harvester.walk import HarvestError, list_documents
from sitemaps.protocol.constants import Capability, ChangeType
from sitemaps.protocol.reader import Document, ParsedEntry


def run_incremental(
    session: HarvestSession,
    capabilities: dict[str, str],
    range_from: dt.datetime,
    range_until: dt.datetime,
) -> dt.datetime | None:
    """Apply the source's changes within [range_from, range_until]; return the newest one's time."""
    selected: list[Change[Document]] | list[Change[Origin]]
    listing = capabilities.get(Capability.CHANGE_LIST)
    if session.config.use_dumps and Capability.CHANGE_DUMP in capabilities:
        url = capabilities[Capability.CHANGE_DUMP]
        selected = incremental_from_dump(session, url, listing, range_from, range_until)
    elif listing is not None:
        selected = incremental_from_list(session, listing, range_from, range_until)
    else:
        raise HarvestError("the Capability List advertises neither a Change List nor a Change Dump")
    settle_unsettled(session, {change.uri for change in selected})
    return newest(selected)


def settle_unsettled(session: HarvestSession, changed: set[str]) -> None:
    """Forget what a baseline left unsettled once a change to it applied; fail the rest."""
    failed = {outcome.uri for outcome in session.report.failures}
    for uri, found in sorted(session.state.unsettled.items()):
        if uri not in changed:
            session.report.fail(
                uri, f"{found} when the baseline fetched it, and no change to it is listed since"
            )
        elif uri not in failed and not session.dry_run:
            del session.state.unsettled[uri]


def incremental_from_list(
    session: HarvestSession, url: str, range_from: dt.datetime, range_until: dt.datetime
) -> list[Change[Document]]:
    """Download created/updated and remove deleted resources named by the Change List."""
    documents = _documents_in_range(session, url, Capability.CHANGE_LIST, range_from, range_until)
    changes = [
        Change(entry=entry, origin=document, position=position)
        for position, (document, entry) in enumerate(_entries(documents))
    ]
    _warn_on_gap(session, documents, range_from)
    selected = latest_changes(changes, range_from, range_until)
    download_resources(session, [c.entry for c in selected if c.kind != ChangeType.DELETED])
    delete_resources(session, [c.uri for c in selected if c.kind == ChangeType.DELETED])
    return selected


#: Where a change of a Change Dump run comes from: a package, or the Change List standing in.
Origin = Package | Document


def incremental_from_dump(
    session: HarvestSession,
    url: str,
    listing: str | None,
    range_from: dt.datetime,
    range_until: dt.datetime,
) -> list[Change[Origin]]:
    """Extract created/updated bitstreams from the Change Dump's packages, remove deleted ones;
    what a package or member fails to give, the Change List (`listing`) gives if it can."""
    documents = _documents_in_range(session, url, Capability.CHANGE_DUMP, range_from, range_until)
    intervals = {
        entry.loc: entry
        for document in documents
        for entry in document.entries
        if intersects(entry.from_, entry.until, range_from, range_until)
    }
    _warn_on_gap(session, documents, range_from)
    unread: dict[str, Outcome] = {}
    unextracted: dict[str, Outcome] = {}
    stand_in = ChangeListStandIn(session, listing, range_from, range_until)
    with work_directory(session) as work:
        changes: list[Change[Origin]] = []
        for package in download_packages(session, list(intervals.values()), work, aside=unread):
            kind = Capability.CHANGE_DUMP_MANIFEST
            manifest = read_manifest(session, package, kind, aside=unread)
            for entry in manifest.entries if manifest else ():
                changes.append(Change(entry=entry, origin=package, position=len(changes)))
        changes += stand_in.for_packages([intervals[url] for url in unread], unread, len(changes))
        selected = latest_changes(changes, range_from, range_until)
        packed = [c for c in selected if isinstance(c.origin, Package) and _brings_bytes(c)]
        session.progress.start("extract", len(packed))
        for package in dict.fromkeys(_package(change) for change in packed):
            entries = [c.entry for c in packed if c.origin is package]
            extract_members(session, package, entries, aside=unextracted)
    failed = [c for c in packed if c.uri in unextracted]
    given = {c.uri: c for c in stand_in.for_members(failed, intervals, unextracted)}
    selected = [given.get(c.uri, c) for c in selected]
    listed = [c for c in selected if _brings_bytes(c) and not isinstance(c.origin, Package)]
    download_resources(session, [c.entry for c in listed])
    delete_resources(session, [c.uri for c in selected if c.kind == ChangeType.DELETED])
    return selected


def _brings_bytes(change: Change[Origin]) -> bool:
    """Whether the change brings bytes: created or updated."""
    return change.kind != ChangeType.DELETED


class ChangeListStandIn:
    """The Change List read for the intervals of packages (or members) that failed, so
    their changes are still applied; without a list read whole their failures stand."""

    def __init__(
        self,
        session: HarvestSession,
        listing: str | None,
        range_from: dt.datetime,
        range_until: dt.datetime,
    ) -> None:
        self.session, self.listing = session, listing
        self.range_from, self.range_until = range_from, range_until

    def for_packages(
        self, packages: list[ParsedEntry], unread: dict[str, Outcome], position: int
    ) -> list[Change[Origin]]:
        """The listed changes in the failed packages' intervals, each package a warning;
        or none, each package a failure."""
        listed = self._changes_within(packages, position) if packages else None
        for outcome in unread.values():
            if listed is None:
                self.session.report.add(outcome)
            else:
                self.session.report.warnings.append(
                    f"{outcome.uri}: package not taken from the Change Dump ({outcome.reason}); "
                    "its changes were taken from the Change List"
                )
        return list(listed or [])

    def for_members(
        self,
        failed: list[Change[Origin]],
        intervals: dict[str, ParsedEntry],
        unextracted: dict[str, Outcome],
    ) -> list[Change[Origin]]:
        """The latest listed change of each failed member's resource within its package's
        interval, with a warning; a member the list has no change for stays a failure."""
        packages = [intervals[_package(change).url] for change in failed]
        listed = self._changes_within(packages, 0) if failed else None
        latest = {c.uri: c for c in latest_changes(listed or [], self.range_from, self.range_until)}
        given: list[Change[Origin]] = []
        for change in failed:
            outcome = unextracted[change.uri]
            if (stand_in := latest.get(change.uri)) is None:
                self.session.report.add(outcome)
                continue
            given.append(stand_in)
            self.session.report.warnings.append(
                f"{change.uri}: not taken from the Change Dump package {_package(change).url} "
                f"({outcome.reason}); taken from the Change List"
            )
        return given

    def _changes_within(
        self, packages: list[ParsedEntry], position: int
    ) -> list[Change[Origin]] | None:
        """The Change List's changes whose `datetime` lies in one of the packages' intervals
        (one without a `datetime` cannot be placed in one), or None if it is not advertised
        or not read whole (a failure recorded)."""
        if self.listing is None:
            return None
        start = max(self.range_from, min(p.from_ or self.range_from for p in packages))
        end = min(self.range_until, max(p.until or self.range_until for p in packages))
        failed_before = self.session.report.failed
        try:
            documents = _documents_in_range(
                self.session, self.listing, Capability.CHANGE_LIST, start, end
            )
        except HarvestError as error:
            self.session.report.fail(self.listing, str(error))
            return None
        if self.session.report.failed != failed_before:
            return None  # a part failed: what the packages held may be in it
        return [
            Change(entry=entry, origin=document, position=position + number)
            for number, (document, entry) in enumerate(_entries(documents))
            if entry.datetime is not None
            and any(intersects(p.from_, p.until, entry.datetime, entry.datetime) for p in packages)
        ]


def _package(change: Change[Origin]) -> Package:
    """The package a change was read from."""
    assert isinstance(change.origin, Package)
    return change.origin


def newest(changes: Iterable[Change[Any]]) -> dt.datetime | None:
    """The latest `datetime` among the changes; those without one cannot be placed."""
    times = [change.entry.datetime for change in changes if change.entry.datetime is not None]
    return max(times) if times else None


def _documents_in_range(
    session: HarvestSession,
    url: str,
    capability: str,
    range_from: dt.datetime,
    range_until: dt.datetime,
) -> list[Document]:
    def parts_in_range(index: Document) -> list[ParsedEntry]:
        parts = [p for p in index.entries if intersects(p.from_, p.until, range_from, range_until)]
        return sorted(parts, key=lambda part: part.from_ or dt.datetime.min.replace(tzinfo=dt.UTC))

    documents = list_documents(session, url, capability, select=parts_in_range)
    return [d for d in documents if intersects(d.from_, d.until, range_from, range_until)]


def _entries(documents: Iterable[Document]) -> Iterable[tuple[Document, ParsedEntry]]:
    for document in documents:
        for entry in document.entries:
            yield document, entry


def _warn_on_gap(
    session: HarvestSession, documents: list[Document], range_from: dt.datetime
) -> None:
    """The source only vouches for changes since its documents' `from` (spec §4)."""
    starts = [document.from_ for document in documents if document.from_ is not None]
    covered_from = min(starts) if starts else None
    if covered_from is None:
        session.report.warnings.append(
            f"no change document of the source covers {range_from.isoformat()}; "
            "changes may be missed, run a baseline"
        )
    elif covered_from > range_from:
        session.report.warnings.append(
            f"the source lists changes only since {covered_from.isoformat()}, after the range "
            f"start {range_from.isoformat()}; changes in between may be missed, run a baseline"
        )
