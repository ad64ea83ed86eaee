"""Publishing through an external WebSub hub (RESOURCESYNC_NOTIFICATIONS["HUB_URL"]).

Generic hubs take a `hub.mode=publish` form naming the topic, then fetch the
topic URL themselves (it answers with the newest payload and its self/hub
links) and distribute what they fetched. Several payloads published within
one fetch reach subscribers as the newest only; the subscribers see the gap
in the intervals and fill it from the Change List. A protected set's topic
cannot be read by such a hub, so protected sets notify only through the
embedded hub.
"""

from __future__ import annotations

import logging

import httpx

from sources.models import ResourceSet

from .conf import notification_settings
from .topics import topic_url

logger = logging.getLogger(__name__)


def publish(resource_set: ResourceSet, kind: str) -> bool:
    """Tell the external hub that the topic has new content; False when it did not take it."""
    config = notification_settings()
    if config.embedded_hub or resource_set.protected:
        return False
    topic = topic_url(resource_set, kind)
    form = {"hub.mode": "publish", "hub.topic": topic, "hub.url": topic}
    try:
        response = httpx.post(
            config.HUB_URL, data=form, timeout=config.CALLBACK_TIMEOUT, trust_env=False
        )
    except httpx.HTTPError as error:
        logger.warning("The hub %s did not take %s: %s", config.HUB_URL, topic, error)
        return False
    if not response.is_success:
        logger.warning(
            "The hub %s refused %s: HTTP %s %s",
            config.HUB_URL,
            topic,
            response.status_code,
            response.text[:200],
        )
        return False
    return True
