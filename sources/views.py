"""Serve the files under a set's resource root, so its `<loc>` URLs resolve.

Production deployments usually let a web server do this; the embedded demo
relies on it. Paths are checked against the root like event locations, and a
protected set's files need the same token as its documents.
"""

from __future__ import annotations

import mimetypes
import os

from django.conf import settings
from django.http import FileResponse, Http404, HttpRequest, HttpResponseBase

from sitemaps import links
from sitemaps.access import SetReadView

from .locations import LocationError, resolve_location
from .models import LocationType
from .resource_files import ResourceUnreadable, open_regular_file


class ResourceFileView(SetReadView):
    """One file under the set's `resource_root_dir`."""

    def get(
        self, request: HttpRequest, provider: str, set_slug: str, path: str
    ) -> HttpResponseBase:
        if not settings.SERVE_RESOURCE_FILES:
            raise Http404("Resource files are served elsewhere.")
        resource_set = self.get_resource_set()
        if not resource_set.resource_root_dir:
            raise Http404("This set has no resource root.")
        try:
            resolve_location(
                LocationType.REL_PATH,
                path,
                url_prefix=resource_set.url_prefix,
                resource_root_dir=resource_set.resource_root_dir,
            )
        except LocationError:
            raise Http404("No such file.") from None
        full_path = os.path.join(resource_set.resource_root_dir, *path.split("/"))
        try:  # checked on what was opened: no window for a swap, and no FIFO waited on
            handle = open_regular_file(full_path)
        except ResourceUnreadable:
            raise Http404("No such file.") from None
        content_type = mimetypes.guess_type(full_path)[0] or "application/octet-stream"
        # Named: the handle opened from a descriptor has no name of its own to send.
        response = FileResponse(
            handle, content_type=content_type, filename=os.path.basename(full_path)
        )
        # ResourceSync discovery: the resource names its Capability List.
        response["Link"] = f'<{links.capability_list_url(resource_set)}>; rel="resourcesync"'
        return response


resource_file = ResourceFileView.as_view()
