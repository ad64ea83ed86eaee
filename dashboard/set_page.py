"""The set page in the admin: state, "Regenerate now", live progress, documents, runs.

`ResourceSetPage` is mixed into `sources.admin.ResourceSetAdmin`; it adds three
staff-only URLs under the set's change page: `regenerate/` (POST), `status/`
(the JSON the page polls while a run is going) and `documents/<name>` (a
document as an HTML table).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from celery.result import EagerResult
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from journal.selectors import runs_recent
from sitemaps.protocol.reader import ResourceSyncParseError
from sitemaps.selectors import dirty_resource_pages, with_regeneration_status
from sitemaps.tasks import regenerate_resource_set
from sources.models import ResourceSet

from . import documents, overview
from .status import regeneration_status

#: Runs shown on the set page; the journal has the rest.
RUNS_SHOWN = 10


def start_regeneration(resource_set: ResourceSet, *, full: bool = False) -> tuple[int, str]:
    """Send the regeneration task; say what happened (it may already have run, eagerly)."""
    result = regenerate_resource_set.delay(resource_set.pk, full=full)
    if not isinstance(result, EagerResult):  # a worker takes it (there may be no result store)
        return (
            messages.INFO,
            f"Regeneration of {resource_set} queued; this page shows its progress.",
        )
    if not result.successful():
        return messages.ERROR, f"Regeneration of {resource_set} failed: {result.result}"
    if result.result == "busy":
        return messages.WARNING, f"{resource_set}: another run holds the set; it takes new changes."
    return messages.SUCCESS, f"Regenerated {resource_set}: {result.result}."


class ResourceSetPage:
    """Mixin for the ResourceSet admin: the set page and its three views."""

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view  # type: ignore[attr-defined]
        mine = [
            path(
                "<int:pk>/regenerate/",
                wrap(self.regenerate_view),
                name="sources_resourceset_regenerate",
            ),
            path("<int:pk>/status/", wrap(self.status_view), name="sources_resourceset_status"),
            path(
                "<int:pk>/documents/<str:name>",
                wrap(self.document_view),
                name="sources_resourceset_document",
            ),
        ]
        return [*mine, *super().get_urls()]  # type: ignore[misc]

    def get_set(self, request: HttpRequest, pk: int, *, change: bool = False) -> ResourceSet:
        """The set, if this user may see it (and change it, for `change`); else 404/403."""
        resource_set = ResourceSet.objects.select_related("provider").filter(pk=pk).first()
        if resource_set is None:
            raise Http404("No such resource set.")
        allowed = self.has_change_permission if change else self.has_view_permission  # type: ignore[attr-defined]
        if not allowed(request, resource_set):
            raise PermissionDenied
        return resource_set

    def regenerate_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        return _regenerate(self, request, pk)

    def status_view(self, request: HttpRequest, pk: int) -> JsonResponse:
        """The set's regeneration now, for the page to poll while a run is going."""
        status = regeneration_status(self.get_set(request, pk))
        response = JsonResponse(status.as_json())
        response["Cache-Control"] = "no-store"
        return response

    def document_view(self, request: HttpRequest, pk: int, name: str) -> TemplateResponse:
        """One document as a table, 500 entries a page."""
        resource_set = self.get_set(request, pk)
        try:
            document, page = documents.document_page(resource_set, name, request.GET.get("page"))
        except ResourceSyncParseError as error:
            raise Http404(f"{name} cannot be read: {error}") from error
        context = {
            **self.admin_site.each_context(request),  # type: ignore[attr-defined]
            "opts": self.model._meta,  # type: ignore[attr-defined]
            "resource_set": resource_set,
            "title": f"{name} of {resource_set}",
            "name": name,
            "document": document,
            "page": page,
            "rows": [(entry, _view_url(resource_set, entry.loc)) for entry in page.object_list],
        }
        return TemplateResponse(request, "admin/dashboard/document.html", context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        sets = with_regeneration_status(ResourceSet.objects.select_related("provider"))
        try:
            resource_set = sets.filter(pk=object_id).first()
        except ValueError:  # not an id: Django's view below says the set doesn't exist
            resource_set = None
        extra = set_page_context(resource_set, timezone.now()) if resource_set else {}
        return super().change_view(request, object_id, form_url, {**extra, **(extra_context or {})})  # type: ignore[misc]


def _regenerate(admin: ResourceSetPage, request: HttpRequest, pk: int) -> HttpResponse:
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    resource_set = admin.get_set(request, pk, change=True)
    level, message = start_regeneration(resource_set, full=request.POST.get("full") == "1")
    messages.add_message(request, level, message)
    return HttpResponseRedirect(reverse("admin:sources_resourceset_change", args=[pk]) + "?watch=1")


def _view_url(resource_set: ResourceSet, url: str) -> str | None:
    """The HTML view of this set's document at `url` (an index's parts), else None."""
    name = documents.view_name(resource_set, url)
    if name is None:
        return None
    return reverse("admin:sources_resourceset_document", args=[resource_set.pk, name])


def set_page_context(resource_set: ResourceSet, now: dt.datetime) -> dict[str, Any]:
    """What the set page shows above the form."""
    return {
        "status": regeneration_status(resource_set, now),
        "status_url": reverse("admin:sources_resourceset_status", args=[resource_set.pk]),
        "regenerate_url": reverse("admin:sources_resourceset_regenerate", args=[resource_set.pk]),
        "set_documents": documents.set_documents(resource_set),
        "dirty_pages": dirty_resource_pages(resource_set),
        "published": overview.published_text(resource_set),
        "runs": runs_recent(resource_set=resource_set, limit=RUNS_SHOWN),
        "set_links": overview.set_links(resource_set, now),
        "changes_chart": overview.changes_chart(now, resource_set),
        "durations_chart": overview.durations_chart(resource_set),
    }
