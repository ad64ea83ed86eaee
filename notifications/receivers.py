"""How notifications follow the portal (connected in apps.py).

- `events_ingested`: a change notification for the new changes.
- `sitemaps.signals.documents_changed`: framework notifications for the set's lists.
- Saves and deletes of providers, sets and capability settings: framework
  notifications for Capability Lists and the Source Description (after the commit).

Sets that publish no notifications cost one query here and queue no task.
"""

from __future__ import annotations

from typing import Any

from sources.models import CapabilitySettings

from . import tasks
from .models import Topic, TopicKind


def publishing(resource_set_id: int | None = None) -> bool:
    """Whether the set (any set, with None) has notifications switched on."""
    on = CapabilitySettings.objects.filter(publish_notifications=True)
    if resource_set_id is not None:
        on = on.filter(resource_set_id=resource_set_id)
    return on.exists()


def notify_ingested_changes(
    sender: object, *, resource_set_id: int, after_change_id: int = 0, **kwargs: Any
) -> None:
    """`events_ingested`: publish the new changes on the set's change topic (or, for a set
    that stopped publishing, move its topic past them)."""
    topic = Topic.objects.filter(resource_set_id=resource_set_id, kind=TopicKind.CHANGE)
    if publishing(resource_set_id) or topic.exists():
        tasks.run(tasks.publish_changes, resource_set_id, after_change_id)


def announce_regenerated_documents(sender: object, *, resource_set_id: int, **kwargs: Any) -> None:
    """`documents_changed`: announce the set's created, updated and deleted lists."""
    if publishing(resource_set_id):
        tasks.run(tasks.announce_documents, [resource_set_id])


def announce_after_edit(sender: type, **kwargs: Any) -> None:
    """`post_save`/`post_delete` of a provider, set or capability settings."""
    if publishing():
        tasks.run_after_commit(tasks.announce_documents, None)
