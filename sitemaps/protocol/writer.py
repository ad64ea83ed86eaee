"""The one place that writes ResourceSync XML.

Documents reach a million entries, so this writes bytes directly instead of
building an element tree; the output is byte-for-byte what lxml would
serialize for the same tree (the tests prove it), and every value is escaped
here so no caller ever concatenates markup. Characters that XML 1.0 forbids
raise ValueError instead of producing a document no parser will read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sitemaps.protocol.constants import RS_NS, SITEMAP_NS, w3c_datetime
from sitemaps.protocol.records import ResourceColumns, ResourceRecord
from sitemaps.protocol.xmlchars import forbidden_character

RootElement = Literal["urlset", "sitemapindex"]
Attributes = Mapping[str, str]

XML_DECLARATION = b"<?xml version='1.0' encoding='UTF-8'?>\n"

#: The order `rs:md` attributes are written in; no other attribute is accepted.
MD_ATTRIBUTES = (
    "capability",
    "at",
    "completed",
    "from",
    "until",
    "change",
    "datetime",
    "hash",
    "length",
    "type",
    "path",
    "encoding",
    "modified",
)
#: The order `rs:ln` attributes are written in; no other attribute is accepted.
LN_ATTRIBUTES = (
    "rel",
    "href",
    "type",
    "length",
    "hash",
    "modified",
    "pri",
    "path",
    "encoding",
    "profile",
)

_ENTRY_ELEMENT: dict[str, str] = {"urlset": "url", "sitemapindex": "sitemap"}


def _check_characters(value: str) -> None:
    """The rule ingestion applies too (sitemaps.protocol.xmlchars), so this only fires on a bug."""
    found = forbidden_character(value)
    if found is not None:
        position, character = found
        raise ValueError(
            f"character {character!r} at position {position} is not allowed in XML 1.0"
        )


#: Media types seen -> their `type` as written; bounded, as a source could send many.
_SCHEMA_TYPES: dict[str, str] = {}
_SCHEMA_TYPES_SIZE = 4096
#: RFC 6838's name characters that XSD's `\w` (or the `-` beside it) also takes; ASCII,
#: as media types are, so no Unicode table of Python's can differ from libxml2's.
_SCHEMA_TYPE = re.compile(r"[A-Za-z0-9$^+-]+/[A-Za-z0-9$^+-]+")


def schema_type(mime: str) -> str:
    """The `type` the 1.1 schema takes for a media type: itself, else without its
    parameters, else "" (left out; the database and the API keep it whole).

    The schema's `[\\w-]+/[\\w-]+` (XSD's `\\w`: no punctuation, separator or control)
    refuses parameters and the `.` and `_` RFC 6838 allows (`application/vnd.ms-excel`);
    a document a strict reader refuses whole costs more than one entry's type.
    """
    written = _SCHEMA_TYPES.get(mime)
    if written is None:
        essence = mime.split(";", 1)[0].strip()
        written = essence if _SCHEMA_TYPE.fullmatch(essence) else ""
        if len(_SCHEMA_TYPES) >= _SCHEMA_TYPES_SIZE:
            _SCHEMA_TYPES.clear()
        _SCHEMA_TYPES[mime] = written
    return written


def _attribute(attributes: Attributes, name: str) -> str:
    """An attribute's value as written: a `type` as the schema takes it."""
    value = attributes[name]
    return schema_type(value) if name == "type" and value else value


def escape_text(value: str) -> str:
    """Escape element content as libxml2 does: `& < >` and CR (which a parser would drop)."""
    # Printable ASCII (the usual URI or timestamp) cannot hold a forbidden character or CR.
    if value.isascii() and value.isprintable():
        if "&" in value or "<" in value or ">" in value:
            return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        return value
    _check_characters(value)
    return (
        value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")
    )


