"""Read a fetched document leniently, so every problem in it can be reported.

The project's reader (`sitemaps.protocol.reader`) stops at the first error, as a
harvester should; a validator keeps going. Parsing goes through the reader's
`top_level_elements`, so it is just as safe: DTDs and entity declarations are
refused before and after parsing, lxml runs with entity resolution, DTD loading
and network access off, and no entry holds more than any real one. Each element
under the root is read, handed to the schema check and let go, so the tree is
never held whole; what is kept (every entry as written) is capped by MAX_ELEMENTS.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from lxml import etree

from sitemaps.protocol.constants import RS_NS, SITEMAP_NS
from sitemaps.protocol.reader import ResourceSyncParseError, top_level_elements
from sitemaps.protocol.writer import LN_ATTRIBUTES, MD_ATTRIBUTES

from .schema import SchemaCheck

URLSET = f"{{{SITEMAP_NS}}}urlset"
SITEMAPINDEX = f"{{{SITEMAP_NS}}}sitemapindex"
_ENTRY_TAGS = {URLSET: f"{{{SITEMAP_NS}}}url", SITEMAPINDEX: f"{{{SITEMAP_NS}}}sitemap"}
_LOC = f"{{{SITEMAP_NS}}}loc"
_LASTMOD = f"{{{SITEMAP_NS}}}lastmod"
_MD = f"{{{RS_NS}}}md"
_LN = f"{{{RS_NS}}}ln"
#: The attributes kept: the rules read no other, and the schema reports the rest.
_KNOWN_ATTRIBUTES = frozenset(MD_ATTRIBUTES + LN_ATTRIBUTES)
#: Elements a document may have: 50,000 entries of 20 elements each. The entries
#: as written are kept for the rules that compare them.
MAX_ELEMENTS = 1_000_000


class UnreadableDocument(ValueError):
    """Not a safe, well-formed sitemap document: nothing more can be checked."""


@dataclass(slots=True)
class RawEntry:
    """One `<url>` or `<sitemap>` as written: attribute values are unparsed strings."""

    loc: str | None
    lastmod: str | None = None
    mds: list[dict[str, str]] = field(default_factory=list)
    links: list[dict[str, str]] = field(default_factory=list)
    line: int = 0

    @property
    def md(self) -> dict[str, str]:
        return self.mds[0] if self.mds else {}


@dataclass(slots=True)
class RawDocument:
    is_index: bool
    mds: list[dict[str, str]] = field(default_factory=list)
    links: list[dict[str, str]] = field(default_factory=list)
    entries: list[RawEntry] = field(default_factory=list)
    #: True when a root `<rs:md>` or `<rs:ln>` comes after the first entry.
    header_after_entries: bool = False

    @property
    def md(self) -> dict[str, str]:
        return self.mds[0] if self.mds else {}

    @property
    def capability(self) -> str:
        return self.md.get("capability", "").strip()

    def link(self, rel: str) -> str | None:
        """The href of the first root link with this relation."""
        return next((ln.get("href", "").strip() for ln in self.links if ln.get("rel") == rel), None)


def read_checked(data: bytes) -> tuple[RawDocument, list[str]]:
    """The document as written and its schema errors.

    UnreadableDocument if it is unsafe, not well-formed or too large.
    """
    try:
        return _read(top_level_elements(data, max_elements=MAX_ELEMENTS))
    except etree.XMLSyntaxError as error:
        raise UnreadableDocument(f"not well-formed XML: {error}") from error
    except ResourceSyncParseError as error:
        raise UnreadableDocument(str(error)) from error


def _read(elements: Iterator[etree._Element]) -> tuple[RawDocument, list[str]]:
    """Read each element under the root, then hand it to the schema check."""
    root = next(elements, None)
    if root is None:
        raise UnreadableDocument("not well-formed XML: no root element")
    entry_tag = _ENTRY_TAGS[root.tag]
    document = RawDocument(is_index=root.tag == SITEMAPINDEX)
    schema = SchemaCheck(root, entry_tag)
    for child in elements:
        if child.tag == entry_tag:
            document.entries.append(_entry(child))
        elif child.tag in (_MD, _LN):
            document.header_after_entries |= bool(document.entries)
            target = document.mds if child.tag == _MD else document.links
            target.append(_known_attributes(child))
        schema.add(child)
    return document, schema.errors()


def _entry(element: etree._Element) -> RawEntry:
    entry = RawEntry(loc=None, line=element.sourceline or 0)
    for child in element:
        if child.tag == _LOC and entry.loc is None:
            entry.loc = (child.text or "").strip()
        elif child.tag == _LASTMOD:
            entry.lastmod = (child.text or "").strip()
        elif child.tag == _MD:
            entry.mds.append(_known_attributes(child))
        elif child.tag == _LN:
            entry.links.append(_known_attributes(child))
    return entry


def _known_attributes(element: etree._Element) -> dict[str, str]:
    return {name: value for name, value in element.items() if name in _KNOWN_ATTRIBUTES}
