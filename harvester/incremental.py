"""Incremental synchronization: apply the changes made in a time range.

Per harvesting workflow 002: a Change Dump is preferred when advertised (only
packages whose interval intersects the range are fetched); otherwise the
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
    selected: list[Change[Document]] | list[Change[Package]]
    if session.config.use_dumps and Capability.CHANGE_DUMP in capabilities:
        url = capabilities[Capability.CHANGE_DUMP]
        selected = incremental_from_dump(session, url, range_from, range_until)
    elif Capability.CHANGE_LIST in capabilities:
        url = capabilities[Capability.CHANGE_LIST]
        selected = incremental_from_list(session, url, range_from, range_until)
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


def incremental_from_dump(
    session: HarvestSession, url: str, range_from: dt.datetime, range_until: dt.datetime
) -> list[Change[Package]]:
    """Extract created/updated bitstreams from the Change Dump's packages, remove deleted ones."""
    documents = _documents_in_range(session, url, Capability.CHANGE_DUMP, range_from, range_until)
    package_entries = [
        entry
        for document in documents
        for entry in document.entries
        if intersects(entry.from_, entry.until, range_from, range_until)
    ]
    _warn_on_gap(session, documents, range_from)
    with work_directory(session) as work:
        changes: list[Change[Package]] = []
        for package in download_packages(session, package_entries, work):
            manifest = read_manifest(session, package, Capability.CHANGE_DUMP_MANIFEST)
            for entry in manifest.entries if manifest else ():
                changes.append(Change(entry=entry, origin=package, position=len(changes)))
        selected = latest_changes(changes, range_from, range_until)
        updates = [change for change in selected if change.kind != ChangeType.DELETED]
        session.progress.start("extract", len(updates))
        for package in dict.fromkeys(change.origin for change in updates):
            extract_members(session, package, [c.entry for c in updates if c.origin is package])
    delete_resources(session, [c.uri for c in selected if c.kind == ChangeType.DELETED])
    return selected


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
