"""How the sources app follows ingestion: the Elasticsearch mirror (connected in apps.py)."""

from __future__ import annotations

from typing import Any

from . import tasks


def index_ingested_changes(sender: object, *, resource_set_id: int, **kwargs: Any) -> None:
    """`events_ingested`: mirror the set's new changes into Elasticsearch."""
    tasks.queue_indexing(resource_set_id)
