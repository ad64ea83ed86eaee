"""A set's published documents for people: the list with links, and one document as a table.

Staff read a document here as HTML, parsed by the project's one reader
(`sitemaps.protocol.reader`); the XML that destinations fetch stays exactly as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.http import Http404

from sitemaps import descriptions, links
from sitemaps.models import (
    ChangeListPage,
    DumpDocument,
    IndexDocument,
    ResourceListPage,
    StoredDocument,
)
from sitemaps.protocol.reader import Document, parse_document
from sitemaps.storage import document_storage
from sources.models import ResourceSet

#: Entries per page of the HTML view of a document.
ENTRIES_PER_PAGE = 500
#: Change Lists listed on the set page, newest first; the rest are counted.
CHANGE_LISTS_SHOWN = 20
CAPABILITY_LIST = "capabilitylist.xml"
_NUMBERED = re.compile(r"^(resourcelist|changelist)-(\d+)\.xml$")
_DUMP = re.compile(r"^(resourcedump|changedump)(?:-(\d+))?\.xml$")
_INDEXES = {f"{kind}.xml": kind for kind in IndexDocument.Kind.values}


@dataclass(frozen=True)
class DocumentLink:
    """One published document: its public URL, file name and what it holds."""

    name: str
    url: str
    entries: int | None = None
    size: int | None = None
    generated_at: object = None


def _link(resource_set: ResourceSet, document: StoredDocument) -> DocumentLink:
    url = links.absolute(f"/resourcesync/{resource_set.path}/{document.public_name}")
    return DocumentLink(
        document.public_name, url, document.entries, document.size, document.generated_at
    )


def set_documents(resource_set: ResourceSet) -> dict[str, object]:
    """The set's documents: Capability List, indexes, Resource List pages, newest Change Lists."""
    written = {"storage_name__gt": ""}
    change_lists = ChangeListPage.objects.filter(resource_set=resource_set, **written)
    newest = list(change_lists.order_by("-since")[:CHANGE_LISTS_SHOWN])
    return {
        "capability_list": DocumentLink(CAPABILITY_LIST, links.capability_list_url(resource_set)),
        "indexes": [
            _link(resource_set, d)
            for model in (IndexDocument, DumpDocument)
            for d in model.objects.filter(resource_set=resource_set, **written)
        ],
        "resource_list_pages": [
            _link(resource_set, d)
            for d in ResourceListPage.objects.filter(resource_set=resource_set, **written)
        ],
        "change_lists": [_link(resource_set, d) for d in newest],
        "change_lists_not_shown": max(change_lists.count() - len(newest), 0),
    }


def stored_document(resource_set: ResourceSet, name: str) -> StoredDocument:
    """The stored document with this public name; 404 when there is none."""
    found: StoredDocument | None = None
    numbered, dump = _NUMBERED.match(name), _DUMP.match(name)
    if numbered:
        model = ResourceListPage if numbered[1] == "resourcelist" else ChangeListPage
        found = model.objects.filter(resource_set=resource_set, number=int(numbered[2])).first()
    elif name in _INDEXES:
        kind = _INDEXES[name]
        found = IndexDocument.objects.filter(resource_set=resource_set, kind=kind).first()
    elif dump:
        number = int(dump[2] or 0)
        documents = DumpDocument.objects.filter(resource_set=resource_set, kind=dump[1])
        found = documents.filter(number=number).first()
    if found is None or not found.storage_name:
        raise Http404(f"{resource_set.path} has no document {name}.")
    return found


def document_content(resource_set: ResourceSet, name: str) -> bytes:
    """The document's bytes as published (the Capability List is built as it is served)."""
    if name == CAPABILITY_LIST:
        return descriptions.capability_list(resource_set)
    with document_storage().open(stored_document(resource_set, name).storage_name, "rb") as handle:
        return handle.read()


def document_page(resource_set: ResourceSet, name: str, page: str | None) -> tuple[Document, Page]:
    """The parsed document and one page of its entries."""
    document = parse_document(document_content(resource_set, name))
    return document, Paginator(document.entries, ENTRIES_PER_PAGE).get_page(page)


def view_name(resource_set: ResourceSet, url: str) -> str | None:
    """The name of this set's document at `url`, to link its HTML view; None for others."""
    prefix = links.absolute(f"/resourcesync/{resource_set.path}/")
    name = url.removeprefix(prefix)
    readable = _NUMBERED.match(name) or _DUMP.match(name) or name in _INDEXES
    if url.startswith(prefix) and readable:
        return name
    return None
