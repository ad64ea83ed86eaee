"""Where the copy of a resource lives under the destination directory.

A resource URI maps to ``<destination>/<host>[_<port>]/<decoded path>``::

    http://example.org/a/b%20c.pdf  ->  example.org/a/b c.pdf
    http://127.0.0.1:8000/r/1       ->  127.0.0.1_8000/r/1
    http://example.org/list?page=2  ->  example.org/list?page=2
    http://example.org/docs/        ->  example.org/docs/_index

Host plus path, rather than a path relative to the Capability List, because
resources need not sit under the Capability List's folder (the spec's own
examples put them beside it) and because the mapping then never changes when a
source moves its documents. A query stays in the file name (with `/` escaped);
a URI ending in `/` gets the name `_index`.

Nothing a source sends can write outside the destination: each path segment is
percent-decoded and then rejected if it is empty, `.`, `..` or holds `/`, `\\`
or a control character (so `%2e%2e` and `%2F` fail too); host names are
checked; and no existing component between the destination and the file may
be a symbolic link. ZIP member paths from manifests are checked the same way,
although they only name what to read: the file written is always the one the
entry's URI maps to.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import threading
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

#: Names at the destination root that belong to the harvester, never to a resource.
RESERVED_PREFIX = ".resourcesync"
INDEX_NAME = "_index"

_HOST = re.compile(r"[a-z0-9]([a-z0-9_-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9_-]*[a-z0-9])?)*")
_IPV6 = re.compile(r"[0-9a-f:.]+")
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: A separator (`/`, `\\`) or a control character (C0 or DEL) in a decoded segment.
_UNSAFE_CHARACTER = re.compile(r"[/\\\x00-\x1f\x7f]")


class UnsafePathError(ValueError):
    """A URI or member path would leave the destination, or cannot be mapped."""


def resource_relpath(uri: str) -> PurePosixPath:
    """The path, relative to the destination, of the copy of `uri`."""
    return PurePosixPath(*_relative_parts(uri))


def _relative_parts(uri: str) -> list[str]:
    """The host folder and the checked path segments of the copy of `uri`."""
    parts = urlsplit(uri)
    try:
        segments = [_host_folder(parts.scheme, parts.netloc)]
    except UnsafePathError as error:
        raise UnsafePathError(f"{uri}: {error}") from None
    raw_segments = parts.path.split("/")[1:] if parts.path else [""]
    if raw_segments[-1] == "":
        raw_segments[-1] = INDEX_NAME
    segments.extend(_segment(raw, uri) for raw in raw_segments)
    if parts.query:
        segments[-1] = _segment_text(f"{segments[-1]}?{parts.query.replace('/', '%2F')}", uri)
    return segments


@functools.lru_cache(maxsize=64)
def _host_folder(scheme: str, netloc: str) -> str:
    """`<host>[_<port>]` for a URI's scheme and netloc (cached: a source has few hosts)."""
    if scheme not in _DEFAULT_PORTS:
        raise UnsafePathError("only http and https URIs are harvested")
    parts = urlsplit(f"{scheme}://{netloc}")
    host = (parts.hostname or "").rstrip(".")
    if _HOST.fullmatch(host) is None:
        if _IPV6.fullmatch(host) is None or ":" not in host:
            raise UnsafePathError(f"unusable host name {host!r}")
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError as error:
        raise UnsafePathError("invalid port") from error
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        host = f"{host}_{port}"
    return host


class CheckedFolders:
    """Folders of one run already known to be real folders with no link above them.

    A baseline writes thousands of copies per folder; walking every component
    with `lstat` for each was a tenth of its time. The threat is a hostile
    source, which names paths but cannot create links; a local user able to
    swap a folder for a link during a run could as well do it between any
    check and the write that follows it.
    """

    def __init__(self) -> None:
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def __contains__(self, folder: object) -> bool:
        return folder in self._known

    def add(self, folder: Path) -> None:
        """Remember `folder` as checked (it exists, and no link leads to it)."""
        with self._lock:
            self._known.add(os.fspath(folder))


def resource_path(destination: Path, uri: str, checked: CheckedFolders | None = None) -> Path:
    """The absolute path of the copy of `uri`; refuses symlinks on the way.

    Below a folder in `checked` only the file itself is looked at.
    """
    target = destination.joinpath(*_relative_parts(uri))
    if checked is not None and os.fspath(target.parent) in checked:
        if os.path.islink(target):
            raise UnsafePathError(f"{target} is a symbolic link; refusing to follow it")
        return target
    refuse_symlinks(destination, target)
    return target


def member_name(path: str) -> str:
    """The ZIP member a manifest `path` names; a leading `/` is optional (resync omits it)."""
    text = path[1:] if path.startswith("/") else path
    if not text:
        raise UnsafePathError(f"empty member path {path!r}")
    for segment in text.split("/"):
        _segment_text(segment, path)
        if segment.endswith(":"):
            raise UnsafePathError(f"{path}: drive-like segment {segment!r}")
    return text


def refuse_symlinks(destination: Path, target: Path) -> None:
    """Fail if any existing component below `destination` on the way to `target` is a link."""
    # Plain strings, not Path objects: this runs several times per resource downloaded.
    current = os.fspath(destination)
    for part in target.relative_to(destination).parts:
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return
        if stat.S_ISLNK(mode):
            raise UnsafePathError(f"{current} is a symbolic link; refusing to follow it")


def make_parents(destination: Path, target: Path, checked: CheckedFolders | None = None) -> None:
    """Create the folders above `target`, refusing links and files in the way."""
    if checked is not None and os.fspath(target.parent) in checked:
        return
    _make_parents(destination, target)
    if checked is not None:
        checked.add(target.parent)


def _make_parents(destination: Path, target: Path) -> None:
    refuse_symlinks(destination, target)
    try:
        if stat.S_ISDIR(os.lstat(target.parent).st_mode):
            return  # the usual case: no links on the way, and the folder is there
    except (FileNotFoundError, NotADirectoryError):
        pass  # the loop below creates what is missing or names what is in the way
    current = destination
    for part in target.relative_to(destination).parts[:-1]:
        current = current / part
        try:
            current.mkdir()
        except FileExistsError:
            if not current.is_dir():
                raise UnsafePathError(f"{current} exists and is not a folder") from None


def _segment(raw: str, uri: str) -> str:
    if raw in (".", ".."):
        raise UnsafePathError(f"{uri}: dot segment in path")
    try:
        text = unquote(raw, errors="strict")
    except UnicodeDecodeError as error:
        raise UnsafePathError(f"{uri}: path is not UTF-8 once decoded") from error
    return _segment_text(text, uri)


def _segment_text(text: str, context: str) -> str:
    if text in ("", ".", ".."):
        raise UnsafePathError(f"{context}: empty or dot path segment")
    if _UNSAFE_CHARACTER.search(text):
        raise UnsafePathError(f"{context}: path segment {text!r} holds a separator or control")
    return text
