"""The embedded WebSub hub: subscription requests, verification of intent, leases.

A request is checked at once (4xx naming the field), acknowledged with 202
and verified afterwards: the hub GETs the callback with a challenge, and only
a 2xx echo of it makes the subscription (or its end) real (WebSub §5.3).
The callback's host is resolved last, after the topic and the rate limits.
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Mapping
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from django.db import transaction
from django.utils import timezone

from resourcesync_portal.addresses import carried_ipv4, parse_address
from sources.models import ApiToken, ResourceSet

from . import callbacks
from .conf import MAX_LEASE_SECONDS, MIN_LEASE_SECONDS, notification_settings
from .models import Delivery, Subscription, SubscriptionRequest, TopicKind
from .topics import UnknownTopic, parse_topic, topic_url

logger = logging.getLogger(__name__)

#: WebSub §5.1: hub.secret MUST be less than 200 bytes.
MAX_SECRET_BYTES = 199
MAX_CALLBACK_LENGTH = 2000
#: A callback's host gets this many callbacks' worth of requests a minute: variants of
#: one URL (`?1`, `#x`, another case) are new callbacks but no new budget.
HOST_BUDGET_FACTOR = 10
#: C0 and C1 controls and DEL: meaningless in any hub field, and NUL is a 500 on
#: PostgreSQL (its text fields cannot hold it).
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: RFC 3986's characters, `%` only before two hex digits. An IRI must come as a URI
#: (percent-encoded, its host punycoded): the hub calls the callback exactly as stored.
URI = re.compile(r"(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})+")


class HubRequestError(Exception):
    """A refused hub request: `field` names the form field at fault."""

    def __init__(self, field: str, message: str, status_code: int = 400) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.status_code = status_code


def _field(form: Mapping[str, str], field: str, *, strip: bool = True) -> str:
    """A form field (stripped, unless it is a secret); control characters refused."""
    value = form.get(field, "")
    if strip:
        value = value.strip()
    if CONTROL_CHARACTERS.search(value):
        raise HubRequestError(field, "may not contain control characters")
    return value


def _required(form: Mapping[str, str], field: str) -> str:
    value = _field(form, field)
    if not value:
        raise HubRequestError(field, "is required")
    return value


def lease_from(form: Mapping[str, str]) -> int:
    """The lease asked for, brought within 300 s-31 days; the default when none is asked.

    ASCII digits only: `isdigit()` also takes '²' (which `int()` refuses) and other scripts'
    digits. A number longer than the longest lease is that lease, never converted (`int()`
    refuses more than 4,300 digits).
    """
    value = _field(form, "hub.lease_seconds")
    if not value:
        return notification_settings().DEFAULT_LEASE_SECONDS
    if not (value.isascii() and value.isdigit()):
        raise HubRequestError(
            "hub.lease_seconds", "must be a whole number of seconds, in ASCII digits"
        )
    digits = value.lstrip("0") or "0"
    if len(digits) > len(str(MAX_LEASE_SECONDS)):
        return MAX_LEASE_SECONDS
    return min(max(int(digits), MIN_LEASE_SECONDS), MAX_LEASE_SECONDS)


def callback_from(form: Mapping[str, str]) -> str:
    """The callback, if the hub would call it; its host is resolved last (check_reachable)."""
    callback = _required(form, "hub.callback")
    if len(callback) > MAX_CALLBACK_LENGTH:
        raise HubRequestError("hub.callback", f"is longer than {MAX_CALLBACK_LENGTH} characters")
    if not URI.fullmatch(callback):
        raise HubRequestError(
            "hub.callback",
            "must be a URI (RFC 3986): ASCII only, other characters percent-encoded "
            "and a host in punycode",
        )
    try:
        callbacks.host_and_port(callback)
    except callbacks.CallbackRefused as error:
        raise HubRequestError("hub.callback", str(error)) from None
    return callback


def topic_from(form: Mapping[str, str], token: ApiToken | None) -> tuple[ResourceSet, TopicKind]:
    """The set and kind of the topic; a protected one answers as an unknown one."""
    try:
        resource_set, kind = parse_topic(_required(form, "hub.topic"))
    except UnknownTopic:
        raise HubRequestError("hub.topic", "is not a topic of this hub") from None
    if resource_set.protected and (token is None or not token.can_reach(resource_set)):
        raise HubRequestError("hub.topic", "is not a topic of this hub")
    return resource_set, kind


def secret_from(form: Mapping[str, str]) -> str:
    secret = _field(form, "hub.secret", strip=False)
    if len(secret.encode()) > MAX_SECRET_BYTES:
        raise HubRequestError("hub.secret", "must be less than 200 bytes")
    return secret


def check_reachable(callback: str) -> list[str]:
    """Resolve the callback's host, after every other check and the rate limits: its
    addresses.

    One answer whether the host has no address or a private one, and never the address:
    the hub is no DNS oracle for the portal's network. The log keeps the reason.
    """
    try:
        return callbacks.resolve_callback(callback)[2]
    except callbacks.CallbackRefused as error:
        logger.info("Callback %s refused: %s", callback, error)
        raise HubRequestError(
            "hub.callback",
            "the callback's host is not reachable from this hub "
            "(not resolvable, or not a public address)",
        ) from error


def check_budget(callback: str) -> None:
    """429 past the callback's budget, or past its host's (every URL on it counts)."""
    per_minute = notification_settings().HUB_REQUESTS_PER_MINUTE
    if callbacks.over_budget("hub-request", callback, per_minute):
        raise HubRequestError("hub.callback", "too many requests for this callback", 429)
    host = (urlsplit(callback).hostname or "").rstrip(".")
    if callbacks.over_budget("hub-request-host", host, per_minute * HOST_BUDGET_FACTOR):
        raise HubRequestError("hub.callback", "too many requests for this callback's host", 429)


def check_address_budget(addresses: list[str]) -> None:
    """429 past an address's budget: a host's, shared by every name it has (wildcard DNS
    gives any number of names to one address, and each would have had a budget)."""
    per_minute = notification_settings().HUB_REQUESTS_PER_MINUTE * HOST_BUDGET_FACTOR
    for address in sorted({_reached(address) for address in addresses}):
        if callbacks.over_budget("hub-request-address", address, per_minute):
            raise HubRequestError(
                "hub.callback", "too many requests for this callback's address", 429
            )


def _reached(address: str) -> str:
    """The address a request reaches: an IPv6 one carrying an IPv4 one (mapped, 6to4,
    NAT64) is that IPv4 address, however it is spelt."""
    parsed = parse_address(address)
    return str(carried_ipv4(parsed) or parsed)


def anything_to_end(resource_set: ResourceSet, kind: str, callback: str) -> bool:
    """A subscription, or a subscribe still being verified (an unsubscribe then cancels it)."""
    same = {"resource_set": resource_set, "kind": kind, "callback": callback}
    return (
        Subscription.objects.filter(**same).exists()
        or SubscriptionRequest.objects.filter(
            mode=SubscriptionRequest.Mode.SUBSCRIBE, **same
        ).exists()
    )


def subscription_request(
    form: Mapping[str, str], token: ApiToken | None
) -> SubscriptionRequest | None:
    """Check a subscribe/unsubscribe form and record it for verification.

    None: an unsubscribe with nothing to end, ignored (WebSub §5.1 allows it), so the hub
    sends no GET to whatever URL a request names.
    """
    mode = _required(form, "hub.mode")
    if mode not in SubscriptionRequest.Mode.values:
        raise HubRequestError("hub.mode", "must be subscribe or unsubscribe")
    callback = callback_from(form)
    resource_set, kind = topic_from(form, token)
    secret = secret_from(form)
    lease_seconds = lease_from(form)
    check_budget(callback)
    if mode == SubscriptionRequest.Mode.UNSUBSCRIBE and not anything_to_end(
        resource_set, kind, callback
    ):
        return None
    check_address_budget(check_reachable(callback))
    return SubscriptionRequest.objects.create(
        mode=mode,
        resource_set=resource_set,
        kind=kind,
        callback=callback,
        secret=secret,
        lease_seconds=lease_seconds,
        token=token,
    )


def verify(request_id: int, *, now: datetime | None = None) -> bool:
    """Ask the callback to confirm the request; apply it only if it echoes the challenge."""
    request = (
        SubscriptionRequest.objects.select_related("resource_set__provider")
        .filter(pk=request_id)
        .first()
    )
    if request is None:
        return False  # verified already (a task run twice)
    try:
        return apply_verified(request, challenge_answered(request), now or timezone.now())
    except BaseException:
        # Nothing sweeps requests: one left here would wait forever.
        SubscriptionRequest.objects.filter(pk=request.pk).delete()
        raise


def apply_verified(request: SubscriptionRequest, confirmed: bool, now: datetime) -> bool:
    """Answer the request: it goes, and its subscription or its end is made if confirmed."""
    with transaction.atomic():
        removed, _ = SubscriptionRequest.objects.filter(pk=request.pk).delete()
        if not (removed and confirmed):
            return False  # not removed: a twin run, or an unsubscribe, answered it meanwhile
        if request.mode == SubscriptionRequest.Mode.SUBSCRIBE:
            subscribe(request, now)
        else:
            unsubscribe(request)
    return True


def challenge_answered(request: SubscriptionRequest) -> bool:
    """GET the callback with hub.challenge; True on a 2xx whose body is the challenge."""
    challenge = secrets.token_urlsafe(32)
    params = {
        "hub.mode": request.mode,
        "hub.topic": topic_url(request.resource_set, request.kind),
        "hub.challenge": challenge,
    }
    if request.mode == SubscriptionRequest.Mode.SUBSCRIBE:
        params["hub.lease_seconds"] = str(request.lease_seconds)
    try:
        response = callbacks.send("GET", callbacks.with_query(request.callback, params))
    except (ValueError, httpx.InvalidURL, httpx.HTTPError) as error:
        # ValueError: CallbackRefused, or a URL httpx cannot send (stored before it was checked).
        logger.info("Intent to %s not verified at %s: %s", request.mode, request.callback, error)
        return False
    echoed = response.body.decode("utf-8", errors="replace").strip() == challenge
    if not (response.ok and echoed):
        logger.info(
            "Intent to %s not verified at %s: HTTP %s%s",
            request.mode,
            request.callback,
            response.status,
            "" if echoed else ", challenge not echoed",
        )
    return response.ok and echoed


def subscribe(request: SubscriptionRequest, now: datetime) -> Subscription:
    """Create the subscription, or renew it (a new lease; failing ones start afresh)."""
    subscription, _ = Subscription.objects.update_or_create(
        resource_set=request.resource_set,
        kind=request.kind,
        callback=request.callback,
        defaults={
            "secret": request.secret,
            "lease_seconds": request.lease_seconds,
            "expires_at": now + timedelta(seconds=request.lease_seconds),
            "state": Subscription.State.ACTIVE,
            "renewed_at": now,
            "failures": 0,
            "token": request.token,
            "last_error": "",
        },
    )
    return subscription


def unsubscribe(request: SubscriptionRequest) -> None:
    """End the subscription, and cancel a subscribe asked before this and not yet verified."""
    same = {
        "resource_set": request.resource_set,
        "kind": request.kind,
        "callback": request.callback,
    }
    SubscriptionRequest.objects.filter(
        mode=SubscriptionRequest.Mode.SUBSCRIBE, pk__lt=request.pk, **same
    ).delete()
    end_subscriptions(Subscription.objects.filter(**same))


def end_subscriptions(subscriptions) -> int:
    """Delete subscriptions; what they still had to receive is cancelled, and kept in the log."""
    Delivery.objects.filter(subscription__in=subscriptions, status=Delivery.Status.PENDING).update(
        status=Delivery.Status.CANCELLED, claim=""
    )
    count, _ = subscriptions.delete()
    return count


def expire_leases(*, now: datetime | None = None) -> int:
    """End every subscription whose lease has run out (a subscriber renews before that)."""
    now = now or timezone.now()
    return end_subscriptions(Subscription.objects.filter(expires_at__lte=now))
