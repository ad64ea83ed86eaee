"""Incremental synchronization: apply the changes made in a time range.

Per harvesting workflow 002: a Change Dump is preferred when advertised (only
packages whose interval intersects the range are fetched, and the changes of a
package that cannot be used, or of a member that fails, are taken from the
Change List for that package's interval, with a warning, if the list read
spans that interval and neither it there nor a package read has an undated
change); otherwise the
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
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from harvester.baseline import read_packages
from harvester.changes import Change, intersects, latest_changes
from harvester.dumps import Package, extract_members, work_directory
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
    download_resources(session, [c.entry for c in selected if _brings_bytes(c)])
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
    unread: dict[str, Outcome] = {}
    documents, aside = _read_dump(session, url, listing, range_from, range_until, unread)
    packages = {
        entry.loc: entry
        for document in documents
        for entry in document.entries
        if intersects(entry.from_, entry.until, range_from, range_until)
    }
    unextracted: dict[str, Outcome] = {}
    with work_directory(session) as work:
        kind = Capability.CHANGE_DUMP_MANIFEST
        manifests = read_packages(session, list(packages.values()), work, unread, kind)
        packed = _changes_of(manifests)
        _extract(session, latest_changes(packed, range_from, range_until), unextracted)
    # The list is read once, after every failure is known; a package's change a later one
    # in a failed package's interval supersedes was extracted in vain, and is overwritten.
    stand_in = ChangeListStandIn(session, listing, range_from, range_until)
    selected = stand_in.make_up(packed, aside | packages, unread, unextracted)
    listed = [c for c in selected if _brings_bytes(c) and not isinstance(c.origin, Package)]
    download_resources(session, [c.entry for c in listed])
    delete_resources(session, [c.uri for c in selected if c.kind == ChangeType.DELETED])
    return selected


def _changes_of(manifests: list[tuple[Package, Document]]) -> list[Change[Origin]]:
    """The changes the packages' manifests list, numbered in the dump's order."""
    entries = [(package, entry) for package, manifest in manifests for entry in manifest.entries]
    return [
        Change(entry=entry, origin=package, position=position)
        for position, (package, entry) in enumerate(entries)
    ]


def _extract(
    session: HarvestSession, selected: list[Change[Origin]], unextracted: dict[str, Outcome]
) -> None:
    """Extract the members of the selected changes that bring bytes; failures go aside."""
    packed = [c for c in selected if _brings_bytes(c)]
    session.progress.start("extract", len(packed))
    for package in dict.fromkeys(_package(change) for change in packed):
        entries = [c.entry for c in packed if c.origin is package]
        extract_members(session, package, entries, aside=unextracted)


def _brings_bytes(change: Change[Any]) -> bool:
    """Whether the change brings bytes: created or updated."""
    return change.kind != ChangeType.DELETED


class ChangeListStandIn:
    """The Change List, read once for the intervals of all the packages (and members' packages)
    that failed, so their changes are still applied; a failure stands where the list is not
    read whole, does not span the package's interval within the range (it starts later, as
    after retention, or ends earlier), or has changes in it without a `datetime` (which
    cannot be placed in the interval, so what the package held is unknown)."""

    def __init__(
        self,
        session: HarvestSession,
        listing: str | None,
        range_from: dt.datetime,
        range_until: dt.datetime,
    ) -> None:
        self.session, self.listing = session, listing
        self.range_from, self.range_until = range_from, range_until
        #: Whether a package read holds an undated change: a listed change is ordered
        #: against it only by position, which says nothing across the two sources.
        self.undated_read = False

    def make_up(
        self,
        packed: list[Change[Origin]],
        intervals: dict[str, ParsedEntry],
        unread: dict[str, Outcome],
        unextracted: dict[str, Outcome],
    ) -> list[Change[Origin]]:
        """The latest change per resource of the packages read and of the list for the
        packages that failed (a package's change winning over the list's copy of it), each
        failed member replaced by the list's change to it, or recorded as a failure."""
        self.undated_read = any(change.entry.datetime is None for change in packed)
        selected = latest_changes(packed, self.range_from, self.range_until)
        failed = [c for c in selected if c.uri in unextracted]
        needed = [intervals[url] for url in unread] + [
            intervals[_package(change).url] for change in failed
        ]
        documents = self._read(needed) if needed else None
        listed = self._for_packages(documents, [intervals[url] for url in unread], unread)
        selected = latest_changes(listed + packed, self.range_from, self.range_until)
        given = self._for_members(documents, failed, selected, intervals, unextracted)
        return [given.get(change.uri, change) for change in selected]

    def _for_packages(
        self,
        documents: list[Document] | None,
        packages: list[ParsedEntry],
        unread: dict[str, Outcome],
    ) -> list[Change[Origin]]:
        """The listed changes in the failed packages' intervals the list stands in for, each
        package a warning; each other package a failure. Positioned before every package's
        change, so a package read gives a change the list also holds (at a shared bound)."""
        entries = list(_entries(documents or []))
        listed: list[Change[Origin]] = []
        for package in packages:
            outcome = unread[package.loc]
            start, end = self._bounds(package)
            why = self._why_not(documents, start, end, entries, uri=None)
            if why:
                self.session.report.add(_because(outcome, why))
                continue
            listed += [
                Change(entry=entry, origin=document, position=number - len(entries))
                for number, (document, entry) in enumerate(entries)
                if entry.datetime is not None and start <= entry.datetime <= end
            ]
            self.session.report.warnings.append(
                f"{outcome.uri}: not taken from the Change Dump ({outcome.reason}); "
                "its changes were taken from the Change List"
            )
        return listed

    def _for_members(
        self,
        documents: list[Document] | None,
        failed: list[Change[Origin]],
        selected: list[Change[Origin]],
        intervals: dict[str, ParsedEntry],
        unextracted: dict[str, Outcome],
    ) -> dict[str, Change[Origin]]:
        """By URI, the list's latest change to each failed member's resource within its
        package's interval, no older than the member's change, with a warning; a member the
        list gives no such change for stays a failure (one a later listed change superseded
        needs none)."""
        entries = list(_entries(documents or []))
        latest = {change.uri: change for change in selected}
        given: dict[str, Change[Origin]] = {}
        for change in failed:
            outcome, package = unextracted[change.uri], _package(change).url
            superseded = latest[change.uri] is not change
            start, end = self._bounds(intervals[package])
            start = max(start, change.entry.datetime or start)
            why = self._why_not(documents, start, end, entries, uri=change.uri)
            stand_in = None if why else self._latest(entries, change.uri, start, end)
            if not superseded and stand_in is None:
                self.session.report.add(
                    _because(outcome, why or "the Change List has no change to it")
                )
                continue
            if stand_in is not None and not superseded:
                given[change.uri] = stand_in
            self.session.report.warnings.append(
                f"{change.uri}: not taken from the Change Dump package {package} "
                f"({outcome.reason}); taken from the Change List"
            )
        return given

    @staticmethod
    def _latest(
        entries: list[tuple[Document, ParsedEntry]],
        uri: str,
        start: dt.datetime,
        end: dt.datetime,
    ) -> Change[Origin] | None:
        """The list's latest dated change to `uri` within [start, end]."""
        changes: list[Change[Origin]] = [
            Change(entry=entry, origin=document, position=number)
            for number, (document, entry) in enumerate(entries)
            if entry.loc == uri and entry.datetime is not None
        ]
        return next(iter(latest_changes(changes, start, end)), None)

    def _bounds(self, package: ParsedEntry) -> tuple[dt.datetime, dt.datetime]:
        """The package's interval within the run's range."""
        start = max(self.range_from, package.from_ or self.range_from)
        return start, min(self.range_until, package.until or self.range_until)

    def _why_not(
        self,
        documents: list[Document] | None,
        start: dt.datetime,
        end: dt.datetime,
        entries: list[tuple[Document, ParsedEntry]],
        uri: str | None,
    ) -> str:
        """Why the list cannot vouch for the changes (to `uri`, or all) in [start, end]:
        not read whole, undated changes in a package read, the list not spanning it, or
        undated changes in a document of it that overlaps it."""
        if documents is None:
            return "no Change List read whole stands in"
        if self.undated_read:
            return "a package read holds changes without a datetime"
        if not _spans(documents, start, end):
            return f"the Change List does not span {start.isoformat()}..{end.isoformat()}"
        if any(
            entry.datetime is None
            and uri in (None, entry.loc)
            and intersects(document.from_, document.until, start, end)
            for document, entry in entries
        ):
            return "the Change List has changes without a datetime that may lie in it"
        return ""

    def _read(self, intervals: list[ParsedEntry]) -> list[Document] | None:
        """The Change List's documents over the failed intervals, read once; None if it is not
        advertised or not read whole (a failure recorded)."""
        if self.listing is None:
            return None
        bounds = [self._bounds(interval) for interval in intervals]
        start, end = min(b[0] for b in bounds), max(b[1] for b in bounds)
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
        return documents


