"""How the sources app follows ingestion: the Elasticsearch mirror (connected in apps.py)."""

from __future__ import annotations

from typing import Any

from . import tasks


def index_ingested_changes(sender: object, *, resource_set_id: int, **kwargs: Any) -> None:
    """`events_ingested`: mirror the set's new changes into Elasticsearch."""
    tasks.queue_indexing(resource_set_id)


def follow_up_turned_away_run(sender: object, *, resource_set_id: int, **kwargs: Any) -> None:
    """`indexing_turned_away`: make sure the set is indexed once the claim could have lapsed."""
    tasks.queue_follow_up(resource_set_id)
