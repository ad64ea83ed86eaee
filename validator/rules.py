"""What a ResourceSync 1.1 document must say, given where it was found.

Pure functions of the parsed document and its context: no HTTP here. Each
check returns findings; `check_document` runs them all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from sitemaps.protocol.constants import MAX_DOCUMENT_BYTES, MAX_ENTRIES_PER_DOCUMENT, Capability

from .authority import Authority
from .parsing import RawDocument, RawEntry
from .values import attribute_problems, datetime_or_none, datetime_problem, loc_problem

RESOURCE_FAMILY = frozenset(
    {Capability.RESOURCE_LIST, Capability.RESOURCE_DUMP, Capability.RESOURCE_DUMP_MANIFEST}
)
CHANGE_FAMILY = frozenset(
    {Capability.CHANGE_LIST, Capability.CHANGE_DUMP, Capability.CHANGE_DUMP_MANIFEST}
)
#: Values a Capability List entry may carry (spec §9, archives §6, notifications §10).
LISTED_CAPABILITIES = frozenset(
    {
        Capability.RESOURCE_LIST,
        Capability.RESOURCE_DUMP,
        Capability.CHANGE_LIST,
        Capability.CHANGE_DUMP,
        Capability.RESOURCE_LIST_ARCHIVE,
        Capability.RESOURCE_DUMP_ARCHIVE,
        Capability.CHANGE_LIST_ARCHIVE,
        Capability.CHANGE_DUMP_ARCHIVE,
        Capability.CHANGE_NOTIFICATION,
        Capability.FRAMEWORK_NOTIFICATION,
    }
)
KNOWN_CAPABILITIES = frozenset(Capability)
#: Documents ordered oldest first by `datetime` (spec: must).
CHRONOLOGICAL = frozenset({Capability.CHANGE_LIST, Capability.CHANGE_DUMP_MANIFEST})


class Finding(NamedTuple):
    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class Context:
    """Where a document was found, which decides what it must say."""

    #: The capability the linking document announced for it.
    expected: str | None = None
    #: Where its root `up` link must point; None when nothing linked to it.
    up: str | None = None
    #: The index that lists it, which its root `index` link should name.
    index: str | None = None
    #: The `<rs:md>` attributes of its entry in that index.
    listed: dict[str, str] = field(default_factory=dict)


def check_document(
    document: RawDocument, context: Context, authority: Authority, size: int
) -> list[Finding]:
    """Every finding about one parsed document."""
    findings = [*_limits(document, size), *_header(document, context)]
    capability = document.capability
    findings += _navigation(document, context, authority)
    findings += _root_times(document, capability)
    findings += _listed_times(document, context, capability)
    for entry in document.entries:
        findings += _entry(entry, document, authority)
    findings += _order(document, capability)
    return findings


def _limits(document: RawDocument, size: int) -> Iterator[Finding]:
    if len(document.entries) > MAX_ENTRIES_PER_DOCUMENT:
        yield Finding(
            "limits",
            f"{len(document.entries)} entries; at most {MAX_ENTRIES_PER_DOCUMENT} per document",
        )
    if size > MAX_DOCUMENT_BYTES:
        yield Finding("limits", f"{size} bytes; at most {MAX_DOCUMENT_BYTES} per document")


def _header(document: RawDocument, context: Context) -> Iterator[Finding]:
    """One root `<rs:md>` with a capability, the one expected, before the entries."""
    if not document.mds:
        yield Finding("capability", "no root <rs:md>, so no capability")
        return
    if len(document.mds) > 1:
        yield Finding("capability", "more than one root <rs:md>")
    if document.header_after_entries:
        yield Finding("capability", "root <rs:md> and <rs:ln> must come before the entries")
    capability = document.capability
    if not capability:
        yield Finding("capability", "the root <rs:md> has no capability")
    elif capability not in KNOWN_CAPABILITIES:
        yield Finding("capability", f"unknown capability {capability!r}")
    elif context.expected and capability != context.expected:
        yield Finding(
            "capability",
            f"capability is {capability!r}; the linking document says {context.expected!r}",
        )
    if capability == Capability.CAPABILITY_LIST and document.is_index:
        yield Finding("capability", "a Capability List must not be an index (sitemapindex)")
    if context.index and document.is_index:
        yield Finding(
            "capability", f"an index listed in the index {context.index}: indexes do not nest"
        )
    yield from (
        Finding("attributes", f"root <rs:md>: {p}") for p in attribute_problems(document.md)
    )


def _navigation(document: RawDocument, context: Context, authority: Authority) -> Iterator[Finding]:
    """Mandatory `up` (except on a Source Description) and `index` back to a listing index."""
    up = document.link("up")
    if up is None:
        if document.capability not in ("", Capability.DESCRIPTION):
            target = context.up or "its Capability List (or Source Description)"
            yield Finding("up", f'no root <rs:ln rel="up"> (it must point to {target})')
    elif not authority.covers(up):
        yield Finding("up", f"the up link {up!r} is outside the source's authority ({authority})")
    elif context.up and not authority.names(up, context.up):
        yield Finding("up", f"the up link points to {up}; expected {context.up}")
    if context.index:
        index = document.link("index")
        if index is None:
            yield Finding(
                "index", f'listed in the index {context.index} but no root <rs:ln rel="index">'
            )
        elif not authority.names(index, context.index):
            yield Finding("index", f"the index link points to {index}; expected {context.index}")
    for link in document.links:
        yield from (Finding("attributes", f"root <rs:ln>: {p}") for p in attribute_problems(link))


def _root_times(document: RawDocument, capability: str) -> Iterator[Finding]:
    """`at`/`completed` on resource documents, `from`/`until` on change documents, in order."""
    md = document.md
    if capability in RESOURCE_FAMILY:
        required, optional, foreign = "at", "completed", ("from", "until")
    elif capability in CHANGE_FAMILY:
        required, optional, foreign = "from", "until", ("at", "completed")
    else:
        return
    if required not in md:
        yield Finding("times", f"the root <rs:md> of a {capability} needs {required!r}")
    for name in foreign:
        if name in md:
            yield Finding("times", f"{name!r} does not belong on a {capability} (use {required!r})")
    start, end = datetime_or_none(md.get(required)), datetime_or_none(md.get(optional))
    if start and end and end < start:
        yield Finding("times", f"{optional} {md[optional]} is before {required} {md[required]}")


def _listed_times(document: RawDocument, context: Context, capability: str) -> Iterator[Finding]:
    """A part agrees with its index entry; a closed change part says `until` in both."""
    if context.index is None:
        return
    listed, own = context.listed, document.md
    for name in ("at", "completed", "from", "until"):
        both = name in listed and name in own
        if both and datetime_or_none(listed[name]) != datetime_or_none(own[name]):
            yield Finding(
                "index", f"its index entry says {name}={listed[name]}, the document {own[name]}"
            )
    if capability in CHANGE_FAMILY and ("until" in listed) != ("until" in own):
        where = "its index entry" if "until" in listed else "the document"
        yield Finding(
            "index",
            f"only {where} has 'until': a closed part has it in both, an open part in neither",
        )


def _entry(entry: RawEntry, document: RawDocument, authority: Authority) -> Iterator[Finding]:
    where = f"entry {entry.loc or '?'} (line {entry.line})"
    if problem := loc_problem(entry.loc, authority):
        yield Finding("loc", problem)
    if entry.lastmod is not None and (problem := datetime_problem("lastmod", entry.lastmod)):
        yield Finding("attributes", f"{where}: {problem}")
    if len(entry.mds) > 1:
        yield Finding("entry", f"{where}: more than one <rs:md>")
    for attributes in (entry.md, *entry.links):
        yield from (Finding("attributes", f"{where}: {p}") for p in attribute_problems(attributes))
    yield from (Finding("entry", f"{where}: {p}") for p in _entry_requirements(entry, document))


def _entry_requirements(entry: RawEntry, document: RawDocument) -> Iterator[str]:
    """What each kind of document asks of its entries' `<rs:md>`."""
    capability, md = document.capability, entry.md
    entry_capability = md.get("capability")
    if capability == Capability.DESCRIPTION and not document.is_index:
        if entry_capability != Capability.CAPABILITY_LIST:
            yield 'a Source Description entry needs <rs:md capability="capabilitylist">'
    elif capability == Capability.CAPABILITY_LIST:
        if not entry_capability:
            yield "a Capability List entry needs <rs:md capability=...>"
        elif entry_capability not in LISTED_CAPABILITIES:
            yield f"{entry_capability!r} is not a capability a Capability List may list"
    elif document.is_index:
        return
    elif (
        capability in (Capability.CHANGE_LIST, Capability.CHANGE_DUMP_MANIFEST)
        and "change" not in md
    ):
        yield "a change entry needs rs:md change"
    if capability == Capability.RESOURCE_DUMP_MANIFEST and "path" not in md:
        yield "a Resource Dump Manifest entry needs rs:md path"
    deleted = md.get("change") == "deleted"
    if capability == Capability.CHANGE_DUMP_MANIFEST and "path" not in md and not deleted:
        yield "a Change Dump Manifest entry needs rs:md path (unless deleted)"


