"""Request rate limits per API token.

Counted in the default cache, which settings make shared by every process
(the database, or Redis with CACHE_URL), so a limit holds however many
gunicorn workers or web nodes answer.
"""

from __future__ import annotations

import logging

from django.db import DatabaseError
from redis.exceptions import RedisError
from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from sources.models import ApiToken

logger = logging.getLogger(__name__)


class ApiTokenRateThrottle(SimpleRateThrottle):
    """Limits each token to `REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["provider"]`."""

    scope = "provider"

    def get_rate(self) -> str | None:
        # DRF reads the rates once at import; read them per request so settings changes apply.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if not isinstance(request.auth, ApiToken) or request.auth.pk is None:
            return None  # no token, or staff in the browsable API
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}

    def allow_request(self, request: Request, view: APIView) -> bool:
        # A rate limit is not worth refusing service for: an unreachable cache lets requests by.
        try:
            return super().allow_request(request, view)
        except (DatabaseError, RedisError):
            logger.warning("Rate limit not checked: the cache is unavailable.", exc_info=True)
            return True