def escape_attribute(value: str) -> str:
    """Escape a double-quoted attribute value as libxml2 does, whitespace as character references.

    Tab, LF and CR are written as `&#9;` `&#10;` `&#13;` because a parser would
    otherwise normalise them to spaces.
    """
    if value.isascii() and value.isprintable():
        if "&" in value or "<" in value or ">" in value or '"' in value:
            return (
                value.replace("&", "&amp;")
                .replace("<", "&lt;")
                .replace(">", "&gt;")
                .replace('"', "&quot;")
            )
        return value
    _check_characters(value)
    return (
        value.replace("&", "&amp;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&quot;")
        .replace("\t", "&#9;")
        .replace("\n", "&#10;")
        .replace("\r", "&#13;")
    )


# Printable ASCII but `& < > "` maps to itself, every other byte to NUL.
_PLAIN_BYTES = bytes(
    byte if 0x20 <= byte < 0x7F and byte not in b'&<>"' else 0 for byte in range(256)
)


def _is_plain(value: str) -> bool:
    """True if `value` needs no escaping anywhere: printable ASCII without `& < > "`."""
    # One table lookup per byte: faster than isprintable() and four `in` tests.
    return value.isascii() and 0 not in value.encode().translate(_PLAIN_BYTES)


# Names as given -> names in output order, per element, for the few shapes callers use.
_ORDER_CACHES: dict[str, dict[tuple[str, ...], tuple[str, ...]]] = {"rs:md": {}, "rs:ln": {}}
_ORDER_CACHE_SIZE = 256
_MD_ORDER = _ORDER_CACHES["rs:md"]


def _output_order(element: str, attributes: Attributes, order: tuple[str, ...]) -> tuple[str, ...]:
    """The names of `attributes` in the fixed output order; unknown names are an error."""
    given = tuple(attributes)
    cache = _ORDER_CACHES[element]
    names = cache.get(given)
    if names is None:
        unknown = set(given).difference(order)
        if unknown:
            raise ValueError(f"unknown <{element}> attribute(s): {', '.join(sorted(unknown))}")
        names = tuple(name for name in order if name in attributes)
        if len(cache) < _ORDER_CACHE_SIZE:
            cache[given] = names
    return names


def _element(element: str, attributes: Attributes, order: tuple[str, ...]) -> tuple[str, str]:
    """`<element a="..."/>` with unescaped values, and those values joined for one check.

    Empty values are left out; with none left the element is "" (an empty
    `rs:md` says nothing). The caller escapes when the joined values need it.
    """
    markup = ""
    values = ""
    for name in _output_order(element, attributes, order):
        value = _attribute(attributes, name)
        if value:
            markup += f' {name}="{value}"'
            values += value
    return (f"<{element}{markup}/>" if markup else ""), values


def _escaped_element(element: str, attributes: Attributes, order: tuple[str, ...]) -> str:
    """`<element a="..."/>` with every value escaped (the rare slow path)."""
    markup = ""
    for name in _output_order(element, attributes, order):
        value = _attribute(attributes, name)
        if value:
            markup += f' {name}="{escape_attribute(value)}"'
    return f"<{element}{markup}/>" if markup else ""


def _check_link(attributes: Attributes) -> None:
    if not attributes.get("rel") or not attributes.get("href"):
        raise ValueError(f"<rs:ln> needs rel and href, got {dict(attributes)!r}")


@dataclass(frozen=True, slots=True)
class Entry:
    """One `<url>` or `<sitemap>` for `render_document`; md and link values are plain strings."""

    loc: str
    lastmod: str | None = None
    md: Attributes = field(default_factory=dict)
    links: Sequence[Attributes] = ()


