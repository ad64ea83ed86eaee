"""Serving dumps: the dump documents, the manifest copies and the packages.

Access works as for every document (`sitemaps.access`: a protected set
needs its token). Packages answer with ETag, Last-Modified, 304 and single
byte ranges (206), so a large download resumes where it broke off; public
ones are also linked in the published tree for the front server.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    StreamingHttpResponse,
)
from django.utils.cache import get_conditional_response, patch_vary_headers
from django.utils.http import http_date

from sitemaps.models import (
    ChangePackage,
    DumpDocument,
    DumpPackage,
    ResourcePackage,
    StoredDocument,
)
from sitemaps.views import StoredDocumentView, _send, document_cache_control

from .ranges import ByteRange, Unsatisfiable, if_range_holds, requested_range
from .storage import open_stored

ZIP_TYPE = "application/zip"
CHUNK_SIZE = 256 * 1024


class DumpDocumentView(StoredDocumentView):
    """`resourcedump.xml` / `changedump.xml` (number 0) or a part of its index."""

    model = DumpDocument

    def find_document(self) -> StoredDocument | None:
        return self.find({"kind": self.kind, "number": self.kwargs.get("number", 0)})


@dataclass(frozen=True)
class ManifestCopy:
    """A package's manifest as the document sender sees a stored document."""

    storage_name: str
    etag: str
    size: int
    generated_at: datetime | None


class PackageView(StoredDocumentView):
    """A dump package (`manifest=False`) or the served copy of its manifest."""

    model: type[DumpPackage] = ResourcePackage  # type: ignore[assignment]
    manifest = False

    def get(self, request: HttpRequest, **kwargs: Any) -> HttpResponseBase:
        package: DumpPackage = self.get_object()  # type: ignore[assignment]
        if self.manifest:
            copy = ManifestCopy(
                package.manifest_name,
                package.manifest_etag,
                package.manifest_size,
                package.generated_at,
            )
            cache_control = document_cache_control(package)
            return _send(request, copy, cache_control=cache_control)  # type: ignore[arg-type]
        return send_package(request, package)


def send_package(request: HttpRequest, package: DumpPackage) -> HttpResponseBase:
    """The ZIP, whole or one byte range, with validators for 304 and If-Range."""
    if not package.storage_name:
        raise Http404("This package has not been built yet.")
    etag = f'"{package.etag}"'
    last_modified = int(package.generated_at.timestamp()) if package.generated_at else None
    response: HttpResponseBase | None = get_conditional_response(
        request, etag=etag, last_modified=last_modified
    )
    if response is None:
        wanted = None
        header = request.headers.get("Range")
        if header and if_range_holds(request.headers.get("If-Range"), etag, last_modified):
            try:
                wanted = requested_range(header, package.size)
            except Unsatisfiable:
                response = HttpResponse(status=416)
                response["Content-Range"] = f"bytes */{package.size}"
        if response is None:
            response = _package_response(request, package, wanted)
    response["ETag"] = etag
    if last_modified is not None:
        response["Last-Modified"] = http_date(last_modified)
    response["Accept-Ranges"] = "bytes"
    response["Cache-Control"] = document_cache_control(package)
    patch_vary_headers(response, ["Authorization"])
    return response


def _package_response(
    request: HttpRequest, package: DumpPackage, wanted: ByteRange | None
) -> HttpResponseBase:
    try:
        handle = open_stored(package.storage_name)
    except FileNotFoundError:
        raise Http404("This package is being rebuilt; try again.") from None
    length = wanted.length if wanted is not None else package.size
    response: HttpResponseBase
    if request.method == "HEAD":
        handle.close()
        response = HttpResponse(content_type=ZIP_TYPE)
    elif wanted is None:
        response = FileResponse(handle, content_type=ZIP_TYPE)
    else:
        handle.seek(wanted.start)
        response = StreamingHttpResponse(_read(handle, wanted.length), content_type=ZIP_TYPE)
    response["Content-Length"] = str(length)
    if wanted is not None:
        response.status_code = 206
        response["Content-Range"] = wanted.content_range(package.size)
    return response


def _read(handle: IO[bytes], length: int) -> Iterator[bytes]:
    """`length` bytes from the handle's position, in chunks; closes it."""
    with handle:
        while length > 0:
            chunk = handle.read(min(CHUNK_SIZE, length))
            if not chunk:
                return
            length -= len(chunk)
            yield chunk


def _package_views(model: type[DumpPackage], kind: str) -> tuple[Any, Any]:
    return (
        PackageView.as_view(model=model, kind=kind),
        PackageView.as_view(model=model, kind=kind, manifest=True),
    )


resource_dump = DumpDocumentView.as_view(kind="resourcedump")
change_dump = DumpDocumentView.as_view(kind="changedump")
resource_dump_package, resource_dump_manifest = _package_views(ResourcePackage, "resourcedump")
change_dump_package, change_dump_manifest = _package_views(ChangePackage, "changedump")
