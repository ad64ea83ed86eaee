"""Who may use a resource set through the API."""

from __future__ import annotations

from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from sources.models import ApiToken, ResourceSet
from sources.tokens import EXPECTED_HEADER


class HasApiToken(BasePermission):
    """Every API call needs a valid token; without one, a 401 names the header expected."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        if not isinstance(request.auth, ApiToken):
            raise NotAuthenticated(f"No token: send {EXPECTED_HEADER}.")
        return True


class CanReachResourceSet(BasePermission):
    """Provider tokens reach their own sets, staff tokens every set (403 otherwise)."""

    message = "This token does not give access to this resource set."

    def has_object_permission(self, request: Request, view: APIView, obj: object) -> bool:
        return (
            isinstance(obj, ResourceSet)
            and isinstance(request.auth, ApiToken)
            and request.auth.can_reach(obj)
        )
