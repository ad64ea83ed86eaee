"""The public documents as plain files, for a front web server to send.

Stored versions have content-addressed names, so finding the current one
takes the database row. For public sets this module also keeps a tree of
symbolic links, `<published>/resourcesync/<provider>/<set>/<public name>`
(and its `.gz` twin), pointing at the current versions. nginx
(deploy/nginx.conf) answers from that tree with sendfile and gzip_static and
never wakes Python; whatever is absent (protected sets, capabilities not
published, inactive providers, the Capability List, documents not written
yet) falls through to Django, which stays the authority.

A link is replaced atomically (rename over it) before the version it
replaced is deleted, so the tree never points at a missing file for long and
never at a document Django would refuse. Only for the local filesystem
storage: RESOURCESYNC_PUBLISHED_DIR is empty (off) with any other.

Final documents (closed Change Lists and Change Dump packages, whose
Cache-Control is `caching.FINAL`) are linked under the set folder's `final/`
instead: nginx tries that first, and its Cache-Control follows the path.

Each link's own mtime is its row's `generated_at`, so gunicorn without nginx
(sitemaps/published_files.py) sends the Last-Modified Django would without
reading the row.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.files.storage import FileSystemStorage

from sources.models import ResourceSet

from . import caching, lease
from .models import (
    ChangeListPage,
    ChangePackage,
    DumpDocument,
    DumpPackage,
    IndexDocument,
    ResourceListPage,
    ResourcePackage,
    StoredDocument,
)
from .protocol.constants import Capability
from .storage import GZIP_SUFFIX, document_storage

URL_PREFIX = "resourcesync"
#: The set folder's sub-folder of final documents (see the module docstring).
FINAL_DIR = "final"
#: What Django's <slug:> URL converter accepts.
_SLUG = re.compile(r"[-a-zA-Z0-9_]+")

logger = logging.getLogger(__name__)


def published_root() -> Path | None:
    """Where the tree lives, or None when publishing files is off.

    Off, too, when the documents are not local files (S3): there is nothing
    to link to.
    """
    directory = getattr(settings, "RESOURCESYNC_PUBLISHED_DIR", "")
    if not directory:
        return None
    if not isinstance(document_storage(), FileSystemStorage):
        return None
    return Path(directory)


def capability_published(resource_set: ResourceSet, kind: str) -> bool:
    """Whether the set publishes this capability (a list, a Change List archive, a dump)."""
    capabilities = resource_set.capabilities
    return {
        Capability.RESOURCE_LIST: capabilities.publish_resource_list,
        Capability.CHANGE_LIST: capabilities.publish_change_list,
        Capability.CHANGE_LIST_ARCHIVE: capabilities.publish_change_list,
        Capability.RESOURCE_DUMP: capabilities.publish_resource_dump,
        Capability.CHANGE_DUMP: capabilities.publish_change_dump,
    }[Capability(kind)]


def is_public(resource_set: ResourceSet, kind: str) -> bool:
    """What anyone may read without a token: exactly what the tree may hold."""
    return (
        resource_set.provider.active
        and not resource_set.protected
        and capability_published(resource_set, kind)
    )


def set_directory(root: Path, resource_set: ResourceSet) -> Path | None:
    """The set's folder in the tree; None for slugs no URL could name (never a path out)."""
    slugs = (resource_set.provider.slug, resource_set.slug)
    if not all(_SLUG.fullmatch(slug) for slug in slugs):
        return None
    return root.joinpath(URL_PREFIX, *slugs)


def _documents(resource_set: ResourceSet) -> list[StoredDocument]:
    return [
        *ResourceListPage.objects.filter(resource_set=resource_set),
        *ChangeListPage.objects.filter(resource_set=resource_set),
        *IndexDocument.objects.filter(resource_set=resource_set),
        *DumpDocument.objects.filter(resource_set=resource_set),
    ]


def _packages(resource_set: ResourceSet) -> list[DumpPackage]:
    return [
        *ResourcePackage.objects.filter(resource_set=resource_set),
        *ChangePackage.objects.filter(resource_set=resource_set),
    ]