def _spans(documents: list[Document], start: dt.datetime, end: dt.datetime) -> bool:
    """Whether the documents' [from, until] intervals, together, cover [start, end] without
    a gap (one with no `until` reaches the present; one with no `from` vouches for none)."""
    reached = start
    for document in sorted(
        (d for d in documents if d.from_ is not None), key=lambda d: d.from_ or start
    ):
        assert document.from_ is not None
        if document.from_ > reached:
            break
        if document.until is None or document.until >= end:
            return True
        reached = max(reached, document.until)
    return False


def _because(outcome: Outcome, why: str) -> Outcome:
    """The failure with why the Change List did not make up for it."""
    return replace(outcome, reason=f"{outcome.reason}; {why}")


def _package(change: Change[Origin]) -> Package:
    """The package a change was read from."""
    assert isinstance(change.origin, Package)
    return change.origin


def newest(changes: Iterable[Change[Any]]) -> dt.datetime | None:
    """The latest `datetime` among the changes; those without one cannot be placed."""
    times = [change.entry.datetime for change in changes if change.entry.datetime is not None]
    return max(times) if times else None


def _read_dump(
    session: HarvestSession,
    url: str,
    listing: str | None,
    range_from: dt.datetime,
    range_until: dt.datetime,
    unread: dict[str, Outcome],
) -> tuple[list[Document], dict[str, ParsedEntry]]:
    """The Change Dump's documents in range, and the intervals of those set aside.

    With a Change List to stand in, a document that cannot be read (a part of the
    index, or the top one) goes to `unread` as a failed package does, with its
    interval (the part's, or the whole range) for the list to make up for.
    """
    aside = unread if listing is not None else None
    parts: dict[str, ParsedEntry] = {}
    capability = Capability.CHANGE_DUMP
    documents = _documents_in_range(
        session, url, capability, range_from, range_until, aside=aside, parts=parts
    )
    if url in unread:
        return [], {url: ParsedEntry(loc=url)}  # no interval of its own: the whole range
    aside_parts = {loc: parts[loc] for loc in unread}
    _warn_on_gap(session, [*documents, *aside_parts.values()], range_from)
    return documents, aside_parts


