"""Finding a source's Capability Lists from whatever URL a user has (spec §12).

A `source_url` may be a Capability List (one set), a Source Description (every
set it lists), any other ResourceSync document (its `up` link leads to its
Capability List), or a web site. For a site, the places the spec names are
tried in order: `/.well-known/resourcesync`, the `Sitemap:` lines of
`/robots.txt` (each a ResourceSync document, typically a Resource List), then
a `Link: <...>; rel="resourcesync"` header or an HTML `<link rel="resourcesync">`
on the page itself. Every request goes through the harvester's client (or the
validator's fetcher, for a web page it is given), so discovery never leaves the
allowed hosts either.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from urllib.parse import urljoin, urlsplit

import lxml.html
from lxml import etree

from harvester.client import FetchError, HarvestClient, Page
from harvester.walk import HarvestError
from sitemaps.protocol.constants import Capability
from sitemaps.protocol.reader import ResourceSyncParseError, parse_document

WELL_KNOWN_PATH = "/.well-known/resourcesync"
RELATION = "resourcesync"


class Discovery:
    """One discovery run: how pages are fetched (the harvester's client, or the validator's
    fetcher), a note of every place tried, for the error, and the Source Descriptions met."""

    def __init__(self, fetch_page: Callable[[str], Page], max_bytes: int) -> None:
        self.fetch_page = fetch_page
        self.max_bytes = max_bytes
        self.tried: list[str] = []
        self.descriptions: list[str] = []

    def capability_lists(self, url: str) -> list[str]:
        """The Capability List URLs that `url` leads to; HarvestError if none."""
        page = self.get(url)
        found = self.from_page(page) if page is not None else None
        if found is None:
            found = self.from_site(url, page)
        if not found:
            raise HarvestError(
                f"found no ResourceSync source from {url}; tried: {'; '.join(self.tried)}"
            )
        return list(dict.fromkeys(found))

    def from_site(self, url: str, page: Page | None) -> list[str]:
        """Well-known URI, then robots.txt, then the page's links (spec §12.2-12.4)."""
        parts = urlsplit(url)
        root = f"{parts.scheme}://{parts.netloc}"
        found = self.from_url(root + WELL_KNOWN_PATH)
        if found:
            return found
        robots = self.get(root + "/robots.txt")
        if robots is not None:
            found = [cl for sitemap in sitemap_lines(robots) for cl in self.from_url(sitemap)]
            if found:
                return found
        for target in page_links(page) if page is not None else ():
            found = self.from_url(target)
            if found:
                return found
        return []

    def from_url(self, url: str) -> list[str]:
        """The Capability Lists a ResourceSync document at `url` leads to, or []."""
        page = self.get(url)
        return (self.from_page(page) or []) if page is not None else []

    def from_page(self, page: Page) -> list[str] | None:
        """Capability Lists named by a ResourceSync document; None if it is not one."""
        try:
            document = parse_document(page.body, max_bytes=self.max_bytes)
        except ResourceSyncParseError as error:
            self.tried.append(f"{page.url}: not a ResourceSync document ({error})")
            return None
        if document.capability == Capability.DESCRIPTION:
            self.descriptions.append(page.url)
            if not document.entries:
                self.tried.append(f"{page.url}: a Source Description that lists no set")
            return [entry.loc for entry in document.entries]
        if document.capability == Capability.CAPABILITY_LIST:
            return [page.url]
        up = document.link("up")
        if up is None:
            self.tried.append(f"{page.url}: a {document.capability} without an 'up' link")
            return None
        return [urljoin(page.url, up.href)]

    def get(self, url: str) -> Page | None:
        """The page at `url`, or None (noted) when it cannot be fetched."""
        try:
            return self.fetch_page(url)
        except FetchError as error:
            self.tried.append(str(error))
            return None


def discover_capability_lists(client: HarvestClient, url: str) -> list[str]:
    """Every Capability List `url` leads to: `set:` picks among them (`choose_set`), and
    the others still decide the folder it is copied into (`harvester.layout`)."""
    return Discovery(client.fetch_page, client.config.max_document_bytes).capability_lists(url)


def choose_set(capability_lists: list[str], set_name: str) -> str:
    """The Capability List that is `set_name`, or whose folder ends in `/<set_name>`."""
    wanted = set_name.strip("/")
    matches = [
        url
        for url in capability_lists
        if url == set_name or urlsplit(url).path.rsplit("/", 1)[0].endswith("/" + wanted)
    ]
    if len(matches) != 1:
        problem = "matches no set" if not matches else "matches several sets"
        raise HarvestError(
            f"config key 'set': {set_name!r} {problem}; the source lists "
            + ", ".join(capability_lists)
        )
    return matches[0]


def sitemap_lines(robots: Page) -> list[str]:
    """The absolute URLs of a robots.txt's `Sitemap:` lines."""
    text = robots.body.decode("utf-8", errors="replace")
    urls = []
    for line in text.splitlines():
        field, _, value = line.partition(":")
        if field.strip().lower() == "sitemap" and value.strip():
            urls.append(urljoin(robots.url, value.strip()))
    return urls


def page_links(page: Page) -> list[str]:
    """`rel="resourcesync"` targets: the Link header's first, then the HTML's."""
    header = [page.links[RELATION]] if RELATION in page.links else []
    return list(dict.fromkeys([*header, *html_links(page)]))


def html_links(page: Page) -> Iterable[str]:
    """Targets of `<link rel="resourcesync" href="...">` in an HTML page."""
    if not page.body.strip():
        return []
    try:
        root = lxml.html.document_fromstring(page.body)
    except (etree.ParserError, ValueError):
        return []
    return [
        urljoin(page.url, str(link.get("href")).strip())
        for link in root.iter("link")
        if link.get("href") and RELATION in str(link.get("rel", "")).lower().split()
    ]
