"""Read ResourceSync 1.1 documents into typed values.

This is the project's one reader: the harvester, the tests and any tool that
consumes a `<urlset>` or `<sitemapindex>` go through `parse_document`. It is
safe by construction, because documents come from other people's servers:

* the size is checked before any parsing (`max_bytes`, 60 MB by default, a
  little above the 50 MB sitemaps.org limit);
* a document with a DOCTYPE or entity declarations is refused outright, which
  rules out XXE and "billion laughs" whatever the parser would do with them;
* lxml runs with entity resolution, DTD loading and network access off and
  its huge-tree limits on;
* what is held while reading stays small whatever the document's shape: each
  entry is released once read, an element under the root may hold at most
  `MAX_ENTRY_ELEMENTS` and span at most `MAX_BYTES_WITHOUT_END` (libxml2 holds
  about 30 bytes per byte of attributes).

Datetimes are W3C Datetimes (https://www.w3.org/TR/NOTE-datetime) returned as
aware UTC values; a time without a zone is an error. Unknown elements and
attributes are ignored, as the spec asks of destinations.
"""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, TypeVar

from lxml import etree

from sitemaps.protocol.constants import RS_NS, SITEMAP_NS, ChangeType

#: Refuse documents larger than this; sitemaps.org allows 50 MB uncompressed.
DEFAULT_MAX_BYTES = 60 * 1024 * 1024
#: Elements an entry (or any element under the root) may hold, and root links a
#: document may carry. The portal takes at most 100 links per event, written beside
#: <loc>, <lastmod> and <rs:md>; ten times that is room for other producers.
MAX_ENTRY_ELEMENTS = 1_000
#: Bytes the parser may read with no element under the root ending (counted in
#: chunks of `_CHUNK_BYTES`), which bounds what one entry, root link or start tag
#: holds. Real entries take hundreds of bytes, a thousand links some 300 KB;
#: libxml2 takes about 30 bytes per byte of attributes.
MAX_BYTES_WITHOUT_END = 1024 * 1024
_CHUNK_BYTES = 64 * 1024

T = TypeVar("T")

CHANGE_TYPES = frozenset(ChangeType)

_URLSET = f"{{{SITEMAP_NS}}}urlset"
_SITEMAPINDEX = f"{{{SITEMAP_NS}}}sitemapindex"
_URL = f"{{{SITEMAP_NS}}}url"
_SITEMAP = f"{{{SITEMAP_NS}}}sitemap"
_LOC = f"{{{SITEMAP_NS}}}loc"
_LASTMOD = f"{{{SITEMAP_NS}}}lastmod"
_MD = f"{{{RS_NS}}}md"
_LN = f"{{{RS_NS}}}ln"

_W3C_DATETIME = re.compile(
    r"(?P<year>\d{4})"
    r"(?:-(?P<month>\d{2})"
    r"(?:-(?P<day>\d{2})"
    r"(?:T(?P<hour>\d{2}):(?P<minute>\d{2})"
    r"(?::(?P<second>\d{2})(?:\.(?P<fraction>\d+))?)?"
    r"(?P<zone>Z|[+-]\d{2}:\d{2})?)?)?)?"
)
# The form almost every producer writes; datetime.fromisoformat reads it directly.
_UTC_SECONDS = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z")
_HEX = re.compile(r"[0-9a-fA-F]+")
_FORBIDDEN_DECLARATIONS = (b"<!DOCTYPE", b"<!ENTITY")


class ResourceSyncParseError(ValueError):
    """A document is not a well-formed, safe ResourceSync document."""


@dataclass(frozen=True, slots=True)
class ParsedLink:
    """One `<rs:ln>`: a link from a document or an entry to another resource."""

    rel: str
    href: str
    type: str | None = None
    length: int | None = None
    hash: dict[str, str] = field(default_factory=dict)
    modified: dt.datetime | None = None
    pri: int | None = None
    path: str | None = None
    encoding: str | None = None
    profile: str | None = None


@dataclass(frozen=True, slots=True)
class ParsedEntry:
    """One `<url>` or `<sitemap>` with its `<rs:md>` attributes flattened in."""

    loc: str
    lastmod: dt.datetime | None = None
    capability: str | None = None
    change: str | None = None
    datetime: dt.datetime | None = None
    hash: dict[str, str] = field(default_factory=dict)
    length: int | None = None
    type: str | None = None
    path: str | None = None
    at: dt.datetime | None = None
    completed: dt.datetime | None = None
    from_: dt.datetime | None = None
    until: dt.datetime | None = None
    encoding: str | None = None
    modified: dt.datetime | None = None
    links: tuple[ParsedLink, ...] = ()

    def link(self, rel: str) -> ParsedLink | None:
        """The first link with this relation, if any."""
        return next((link for link in self.links if link.rel == rel), None)

    def links_with(self, rel: str) -> tuple[ParsedLink, ...]:
        """Every link with this relation, in document order."""
        return tuple(link for link in self.links if link.rel == rel)


