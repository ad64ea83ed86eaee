"""Several sets from one Source Description: a folder each, one report for all.

Each set is harvested into its own folder under the destination, with its own
state, lock and sync point, so an audit of one set never counts another's
files as extra. The folder is the part of the set's Capability List URL (as
mapped to a path) that differs between the sets: `articles` and `log` for the
portal's `/resourcesync/acme/articles/capabilitylist.xml` and its sibling.

No set's folder may be another's, hold another's or take a `.resourcesync`
name: `/a/cl.xml` beside `/a/b/cl.xml` would give `a` and `a/b`, and the http
and https URLs of one list would share a folder. Each set that clashes so gets
its folder's last name and the first 8 hex digits of its URL's SHA-256 instead
(`a-1f2e3d4c`): stable from run to run, whatever order the sets are listed in,
and the sets that do not clash keep their names. A digest rather than a
refusal, because an honest source may nest its sets or list one twice. Names
are compared as a case-insensitive file system would. Should even those clash
(only a source that aims for it), the harvest is refused, naming the sets.
Once given, a set keeps its folder (`harvester.layout`).
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections import Counter
from pathlib import PurePosixPath

from harvester.mapping import RESERVED_PREFIX, UnsafePathError, resource_relpath
from harvester.report import Action, AuditResult, Difference, Outcome, SyncReport
from harvester.walk import HarvestError


def set_folders(capability_lists: list[str]) -> dict[str, PurePosixPath]:
    """A folder per Capability List URL, apart from every other set's folder and files."""
    urls = list(dict.fromkeys(capability_lists))
    try:
        paths = [resource_relpath(url).parts for url in urls]
    except UnsafePathError as error:
        raise HarvestError(f"cannot name a folder for a set: {error}") from error
    folders = _unshared(paths)
    clashing = _clashing(folders)
    folders = [
        _with_digest(url, folder or path) if index in clashing else folder
        for index, (url, folder, path) in enumerate(zip(urls, folders, paths, strict=True))
    ]
    if clashing := _clashing(folders):
        named = ", ".join(f"{urls[i]} ({PurePosixPath(*folders[i])})" for i in sorted(clashing))
        raise HarvestError(f"cannot give these sets folders apart from each other: {named}")
    return {url: PurePosixPath(*folder) for url, folder in zip(urls, folders, strict=True)}


def clashes(folder: PurePosixPath, given: list[PurePosixPath], taken: set[str]) -> bool:
    """`folder` is, holds or lies inside a folder given, takes a name already at the
    destination's root (`taken`), or a name the harvester keeps."""
    if _folded(folder.parts[0]) in {_folded(name) for name in taken}:
        return True
    folders = [*(given_folder.parts for given_folder in given), folder.parts]
    return len(folders) - 1 in _clashing(folders)


def with_digest(url: str) -> PurePosixPath:
    """The folder of a set whose own name clashes: the last name of its URL's folder (or
    host) and a digest of the URL."""
    try:
        folder = resource_relpath(url).parts[:-1]
    except UnsafePathError as error:
        raise HarvestError(f"cannot name a folder for a set: {error}") from error
    return PurePosixPath(*_with_digest(url, folder))


def _unshared(paths: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    """What each mapped path does not share with the others, less a file name all share."""
    shared = len(os.path.commonprefix(paths))
    own = [path[shared:] for path in paths]
    if all(len(path) > 1 for path in own) and len({path[-1] for path in own}) == 1:
        own = [path[:-1] for path in own]  # the same file name, in different folders
    return own


def _clashing(folders: list[tuple[str, ...]]) -> set[int]:
    """The folders equal to, inside or above another, or taking a name the harvester keeps."""
    keys = [tuple(_folded(name) for name in folder) for folder in folders]
    counts = Counter(keys)
    above = {key[:depth] for key in keys for depth in range(len(key))}
    return {
        index
        for index, key in enumerate(keys)
        if counts[key] > 1
        or key in above
        or any(key[:depth] in counts for depth in range(len(key)))
        or any(name.startswith(RESERVED_PREFIX) for name in key)
    }


def _folded(name: str) -> str:
    """`name` as a case-insensitive (and normalising) file system compares it."""
    return unicodedata.normalize("NFC", name).casefold()


def _with_digest(url: str, folder: tuple[str, ...]) -> tuple[str, ...]:
    """One folder named after `folder`'s last name and `url`; never hidden, never reserved."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:8]
    return (f"{folder[-1].lstrip('.')}-{digest}",)


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
