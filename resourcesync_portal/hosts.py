"""Warn when the portal is reached on a host its documents do not name.

Every URL in every document is built from PUBLIC_BASE_URL, so a portal
opened as http://localhost:8080/ while PUBLIC_BASE_URL says
http://127.0.0.1:8000 hands out links that lead elsewhere. The warning is
logged once per host, so a busy portal's log is not flooded.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.request import split_domain_port

logger = logging.getLogger(__name__)

DEFAULT_PORTS = {"http": "80", "https": "443"}
#: Hosts warned about in this process; bounded, since clients choose the Host header.
MAX_REMEMBERED_HOSTS = 100
#: Load balancers probe health on internal addresses: not worth a warning.
QUIET_PATHS = ("/healthz",)

_warned: set[tuple[str, str]] = set()


def public_host() -> tuple[str, str]:
    """PUBLIC_BASE_URL's (host, port), the port spelled out."""
    return _host_of(settings.PUBLIC_BASE_URL)


@lru_cache(maxsize=8)
def _host_of(url: str) -> tuple[str, str]:
    """Parsed once per value, not once per request (tests change the setting)."""
    parts = urlsplit(url)
    return (parts.hostname or "", str(parts.port or DEFAULT_PORTS.get(parts.scheme, "")))


def request_host(request: HttpRequest) -> tuple[str, str]:
    """The (host, port) the request was sent to, the port spelled out."""
    domain, port = split_domain_port(request.get_host())
    return (domain.strip("[]"), port or DEFAULT_PORTS.get(request.scheme or "", ""))


def warn_about_foreign_host(request: HttpRequest) -> None:
    """Log once per host when a request does not come in on PUBLIC_BASE_URL's host."""
    host = request_host(request)
    if host == public_host() or host in _warned or len(_warned) >= MAX_REMEMBERED_HOSTS:
        return
    _warned.add(host)
    logger.warning(
        "A request came in on %s, but PUBLIC_BASE_URL is %s: every link in the "
        "ResourceSync documents points there. If people reach the portal at %s, "
        "set PUBLIC_BASE_URL (make run derives it from HOST and PORT).",
        request.get_host(),
        settings.PUBLIC_BASE_URL,
        request.get_host(),
    )


class PublicHostMiddleware:
    """Calls `warn_about_foreign_host` on each request (after CommonMiddleware
    has refused hosts outside ALLOWED_HOSTS)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path_info.startswith(QUIET_PATHS):
            warn_about_foreign_host(request)
        return self.get_response(request)
