"""Several sets from one Source Description: a folder each, one report for all.

Each set is harvested into its own folder under the destination, with its own
state, lock and sync point, so an audit of one set never counts another's
files as extra. The folder is the part of the set's Capability List URL (as
mapped to a path) that differs between the sets: `articles` and `log` for the
portal's `/resourcesync/acme/articles/capabilitylist.xml` and its sibling.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from harvester.mapping import UnsafePathError, resource_relpath
from harvester.report import Action, AuditResult, Difference, Outcome, SyncReport
from harvester.walk import HarvestError


def set_folders(capability_lists: list[str]) -> dict[str, PurePosixPath]:
    """A distinct folder per Capability List URL: what their mapped paths do not share."""
    try:
        paths = [resource_relpath(url).parts for url in capability_lists]
    except UnsafePathError as error:
        raise HarvestError(f"cannot name a folder for a set: {error}") from error
    shared = len(os.path.commonprefix(paths))
    own = [path[shared:] for path in paths]
    if all(len(path) > 1 for path in own) and len({path[-1] for path in own}) == 1:
        own = [path[:-1] for path in own]  # the same file name, in different folders
    return {url: PurePosixPath(*path) for url, path in zip(capability_lists, own, strict=True)}


def merge_reports(parts: dict[PurePosixPath, SyncReport]) -> SyncReport:
    """One report for several sets: counts added up, each set's findings under its folder."""
    modes = sorted({part.mode for part in parts.values()})
    merged = SyncReport(mode="+".join(modes), dry_run=any(p.dry_run for p in parts.values()))
    merged.sets = {str(folder): part for folder, part in parts.items()}
    for folder, part in parts.items():
        merged.downloaded += part.downloaded
        merged.deleted += part.deleted
        merged.skipped += part.skipped
        merged.bytes += part.bytes
        merged.failures += part.failures
        merged.deferred += part.deferred
        merged.warnings += [f"{folder}: {warning}" for warning in part.warnings]
        if part.audit is not None:
            merged.audit = _merge_audit(merged.audit or AuditResult(), folder, part.audit)
    merged.started = min(part.started for part in parts.values())
    merged.finished = max(part.finished or part.started for part in parts.values())
    return merged


def failed_set(mode: str, capability_list_url: str, error: Exception) -> SyncReport:
    """The report of a set that could not be harvested at all."""
    report = SyncReport(mode=mode)
    report.failures.append(Outcome(capability_list_url, Action.FAILED, reason=str(error)))
    report.finished = report.started
    return report


def _merge_audit(total: AuditResult, folder: PurePosixPath, part: AuditResult) -> AuditResult:
    total.same += part.same
    total.missing += part.missing
    total.extra += [str(folder / path) for path in part.extra]
    total.changed += [Difference(d.uri, d.reason) for d in part.changed]
    return total
