"""How the documents follow the data (connected in apps.py).

- `events_ingested`: regenerate the set once it passes its threshold.
- A provider turned inactive, a set made protected, a capability switched
  off, a slug renamed or a set deleted must leave the front server's tree at
  once, or it would keep serving what Django now refuses. Admin edits are
  rare, so the whole tree is rebuilt after the commit.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from sources.models import CapabilitySettings, DataProvider, ResourceSet

from . import publishing, tasks

#: The models whose saves and deletes change who may read which document.
PUBLISHING_MODELS = (DataProvider, ResourceSet, CapabilitySettings)


def regenerate_after_ingest(sender: object, *, resource_set_id: int, **kwargs: Any) -> None:
    """`events_ingested`: regenerate now past N pending changes, else after T seconds."""
    tasks.after_ingest(resource_set_id)


def rebuild_published_tree(sender: type, **kwargs: Any) -> None:
    """`post_save`/`post_delete` of PUBLISHING_MODELS: rebuild the tree after the commit."""
    if publishing.published_root() is not None:
        transaction.on_commit(publishing.rebuild)
