"""Thin views: find the stored document, check access, send the file.

Serving reads only the page's row and its file, never the entries; the
Capability List and Source Description are small and built per request.
"""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.utils.cache import get_conditional_response, patch_vary_headers
from django.utils.http import http_date

from sources.tokens import check_set_access, request_token

from . import caching, descriptions
from .access import ReadView, SetReadView
from .document_lookup import find_document
from .models import ChangeListPage, IndexDocument, ResourceListPage, StoredDocument
from .protocol.constants import Capability
from .publishing import capability_published
from .storage import GZIP_SUFFIX, content_etag, document_storage

CONTENT_TYPE = "application/xml"


def _accepts_gzip(request: HttpRequest) -> bool:
    # META, not `request.headers`: that builds a dict of every header on first use.
    return "gzip" in request.META.get("HTTP_ACCEPT_ENCODING", "").lower()


def _send(
    request: HttpRequest, document: StoredDocument, *, cache_control: str
) -> HttpResponseBase:
    """The stored file (or its gzip twin), or a 304, with the document's validators."""
    if not document.storage_name:
        raise Http404("This document has not been generated yet.")
    gzipped = _accepts_gzip(request)
    etag = f'"{document.etag}{"-gz" if gzipped else ""}"'
    # HTTP dates have whole seconds; compare at that precision.
    last_modified = int(document.generated_at.timestamp()) if document.generated_at else None
    response: HttpResponseBase | None = get_conditional_response(
        request, etag=etag, last_modified=last_modified
    )
    if response is None:
        response = _file_response(request, document, gzipped=gzipped)
    response["ETag"] = etag
    if last_modified is not None:
        response["Last-Modified"] = http_date(last_modified)
    response["Cache-Control"] = cache_control
    patch_vary_headers(response, ["Accept-Encoding", "Authorization"])
    return response


def _file_response(
    request: HttpRequest, document: StoredDocument, *, gzipped: bool
) -> HttpResponseBase:
    name = document.storage_name + (GZIP_SUFFIX if gzipped else "")
    try:
        handle = document_storage().open(name, "rb")
    except FileNotFoundError:
        raise Http404("This document is being regenerated; try again.") from None
    response: HttpResponseBase
    if request.method == "HEAD":
        handle.close()
        response = HttpResponse(content_type=CONTENT_TYPE)
        response["Content-Length"] = str(
            document_storage().size(name) if gzipped else document.size
        )
    else:
        response = FileResponse(handle, content_type=CONTENT_TYPE)
    if gzipped:
        response["Content-Encoding"] = "gzip"
    return response


def _send_bytes(request: HttpRequest, content: bytes, *, private: bool) -> HttpResponseBase:
    """A document built per request; it changes at any time, so caches revalidate it."""
    etag = f'"{content_etag(content)}"'
    response: HttpResponseBase | None = get_conditional_response(request, etag=etag)
    if response is None:
        body = b"" if request.method == "HEAD" else content
        response = HttpResponse(body, content_type=CONTENT_TYPE)
        response["Content-Length"] = str(len(content))
    response["ETag"] = etag
    response["Cache-Control"] = caching.cache_control(caching.REVALIDATE, private=private)
    patch_vary_headers(response, ["Authorization"])
    return response


class SourceDescriptionView(ReadView):
    """Every public set, and the protected sets the request's token reaches."""

    def get(self, request: HttpRequest) -> HttpResponseBase:
        token = request_token(request)
        # What it lists depends on the token: private when one was sent.
        content = descriptions.source_description(token)
        return _send_bytes(request, content, private=token is not None)


class CapabilityListView(SetReadView):
    """The set's Capability List, built per request (it is small)."""

    def get(self, request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        resource_set = self.get_resource_set()
        content = descriptions.capability_list(resource_set)
        return _send_bytes(request, content, private=resource_set.protected)


class StoredDocumentView(SetReadView):
    """One stored document kind: an index (`index=True`) or a numbered page."""

    model: type[StoredDocument] = IndexDocument
    kind = Capability.RESOURCE_LIST
    index = False

    def get_object(self) -> StoredDocument:
        """Look up, check access, return, as DRF's `GenericAPIView.get_object` does.

        One query finds the document with its set; only when that finds nothing is
        the set looked up on its own, so a protected set answers 401/403 before 404.
        """
        document = self.find_document()
        if document is None:
            self.get_resource_set()  # 404, 401 or 403
            raise Http404("No such document.")
        check_set_access(self.request, document.resource_set)
        if not capability_published(document.resource_set, self.kind):
            raise Http404("No such document.")
        return document

    def find_document(self) -> StoredDocument | None:
        where: dict[str, object] = (
            {"kind": self.kind} if self.index else {"number": self.kwargs["number"]}
        )
        return self.find(where)

    def find(self, where: dict[str, object], *, latest: bool = False) -> StoredDocument | None:
        """The URL's set's document matching `where`, with its set (one query)."""
        return find_document(
            self.model,
            provider=self.kwargs["provider"],
            set_slug=self.kwargs["set_slug"],
            where=where,
            latest=latest,
        )

    def get(self, request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        document = self.get_object()
        return _send(request, document, cache_control=self.cache_control(document))

    def cache_control(self, document: StoredDocument) -> str:
        return document_cache_control(document)


def document_cache_control(document: StoredDocument) -> str:
    """The document's rule (sitemaps.caching), private for a protected set."""
    private = document.resource_set.protected
    return caching.cache_control(caching.freshness(document), private=private)


source_description = SourceDescriptionView.as_view()
capability_list = CapabilityListView.as_view()
resource_list = StoredDocumentView.as_view(
    model=IndexDocument, kind=Capability.RESOURCE_LIST, index=True
)
resource_list_page = StoredDocumentView.as_view(
    model=ResourceListPage, kind=Capability.RESOURCE_LIST
)
change_list = StoredDocumentView.as_view(
    model=IndexDocument, kind=Capability.CHANGE_LIST, index=True
)
change_list_page = StoredDocumentView.as_view(model=ChangeListPage, kind=Capability.CHANGE_LIST)
change_list_archive = StoredDocumentView.as_view(
    model=IndexDocument, kind=Capability.CHANGE_LIST_ARCHIVE, index=True
)