class DocumentWriter:
    """Streams one urlset or sitemapindex as bytes: `start()`, `entry()` per entry, `end()`.

    Each call returns the encoded bytes of its part, so a caller can check the
    byte limit before appending an entry and close the document early.
    """

    def __init__(self, root: RootElement = "urlset") -> None:
        if root not in _ENTRY_ELEMENT:
            raise ValueError(f"root must be 'urlset' or 'sitemapindex', not {root!r}")
        self.root = root
        self._open = f"<{_ENTRY_ELEMENT[root]}><loc>"
        self._close = f"</{_ENTRY_ELEMENT[root]}>"

    def start(self, md: Attributes, links: Iterable[Attributes] = ()) -> bytes:
        """The XML declaration, the root start tag, its `rs:md` (capability required) and links."""
        if not md.get("capability"):
            raise ValueError("the root <rs:md> needs a capability")
        parts = [
            f'<{self.root} xmlns="{SITEMAP_NS}" xmlns:rs="{RS_NS}">',
            _escaped_element("rs:md", md, MD_ATTRIBUTES),
        ]
        for link in links:
            _check_link(link)
            parts.append(_escaped_element("rs:ln", link, LN_ATTRIBUTES))
        return XML_DECLARATION + "".join(parts).encode()

    def entry(
        self,
        loc: str,
        lastmod: str | None = None,
        md: Attributes | None = None,
        links: Sequence[Attributes] = (),
    ) -> bytes:
        """One `<url>`/`<sitemap>`: loc, optional lastmod, optional `rs:md`, then links."""
        if not loc:
            raise ValueError("an entry needs a non-empty loc")
        # The hot path of million-entry lists: write the values as they are, then
        # check them all at once; only if one needs escaping, render again escaped.
        markup = f"{self._open}{loc}</loc>"
        values = loc
        if lastmod:
            markup += f"<lastmod>{lastmod}</lastmod>"
            values += lastmod
        if md:
            attributes = ""
            for name in _MD_ORDER.get(tuple(md)) or _output_order("rs:md", md, MD_ATTRIBUTES):
                value = _attribute(md, name)
                if value:
                    attributes += f' {name}="{value}"'
                    values += value
            if attributes:
                markup += f"<rs:md{attributes}/>"
        for link in links:
            _check_link(link)
            element, element_values = _element("rs:ln", link, LN_ATTRIBUTES)
            markup += element
            values += element_values
        if _is_plain(values):
            return f"{markup}{self._close}".encode()
        return self._escaped_entry(loc, lastmod, md, links)

    def resource_entry(
        self,
        loc: str,
        lastmod: str,
        *,
        hash: str = "",
        length: str = "",
        type: str = "",
        path: str = "",
        links: Sequence[tuple[str, str, str]] = (),
    ) -> bytes:
        """`entry()` for the one shape of Resource List and manifest entries, twice as fast.

        The `rs:md` attributes are hash, length, type and path; links are
        (rel, href, type) triples. Anything but plain values, a lastmod and
        whole links goes to `entry()`, which escapes it or raises.
        """
        type = type and schema_type(type)
        links = [(rel, href, t and schema_type(t)) for rel, href, t in links]
        if hash and length and type:
            md = f' hash="{hash}" length="{length}" type="{type}"'
        else:
            md = "".join(
                f' {name}="{value}"'
                for name, value in (("hash", hash), ("length", length), ("type", type))
                if value
            )
        if path:
            md += f' path="{path}"'
        markup = f"{self._open}{loc}</loc><lastmod>{lastmod}</lastmod>"
        if md:
            markup += f"<rs:md{md}/>"
        values = f"{loc}{lastmod}{hash}{length}{type}{path}"
        whole = bool(loc and lastmod)
        for rel, href, link_type in links:
            if link_type:
                markup += f'<rs:ln rel="{rel}" href="{href}" type="{link_type}"/>'
            else:
                markup += f'<rs:ln rel="{rel}" href="{href}"/>'
            values += f"{rel}{href}{link_type}"
            whole = whole and bool(rel and href)
        if whole and _is_plain(values):
            return f"{markup}{self._close}".encode()
        return self.entry(
            loc,
            lastmod,
            {"hash": hash, "length": length, "type": type, "path": path},
            [{"rel": rel, "href": href, "type": link_type} for rel, href, link_type in links],
        )

    def _escaped_entry(
        self, loc: str, lastmod: str | None, md: Attributes | None, links: Sequence[Attributes]
    ) -> bytes:
        markup = f"{self._open}{escape_text(loc)}</loc>"
        if lastmod:
            markup += f"<lastmod>{escape_text(lastmod)}</lastmod>"
        if md:
            markup += _escaped_element("rs:md", md, MD_ATTRIBUTES)
        for link in links:
            markup += _escaped_element("rs:ln", link, LN_ATTRIBUTES)
        return f"{markup}{self._close}".encode()

    def end(self) -> bytes:
        """The root end tag."""
        return f"</{self.root}>".encode()


