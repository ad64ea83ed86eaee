"""The official ResourceSync 1.1 and Sitemap schemas, shipped in `validator/xsd/`."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from lxml import etree

from sitemaps.protocol.constants import SITEMAP_NS

XSD_DIR = Path(__file__).resolve().parent / "xsd"


@cache
def _schema(name: str) -> etree.XMLSchema:
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    return etree.XMLSchema(etree.parse(str(XSD_DIR / name), parser))


def schema_errors(root: etree._Element) -> list[str]:
    """Every schema error of a `<urlset>` or `<sitemapindex>`, with its line.

    One relaxation: the Sitemap schema wants at least one entry, but
    ResourceSync needs empty documents (a Change List just opened, a set with
    no resources yet), so a missing first entry is not reported.
    """
    index = etree.QName(root).localname == "sitemapindex"
    schema = _schema("rs-sitemapindex.xsd" if index else "rs-urlset.xsd")
    if schema.validate(root):
        return []
    entry = f"{{{SITEMAP_NS}}}{'sitemap' if index else 'url'}"
    empty = root.find(entry) is None
    missing_entry = f"Element '{root.tag}': Missing child element(s)."
    return [
        f"line {error.line}: {error.message}"
        for error in schema.error_log
        if not (empty and error.message.startswith(missing_entry))
    ]
