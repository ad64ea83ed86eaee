"""Read a fetched document leniently, so every problem in it can be reported.

The project's reader (`sitemaps.protocol.reader`) stops at the first error, as a
harvester should; a validator keeps going. Parsing goes through the reader's
`top_level_elements`, so it is just as safe: DTDs and entity declarations are
refused before and after parsing, lxml runs with entity resolution, DTD loading
and network access off, and no entry holds more than any real one. The
validator keeps the whole tree for the schema check, so it also caps its size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lxml import etree

from sitemaps.protocol.constants import RS_NS, SITEMAP_NS
from sitemaps.protocol.reader import ResourceSyncParseError, top_level_elements

URLSET = f"{{{SITEMAP_NS}}}urlset"
SITEMAPINDEX = f"{{{SITEMAP_NS}}}sitemapindex"
_ENTRY_TAGS = {URLSET: f"{{{SITEMAP_NS}}}url", SITEMAPINDEX: f"{{{SITEMAP_NS}}}sitemap"}
_LOC = f"{{{SITEMAP_NS}}}loc"
_LASTMOD = f"{{{SITEMAP_NS}}}lastmod"
_MD = f"{{{RS_NS}}}md"
_LN = f"{{{RS_NS}}}ln"
_FORBIDDEN = (b"<!DOCTYPE", b"<!ENTITY")
#: Elements the validator holds at most: 50,000 entries of 20 elements each. The
#: tree, the schema check and the values read take about 1 GB at this size.
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


def parse_safely(data: bytes) -> etree._Element:
    """The root element; UnreadableDocument if it is unsafe, not well-formed or too large."""
    for declaration in _FORBIDDEN:
        if declaration in data:
            raise UnreadableDocument(
                f"contains {declaration.decode()}: DTDs and entities are refused"
            )
    try:
        elements = top_level_elements(data, max_elements=MAX_ELEMENTS)
        root = next(elements, None)
        for _ in elements:
            pass
    except etree.XMLSyntaxError as error:
        raise UnreadableDocument(f"not well-formed XML: {error}") from error
    except ResourceSyncParseError as error:
        raise UnreadableDocument(str(error)) from error
    if root is None:
        raise UnreadableDocument("not well-formed XML: no root element")
    return root


def read_document(root: etree._Element) -> RawDocument:
    """The root's metadata, links and entries, keeping every value as written."""
    entry_tag = _ENTRY_TAGS[root.tag]
    document = RawDocument(is_index=root.tag == SITEMAPINDEX)
    for child in root:
        if child.tag == entry_tag:
            document.entries.append(_entry(child))
        elif child.tag in (_MD, _LN):
            document.header_after_entries |= bool(document.entries)
            target = document.mds if child.tag == _MD else document.links
            target.append(dict(child.attrib))
    return document


def _entry(element: etree._Element) -> RawEntry:
    entry = RawEntry(loc=None, line=element.sourceline or 0)
    for child in element:
        if child.tag == _LOC and entry.loc is None:
            entry.loc = (child.text or "").strip()
        elif child.tag == _LASTMOD:
            entry.lastmod = (child.text or "").strip()
        elif child.tag == _MD:
            entry.mds.append(dict(child.attrib))
        elif child.tag == _LN:
            entry.links.append(dict(child.attrib))
    return entry
