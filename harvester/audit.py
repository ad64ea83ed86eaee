"""Audit: compare the destination with the source's current Resource List.

Coverage: listed resources without a local copy are *missing*; files under
the destination that no listed URI maps to are *extra*. Accuracy: copies
whose length or a verifiable digest differs from the listing are *changed*.
Copies are hashed afresh (the state file is not trusted here), so an audit
also catches local corruption. Nothing is written.
"""

from __future__ import annotations

import os
from enum import StrEnum
from functools import partial
from pathlib import Path, PurePosixPath

from harvester.concurrency import map_bounded
from harvester.mapping import RESERVED_PREFIX, UnsafePathError, resource_path
from harvester.report import AuditResult, Difference
from harvester.session import HarvestSession
from harvester.storage import (
    TEMP_PREFIX,
    TEMP_SUFFIX,
    Expected,
    VerificationError,
    check,
    file_digests,
    regular_file_stat,
)
from harvester.walk import HarvestError, list_parts
from sitemaps.protocol.constants import Capability
from sitemaps.protocol.reader import ParsedEntry


class Verdict(StrEnum):
    """How one listed resource compares with its copy."""

    SAME = "same"
    MISSING = "missing"
    CHANGED = "changed"
    UNREADABLE = "unreadable"


def run_audit(session: HarvestSession, capabilities: dict[str, str]) -> AuditResult:
    """Compare every listed resource with its copy and look for files nobody lists."""
    url = capabilities.get(Capability.RESOURCE_LIST)
    if url is None:
        raise HarvestError("the Capability List advertises no Resource List to audit against")
    result = AuditResult()
    expected_paths: set[PurePosixPath] = set()
    for document, part in list_parts(session, url, Capability.RESOURCE_LIST):
        session.progress.start(f"audit{part}", len(document.entries))
        work = partial(compare, session)
        for entry, (verdict, detail, path) in map_bounded(
            session.config.concurrency, document.entries, work
        ):
            if path is not None:
                expected_paths.add(path)
            if verdict is Verdict.SAME:
                result.same += 1
            elif verdict is Verdict.MISSING:
                result.missing.append(entry.loc)
            elif verdict is Verdict.CHANGED:
                result.changed.append(Difference(entry.loc, detail))
            else:
                session.report.fail(entry.loc, detail)
            session.progress.advance()
    result.missing.sort()
    result.changed.sort(key=lambda difference: difference.uri)
    result.extra = sorted(
        str(path) for path in local_files(session.destination) if path not in expected_paths
    )
    session.report.audit = result
    return result


def compare(
    session: HarvestSession, entry: ParsedEntry
) -> tuple[Verdict, str, PurePosixPath | None]:
    """Verdict, explanation and mapped path for one listed resource."""
    try:
        target = resource_path(session.destination, entry.loc)
    except UnsafePathError as error:
        return Verdict.UNREADABLE, str(error), None
    relative = PurePosixPath(target.relative_to(session.destination).as_posix())
    info = regular_file_stat(target)
    if info is None:
        return Verdict.MISSING, "", relative
    expected = Expected.from_entry(entry, session.config.hash_algorithms)
    try:
        if expected.hashes:
            length, digests = file_digests(target, expected.hashes)
            check(expected, length, digests)
        else:
            check(expected, info.st_size, {})
    except VerificationError as error:
        return Verdict.CHANGED, str(error), relative
    except OSError as error:
        return Verdict.UNREADABLE, f"cannot read the copy: {error}", relative
    return Verdict.SAME, "", relative


def local_files(destination: Path) -> list[PurePosixPath]:
    """Every file under the destination except the harvester's own state and scratch files."""
    found: list[PurePosixPath] = []
    for root, folders, names in os.walk(destination):
        here = Path(root)
        if here == destination:
            folders[:] = [name for name in folders if not name.startswith(RESERVED_PREFIX)]
            names = [name for name in names if not name.startswith(RESERVED_PREFIX)]
        for name in names:
            if name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX):
                continue
            found.append(PurePosixPath((here / name).relative_to(destination).as_posix()))
    return found
