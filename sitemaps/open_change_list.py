"""`changelist-open.xml`: the set's open Change List under a URL that never changes.

A client that reads no Change List Index (resync 2.0.1) can always pass this
URL as its Change List. It is answered exactly as `changelist-<n>.xml` of the
open list is, by that view, so access, 304, HEAD and gzip behave the same.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase
from django.views.decorators.http import require_safe

from . import views
from .models import ChangeListPage


def open_list_number(provider: str, set_slug: str) -> int | None:
    """The number of the set's open Change List, if it has one yet."""
    return (
        ChangeListPage.objects.filter(
            resource_set__provider__slug=provider,
            resource_set__slug=set_slug,
            until__isnull=True,
        )
        .values_list("number", flat=True)
        .first()
    )


@require_safe
def open_change_list(request: HttpRequest, provider: str, set_slug: str) -> HttpResponseBase:
    # No number 0 exists: the page view then answers 401, 403 or 404 as for any page.
    number = open_list_number(provider, set_slug) or 0
    return views.change_list_page(request, provider=provider, set_slug=set_slug, number=number)
