"""The portal's own pages: the landing page and the health report."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from sitemaps import links
from sitemaps.descriptions import visible_sets

from . import health


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


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when every configured part works, else 503 naming the ones that do not."""
    report = health.run_checks()
    return JsonResponse(report, status=200 if report["status"] == health.OK else 503)
