"""Topic and hub URLs, and what a Capability List says about them.

A set that publishes notifications has two topics, one per kind, under its
own URL path; the hub is the embedded one unless a deployment names another.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.urls import Resolver404, resolve, reverse

from sitemaps.links import absolute
from sitemaps.protocol.builders import CapabilityEntry
from sitemaps.protocol.constants import Capability
from sitemaps.protocol.records import Link
from sources.models import ResourceSet

from .conf import notification_settings
from .models import TopicKind

CAPABILITY = {
    TopicKind.CHANGE: Capability.CHANGE_NOTIFICATION,
    TopicKind.FRAMEWORK: Capability.FRAMEWORK_NOTIFICATION,
}


def publishes_notifications(resource_set: ResourceSet) -> bool:
    """Whether the set has topics (its provider active and the capability on)."""
    return resource_set.provider.active and resource_set.capabilities.publish_notifications


def hub_url() -> str:
    """The hub every topic names: an external one if configured, else the embedded one."""
    return notification_settings().HUB_URL or absolute(reverse("notifications:hub"))


def topic_url(resource_set: ResourceSet, kind: str) -> str:
    return absolute(
        reverse(
            "notifications:topic",
            kwargs={
                "provider": resource_set.provider.slug,
                "set_slug": resource_set.slug,
                "kind": kind,
            },
        )
    )


def link_header(topic: str) -> str:
    """The `Link` header of a topic and of every delivery (WebSub discovery)."""
    return f'<{topic}>; rel="self", <{hub_url()}>; rel="hub"'


def capability_entries(resource_set: ResourceSet) -> list[CapabilityEntry]:
    """The two topic entries of a Capability List, as the spec's example shows them."""
    if not resource_set.capabilities.publish_notifications:
        return []
    hub = Link(rel="hub", href=hub_url())
    return [
        CapabilityEntry(CAPABILITY[kind], topic_url(resource_set, kind), links=(hub,))
        for kind in TopicKind
    ]


class UnknownTopic(ValueError):
    """Not a topic of this portal (or one the request may not know about)."""


def parse_topic(url: str) -> tuple[ResourceSet, TopicKind]:
    """The set and kind a topic URL names; UnknownTopic when it names none."""
    base = urlsplit(absolute("/"))
    parts = urlsplit(url)
    if (parts.scheme, parts.netloc) != (base.scheme, base.netloc) or parts.query:
        raise UnknownTopic(url)
    try:
        match = resolve(parts.path)
    except Resolver404:
        raise UnknownTopic(url) from None
    if match.view_name != "notifications:topic":
        raise UnknownTopic(url)
    resource_set = (
        ResourceSet.objects.select_related("provider", "capability_settings")
        .filter(provider__slug=match.kwargs["provider"], slug=match.kwargs["set_slug"])
        .first()
    )
    if resource_set is None or not publishes_notifications(resource_set):
        raise UnknownTopic(url)
    return resource_set, TopicKind(match.kwargs["kind"])