@dataclass(frozen=True, slots=True)
class Document:
    """A parsed urlset (`is_index` False) or sitemapindex (`is_index` True)."""

    is_index: bool
    capability: str
    at: dt.datetime | None = None
    completed: dt.datetime | None = None
    from_: dt.datetime | None = None
    until: dt.datetime | None = None
    links: tuple[ParsedLink, ...] = ()
    entries: tuple[ParsedEntry, ...] = ()

    def link(self, rel: str) -> ParsedLink | None:
        """The first root link with this relation, if any."""
        return next((link for link in self.links if link.rel == rel), None)


def parse_document(source: bytes | IO[bytes], *, max_bytes: int = DEFAULT_MAX_BYTES) -> Document:
    """Parse a ResourceSync urlset or sitemapindex, refusing unsafe input."""
    return in_a_thread_of_its_own(_parse, _read_limited(source, max_bytes))


def _parse(data: bytes) -> Document:
    try:
        return _parse_events(top_level_elements(data))
    except etree.XMLSyntaxError as error:
        raise ResourceSyncParseError(f"not well-formed XML: {error}") from error


def in_a_thread_of_its_own(parse: Callable[[bytes], T], data: bytes) -> T:
    """`parse(data)` in a thread that ends with it.

    libxml2 keeps every element and attribute name it has read in its
    thread's dictionary, which is freed only with the thread. In a thread that
    lives on (a `harvest --follow`, a worker) a source sending documents of
    ever new names grew memory without end (3 such documents: +190 MiB); a
    thread of its own costs about 0.1 ms a document (17 → 135 µs for a one-entry list).
    """
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(parse(data))
        except BaseException as error:  # handed to the caller below
            failure.append(error)

    thread = threading.Thread(target=run, name="parse-document", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


def parse_datetime(value: str) -> dt.datetime:
    """Parse a W3C Datetime into an aware UTC datetime; a time needs a zone."""
    text = value.strip()
    if _UTC_SECONDS.fullmatch(text):
        try:
            return dt.datetime.fromisoformat(text)
        except ValueError as error:
            raise ResourceSyncParseError(f"invalid datetime {value!r}: {error}") from error
    match = _W3C_DATETIME.fullmatch(text)
    if match is None:
        raise ResourceSyncParseError(f"not a W3C Datetime: {value!r}")
    parts = match.groupdict()
    if parts["hour"] is not None and parts["zone"] is None:
        raise ResourceSyncParseError(f"datetime without a time zone: {value!r}")
    fraction = (parts["fraction"] or "")[:6].ljust(6, "0")
    try:
        parsed = dt.datetime(
            int(parts["year"]),
            int(parts["month"] or 1),
            int(parts["day"] or 1),
            int(parts["hour"] or 0),
            int(parts["minute"] or 0),
            int(parts["second"] or 0),
            int(fraction),
            tzinfo=_zone(parts["zone"]),
        )
    except ValueError as error:
        raise ResourceSyncParseError(f"invalid datetime {value!r}: {error}") from error
    return parsed.astimezone(dt.UTC)


def parse_hash(value: str) -> dict[str, str]:
    """Parse `algo:digest` pairs; algorithms lowercased, hex digests lowercased."""
    digests: dict[str, str] = {}
    for token in value.split():
        algorithm, separator, digest = token.partition(":")
        algorithm = algorithm.lower()
        if not separator or not algorithm or not digest:
            raise ResourceSyncParseError(f"hash value is not algo:digest: {token!r}")
        if algorithm in digests:
            raise ResourceSyncParseError(f"hash algorithm {algorithm!r} given twice")
        digests[algorithm] = digest.lower() if _HEX.fullmatch(digest) else digest
    return digests


def _read_limited(source: bytes | IO[bytes], max_bytes: int) -> bytes:
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
    else:
        data = source.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ResourceSyncParseError(f"document is larger than the limit of {max_bytes} bytes")
    if not data.strip():
        raise ResourceSyncParseError("document is empty")
    return data


def top_level_elements(data: bytes, *, max_elements: int | None = None) -> Iterator[etree._Element]:
    """The root first, then each element under it as it ends; bounded whatever the shape.

    Refuses a DOCTYPE, a root other than urlset or sitemapindex, an element under
    the root spanning more than `MAX_BYTES_WITHOUT_END` or holding more than
    `MAX_ENTRY_ELEMENTS`, and (for a caller keeping the tree) more than
    `max_elements` in all. XMLSyntaxError is left to the caller.
    """
    _refuse_declarations(data)
    root: etree._Element | None = None
    fed = held = nested = 0  # chunks fed since an element under the root ended
    for element in _ended_elements(data):
        if element is None:
            fed += 1
            if fed * _CHUNK_BYTES > MAX_BYTES_WITHOUT_END:
                raise ResourceSyncParseError(
                    f"no element under the root ends within {MAX_BYTES_WITHOUT_END} bytes; "
                    "no real entry, link or tag is that long"
                )
            continue
        if root is None:
            root = _checked_root(element)
            yield root
        parent = element.getparent()
        if parent is not root and parent is not None:
            nested += 1
            if nested > MAX_ENTRY_ELEMENTS:
                raise ResourceSyncParseError(
                    f"an element under the root holds more than {MAX_ENTRY_ELEMENTS} elements; "
                    "no real entry has that many"
                )
            continue
        fed = 0
        held += nested + 1
        if max_elements is not None and held > max_elements:
            raise ResourceSyncParseError(f"the document holds more than {max_elements} elements")
        nested = 0
        if parent is not None:
            yield element


def _refuse_declarations(data: bytes) -> None:
    """Refuse a DTD or an entity declaration before libxml2 sees a byte of it."""
    for declaration in _FORBIDDEN_DECLARATIONS:
        if declaration in data:
            raise ResourceSyncParseError(
                f"document contains {declaration.decode()}; DTDs and entities are refused"
            )


def _ended_elements(data: bytes) -> Iterator[etree._Element | None]:
    """Each element as it ends, and None after each chunk fed (64 KB at a time)."""
    parser = etree.XMLPullParser(
        events=("end",),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    for start in range(0, len(data), _CHUNK_BYTES):
        parser.feed(data[start : start + _CHUNK_BYTES])
        for _, element in parser.read_events():
            yield element
        yield None
    parser.close()
    for _, element in parser.read_events():
        yield element


def _parse_events(elements: Iterator[etree._Element]) -> Document:
    root = next(elements, None)
    if root is None:
        raise ResourceSyncParseError("document has no root element")
    entry_tag = _SITEMAP if root.tag == _SITEMAPINDEX else _URL
    header = _Header()
    entries: list[ParsedEntry] = []
    for element in elements:
        if element.tag == entry_tag:
            entries.append(_entry(element))
        elif element.tag in (_MD, _LN):
            header.add(element, after_entries=bool(entries))
        _release(element, root)
    md = header.md
    if md is None or not md.get("capability"):
        raise ResourceSyncParseError("the root <rs:md> with a capability is missing")
    return Document(
        is_index=root.tag == _SITEMAPINDEX,
        capability=md["capability"].strip(),
        at=_optional_datetime(md, "at"),
        completed=_optional_datetime(md, "completed"),
        from_=_optional_datetime(md, "from"),
        until=_optional_datetime(md, "until"),
        links=tuple(header.links),
        entries=tuple(entries),
    )


def _checked_root(element: etree._Element) -> etree._Element:
    """The document's root, if its prolog has no DTD and it is a sitemaps.org root."""
    tree = element.getroottree()
    # This covers encodings the byte scan cannot see (UTF-16 and the like).
    if tree.docinfo.doctype or tree.docinfo.internalDTD is not None:
        raise ResourceSyncParseError("document has a DOCTYPE; DTDs are refused")
    root = tree.getroot()
    if root.tag not in (_URLSET, _SITEMAPINDEX):
        raise ResourceSyncParseError(
            f"root element is {root.tag}, not a sitemaps.org urlset or sitemapindex"
        )
    return root


@dataclass
class _Header:
    """The root's own `<rs:md>` (one) and `<rs:ln>`s, which precede the entries."""

    md: dict[str, str] | None = None
    links: list[ParsedLink] = field(default_factory=list)

    def add(self, element: etree._Element, *, after_entries: bool) -> None:
        if after_entries:
            raise ResourceSyncParseError("root <rs:md> and <rs:ln> must precede the entries")
        if element.tag == _LN:
            if len(self.links) == MAX_ENTRY_ELEMENTS:
                raise ResourceSyncParseError(
                    f"the document has more than {MAX_ENTRY_ELEMENTS} root <rs:ln>"
                )
            self.links.append(_link(element))
        elif self.md is not None:
            raise ResourceSyncParseError("the document has more than one root <rs:md>")
        else:
            self.md = dict(element.items())


def _release(element: etree._Element, root: etree._Element) -> None:
    """Free parsed entries as we go, so a 50,000-entry tree never builds up."""
    element.clear()
    while element.getprevious() is not None:
        del root[0]


#: Children an entry holds at most once, and how errors name them.
_SINGLE_CHILDREN = {_LOC: "<loc>", _LASTMOD: "<lastmod>", _MD: "<rs:md>"}


def _entry_children(element: etree._Element) -> tuple[dict[str, etree._Element], list[ParsedLink]]:
    """An entry's single children by tag, and its links in document order."""
    single: dict[str, etree._Element] = {}
    links: list[ParsedLink] = []
    for child in element:
        if child.tag == _LN:
            links.append(_link(child))
        elif child.tag in _SINGLE_CHILDREN:
            if child.tag in single:
                raise ResourceSyncParseError(
                    f"an entry has more than one {_SINGLE_CHILDREN[child.tag]}"
                )
            single[child.tag] = child
    return single, links


def _entry(element: etree._Element) -> ParsedEntry:
    single, links = _entry_children(element)
    loc = (single[_LOC].text or "").strip() if _LOC in single else ""
    if not loc:
        raise ResourceSyncParseError("an entry needs one non-empty <loc>")
    md: dict[str, str] = dict(single[_MD].items()) if _MD in single else {}
    change = md.get("change")
    if change is not None and change not in CHANGE_TYPES:
        raise ResourceSyncParseError(f"{loc}: unknown change type {change!r}")
    lastmod = single[_LASTMOD].text or "" if _LASTMOD in single else None
    try:
        return ParsedEntry(
            loc=loc,
            lastmod=parse_datetime(lastmod) if lastmod is not None else None,
            capability=md.get("capability"),
            change=change,
            datetime=_optional_datetime(md, "datetime"),
            hash=parse_hash(md["hash"]) if "hash" in md else {},
            length=_optional_length(md),
            type=md.get("type"),
            path=md.get("path"),
            at=_optional_datetime(md, "at"),
            completed=_optional_datetime(md, "completed"),
            from_=_optional_datetime(md, "from"),
            until=_optional_datetime(md, "until"),
            encoding=md.get("encoding"),
            modified=_optional_datetime(md, "modified"),
            links=tuple(links),
        )
    except ResourceSyncParseError as error:
        raise ResourceSyncParseError(f"{loc}: {error}") from error


def _link(element: etree._Element) -> ParsedLink:
    attributes: dict[str, str] = dict(element.items())
    rel = attributes.get("rel", "").strip()
    href = attributes.get("href", "").strip()
    if not rel or not href:
        raise ResourceSyncParseError("<rs:ln> needs both rel and href")
    pri = attributes.get("pri")
    priority = _integer(pri, "pri") if pri is not None else None
    if priority is not None and not 1 <= priority <= 999_999:
        raise ResourceSyncParseError(f"pri must be within 1..999999, got {priority}")
    return ParsedLink(
        rel=rel,
        href=href,
        type=attributes.get("type"),
        length=_optional_length(attributes),
        hash=parse_hash(attributes["hash"]) if "hash" in attributes else {},
        modified=_optional_datetime(attributes, "modified"),
        pri=priority,
        path=attributes.get("path"),
        encoding=attributes.get("encoding"),
        profile=attributes.get("profile"),
    )


def _optional_datetime(attributes: dict[str, str], name: str) -> dt.datetime | None:
    value = attributes.get(name)
    if value is None:
        return None
    try:
        return parse_datetime(value)
    except ResourceSyncParseError as error:
        raise ResourceSyncParseError(f"attribute {name}: {error}") from error


def _optional_length(attributes: dict[str, str]) -> int | None:
    value = attributes.get("length")
    if value is None:
        return None
    length = _integer(value, "length")
    if length < 0:
        raise ResourceSyncParseError(f"length must not be negative, got {length}")
    return length


def _integer(value: str, name: str) -> int:
    try:
        return int(value.strip())
    except ValueError as error:
        raise ResourceSyncParseError(f"{name} is not an integer: {value!r}") from error


def _zone(zone: str | None) -> dt.tzinfo:
    if zone is None or zone == "Z":
        return dt.UTC
    sign = 1 if zone[0] == "+" else -1
    hours, minutes = int(zone[1:3]), int(zone[4:6])
    if hours > 23 or minutes > 59:
        raise ResourceSyncParseError(f"invalid time zone offset {zone!r}")
    return dt.timezone(sign * dt.timedelta(hours=hours, minutes=minutes))
