"""The admin site: its index is the dashboard (`dashboard.overview`)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse

from . import overview


class PortalAdminSite(admin.AdminSite):
    site_header = "ResourceSync portal"
    site_title = "ResourceSync portal"
    index_title = "Dashboard"
    index_template = "admin/dashboard.html"

    def index(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> TemplateResponse:
        """The app list, with every set's state and the last 30 days in charts."""
        return super().index(request, {**overview.dashboard_context(), **(extra_context or {})})
