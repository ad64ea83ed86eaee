"""How notifications follow the portal (connected in apps.py).

- `events_ingested`: a change notification for the new changes.
- `sitemaps.signals.documents_changed`: framework notifications for the set's lists.
- Saves and deletes of providers, sets and capability settings: framework
  notifications for Capability Lists and the Source Description (after the commit).
"""

from __future__ import annotations

from typing import Any

from . import tasks


def notify_ingested_changes(
    sender: object, *, resource_set_id: int, after_change_id: int = 0, **kwargs: Any
) -> None:
    """`events_ingested`: publish the new changes on the set's change topic."""
    tasks.run(tasks.publish_changes, resource_set_id, after_change_id)


def announce_regenerated_documents(sender: object, *, resource_set_id: int, **kwargs: Any) -> None:
    """`documents_changed`: announce the set's created, updated and deleted lists."""
    tasks.run(tasks.announce_documents, [resource_set_id])


def announce_after_edit(sender: type, **kwargs: Any) -> None:
    """`post_save`/`post_delete` of a provider, set or capability settings."""
    tasks.run_after_commit(tasks.announce_documents, None)
