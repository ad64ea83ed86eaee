"""One token check for the API, the ResourceSync documents and `/files/`.

A person holds one key and sends it as `Authorization: Bearer <key>` or
`Authorization: Token <key>`, wherever it goes; the same rules then decide
whether the key is valid (not revoked, its user and provider active) and
whether it reaches a set. Only the SHA-256 of a key is stored.
"""

from __future__ import annotations

from django.http import HttpRequest

from sources.models import ApiToken, ResourceSet, hash_token

SCHEMES = ("bearer", "token")
#: The `WWW-Authenticate` challenge of every 401.
CHALLENGE = 'Bearer realm="resourcesync"'
EXPECTED_HEADER = "'Authorization: Bearer <key>' (or 'Authorization: Token <key>')"


class AccessDenied(Exception):
    """The request may not have what it asked for (403)."""

    status_code = 403


class NotAuthenticated(AccessDenied):
    """No usable token (401); answered with `CHALLENGE`."""

    status_code = 401


def authorization_key(header: str) -> str | None:
    """The key of a `Bearer` or `Token` header; None without a header."""
    if not header:
        return None
    parts = header.split()
    if len(parts) != 2 or parts[0].lower() not in SCHEMES:
        raise NotAuthenticated(f"Invalid Authorization header: send {EXPECTED_HEADER}.")
    return parts[1]


def token_for_key(key: str) -> ApiToken:
    """The valid token with this key: not revoked, and its user and provider active."""
    token = (
        ApiToken.objects.select_related("provider", "user").filter(key_hash=hash_token(key)).first()
    )
    if token is None:
        raise NotAuthenticated("Invalid or revoked token.")
    if reason := token.out_of_force_because():
        raise NotAuthenticated(reason)
    return token


def request_token(request: HttpRequest) -> ApiToken | None:
    """The request's valid token, None without one; a bad one raises NotAuthenticated."""
    key = authorization_key(request.headers.get("Authorization", ""))
    return None if key is None else token_for_key(key)


def check_set_access(request: HttpRequest, resource_set: ResourceSet) -> None:
    """Public sets are open to reading; protected ones need a token that reaches them."""
    if not resource_set.protected:
        return
    token = request_token(request)
    if token is None:
        raise NotAuthenticated(f"This set is protected: send {EXPECTED_HEADER}.")
    if not token.can_reach(resource_set):
        raise AccessDenied("This token does not reach this set.")