def _replace_link(link: Path, target: Path | None, modified: datetime | None = None) -> None:
    """Make `link` point at `target` (None: remove it), atomically, stamped `modified`."""
    if target is None:
        link.unlink(missing_ok=True)
        return
    relative = os.path.relpath(target, link.parent)
    if link.is_symlink() and os.readlink(link) == relative:
        _stamp(link, modified)
        return
    temporary = link.with_name(f".{link.name}.{uuid.uuid4().hex}")
    os.symlink(relative, temporary)
    _stamp(temporary, modified)  # before the rename: the new link is never seen unstamped
    os.replace(temporary, link)


def _stamp(link: Path, modified: datetime | None) -> None:
    """Give the link itself the row's `generated_at` as its mtime, in whole seconds.

    That is the Last-Modified Django sends; sitemaps.published_files sends it
    from the link without reading the row.
    """
    if modified is None:
        return
    seconds = int(modified.timestamp())
    if link.lstat().st_mtime != seconds:
        os.utime(link, (seconds, seconds), follow_symlinks=False)


def _directory(resource_set: ResourceSet) -> Path | None:
    """The set's folder when publishing is on and its slugs are safe, else None."""
    root = published_root()
    return None if root is None else set_directory(root, resource_set)


def _current_version(resource_set: ResourceSet, document: StoredDocument) -> Path | None:
    """The file the public name should point at; None when it must not be in the tree."""
    if document.storage_name and is_public(resource_set, document.kind):
        return Path(document_storage().path(document.storage_name))
    return None


def _link_pair(link: Path, target: Path | None, modified: datetime | None) -> None:
    twin = target.with_name(target.name + GZIP_SUFFIX) if target is not None else None
    # The twin first: a reader asking for gzip never gets a version older than the plain one.
    _replace_link(link.with_name(link.name + GZIP_SUFFIX), twin, modified)
    _replace_link(link, target, modified)


def _link(
    directory: Path,
    name: str,
    target: Path | None,
    *,
    final: bool = False,
    modified: datetime | None = None,
) -> None:
    """Link `name` (and its twin) in the set folder, or in `final/` for a final document.

    The new link is made before the other place's is removed, so nginx (which
    tries `final/` first) always finds one while the document is public.
    """
    here, elsewhere = _places(directory, final=final)
    if target is not None:
        here.mkdir(parents=True, exist_ok=True)
    _link_pair(here / name, target, modified)
    _link_pair(elsewhere / name, None, None)


def _places(directory: Path, *, final: bool) -> tuple[Path, Path]:
    """(where a document's links go, where they must not be)."""
    final_dir = directory / FINAL_DIR
    return (final_dir, directory) if final else (directory, final_dir)


def _is_final(document: StoredDocument) -> bool:
    return caching.freshness(document) == caching.FINAL


def publish(resource_set: ResourceSet, document: StoredDocument) -> None:
    """Point the document's public name at its current version, or withdraw it."""
    directory = _directory(resource_set)
    if directory is not None:
        target = _current_version(resource_set, document)
        _link(
            directory,
            document.public_name,
            target,
            final=_is_final(document),
            modified=document.generated_at,
        )


def _link_package(directory: Path, resource_set: ResourceSet, package: DumpPackage) -> set[str]:
    """Link a package (no gzip twin: a ZIP is compressed already) and its manifest copy.

    Returns the names it may have in the folder, relative to it.
    """
    public = bool(package.storage_name) and is_public(resource_set, package.kind)
    zip_target = Path(document_storage().path(package.storage_name)) if public else None
    manifest = package.manifest_name if public else ""
    manifest_target = Path(document_storage().path(manifest)) if manifest else None
    final = _is_final(package)
    modified = package.generated_at
    _link(directory, package.manifest_public_name, manifest_target, final=final, modified=modified)
    here, elsewhere = _places(directory, final=final)
    if zip_target is not None:
        here.mkdir(parents=True, exist_ok=True)
    _replace_link(here / package.public_name, zip_target, modified)
    _replace_link(elsewhere / package.public_name, None)
    return _names(package.public_name, final=final) | _names(
        package.manifest_public_name, final=final, twin=True
    )