def hash_value(md5: str, sha256: str = "") -> str:
    """The `hash` attribute: space-separated `algo:hexdigest`, md5 first, as resync writes it."""
    if md5 and sha256:
        return f"md5:{md5} sha-256:{sha256}"
    if md5:
        return f"md5:{md5}"
    if sha256:
        return f"sha-256:{sha256}"
    return ""


_RESOURCE_LIST = DocumentWriter("urlset")

#: Every byte that needs no escaping anywhere: printable ASCII but `& < > "`.
_PLAIN = bytes(byte for byte in range(256) if 0x20 <= byte < 0x7F and byte not in b'&<>"')


def _markup_bytes(markup: str) -> int:
    """How many bytes of `markup` (tags alone, no values) are not plain: its `<`, `>` and `"`."""
    return len(markup.encode().translate(None, _PLAIN))


#: The usual entry's tags without their values, and a typed link's.
_URL_MARKUP = _markup_bytes(
    '<url><loc></loc><lastmod></lastmod><rs:md hash="" length="" type=""/></url>'
)
_LINK_MARKUP = _markup_bytes('<rs:ln rel="" href="" type=""/>')


def resource_url(record: ResourceRecord) -> bytes:
    """A Resource List `<url>` for a record, in one call: a million-entry list makes a million.

    The usual entry (md5, type, links with a type) is written here with its
    values as they are, then checked whole: deleting every plain byte from it
    must leave exactly its tags' `<`, `>` and `"`, so no value holds one, an
    `&`, a control character or non-ASCII. One C pass over the bytes written,
    instead of joining the values to check them apart. Anything else goes
    through `DocumentWriter.resource_entry`, which escapes it or raises.
    """
    loc, md5, mime = record.uri, record.md5, record.mime
    if mime:  # schema_type, its cache read here: a million-entry list makes a million
        mime = _SCHEMA_TYPES.get(mime) or schema_type(mime)
    lastmod = w3c_datetime(record.lastmod)
    if loc and md5 and mime and not record.sha256:
        markup = (
            f"<url><loc>{loc}</loc><lastmod>{lastmod}</lastmod>"
            f'<rs:md hash="md5:{md5}" length="{record.length}" type="{mime}"/>'
        )
        tags = _URL_MARKUP
        for rel, href, link_type in record.links:
            if link_type:
                link_type = _SCHEMA_TYPES.get(link_type) or schema_type(link_type)
            if not (rel and href and link_type):
                break
            markup += f'<rs:ln rel="{rel}" href="{href}" type="{link_type}"/>'
            tags += _LINK_MARKUP
        else:
            entry = f"{markup}</url>".encode()
            if len(entry.translate(None, _PLAIN)) == tags:
                return entry
    return _RESOURCE_LIST.resource_entry(
        loc,
        lastmod,
        hash=hash_value(md5, record.sha256),
        length=f"{record.length}",
        type=mime,
        links=record.links,  # Link is a (rel, href, mime) triple
    )


