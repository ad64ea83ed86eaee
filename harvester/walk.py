"""Fetching ResourceSync documents and walking from the Capability List down."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from harvester.client import FetchError
from harvester.report import Action, Outcome
from harvester.session import HarvestSession
from harvester.storage import Expected, VerificationError, bytes_digests, check
from sitemaps.protocol.constants import Capability
from sitemaps.protocol.reader import Document, ParsedEntry, ResourceSyncParseError, parse_document


class HarvestError(Exception):
    """The run cannot go on: the source's documents are unreachable or unusable."""


class WrongCapability(ResourceSyncParseError):
    """A document is another capability than the one the harvester went for."""

    def __init__(self, url: str, found: str, expected: str) -> None:
        super().__init__(f"{url} is a {found}, expected {expected}")
        self.found = found


def fetch_document(
    session: HarvestSession, url: str, capability: str, *, listed: ParsedEntry | None = None
) -> Document:
    """GET and parse one document, checking it is the capability we went for.

    An index part is also checked against the length and hash its index lists.
    """
    data = session.client.fetch_document(url)
    if listed is not None:
        expected = Expected.from_entry(listed, session.config.hash_algorithms)
        try:
            check(expected, len(data), bytes_digests(data, expected.hashes))
        except VerificationError as error:
            raise ResourceSyncParseError(f"{url} differs from its index entry: {error}") from error
    document = parse_document(data, max_bytes=session.config.max_document_bytes)
    if document.capability != capability:
        raise WrongCapability(url, document.capability, capability)
    return document


def read_capabilities(session: HarvestSession) -> dict[str, str]:
    """Map each capability the source advertises to its document's URL."""
    url = session.config.require_capability_list_url()
    try:
        document = fetch_document(session, url, Capability.CAPABILITY_LIST)
    except WrongCapability as error:
        if error.found == Capability.DESCRIPTION:
            raise HarvestError(
                f"{url} is a Source Description, not a Capability List: give it as "
                "`source_url:` in the config (instead of `capability_list_url:`) to harvest "
                "every set it lists, each into its own folder, or the one named by `set:`"
            ) from error
        raise HarvestError(f"cannot read the Capability List: {error}") from error
    except (FetchError, ResourceSyncParseError) as error:
        raise HarvestError(f"cannot read the Capability List: {error}") from error
    if document.is_index:
        raise HarvestError(f"{url}: a Capability List must not be an index")
    capabilities: dict[str, str] = {}
    for entry in document.entries:
        if entry.capability and entry.capability not in capabilities:
            capabilities[entry.capability] = entry.loc
        elif entry.capability:
            session.report.warnings.append(
                f"the Capability List names {entry.capability} twice; using the first"
            )
    return capabilities


def list_documents(
    session: HarvestSession,
    url: str,
    capability: str,
    *,
    select: Callable[[Document], Iterable[ParsedEntry]] | None = None,
    aside: dict[str, Outcome] | None = None,
) -> Iterator[Document]:
    """Yield the document at `url`, or each part (chosen by `select`) if it is an index.

    A part failing is recorded as a failure (or set `aside`, for a caller that may
    yet make up for it) and the others are still harvested. The top document
    failing stops the run, or with `aside` given is set aside too (nothing yielded).
    """
    for document, _ in list_parts(session, url, capability, select=select, aside=aside):
        yield document


def list_parts(
    session: HarvestSession,
    url: str,
    capability: str,
    *,
    select: Callable[[Document], Iterable[ParsedEntry]] | None = None,
    aside: dict[str, Outcome] | None = None,
) -> Iterator[tuple[Document, str]]:
    """As `list_documents`, each document with where it stands: " (part 2 of 4)" for a
    part of an index, "" otherwise. A phase per part says so, as its count starts anew."""
    try:
        top = fetch_document(session, url, capability)
    except (FetchError, ResourceSyncParseError) as error:
        if aside is None:
            raise HarvestError(f"cannot read the {capability} at {url}: {error}") from error
        record_failure(session, aside, url, str(error))
        return
    if not top.is_index:
        yield top, ""
        return
    parts = list(select(top) if select is not None else top.entries)
    for number, part in enumerate(parts, 1):
        try:
            document = fetch_document(session, part.loc, capability, listed=part)
        except (FetchError, ResourceSyncParseError) as error:
            record_failure(session, aside, part.loc, str(error))
            continue
        if document.is_index:
            record_failure(
                session, aside, part.loc, "an index inside an index; indexes do not nest"
            )
            continue
        yield document, f" (part {number} of {len(parts)})"


def record_failure(
    session: HarvestSession, aside: dict[str, Outcome] | None, uri: str, reason: str
) -> None:
    """Record a failure, or set it aside for a caller that may yet make up for it."""
    outcome = Outcome(uri, Action.FAILED, reason=reason)
    if aside is None:
        session.report.add(outcome)
    else:
        aside[uri] = outcome
