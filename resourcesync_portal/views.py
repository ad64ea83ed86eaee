"""The portal's own pages: the landing page, the API docs, its icon and the health report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.shortcuts import render
from django.views import View
from django.views.decorators.cache import cache_control, never_cache
from django.views.decorators.http import require_safe
from drf_spectacular.views import SpectacularSwaggerView

from sitemaps import links
from sitemaps.descriptions import visible_sets

from . import health

FAVICON = (Path(__file__).parent / "static" / "portal" / "favicon.svg").read_bytes()


@require_safe
def landing(request: HttpRequest) -> HttpResponse:
    """What this portal publishes: the public sets and where to start harvesting."""
    public_sets = [
        (resource_set, links.capability_list_url(resource_set))
        for resource_set in visible_sets(None).order_by("provider__name", "name")
    ]
    context = {
        "public_sets": public_sets,
        "source_description_url": links.source_description_url(),
    }
    return render(request, "portal/landing.html", context)


class ApiDocs(SpectacularSwaggerView):
    """Swagger UI. OPTIONS answers as any Django page does: DRF's answer is metadata, which
    the page's HTML renderer has no template for (a 500)."""

    def options(self, request: Any, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return View.options(self, request, *args, **kwargs)


@cache_control(public=True, max_age=86400)
@require_safe
def favicon(request: HttpRequest) -> HttpResponse:
    """The icon, at the address browsers ask for on every page (a 404 each time before)."""
    return HttpResponse(FAVICON, content_type="image/svg+xml")


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when every configured part works, else 503 naming the ones that do not."""
    report = health.run_checks()
    return JsonResponse(report, status=200 if report["status"] == health.OK else 503)
