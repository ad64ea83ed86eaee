"""Which values the official schemas take as URIs: `xs:anyURI` (a link's `href`, a `rel`
that is no token) and `<loc>` (`tLoc`: an `xs:anyURI` of 12 to 2,048 characters).

One rule for ingestion, which refuses the rest before it is stored, so nothing the API
accepts can later make a document invalid. The judge is libxml2, which validates
documents against the schemas: a plain http(s) URL is taken at once, anything else is
validated by it as a one-element document (about 2 µs).
"""

from __future__ import annotations

import re
import threading
from urllib.parse import urlsplit

from lxml import etree

#: `tLoc`'s bounds in sitemap.xsd.
LOC_MIN_LENGTH = 12
LOC_MAX_LENGTH = 2048

_PCHAR = r"(?:[A-Za-z0-9._~!$&'()*+,;=:@/-]|%[0-9A-Fa-f]{2})"
#: An ASCII http(s) URL with a plain host and a port of up to five digits: libxml2 takes
#: every one (it refuses a port past 2**31 - 1, so longer ones go to it).
_PLAIN_URL = re.compile(
    rf"https?://[A-Za-z0-9.-]+(?::[0-9]{{1,5}})?(?:/{_PCHAR}*)?(?:\?(?:{_PCHAR}|\?)*)?(?:#(?:{_PCHAR}|\?)*)?"
)
#: ASCII characters RFC 3986 allows nowhere in a URI (section 2; "excluded" in RFC 2396),
#: which libxml2 takes all the same. Unencoded, `>` or `"` ends the target of a
#: `Link: <...>` header early (RFC 8288) and breaks the header.
_EXCLUDED = re.compile(r'[<>"{}|\\^`]')
_SCHEMA = b"""<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema">
  <xs:element name="uri" type="xs:anyURI"/>
</xs:schema>"""
_local = threading.local()


def is_any_uri(value: str) -> bool:
    """Whether libxml2 takes `value` as an `xs:anyURI`."""
    if _PLAIN_URL.fullmatch(value):
        return True
    schema = getattr(_local, "schema", None)
    if schema is None:  # one per thread: a validator is not to be shared between threads
        schema = _local.schema = etree.XMLSchema(etree.fromstring(_SCHEMA))
    element = etree.Element("uri")
    element.text = value
    return bool(schema.validate(element))


def uri_problem(value: str) -> str | None:
    """Why `value` is not an `xs:anyURI` (None when it is one)."""
    if is_any_uri(value):
        return None
    return (
        "is not a valid URI for the ResourceSync schemas (percent-encode '%', a second '#',"
        " and '[' or ']' outside the host)"
    )


def _percent_encoded(character: str) -> str:
    return "".join(f"%{byte:02X}" for byte in character.encode("utf-8"))


def excluded_character_problem(value: str) -> str | None:
    """Why `value` is no URI for RFC 3986 although libxml2 takes it (None when it is)."""
    found = _EXCLUDED.search(value)
    if found is None:
        return None
    character = found.group()
    encoded = _percent_encoded(character)
    return f"holds {character!r}, which no URI may hold: percent-encode it as {encoded}"


def link_target_problem(value: str) -> str | None:
    """Why `value` cannot be the target of a `Link` header (an RFC 3986 URI-reference in
    ASCII), or None: `<`, `>`, `"` would break the header, and a header carries no
    character past ASCII."""
    for character in value:
        if not character.isascii():
            return (
                f"holds {character!r}, which no header value can carry: percent-encode it as "
                f"{_percent_encoded(character)} (a host name in its xn-- form)"
            )
    return excluded_character_problem(value)


def loc_problem(value: str) -> str | None:
    """Why `value` cannot be a sitemap `<loc>` (None when it can)."""
    if len(value) < LOC_MIN_LENGTH:
        return f"is shorter than the {LOC_MIN_LENGTH} characters a sitemap <loc> needs"
    if len(value) > LOC_MAX_LENGTH:
        return f"is longer than the {LOC_MAX_LENGTH} characters a sitemap <loc> may have"
    return uri_problem(value)


def base_url_problem(value: str) -> str | None:
    """Why `value` cannot start every URL of a document (a PUBLIC_BASE_URL, a set's
    url_prefix), or None: URLs joined to it must be valid `<loc>`s."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:  # a port out of range, or a bracket left open
        port = 0
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        return "Give an http:// or https:// URL, with a port from 1 to 65535."
    if "?" in value or "#" in value:
        return "Give a URL with no query or fragment: paths are joined after it."
    if "@" in parts.netloc:
        return "Give a URL with no user name or password: it would be in every URL published."
    problem = excluded_character_problem(value) or uri_problem(value)
    return f"The URL {problem}." if problem else None
