"""Who may read a protected set's documents: a bearer token of its provider or staff."""

from __future__ import annotations

from django.http import HttpRequest

from sources.models import ApiToken, ResourceSet, hash_token


class AccessDenied(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def bearer_token(request: HttpRequest) -> ApiToken | None:
    """The request's bearer token; a malformed or unknown one is refused (401)."""
    header = request.headers.get("Authorization", "")
    if not header:
        return None
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise AccessDenied(401, "Use 'Authorization: Bearer <token>'.")
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=hash_token(key.strip()), revoked=False)
        .first()
    )
    if token is None:
        raise AccessDenied(401, "Unknown or revoked token.")
    return token


def check_access(request: HttpRequest, resource_set: ResourceSet) -> None:
    """Public sets are open; protected ones need a token that reaches them."""
    if not resource_set.protected:
        return
    token = bearer_token(request)
    if token is None:
        raise AccessDenied(401, "This set is protected: send 'Authorization: Bearer <token>'.")
    if not token.can_reach(resource_set):
        raise AccessDenied(403, "This token does not reach this set.")
