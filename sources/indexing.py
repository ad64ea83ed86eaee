"""Mirror database rows into Elasticsearch, after commit and idempotently.

The database is the record. Indexing reads the current rows, so running it
twice, late, or out of order converges to the same state; `reconcile`
repairs whatever an outage left behind.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db.models import Count, Sum
from elasticsearch import Elasticsearch
from elasticsearch.dsl.connections import connections
from elasticsearch.helpers import streaming_bulk

from .documents import ChangeDocument, ResourceDocument, changes_index, resources_index
from .models import Change, Resource, ResourceSet

logger = logging.getLogger(__name__)

BATCH_SIZE = 2000


def elasticsearch_enabled() -> bool:
    return bool(settings.ELASTICSEARCH_URL)


def client() -> Elasticsearch:
    return connections.get_connection()


def ensure_indices() -> None:
    """Create both indices with their mappings if they are missing."""
    for index in (resources_index, changes_index):
        if not index.exists():
            index.create()


def _bulk(actions: Iterable[dict[str, Any]]) -> int:
    """Send actions; a delete of a missing document is fine, any other error raises."""
    count = 0
    for ok, item in streaming_bulk(
        client(), actions, chunk_size=BATCH_SIZE, raise_on_error=False, max_retries=2
    ):
        action, info = next(iter(item.items()))
        if not ok and not (action == "delete" and info.get("status") == 404):
            raise RuntimeError(f"Elasticsearch refused a {action}: {info.get('error')}")
        count += 1
    return count


def _resource_actions(keys: set[int]) -> Iterator[dict[str, Any]]:
    document = ResourceDocument()
    index = resources_index._name
    rows = Resource.objects.filter(pk__in=keys).select_related("resource_set__provider")
    found = set()
    for row in rows:
        found.add(row.pk)
        yield {
            "_op_type": "index",
            "_index": index,
            "_id": row.pk,
            "_source": document.prepare(row),
        }
    for key in keys - found:
        yield {"_op_type": "delete", "_index": index, "_id": key}


def _change_actions(changes: list[Change]) -> Iterator[dict[str, Any]]:
    document = ChangeDocument()
    index = changes_index._name
    for change in changes:
        yield {
            "_op_type": "index",
            "_index": index,
            "_id": change.pk,
            "_source": document.prepare(change),
        }


def index_changes(changes: list[Change]) -> int:
    """Mirror these changes and the current state of the resources they touched."""
    if not changes:
        return 0
    keys = {change.resource_key for change in changes if change.resource_key}
    _bulk(_resource_actions(keys))
    _bulk(_change_actions(changes))
    client().indices.refresh(index=f"{resources_index._name},{changes_index._name}")
    Change.objects.filter(pk__in=[change.pk for change in changes]).update(indexed=True)
    return len(changes)


def index_pending_changes(resource_set_id: int | None = None) -> int:
    """Index every change not yet mirrored (of one set, or of all sets)."""
    ensure_indices()
    pending = Change.objects.filter(indexed=False).select_related("resource_set__provider")
    if resource_set_id is not None:
        pending = pending.filter(resource_set_id=resource_set_id)
    done = 0
    last = 0
    while True:
        batch = list(pending.filter(pk__gt=last).order_by("pk")[:BATCH_SIZE])
        if not batch:
            return done
        done += index_changes(batch)
        last = batch[-1].pk


@dataclass
class ReconcileReport:
    changes_indexed: int = 0
    resources_indexed: int = 0
    resources_removed: int = 0
    changes_removed: int = 0
    changes_reindexed: int = 0
    sets: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (
            f"indexed {self.changes_indexed} pending change(s); "
            f"re-indexed {self.resources_indexed} resource(s) and "
            f"{self.changes_reindexed} change(s); removed {self.resources_removed} stale "
            f"resource(s) and {self.changes_removed} stale change(s)"
        )


def _es_keys(index: str, resource_set: ResourceSet) -> Iterator[int]:
    search_after = None
    while True:
        body: dict[str, Any] = {
            "query": {"term": {"resource_set_id": resource_set.pk}},
            "sort": [{"key": "asc"}],
            "size": 10_000,
            "_source": False,
            "track_total_hits": False,
            "docvalue_fields": ["key"],
        }
        if search_after:
            body["search_after"] = search_after
        hits = client().search(index=index, filter_path=["hits.hits.sort"], **body)
        hits = hits.get("hits", {}).get("hits", [])
        for hit in hits:
            yield hit["sort"][0]
        if len(hits) < 10_000:
            return
        search_after = hits[-1]["sort"]


def _fingerprint(index: str, resource_set: ResourceSet) -> tuple[int, int]:
    """Count and sum of the mirrored keys: cheap, and unequal after any loss."""
    response = client().search(
        index=index,
        query={"term": {"resource_set_id": resource_set.pk}},
        size=0,
        aggs={"keys": {"sum": {"field": "key"}}},
        track_total_hits=True,
    )
    return response["hits"]["total"]["value"], int(response["aggregations"]["keys"]["value"])


def reconcile(resource_sets: Iterable[ResourceSet] | None = None) -> ReconcileReport:
    """Bring both indices in line with the database and say what was fixed."""
    ensure_indices()
    report = ReconcileReport(changes_indexed=index_pending_changes())
    client().indices.refresh(index=f"{resources_index._name},{changes_index._name}")
    sets = (
        resource_sets
        if resource_sets is not None
        else ResourceSet.objects.select_related("provider")
    )
    for resource_set in sets:
        report.sets.append(resource_set.path)
        _reconcile_keys(
            resource_set,
            resources_index._name,
            Resource.objects.filter(resource_set=resource_set),
            report,
            "resources",
        )
        _reconcile_keys(
            resource_set,
            changes_index._name,
            Change.objects.filter(resource_set=resource_set),
            report,
            "changes",
        )
    client().indices.refresh(index=f"{resources_index._name},{changes_index._name}")
    return report


def _reconcile_keys(resource_set, index, rows, report: ReconcileReport, kind: str) -> None:
    expected = rows.aggregate(count=Count("pk"), total=Sum("pk"))
    if _fingerprint(index, resource_set) == (expected["count"], expected["total"] or 0):
        return
    # The mirror differs: compare keys and fix the difference.
    db_keys = set(rows.values_list("pk", flat=True).iterator(chunk_size=10_000))
    es_keys = set(_es_keys(index, resource_set))
    missing, extra = db_keys - es_keys, es_keys - db_keys
    if kind == "resources":
        _bulk(_resource_actions(missing | extra))
        report.resources_indexed += len(missing)
        report.resources_removed += len(extra)
    else:
        for start in range(0, len(missing), BATCH_SIZE):
            chunk = sorted(missing)[start : start + BATCH_SIZE]
            _bulk(
                _change_actions(
                    list(
                        Change.objects.filter(pk__in=chunk).select_related("resource_set__provider")
                    )
                )
            )
        _bulk({"_op_type": "delete", "_index": index, "_id": key} for key in extra)
        report.changes_reindexed += len(missing)
        report.changes_removed += len(extra)
