"""Turn an event's location into the `<loc>` URI destinations will fetch.

Seed 001: a `url` is used as is; an `abs_path` must lie inside the set's
`resource_root_dir` and is made relative to it; both path kinds are then
joined to `url_prefix`. Anything that could resolve outside its root is an
error, never silently rewritten.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable
from urllib.parse import quote, unquote, urlsplit

import idna

from .models import MAX_URI_LENGTH, LocationType

#: Unreserved characters plus sub-delims that are safe inside a path segment.
_SEGMENT_SAFE = "-._~!$&'()*+,;=:@"


class LocationError(ValueError):
    """A location that cannot be published; the message says why."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# With str patterns \s is Unicode whitespace, the same set as str.isspace().
_SPACE = re.compile(r"\s")
_SCHEME_AUTHORITY = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*):(?://(?P<authority>[^/?#]*))?")


def _check_text(value: str) -> None:
    if not value:
        raise LocationError("must not be empty.")
    if _CONTROL.search(value):
        raise LocationError("must not contain control characters.")


def _fully_unquoted(value: str) -> str:
    """Decode %-escapes until stable, so %252e%252e is seen as '..' too."""
    for _ in range(5):
        decoded = unquote(value)
        if decoded == value:
            return value
        value = decoded
    raise LocationError("is encoded too many times.")


def _check_segments(path: str) -> list[str]:
    """Reject `.`/`..` segments and backslashes, plain or %-encoded."""
    decoded = _fully_unquoted(path)
    if "\\" in decoded or "\x00" in decoded:
        raise LocationError("must not contain backslashes or NUL bytes.")
    segments = decoded.split("/")
    if any(segment in {".", ".."} for segment in segments):
        raise LocationError("must not contain '.' or '..' segments.")
    return [segment for segment in path.split("/") if segment]


def _join(url_prefix: str, segments: list[str]) -> str:
    base = url_prefix if url_prefix.endswith("/") else url_prefix + "/"
    return base + "/".join(quote(segment, safe=_SEGMENT_SAFE) for segment in segments)


def _inside(root: str, path: str) -> bool:
    real_root = os.path.realpath(root)
    real_path = os.path.realpath(path)
    return real_path == real_root or real_path.startswith(real_root.rstrip(os.sep) + os.sep)


def check_url(value: str) -> str:
    """An http(s) URL with a host, used as is."""
    _checked_url(value)
    return value


def _checked_url(value: str) -> re.Match[str]:
    """`check_url`'s checks; the URL's scheme and authority as they matched."""
    # Non-empty printable ASCII without a space holds no control character and
    # no space: the usual URL skips both searches.
    plain = value != "" and value.isascii() and value.isprintable() and " " not in value
    if not plain:
        _check_text(value)
    # The scheme and authority as urlsplit finds them, at a fraction of its
    # cost (it was a fifth of ingestion's time); odd hosts get urlsplit's checks.
    match = _SCHEME_AUTHORITY.match(value)
    if match is None or match["scheme"].lower() not in {"http", "https"}:
        raise LocationError("must be an http or https URL.")
    if not match["authority"]:
        raise LocationError("must name a host.")
    if "[" in match["authority"] or "]" in match["authority"]:
        try:
            urlsplit(value)
        except ValueError as error:
            raise LocationError(f"has an invalid host: {error}.") from None
    if not plain and _SPACE.search(value):
        raise LocationError("must not contain spaces; percent-encode them.")
    return match


def resolve_location(
    location_type: str, value: str, *, url_prefix: str, resource_root_dir: str = ""
) -> str:
    """Return the absolute URI for a location, or raise LocationError."""
    resolve = _RESOLVERS.get(location_type)
    if resolve is None:
        raise LocationError(f"unknown location type {location_type!r}.")
    uri = resolve(value, url_prefix, resource_root_dir)
    if len(uri) >= MAX_URI_LENGTH:
        raise LocationError(f"resolves to a URI of {len(uri)} characters (limit {MAX_URI_LENGTH}).")
    return uri


def _resolve_url(value: str, url_prefix: str, resource_root_dir: str) -> str:
    return _normal_url(value, _checked_url(value))  # checks the text too


#: Every printable ASCII character but the space: what `quote` leaves as it is when it
#: encodes a URL's non-ASCII characters (a `%` there is already an escape).
_PRINTABLE_ASCII = "".join(chr(code) for code in range(0x21, 0x7F))
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


def _normal_url(value: str, match: re.Match[str]) -> str:
    """The one URI of a resource however its URL is written: scheme and host in lower
    case, escapes in upper case (RFC 3986 6.2.2.1), an IRI's non-ASCII characters
    percent-encoded as UTF-8 (RFC 3987 3.1) and its host in IDNA. Sitemaps take URIs,
    and resync cannot fetch a `<loc>` that is not one. `match`: its checked scheme and
    authority."""
    scheme, authority = match["scheme"], match["authority"]
    plain = value.isascii() and "%" not in value
    if plain and scheme == scheme.lower() and authority == authority.lower():
        return value  # the usual URL, at the cost of one match
    userinfo, at, host = authority.rpartition("@")
    head = f"{scheme.lower()}://{_escaped(userinfo)}{at}{_normal_host(host)}"
    return head + _escaped(value[match.end() :])


def _escaped(text: str) -> str:
    """`text` with its non-ASCII characters percent-encoded and every escape upper case."""
    if not text.isascii():
        text = quote(text, safe=_PRINTABLE_ASCII)
    return _ESCAPE.sub(lambda escape: escape[0].upper(), text)


def _normal_host(host: str) -> str:
    """A host (and port) in lower case; an internationalised name in IDNA."""
    if host.isascii():
        return host.lower()
    name, colon, port = host.rpartition(":") if ":" in host else (host, "", "")
    try:  # IDNA 2008 (UTS 46), as browsers and HTTP clients resolve it
        return idna.encode(name, uts46=True).decode("ascii") + colon + port
    except idna.IDNAError:
        raise LocationError("has a host that is no valid internationalised domain name.") from None


def _resolve_abs_path(value: str, url_prefix: str, resource_root_dir: str) -> str:
    _check_text(value)
    if not resource_root_dir:
        raise LocationError("abs_path needs the set's resource_root_dir, which is not set.")
    if not value.startswith("/"):
        raise LocationError("abs_path must be absolute.")
    _check_segments(value)
    normalized = posixpath.normpath(value)
    root = posixpath.normpath(resource_root_dir)
    if not (normalized + "/").startswith(root.rstrip("/") + "/") or not _inside(root, normalized):
        raise LocationError(f"is outside the resource root {resource_root_dir}.")
    relative = posixpath.relpath(normalized, root)
    if relative == ".":
        raise LocationError("is the resource root itself, not a file in it.")
    return _join(url_prefix, relative.split("/"))


def _resolve_rel_path(value: str, url_prefix: str, resource_root_dir: str) -> str:
    _check_text(value)
    if value.startswith("/"):
        raise LocationError("rel_path must be relative (no leading '/').")
    segments = _check_segments(value)
    if not segments:
        raise LocationError("must name a file.")
    if resource_root_dir and not _inside(
        resource_root_dir, os.path.join(resource_root_dir, *segments)
    ):
        raise LocationError(f"is outside the resource root {resource_root_dir}.")
    return _join(url_prefix, segments)


_RESOLVERS: dict[str, Callable[[str, str, str], str]] = {
    LocationType.URL: _resolve_url,
    LocationType.ABS_PATH: _resolve_abs_path,
    LocationType.REL_PATH: _resolve_rel_path,
}