def _order(document: RawDocument, capability: str) -> Iterator[Finding]:
    """One entry per capability; changes oldest first and within their window."""
    if capability == Capability.CAPABILITY_LIST:
        seen: set[str] = set()
        for entry in document.entries:
            value = entry.md.get("capability", "")
            if value and value in seen:
                yield Finding("entry", f"{value!r} is listed more than once")
            seen.add(value)
    elif capability in CHANGE_FAMILY and document.is_index:
        yield from _chronological(document, "from")
        yield from _within_window(document, ("from", "until"))
    elif capability in CHRONOLOGICAL:
        yield from _chronological(document, "datetime")
        yield from _within_window(document, ("datetime",))


def _chronological(document: RawDocument, name: str) -> Iterator[Finding]:
    previous: dt.datetime | None = None
    for entry in document.entries:
        value = datetime_or_none(entry.md.get(name))
        if value is None:
            continue
        if previous is not None and value < previous:
            yield Finding(
                "order",
                f"entry {entry.loc} (line {entry.line}): {name} {entry.md[name]} is earlier "
                "than the entry before it; changes must be listed oldest first",
            )
        previous = value


def _within_window(document: RawDocument, names: tuple[str, ...]) -> Iterator[Finding]:
    """Entry times (a change's `datetime`, an index part's bounds) within [from, until]."""
    start = datetime_or_none(document.md.get("from"))
    end = datetime_or_none(document.md.get("until"))
    window = f"[{document.md.get('from')}, {document.md.get('until', 'open')}]"
    for entry in document.entries:
        for name in names:
            value = datetime_or_none(entry.md.get(name))
            if value is not None and ((start and value < start) or (end and value > end)):
                yield Finding(
                    "window",
                    f"entry {entry.loc} (line {entry.line}): {name} {entry.md[name]} "
                    f"is outside the document's window {window}",
                )
