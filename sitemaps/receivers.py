"""How the documents follow the data (connected in apps.py).

- `events_ingested`, and `changes_indexed` for a generator that reads a copy:
  regenerate the set once it passes its threshold.
- A provider turned inactive, a set made protected, a capability switched
  off, a slug renamed or a set deleted must leave the front server's tree at
  once, or it would keep serving what Django now refuses. Admin edits are
  rare, so the whole tree is rebuilt after the commit.
- A new set, or a capability turned on, gets its documents written after the
  commit, so what its Capability List advertises is there to read.
- A set whose url_prefix or resource_root_dir changed gets its stored URIs
  resolved again in the save's own transaction (`sources.re_resolve`): once
  it commits, ingestion resolves events with the new prefix, so they must
  find the rows there. Its mirror and every document follow after the commit
  (`tasks.follow_new_locations`).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from sources.models import CapabilitySettings, DataProvider, ResourceSet
from sources.re_resolve import re_resolve_uris

from . import publishing, tasks

#: The models whose saves and deletes change who may read which document.
PUBLISHING_MODELS = (DataProvider, ResourceSet, CapabilitySettings)


def regenerate_after_ingest(sender: object, *, resource_set_id: int, **kwargs: Any) -> None:
    """`events_ingested`, `changes_indexed`: regenerate once the changes are visible."""
    tasks.after_ingest(resource_set_id)


def regenerate_after_repair(sender: object, *, resource_set_id: int, **kwargs: Any) -> None:
    """`copy_repaired`: rewrite every page, since any may have been built from the gap."""
    tasks.regenerate_resource_set.delay(resource_set_id, full=True)


def rebuild_published_tree(sender: type, **kwargs: Any) -> None:
    """`post_save`/`post_delete` of PUBLISHING_MODELS: rebuild the tree after the commit."""
    if publishing.published_root() is not None:
        transaction.on_commit(publishing.rebuild)


def write_documents_of_new_set(
    sender: type, *, instance: ResourceSet, created: bool, raw: bool = False, **kwargs: Any
) -> None:
    """`post_save` of ResourceSet: a new set's (empty) documents, written after the commit."""
    if created and not raw:
        set_id = instance.pk
        transaction.on_commit(lambda: tasks.write_missing_documents(set_id, now=True), robust=True)


#: The fields stored URIs are resolved with (sources.locations).
LOCATION_FIELDS = ("url_prefix", "resource_root_dir")
#: The fields every document URL names (changed only while the set holds no change).
PATH_FIELDS = ("provider_id", "slug")


def remember_locations(
    sender: type, *, instance: ResourceSet, raw: bool = False, **kwargs: Any
) -> None:
    """`pre_save` of ResourceSet: the stored locations, for `follow_changed_locations`."""
    if instance.pk is not None and not raw:
        stored = ResourceSet.objects.filter(pk=instance.pk).values_list(
            *LOCATION_FIELDS, *PATH_FIELDS
        )
        instance._locations_before_save = stored.first()  # type: ignore[attr-defined]


def follow_changed_locations(
    sender: type, *, instance: ResourceSet, created: bool, raw: bool = False, **kwargs: Any
) -> None:
    """`post_save` of ResourceSet: a changed url_prefix or resource_root_dir moves the
    stored URIs in the save's transaction (ResourceSet.save is atomic), and rewrites the
    mirror and the documents after the commit."""
    before = getattr(instance, "_locations_before_save", None)
    now = tuple(getattr(instance, name) for name in (*LOCATION_FIELDS, *PATH_FIELDS))
    if created or raw or before is None or before == now:
        return
    set_id = instance.pk
    if before[: len(LOCATION_FIELDS)] != now[: len(LOCATION_FIELDS)]:
        re_resolve_uris(resource_set=instance)
        transaction.on_commit(lambda: tasks.after_locations_changed(set_id), robust=True)
    else:  # a new slug or provider (a set without changes): its documents name the new path
        transaction.on_commit(
            lambda: tasks.regenerate_resource_set.delay(set_id, full=True), robust=True
        )


def write_documents_turned_on(
    sender: type, *, instance: CapabilitySettings, raw: bool = False, **kwargs: Any
) -> None:
    """`post_save` of CapabilitySettings: queue the documents of a capability turned on."""
    if not raw:
        set_id = instance.resource_set_id
        transaction.on_commit(lambda: tasks.write_missing_documents(set_id, now=False), robust=True)
