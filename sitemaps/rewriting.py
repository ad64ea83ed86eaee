"""Rewrite every URL of a ResourceSync document through the project's reader and writer.

An export moves a set's documents to another address; their `<loc>`s and
`<rs:ln href>`s must move with them. The document is parsed by
`sitemaps.protocol.reader` into typed values and written again by `sitemaps.protocol.writer`,
never edited as text, so escaping and attribute order stay the writer's. A
document the portal wrote comes back byte for byte when no URL changes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping

from .protocol.constants import w3c_datetime
from .protocol.reader import Document, ParsedEntry, ParsedLink, parse_document
from .protocol.writer import Attributes, DocumentWriter

UrlRewrite = Callable[[str], str]


class PrefixRewrite:
    """Map URLs by their longest matching prefix; a URL under none is left as it is."""

    def __init__(self, prefixes: Mapping[str, str]) -> None:
        self.prefixes = sorted(prefixes.items(), key=lambda pair: len(pair[0]), reverse=True)

    def __call__(self, url: str) -> str:
        for old, new in self.prefixes:
            if url.startswith(old):
                return new + url[len(old) :]
        return url

    def moves(self, url: str) -> bool:
        """Whether the URL falls under one of the prefixes."""
        return any(url.startswith(old) for old, _ in self.prefixes)


def _time(value: dt.datetime | None) -> str:
    return "" if value is None else w3c_datetime(value)


def _hash(digests: Mapping[str, str]) -> str:
    return " ".join(f"{algorithm}:{digest}" for algorithm, digest in digests.items())


def _number(value: int | None) -> str:
    return "" if value is None else str(value)


def _link(link: ParsedLink, rewrite: UrlRewrite) -> Attributes:
    return {
        "rel": link.rel,
        "href": rewrite(link.href),
        "type": link.type or "",
        "length": _number(link.length),
        "hash": _hash(link.hash),
        "modified": _time(link.modified),
        "pri": _number(link.pri),
        "path": link.path or "",
        "encoding": link.encoding or "",
        "profile": link.profile or "",
    }


def _entry_md(entry: ParsedEntry) -> Attributes:
    return {
        "capability": entry.capability or "",
        "at": _time(entry.at),
        "completed": _time(entry.completed),
        "from": _time(entry.from_),
        "until": _time(entry.until),
        "change": entry.change or "",
        "datetime": _time(entry.datetime),
        "hash": _hash(entry.hash),
        "length": _number(entry.length),
        "type": entry.type or "",
        "path": entry.path or "",
        "encoding": entry.encoding or "",
        "modified": _time(entry.modified),
    }


def render_parsed(document: Document, rewrite: UrlRewrite) -> bytes:
    """Write a parsed document again, every URL passed through `rewrite`."""
    writer = DocumentWriter("sitemapindex" if document.is_index else "urlset")
    root_md = {
        "capability": document.capability,
        "at": _time(document.at),
        "completed": _time(document.completed),
        "from": _time(document.from_),
        "until": _time(document.until),
    }
    parts = [writer.start(root_md, [_link(link, rewrite) for link in document.links])]
    parts.extend(_entries(writer, document.entries, rewrite))
    parts.append(writer.end())
    return b"".join(parts)


def _entries(writer: DocumentWriter, entries: Iterable[ParsedEntry], rewrite: UrlRewrite):
    for entry in entries:
        yield writer.entry(
            rewrite(entry.loc),
            _time(entry.lastmod) or None,
            _entry_md(entry),
            [_link(link, rewrite) for link in entry.links],
        )


def rewrite_document(content: bytes, rewrite: UrlRewrite) -> tuple[Document, bytes]:
    """The parsed document (original URLs) and its bytes with every URL rewritten."""
    document = parse_document(content)
    return document, render_parsed(document, rewrite)
