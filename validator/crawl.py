"""Walk a source from its Source Description or Capability List and check each document.

Which documents follow from which is decided by the capability each one
declares: a Source Description lists Capability Lists, a Capability List
lists the set's capability documents, an index lists its parts, a dump's
entries may link their manifests (`rel="contents"`). Notification topics and
the resources themselves are not fetched. A web page given as the start
leads to its source as it leads the harvester (`harvester.discovery`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from harvester.client import FetchError, Page
from harvester.discovery import Discovery
from harvester.walk import HarvestError
from sitemaps.protocol.constants import Capability

from .authority import Authority
from .http import DEFAULT_MAX_BYTES, Fetched, Fetcher, FetchFailed
from .parsing import RawDocument, UnreadableDocument, read_checked
from .problems import Report
from .rules import CHANGE_FAMILY, RESOURCE_FAMILY, Context, check_document

#: Capability List entries the validator fetches; notification topics are not documents.
FOLLOWED = (RESOURCE_FAMILY | CHANGE_FAMILY) - {
    Capability.RESOURCE_DUMP_MANIFEST,
    Capability.CHANGE_DUMP_MANIFEST,
} | {
    Capability.RESOURCE_LIST_ARCHIVE,
    Capability.RESOURCE_DUMP_ARCHIVE,
    Capability.CHANGE_LIST_ARCHIVE,
    Capability.CHANGE_DUMP_ARCHIVE,
}
MANIFESTS: dict[str, str] = {
    Capability.RESOURCE_DUMP: Capability.RESOURCE_DUMP_MANIFEST,
    Capability.CHANGE_DUMP: Capability.CHANGE_DUMP_MANIFEST,
}


@dataclass(frozen=True, slots=True)
class Visit:
    url: str
    context: Context
    #: The URL the user gave, which may be a web page rather than a document.
    given: bool = False


def validate_source(
    url: str,
    *,
    token: str | None = None,
    extra_hosts: tuple[str, ...] = (),
    report: Report | None = None,
    timeout: float = 30.0,
    max_bytes: int = DEFAULT_MAX_BYTES,
    transport: httpx.BaseTransport | None = None,
) -> Report:
    """Check every document reachable from `url`; the report holds what was wrong."""
    report = report or Report()
    authority = Authority.of(url, extra_hosts)
    fetcher = Fetcher(
        authority, token=token, timeout=timeout, max_bytes=max_bytes, transport=transport
    )
    try:
        Crawler(fetcher, authority, report).run(url)
    finally:
        fetcher.close()
    return report


class Crawler:
    def __init__(self, fetcher: Fetcher, authority: Authority, report: Report) -> None:
        self.fetcher = fetcher
        self.authority = authority
        self.report = report

    def run(self, start: str) -> None:
        queue = deque([Visit(start, Context(), given=True)])
        seen = {start}
        while queue:
            visit = queue.popleft()
            for following in self.check(visit):
                if following.url in seen:
                    continue
                seen.add(following.url)
                if self.authority.covers(following.url):
                    queue.append(following)
                else:
                    self.report.add(
                        visit.url,
                        f"links {following.url}, outside the source's authority "
                        f"({self.authority}): not followed",
                        "authority",
                    )

    def check(self, visit: Visit) -> list[Visit]:
        """Fetch and check one document; the documents it leads to."""
        try:
            fetched = self.fetcher.get(visit.url)
        except FetchFailed as error:
            self.report.checked(visit.url)
            self.report.add(visit.url, str(error), "http")
            return []
        if visit.given and fetched.is_web_page:
            return self.discover(visit.url)
        self.report.checked(visit.url)
        for problem in self.fetcher.http_problems(fetched):
            self.report.add(visit.url, problem, "http")
        document = self.read(visit.url, fetched)
        if document is None:
            return []
        for finding in check_document(document, visit.context, self.authority, len(fetched.body)):
            self.report.add(visit.url, finding.message, finding.kind)
        return list(following(visit, document))

    def discover(self, url: str) -> list[Visit]:
        """The Source Description (else the Capability Lists) a web page leads to."""
        discovery = Discovery(self.page, self.fetcher.max_bytes)
        try:
            capability_lists = discovery.capability_lists(url)
        except HarvestError as error:
            self.report.add(url, str(error), "discovery")
            return []
        starts = discovery.descriptions or capability_lists
        self.report.emit(
            f"{url} is a web page; checking the source it leads to: {', '.join(starts)}"
        )
        return [Visit(start, Context()) for start in starts]

    def page(self, url: str) -> Page:
        """A page for discovery, fetched within the authority like every document."""
        try:
            fetched = self.fetcher.get(url)
        except FetchFailed as error:
            raise FetchError(url, str(error)) from error
        return Page(url=fetched.url, body=fetched.body, links=fetched.links)

    def read(self, url: str, fetched: Fetched) -> RawDocument | None:
        try:
            document, schema_errors = read_checked(fetched.body)
        except UnreadableDocument as error:
            self.report.add(url, str(error), "xml")
            return None
        for message in schema_errors:
            self.report.add(url, f"schema: {message}", "schema")
        return document


def following(visit: Visit, document: RawDocument) -> Iterator[Visit]:
    """The documents this one leads to, each with what it must say about itself."""
    capability = document.capability
    if capability == Capability.DESCRIPTION:
        yield from _listed_capability_lists(visit, document)
        return
    # Below a Capability List, every document's `up` names the Capability List.
    up = visit.url if capability == Capability.CAPABILITY_LIST else visit.context.up
    if capability == Capability.CAPABILITY_LIST and not document.is_index:
        yield from _listed_capabilities(document, up)
    elif document.is_index and capability in FOLLOWED and not visit.context.index:
        yield from _index_parts(visit, document, up)
    elif capability in MANIFESTS:
        yield from _manifests(document, up)


def _listed_capability_lists(visit: Visit, document: RawDocument) -> Iterator[Visit]:
    expected = Capability.DESCRIPTION if document.is_index else Capability.CAPABILITY_LIST
    for entry in document.entries:
        if entry.loc:
            yield Visit(entry.loc, Context(expected=expected, up=visit.url))


def _listed_capabilities(document: RawDocument, up: str | None) -> Iterator[Visit]:
    for entry in document.entries:
        listed = entry.md.get("capability", "")
        if entry.loc and listed in FOLLOWED:
            yield Visit(entry.loc, Context(expected=listed, up=up))


def _index_parts(visit: Visit, document: RawDocument, up: str | None) -> Iterator[Visit]:
    for entry in document.entries:
        if entry.loc:
            context = Context(expected=document.capability, up=up, index=visit.url, listed=entry.md)
            yield Visit(entry.loc, context)


def _manifests(document: RawDocument, up: str | None) -> Iterator[Visit]:
    for entry in document.entries:
        for link in entry.links:
            if link.get("rel") == "contents" and link.get("href"):
                yield Visit(link["href"], Context(expected=MANIFESTS[document.capability], up=up))
