"""Who may read a set's documents and files: base views that look up, check, answer.

Like DRF's `GenericAPIView.get_object`, `get_resource_set()` looks the set up
(404), checks the token against it (`sources.tokens`: 401 or 403) and returns
it; a refusal raised anywhere in a view is answered once, in `dispatch`.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404
from django.views import View

from sources.models import ResourceSet
from sources.tokens import CHALLENGE, AccessDenied, check_set_access


def denied_response(error: AccessDenied) -> HttpResponse:
    """A plain-text refusal; every 401 says which scheme to use."""
    response = HttpResponse(str(error), status=error.status_code, content_type="text/plain")
    if error.status_code == 401:
        response["WWW-Authenticate"] = CHALLENGE
    return response


class ReadView(View):
    """GET and HEAD only (405 otherwise); a refused token is answered here."""

    http_method_names = ["get", "head"]

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        try:
            return super().dispatch(request, *args, **kwargs)
        except AccessDenied as error:
            return denied_response(error)


class SetReadView(ReadView):
    """A view under `<provider>/<set_slug>/`: a set of an active provider, if readable."""

    resource_sets = ResourceSet.objects.select_related("provider", "capability_settings")

    def get_resource_set(self) -> ResourceSet:
        resource_set = get_object_or_404(
            self.resource_sets,
            provider__slug=self.kwargs["provider"],
            provider__active=True,
            slug=self.kwargs["set_slug"],
        )
        check_set_access(self.request, resource_set)
        return resource_set