def _documents_in_range(
    session: HarvestSession,
    url: str,
    capability: str,
    range_from: dt.datetime,
    range_until: dt.datetime,
    *,
    aside: dict[str, Outcome] | None = None,
    parts: dict[str, ParsedEntry] | None = None,
) -> list[Document]:
    """The documents (or index parts) in range; parts failing go `aside` when given, and
    the index entries of the parts chosen into `parts`."""

    def parts_in_range(index: Document) -> list[ParsedEntry]:
        chosen = [p for p in index.entries if intersects(p.from_, p.until, range_from, range_until)]
        if parts is not None:
            parts.update((part.loc, part) for part in chosen)
        return sorted(chosen, key=lambda part: part.from_ or dt.datetime.min.replace(tzinfo=dt.UTC))

    documents = list_documents(session, url, capability, select=parts_in_range, aside=aside)
    return [d for d in documents if intersects(d.from_, d.until, range_from, range_until)]


def _entries(documents: Iterable[Document]) -> Iterable[tuple[Document, ParsedEntry]]:
    for document in documents:
        for entry in document.entries:
            yield document, entry


def _warn_on_gap(
    session: HarvestSession, documents: Sequence[Document | ParsedEntry], range_from: dt.datetime
) -> None:
    """The source only vouches for changes since its documents' `from` (spec §4); a part set
    aside does by its index entry (the Change List stands in for it, or it fails)."""
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
