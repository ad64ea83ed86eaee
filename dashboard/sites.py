"""The admin site: its index is the dashboard (`dashboard.overview`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.template.response import TemplateResponse

from sources.models import ResourceSet

from . import overview


class PortalAdminSite(admin.AdminSite):
    site_header = "ResourceSync portal"
    site_title = "ResourceSync portal"
    index_title = "Dashboard"
    index_template = "admin/dashboard.html"

    def index(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        """The app list, with every set's state and the last 30 days in charts.

        Only for those who may view resource sets: everything the dashboard shows
        and links to is about them. Others get the admin's plain index.
        """
        if not self._may_view_sets(request):
            response = super().index(request, extra_context)
            response.template_name = "admin/index.html"
            return response
        return super().index(request, {**overview.dashboard_context(), **(extra_context or {})})

    def admin_view(self, view: Callable[..., Any], cacheable: bool = False) -> Any:
        """Every admin page, answering 400 where SQLite refuses to bind an id past 64 bits
        (a list filtered as `?resource_set=<n>`: Django checks the range of its own
        filters' parameters, not of those named as the field)."""
        inner = super().admin_view(view, cacheable)

        @wraps(inner)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            try:
                return inner(request, *args, **kwargs)
            except OverflowError as error:
                if "SQLite INTEGER" not in str(error):
                    raise
                return HttpResponseBadRequest(
                    "A number in this address or its filters is larger than any id.\n",
                    content_type="text/plain",
                )

        return guarded

    def _may_view_sets(self, request: HttpRequest) -> bool:
        set_admin = self._registry.get(ResourceSet)
        return set_admin is not None and set_admin.has_view_permission(request)
