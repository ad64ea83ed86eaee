"""Delete stored files no document needs any more.

Superseded versions (retired by `storage.delete_document`) and what killed
runs leave behind (versions no row points at, `.partial` writes) go once the
grace period (RESOURCESYNC_SUPERSEDED_GRACE_SECONDS) has passed. Never
removed: a version a row references, one a running run staged for its dump
switch (`sitemaps.dumps.switch`), one the published tree links to, one
retired or written within the grace period, and any file whose name is not
a document version's. Beat runs the whole sweep (`sitemaps.tasks.cleanup_documents`),
and so does `manage.py cleanup_documents`; regeneration itself deletes the
expired retired versions now and then (`expire_retired_when_due`), so a
portal without beat does not fill its disk either.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.files.storage import FileSystemStorage, Storage
from django.utils import timezone

from . import publishing
from .models import (
    ChangeListPage,
    ChangePackage,
    DumpDocument,
    IndexDocument,
    ResourceListPage,
    ResourcePackage,
    RetiredDocument,
    StagedVersion,
)
from .storage import GZIP_SUFFIX, PARTIAL_SUFFIX, document_storage

#: Expired versions deleted per pass, so one pass stays short.
RETIRED_PER_SWEEP = 1000

DOCUMENT_MODELS = (ResourceListPage, ChangeListPage, IndexDocument, DumpDocument)
#: Rows and the fields that name their stored versions (a dump package: its ZIP and manifest;
#: a staged version: one a running run will switch a package to).
STORED_NAMES = (
    *((model, "storage_name") for model in DOCUMENT_MODELS),
    *(
        (model, field)
        for model in (ResourcePackage, ChangePackage)
        for field in ("storage_name", "manifest_name")
    ),
    (StagedVersion, "name"),
)
#: What `storage.save_document` writes: `<stem>.<etag>.xml`, its gzip twin, partial writes
#: (a `StreamedDocument`'s are named after the public name);
#: dump packages `<stem>.<etag>.zip` and their scratch files (`sitemaps.dumps.storage`).
_VERSION = r"[-\w]+\.[0-9a-f]{32}\.(?:xml(?:\.gz)?|zip)"
DOCUMENT_FILE = re.compile(
    rf"{_VERSION}|\.{_VERSION}\.[0-9a-f]{{32}}{re.escape(PARTIAL_SUFFIX)}"
    rf"|\.[-\w]+\.xml(?:\.gz)?\.[0-9a-f]{{32}}{re.escape(PARTIAL_SUFFIX)}"
    rf"|\.package-\w+{re.escape(PARTIAL_SUFFIX)}"
)


logger = logging.getLogger(__name__)
#: Seconds between two expiries from regeneration, in one process.
EXPIRY_INTERVAL = 60.0
_next_expiry = 0.0


def grace_period() -> timedelta:
    return timedelta(seconds=settings.RESOURCESYNC_SUPERSEDED_GRACE_SECONDS)


def remove_unreferenced(*, now: datetime | None = None, dry_run: bool = False) -> list[str]:
    """Delete the stored files past their use (only list them with `dry_run`); return them.

    `now` is the clock, for tests.
    """
    cutoff = (now or timezone.now()) - grace_period()
    storage = document_storage()
    needed = _needed(cutoff) | _linked(storage)
    removed = []
    for name in _document_files(storage):
        if name in needed or not _older(storage, name, cutoff) or _needed_now(name, cutoff):
            continue
        if not dry_run:
            storage.delete(name)
        removed.append(name)
    if not dry_run:
        RetiredDocument.objects.filter(retired_at__lte=cutoff).delete()
    return removed


def expire_retired(*, now: datetime | None = None) -> list[str]:
    """Delete the versions retired before the grace period that nothing needs again.

    Cheaper than the whole sweep: it lists no storage, it only asks about the
    names retired long enough ago. Returns the file names deleted.
    """
    cutoff = (now or timezone.now()) - grace_period()
    expired = RetiredDocument.objects.filter(retired_at__lte=cutoff)
    versions = list(expired.values_list("name", flat=True)[:RETIRED_PER_SWEEP])
    if not versions:
        return []
    storage = document_storage()
    linked = _linked(storage)
    removed = []
    for version in versions:
        if _needed_now(version, cutoff):
            continue
        for name in (version, version + GZIP_SUFFIX):
            if name not in linked and _older(storage, name, cutoff):
                storage.delete(name)
                removed.append(name)
    expired.filter(name__in=versions).delete()
    return removed


def expire_retired_when_due() -> None:
    """`expire_retired` at most once a minute per process; a failure never fails the caller."""
    global _next_expiry
    if time.monotonic() < _next_expiry:
        return
    _next_expiry = time.monotonic() + EXPIRY_INTERVAL
    try:
        removed = expire_retired()
    except Exception:
        logger.exception("Could not delete expired document versions; cleanup will")
        return
    if removed:
        logger.info("Deleted %d expired document version file(s)", len(removed))


def _with_twins(names: set[str]) -> set[str]:
    return names | {name + GZIP_SUFFIX for name in names}


def _needed(cutoff: datetime) -> set[str]:
    """Versions a row references or that were retired within the grace period."""
    names = {
        name
        for model, field in STORED_NAMES
        for name in model.objects.exclude(**{field: ""}).values_list(field, flat=True)
    }
    names |= set(
        RetiredDocument.objects.filter(retired_at__gt=cutoff).values_list("name", flat=True)
    )
    return _with_twins(names)


def _needed_now(name: str, cutoff: datetime) -> bool:
    """Asked again just before deleting: a run may have reused the version since."""
    version = name.removesuffix(GZIP_SUFFIX)
    if any(model.objects.filter(**{field: version}).exists() for model, field in STORED_NAMES):
        return True
    return RetiredDocument.objects.filter(name=version, retired_at__gt=cutoff).exists()


def _older(storage: Storage, name: str, cutoff: datetime) -> bool:
    try:
        return storage.get_modified_time(name) <= cutoff
    except FileNotFoundError:  # gone meanwhile
        return False


def _linked(storage: Storage) -> set[str]:
    """Storage names the published tree links to: nginx may be sending them."""
    root = publishing.published_root()
    if root is None or not isinstance(storage, FileSystemStorage) or not root.is_dir():
        return set()
    location = Path(os.path.realpath(storage.location))
    names = set()
    for directory, _, files in os.walk(root):
        for file in files:
            target = Path(os.path.realpath(os.path.join(directory, file)))
            if target.is_relative_to(location):
                names.add(target.relative_to(location).as_posix())
    return names


def _document_files(storage: Storage) -> Iterator[str]:
    """Every file in the storage named as a document version (or a partial write of one)."""
    if isinstance(storage, FileSystemStorage):
        names = _local_files(Path(storage.location))
    else:
        names = _listed_files(storage, "")
    return (name for name in names if DOCUMENT_FILE.fullmatch(name.rsplit("/", 1)[-1]))


def _local_files(location: Path) -> Iterator[str]:
    """Regular files under `location`; symbolic links lead elsewhere and are not followed."""
    for directory, _, files in os.walk(location):
        for file in files:
            path = Path(directory, file)
            if not path.is_symlink():
                yield path.relative_to(location).as_posix()


def _listed_files(storage: Storage, prefix: str) -> Iterator[str]:
    directories, files = storage.listdir(prefix)
    for file in files:
        yield f"{prefix}{file}"
    for directory in directories:
        yield from _listed_files(storage, f"{prefix}{directory}/")
