"""Request rate limits per API token."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle
from rest_framework.views import APIView

from sources.models import ApiToken


class ApiTokenRateThrottle(SimpleRateThrottle):
    """Limits each token to `REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["provider"]`."""

    scope = "provider"

    def get_rate(self) -> str | None:
        # DRF reads the rates once at import; read them per request so settings changes apply.
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if not isinstance(request.auth, ApiToken):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}
