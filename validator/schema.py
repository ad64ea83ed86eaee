"""The official ResourceSync 1.1 and Sitemap schemas, shipped in `validator/xsd/`."""

from __future__ import annotations

import itertools
from functools import cache
from pathlib import Path

from lxml import etree

from sitemaps.protocol.constants import SITEMAP_NS
from sitemaps.protocol.reader import ResourceSyncParseError

XSD_DIR = Path(__file__).resolve().parent / "xsd"
#: Schema errors listed for one document. lxml holds every error of a validation
#: until it ends, and a document of unknown attributes has one per attribute.
MAX_ERRORS = 1_000
#: Elements and attributes validated at once, which bounds one validation's errors.
SLICE_ITEMS = 10_000
#: Elements and attributes one element under the root may have: a thousand links
#: of ten attributes each, twice over. lxml takes about 1.5 KB per error.
MAX_CHILD_ITEMS = 2 * SLICE_ITEMS


@cache
def _schema(name: str) -> etree.XMLSchema:
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    return etree.XMLSchema(etree.parse(str(XSD_DIR / name), parser))


class SchemaCheck:
    """The schema errors of a `<urlset>` or `<sitemapindex>`, each with its line.

    The root's children are moved in as they are parsed and validated a slice at
    a time, each slice under a root of its own, so neither the tree nor lxml's
    errors are ever held whole; listing stops after MAX_ERRORS. A slice after
    entries starts with a valid placeholder entry, so a root `<rs:md>` or `<rs:ln>`
    there is out of place as it is in the document.

    One relaxation: the Sitemap schema wants at least one entry, but ResourceSync
    needs empty documents (a Change List just opened, a set with no resources
    yet), so a missing entry is not reported.
    """

    def __init__(self, root: etree._Element, entry_tag: str) -> None:
        index = etree.QName(root).localname == "sitemapindex"
        self._schema = _schema("rs-sitemapindex.xsd" if index else "rs-urlset.xsd")
        self._root = root
        self._entry_tag = entry_tag
        self._missing_entry = f"Element '{root.tag}': Missing child element(s)."
        self._messages: list[str] = []
        self._items = 0
        self._after_entries = False
        self._pending: etree._Element | None = None
        # The root's own attributes and text are checked (and reported) with the first slice.
        self._slice = self._new_slice(attributes=dict(root.attrib))
        self._slice.text = root.text

    def add(self, child: etree._Element) -> None:
        """Take `child`, an element under the root that has just ended, into the check.

        It leaves its tree when the next one comes: until a later element has ended,
        libxml2 may still be appending the text after it, and moved away that text
        would be written into another node's buffer (heap corruption).
        """
        if self._pending is not None:
            self._move(self._pending)
        self._pending = child

    def errors(self) -> list[str]:
        """At most MAX_ERRORS messages, then one saying there were more (parsing is over)."""
        if self._pending is not None:
            self._move(self._pending)
            self._pending = None
        self._validate()
        if len(self._messages) <= MAX_ERRORS:
            return self._messages
        return [*self._messages[:MAX_ERRORS], f"more errors: listing stopped at {MAX_ERRORS}"]

    def _move(self, child: etree._Element) -> None:
        """Out of its tree into the current slice, validating the slice first if it is full."""
        items = sum(1 + len(element.attrib) for element in child.iter())
        if items > MAX_CHILD_ITEMS:
            raise ResourceSyncParseError(
                f"an element under the root (line {child.sourceline}) has more than "
                f"{MAX_CHILD_ITEMS} elements and attributes; no real entry has that many"
            )
        if self._items + items > SLICE_ITEMS and self._items:
            self._validate()
            self._slice = self._new_slice()
            self._items = 0
        self._slice.append(child)
        self._items += items
        self._after_entries |= child.tag == self._entry_tag

    def _validate(self) -> None:
        if len(self._messages) > MAX_ERRORS or self._schema.validate(self._slice):
            return
        messages = (
            f"line {error.line}: {error.message}"
            for error in self._schema.error_log
            if not error.message.startswith(self._missing_entry)
        )
        self._messages.extend(itertools.islice(messages, MAX_ERRORS + 1 - len(self._messages)))

    def _new_slice(self, attributes: dict[str, str] | None = None) -> etree._Element:
        part = etree.Element(self._root.tag, attributes, nsmap=self._root.nsmap)
        part.sourceline = self._root.sourceline
        if self._after_entries:
            placeholder = etree.SubElement(part, self._entry_tag)
            etree.SubElement(placeholder, f"{{{SITEMAP_NS}}}loc").text = "http://example.org/"
        return part