def _names(name: str, *, final: bool, twin: bool = False) -> set[str]:
    """Where `name` (and its gzip twin) lies in the set folder."""
    place = f"{FINAL_DIR}/{name}" if final else name
    return {place, place + GZIP_SUFFIX} if twin else {place}


def publish_package(resource_set: ResourceSet, package: DumpPackage) -> None:
    """Point a dump package's public names at its current versions, or withdraw them."""
    directory = _directory(resource_set)
    if directory is not None:
        _link_package(directory, resource_set, package)


def withdraw_package(resource_set: ResourceSet, package: DumpPackage) -> None:
    """Remove a package that is going away."""
    directory = _directory(resource_set)
    if directory is not None:
        _link(directory, package.manifest_public_name, None)
        for place in (directory, directory / FINAL_DIR):
            _replace_link(place / package.public_name, None)


def withdraw(resource_set: ResourceSet, document: StoredDocument) -> None:
    """Remove a document that is going away (an emptied page)."""
    directory = _directory(resource_set)
    if directory is not None:
        _link(directory, document.public_name, None)


@contextmanager
def switching(
    held: lease.Lease, resource_set: ResourceSet, document: StoredDocument
) -> Iterator[None]:
    """`held.holding()` around saving a document's row and switching its links.

    When the block fails (the published folder full between the twin and the plain
    link, the commit refused), the row rolls back but switched links would not.
    They are removed: nginx then passes the name to Django, which sends the row's
    version, until the next publish links it again. Removing needs neither the
    database nor free space, which the failure may have taken.
    """
    started = False
    try:
        with held.holding():
            started = True
            yield
    except Exception:
        if started:
            _unlink(resource_set, document)
        raise


def _unlink(resource_set: ResourceSet, document: StoredDocument) -> None:
    try:
        withdraw(resource_set, document)
    except OSError:
        logger.exception("%s: the links of %s could not be removed", resource_set, document)


def publish_set(resource_set: ResourceSet) -> None:
    """Bring one set's directory in line with its rows and its visibility."""
    directory = _directory(resource_set)
    if directory is None:
        return
    # Holding the set's state row: a run that points a row at a new version meanwhile
    # would have its link put back on the old version.
    with lease.state_locked(resource_set):
        _publish_set_in(directory, resource_set)


def _publish_set_in(directory: Path, resource_set: ResourceSet) -> None:
    wanted = set()
    for document in _documents(resource_set):
        final = _is_final(document)
        target = _current_version(resource_set, document)
        _link(directory, document.public_name, target, final=final, modified=document.generated_at)
        wanted |= _names(document.public_name, final=final, twin=True)
    for package in _packages(resource_set):
        wanted |= _link_package(directory, resource_set, package)
    for place in (directory, directory / FINAL_DIR):
        _remove_unwanted(directory, place, wanted)


def _remove_unwanted(directory: Path, place: Path, wanted: set[str]) -> None:
    """Remove the links in `place` that `wanted` (paths relative to `directory`) does not name."""
    if not place.is_dir():
        return
    for entry in place.iterdir():
        name = entry.relative_to(directory).as_posix()
        if name not in wanted and not (name == FINAL_DIR and entry.is_dir()):
            entry.unlink(missing_ok=True)


def rebuild() -> None:
    """The whole tree from the database: every set, and no directory of a set gone."""
    root = published_root()
    if root is None:
        return
    wanted = set()
    for resource_set in ResourceSet.objects.select_related("provider", "capability_settings"):
        publish_set(resource_set)
        wanted.add(set_directory(root, resource_set))  # None for an unsafe slug: not in the tree
    base = root / URL_PREFIX
    if not base.is_dir():
        return
    for provider in base.iterdir():
        for directory in provider.iterdir() if provider.is_dir() else []:
            if directory not in wanted:
                shutil.rmtree(directory, ignore_errors=True)
        if provider.is_dir() and not any(provider.iterdir()):
            provider.rmdir()
