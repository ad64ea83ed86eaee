"""The bytes of a set's resources, where the portal can read them.

`abs_path` and `rel_path` locations resolve to `url_prefix` + a path under
the set's `resource_root_dir` (`sources.locations`), so a `<loc>` that
starts with the prefix names a file under the root. Dumps need those bytes
(seed 004: obtaining the resource is the generator's job for the dump
strategies); a set whose resources are only `url` locations, or that has no
root, cannot publish dumps, and `unreadable_reason` says why.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO
from urllib.parse import unquote

from sitemaps.protocol.records import ChangeRecord, ResourceRecord
from sitemaps.protocol.xmlchars import forbidden_character

from .generators.base import ResourceUnreadable
from .locations import LocationError, resolve_location
from .models import LocationType, Resource, ResourceSet

__all__ = [
    "ResourceUnreadable",
    "open_regular_file",
    "open_resource_file",
    "packaged_path",
    "relative_path",
    "under_prefix_uri",
    "unreadable_reason",
]


def relative_path(resource_set: ResourceSet, uri: str) -> str | None:
    """The path under the resource root that `uri` names, or None if it names none."""
    prefix = resource_set.url_prefix
    prefix = prefix if prefix.endswith("/") else prefix + "/"
    if not uri.startswith(prefix) or len(uri) == len(prefix):
        return None
    return unquote(uri[len(prefix) :])


def packaged_path(resource_set: ResourceSet, uri: str) -> str | None:
    """`relative_path`, if a dump manifest can name it; else None (the caller names the
    bitstream by its key). A URI may percent-encode what XML 1.0 forbids (`%01`), and
    the schema's `path` ends in a name, not a `/`."""
    relative = relative_path(resource_set, uri)
    if relative is None or relative.endswith("/") or forbidden_character(relative):
        return None
    return relative


def under_prefix_uri(resource_set: ResourceSet, record: ResourceRecord | ChangeRecord) -> str:
    """The URI to read a record's file by: its own, or for a change recorded before the
    set's url_prefix moved (closed lists keep the URIs they were published with), the
    URI its resource has now, which names the same file under the root."""
    if isinstance(record, ResourceRecord) or relative_path(resource_set, record.uri) is not None:
        return record.uri
    moved = Resource.objects.filter(pk=record.resource_key, resource_set=resource_set)
    return moved.values_list("uri", flat=True).first() or record.uri


def resource_file(resource_set: ResourceSet, uri: str) -> str:
    """The local file behind `uri`, checked to lie inside the set's resource root."""
    root = resource_set.resource_root_dir
    if not root:
        raise ResourceUnreadable("the set has no resource_root_dir")
    relative = relative_path(resource_set, uri)
    if relative is None:
        raise ResourceUnreadable("its URI is not under the set's url_prefix")
    try:
        resolve_location(
            LocationType.REL_PATH,
            relative,
            url_prefix=resource_set.url_prefix,
            resource_root_dir=root,
        )
    except LocationError as error:
        raise ResourceUnreadable(f"its path {error}") from None
    return os.path.join(root, *relative.split("/"))


def open_resource_file(resource_set: ResourceSet, uri: str) -> BinaryIO:
    """Open the file behind `uri` for reading (a regular file only)."""
    return open_regular_file(resource_file(resource_set, uri))


def open_regular_file(path: str) -> BinaryIO:
    """Open `path` for reading if it is a regular file; ResourceUnreadable says why not.

    Checked, opened non-blocking, then checked again on what was opened: a plain
    open of a FIFO waits for a writer, which held a regeneration (and its set) for
    good, and a device's driver may act on an open.
    """
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ResourceUnreadable("it is not a regular file")
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ResourceUnreadable("its file is missing") from None
    except OSError as error:
        raise ResourceUnreadable(f"its file cannot be read: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise ResourceUnreadable("it is not a regular file")
    os.set_blocking(descriptor, True)
    return os.fdopen(descriptor, "rb")


def unreadable_reason(resource_set: ResourceSet) -> str | None:
    """Why the portal cannot read this set's resources (so it cannot dump them), or None."""
    root = resource_set.resource_root_dir
    if not root:
        return (
            "the set has no resource_root_dir: dumps package the files under it, "
            "so set it (resources with abs_path or rel_path locations)"
        )
    if not os.path.isdir(root):
        return f"the resource_root_dir {root} is not a directory the portal can read"
    if resource_set.pk is None:
        return None
    resources = Resource.objects.filter(resource_set=resource_set)
    if resources.exists() and not resources.exclude(location_type=LocationType.URL).exists():
        return (
            "every resource of the set has a url location, which the portal cannot read; "
            "dumps need abs_path or rel_path locations under the resource_root_dir"
        )
    return None
