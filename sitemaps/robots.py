"""`/robots.txt`: discovery for crawlers, as ResourceSync spec §6.3 allows.

Its `Sitemap:` lines name the Resource List of every set anyone may read, so a
crawler that knows only the host finds the resources. It allows everything,
as the absence of a robots.txt did.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

from sources.models import ResourceSet

from . import links
from .protocol.constants import Capability
from .publishing import is_public


def public_resource_list_urls() -> list[str]:
    """Resource Lists of public sets of active providers that publish one, in a stable order."""
    sets = (
        ResourceSet.objects.filter(provider__active=True, protected=False)
        .select_related("provider", "capability_settings")
        .order_by("provider__slug", "slug")
    )
    return [links.resource_list_url(s) for s in sets if is_public(s, Capability.RESOURCE_LIST)]


def robots_txt_body() -> str:
    lines = ["User-agent: *", "Disallow:", ""]
    lines += [f"Sitemap: {url}" for url in public_resource_list_urls()]
    return "\n".join(lines) + "\n"


@require_safe
def robots_txt(request: HttpRequest) -> HttpResponse:
    return HttpResponse(robots_txt_body(), content_type="text/plain; charset=utf-8")
