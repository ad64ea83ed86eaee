"""The API's authentication: the portal's one token check (`sources.tokens`).

`Authorization: Bearer <key>` or `Authorization: Token <key>`, a provider's
(or a staff user's) key, the same one the protected documents accept.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.contrib.auth.models import AnonymousUser
from django.db import DatabaseError, transaction
from django.db.models import Q
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from sources.models import ApiToken
from sources.tokens import CHALLENGE, NotAuthenticated, request_token

logger = logging.getLogger(__name__)
#: `last_used_at` is a hint for operators, not an audit log: one write a minute is enough.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """Sets `request.auth` to the ApiToken and `request.user` to its staff user, if any."""

    def authenticate(self, request: Request) -> tuple[object, ApiToken] | None:
        try:
            token = request_token(request)
        except NotAuthenticated as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from exc
        if token is None:
            return None
        token_touch(token=token)
        return (token.user or AnonymousUser(), token)

    def authenticate_header(self, request: Request) -> str:
        # A value here makes DRF answer 401, not 403, when the token is missing.
        return CHALLENGE


def token_touch(*, token: ApiToken) -> None:
    """Record use at most once a minute, so busy clients do not write on every request.

    A hint must never fail a request: when the database is busy (SQLite's
    write lock held by another request), the write is skipped.
    """
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    try:
        with transaction.atomic():
            ApiToken.objects.filter(
                Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION),
                pk=token.pk,
            ).update(last_used_at=now)
    except DatabaseError:
        logger.warning("Could not record the use of API token %s", token.pk, exc_info=True)
        return
    token.last_used_at = now


class StaffSessionAuthentication(authentication.SessionAuthentication):
    """Staff logged in to the admin reach what a staff token reaches: the browsable API.

    The request's `auth` is then an unsaved staff ApiToken (never stored, never
    throttled); CSRF is checked on writes as for any session. Not in the OpenAPI
    schema (SPECTACULAR_SETTINGS["AUTHENTICATION_WHITELIST"]): clients send a token.
    """

    def authenticate(self, request: Request) -> tuple[object, ApiToken] | None:
        found = super().authenticate(request)
        if found is None or not found[0].is_staff:
            return None
        return found[0], ApiToken(user=found[0], name="admin session")


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """The two ways to send a key, as Swagger's "Authorize" offers them: either will do."""

    target_class = ApiTokenAuthentication
    name = ["BearerToken", "ApiToken"]

    def get_security_requirement(self, auto_schema: object) -> list[dict[str, list[str]]]:
        return [{"BearerToken": []}, {"ApiToken": []}]

    def get_security_definition(self, auto_schema: object) -> list[dict[str, str]]:
        source = "a key from `manage.py create_api_token` (or the admin's API tokens)"
        return [
            {
                "type": "http",
                "scheme": "bearer",
                "description": f"`Authorization: Bearer <key>`: paste {source}.",
            },
            {
                "type": "apiKey",
                "in": "header",
                "name": "Authorization",
                "description": f"`Authorization: Token <key>`: type `Token `, then {source}.",
            },
        ]
