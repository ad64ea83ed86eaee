"""The notifications settings: one namespaced dict resolved against defaults, as DRF does.

`RESOURCESYNC_NOTIFICATIONS` in Django's settings overrides any key below;
nothing else reads these values.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, fields
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from resourcesync_portal.environment import checked_hub_url

#: WebSub leases: the issue's bounds, 300 s to 31 days.
MIN_LEASE_SECONDS = 300
MAX_LEASE_SECONDS = 31 * 24 * 3600


@dataclass(frozen=True, slots=True)
class NotificationSettings:
    """What the hub and the publisher may do; see the README's Notifications section."""

    #: An external WebSub hub to publish to; empty: the embedded hub at /resourcesync/hub.
    HUB_URL: str = ""
    #: Networks a callback may resolve into although they are not public (tests: loopback).
    ALLOWED_CALLBACK_NETWORKS: tuple[str, ...] = ()
    DEFAULT_LEASE_SECONDS: int = 10 * 24 * 3600
    #: Seconds to connect to a callback, and for its whole answer after the request.
    CALLBACK_TIMEOUT: float = 5.0
    #: Bytes of a callback's answer that are read (the challenge echo needs very few).
    MAX_RESPONSE_BYTES: int = 4096
    #: Requests sent to one callback per minute; more wait, they do not fail.
    CALLBACK_REQUESTS_PER_MINUTE: int = 600
    #: Subscription requests accepted for one callback per minute, and for its host
    #: hub.HOST_BUDGET_FACTOR times as many; more get 429.
    HUB_REQUESTS_PER_MINUTE: int = 30
    #: A delivery is retried with exponential backoff this long, then given up.
    RETRY_SECONDS: int = 26 * 3600
    BACKOFF_BASE_SECONDS: float = 5.0
    BACKOFF_MAX_SECONDS: float = 3600.0
    #: Deliveries of one batch sent at once.
    DELIVERY_CONCURRENCY: int = 16
    #: Notifications (and their delivery log) are kept this long once delivered.
    KEEP_DAYS: int = 7

    @property
    def embedded_hub(self) -> bool:
        return not self.HUB_URL

    @property
    def allowed_networks(self) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
        try:
            return tuple(ipaddress.ip_network(net) for net in self.ALLOWED_CALLBACK_NETWORKS)
        except ValueError as error:
            raise ImproperlyConfigured(
                f"RESOURCESYNC_NOTIFICATIONS['ALLOWED_CALLBACK_NETWORKS']: {error}"
            ) from error


def notification_settings() -> NotificationSettings:
    """The current settings (read each time, so tests may override them)."""
    given: dict[str, Any] = dict(getattr(settings, "RESOURCESYNC_NOTIFICATIONS", {}))
    known = {field.name for field in fields(NotificationSettings)}
    unknown = set(given) - known
    if unknown:
        raise ImproperlyConfigured(
            f"RESOURCESYNC_NOTIFICATIONS has unknown key(s): {', '.join(sorted(unknown))}"
        )
    if "ALLOWED_CALLBACK_NETWORKS" in given:
        given["ALLOWED_CALLBACK_NETWORKS"] = tuple(given["ALLOWED_CALLBACK_NETWORKS"])
    # In every topic's Link header (the environment's RESOURCESYNC_HUB_URL is checked at
    # start; a dict set in Python is checked here, the same way).
    if given.get("HUB_URL"):
        checked_hub_url("RESOURCESYNC_NOTIFICATIONS['HUB_URL']", given["HUB_URL"])
    return NotificationSettings(**given)