def resource_urls(columns: ResourceColumns) -> bytes | None:
    """The `<url>`s of a batch of usual records in one pass, as `resource_url` writes them.

    One f-string per entry, then one encoding and one check for the whole
    batch: deleting every plain byte must leave exactly the tags' own `<`,
    `>` and `"`, as in `resource_url`. When a value would need escaping, the
    runs that hold one are checked entry by entry and those entries written
    by `resource_entry`, which escapes or raises. None when a value is empty
    or missing: the caller then writes the records one by one.
    """
    uris, lastmods, md5s, lengths, mimes, rels, hrefs, link_mimes = columns
    mimes = _schema_types(mimes)
    link_mimes = None if link_mimes is None else _schema_types(link_mimes)
    links = (rels, hrefs, link_mimes)
    linked = None not in links
    if not linked and links != (None, None, None):
        return None
    values = [uris, lastmods, md5s, mimes, *(links if linked else ())]
    # `all()` of a column is false for an empty or missing value.
    if None in lengths or not all(len(column) == len(uris) and all(column) for column in values):
        return None
    if linked:
        entries = [
            f'<url><loc>{u}</loc><lastmod>{m}</lastmod><rs:md hash="md5:{h}" length="{n}" '
            f'type="{t}"/><rs:ln rel="{r}" href="{href}" type="{lt}"/></url>'
            for u, m, h, n, t, r, href, lt in zip(*values[:3], lengths, *values[3:], strict=True)
        ]
        tags = _URL_MARKUP + _LINK_MARKUP
    else:
        entries = [
            f'<url><loc>{u}</loc><lastmod>{m}</lastmod><rs:md hash="md5:{h}" length="{n}" '
            f'type="{t}"/></url>'
            for u, m, h, n, t in zip(uris, lastmods, md5s, lengths, mimes, strict=True)
        ]
        tags = _URL_MARKUP
    written = "".join(entries).encode()
    unplain = written.translate(None, _PLAIN)
    extra = len(unplain) - len(entries) * tags
    if not extra:
        return written
    if extra == unplain.count(b"&"):
        # Only ampersands (query strings): `&amp;` is their escape in text and attributes
        # alike, and the tags hold none, so escaping them all is escaping the values.
        return written.replace(b"&", b"&amp;")
    return b"".join(_checked_runs(entries, columns, tags))


def _schema_types(column: Sequence[str]) -> Sequence[str]:
    """The column's media types as `schema_type` writes them; itself when none changes."""
    if not column or _UNCHANGED_TYPES.issuperset(column):
        return column
    written = [value and schema_type(value) for value in column]
    if len(_UNCHANGED_TYPES) < _SCHEMA_TYPES_SIZE:
        _UNCHANGED_TYPES.update(v for v, w in zip(column, written, strict=True) if v == w)
    return written


#: Media types `schema_type` writes as they are: a column of only these is left as it is.
_UNCHANGED_TYPES: set[str] = set()

#: Entries checked together when a batch holds a value to escape: most runs are still plain.
_RUN = 64


def _checked_runs(entries: list[str], columns: ResourceColumns, tags: int) -> Iterator[bytes]:
    """The entries, each run of `_RUN` checked whole, and entry by entry where it fails."""
    for start in range(0, len(entries), _RUN):
        run = entries[start : start + _RUN]
        written = "".join(run).encode()
        if len(written.translate(None, _PLAIN)) == len(run) * tags:
            yield written
            continue
        for row, entry in enumerate(run, start):
            written = entry.encode()
            if len(written.translate(None, _PLAIN)) == tags:
                yield written
            else:
                yield _escaped_resource_url(columns, row)


def _escaped_resource_url(columns: ResourceColumns, row: int) -> bytes:
    """Row `row` of `columns` as `resource_url` writes a record whose value needs escaping."""
    uris, lastmods, md5s, lengths, mimes, rels, hrefs, link_mimes = columns
    links = [(rels[row], hrefs[row], link_mimes[row])] if rels and hrefs and link_mimes else []
    return _RESOURCE_LIST.resource_entry(
        uris[row],
        lastmods[row],
        hash=hash_value(md5s[row]),
        length=f"{lengths[row]}",
        type=mimes[row],
        links=links,
    )


def render_document(
    root: RootElement,
    md: Attributes,
    links: Iterable[Attributes] = (),
    entries: Iterable[Entry] = (),
) -> bytes:
    """A whole small document in one call; large ones stream through `DocumentWriter`."""
    writer = DocumentWriter(root)
    parts = [writer.start(md, links)]
    parts.extend(writer.entry(e.loc, e.lastmod, e.md, e.links) for e in entries)
    parts.append(writer.end())
    return b"".join(parts)
