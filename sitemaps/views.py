"""Thin views: find the stored document, check access, send the file.

Serving reads only the page's row and its file, never the entries; the
Capability List and Source Description are small and built per request.
"""

from __future__ import annotations

from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils.cache import get_conditional_response, patch_vary_headers
from django.utils.http import http_date
from django.views.decorators.http import require_safe

from sources.models import ResourceSet

from . import documents
from .access import AccessDenied, bearer_token, check_access
from .models import ChangeListPage, IndexDocument, ResourceListPage, StoredDocument
from .publishing import capability_published
from .storage import GZIP_SUFFIX, content_etag, document_storage

CONTENT_TYPE = "application/xml"


def _denied(error: AccessDenied) -> HttpResponse:
    response = HttpResponse(str(error), status=error.status, content_type="text/plain")
    if error.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="resourcesync"'
    return response


def _resource_set(request: HttpRequest, provider: str, set_slug: str) -> ResourceSet:
    resource_set = get_object_or_404(
        ResourceSet.objects.select_related("provider", "capability_settings"),
        provider__slug=provider,
        provider__active=True,
        slug=set_slug,
    )
    check_access(request, resource_set)
    return resource_set


def _accepts_gzip(request: HttpRequest) -> bool:
    return "gzip" in request.headers.get("Accept-Encoding", "").lower()


def _send(request: HttpRequest, document: StoredDocument) -> HttpResponse:
    if not document.storage_name:
        raise Http404("This document has not been generated yet.")
    gzipped = _accepts_gzip(request)
    etag = f'"{document.etag}{"-gz" if gzipped else ""}"'
    # HTTP dates have whole seconds; compare at that precision.
    last_modified = int(document.generated_at.timestamp()) if document.generated_at else None
    response = get_conditional_response(request, etag=etag, last_modified=last_modified)
    if response is None:
        name = document.storage_name + (GZIP_SUFFIX if gzipped else "")
        try:
            handle = document_storage().open(name, "rb")
        except FileNotFoundError:
            raise Http404("This document is being regenerated; try again.") from None
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
    response["ETag"] = etag
    if last_modified is not None:
        response["Last-Modified"] = http_date(last_modified)
    patch_vary_headers(response, ["Accept-Encoding", "Authorization"])
    return response


def _send_bytes(request: HttpRequest, content: bytes) -> HttpResponse:
    etag = f'"{content_etag(content)}"'
    response = get_conditional_response(request, etag=etag)
    if response is None:
        body = b"" if request.method == "HEAD" else content
        response = HttpResponse(body, content_type=CONTENT_TYPE)
        response["Content-Length"] = str(len(content))
    response["ETag"] = etag
    patch_vary_headers(response, ["Authorization"])
    return response


@require_safe
def source_description(request: HttpRequest) -> HttpResponse:
    try:
        token = bearer_token(request)
    except AccessDenied as error:
        return _denied(error)
    return _send_bytes(request, documents.source_description(token))


@require_safe
def capability_list(request: HttpRequest, provider: str, set_slug: str) -> HttpResponse:
    try:
        resource_set = _resource_set(request, provider, set_slug)
    except AccessDenied as error:
        return _denied(error)
    return _send_bytes(request, documents.capability_list(resource_set))


def _stored_view(model: type[StoredDocument], kind: str, *, index: bool = False):
    """A view of one stored document kind: one query finds it with its set.

    Only when that finds nothing is the set looked up on its own, so a
    protected set still answers 401/403 before 404.
    """
    related = model.objects.select_related(
        "resource_set__provider", "resource_set__capability_settings"
    )

    @require_safe
    def view(request: HttpRequest, provider: str, set_slug: str, number: int = 0) -> HttpResponse:
        where = {"kind": kind} if index else {"number": number}
        # Unique by constraint; no ORDER BY to compile.
        document = next(
            iter(
                related.filter(
                    resource_set__provider__slug=provider,
                    resource_set__provider__active=True,
                    resource_set__slug=set_slug,
                    **where,
                ).order_by()[:1]
            ),
            None,
        )
        try:
            if document is None:
                _resource_set(request, provider, set_slug)  # 404, 401 or 403
                raise Http404("No such document.")
            check_access(request, document.resource_set)
        except AccessDenied as error:
            return _denied(error)
        if not capability_published(document.resource_set, kind):
            raise Http404("No such document.")
        return _send(request, document)

    return view


resource_list = _stored_view(IndexDocument, "resourcelist", index=True)
resource_list_page = _stored_view(ResourceListPage, "resourcelist")
change_list = _stored_view(IndexDocument, "changelist", index=True)
change_list_page = _stored_view(ChangeListPage, "changelist")
