"""Mirror database rows into Elasticsearch, after commit and idempotently.

The database is the record. Indexing reads the current rows, so running it
twice, late, or out of order converges to the same state; `reconcile`
repairs whatever an outage left behind.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from django.conf import settings
from django.db.models import Count, Sum
from elasticsearch import Elasticsearch
from elasticsearch.dsl.connections import connections

from .documents import changes_index, resources_index
from .models import Change, Resource, ResourceSet

logger = logging.getLogger(__name__)

BATCH_SIZE = 2000
#: How often a long indexing run makes its work searchable and marks it done.
REFRESH_EVERY_SECONDS = 1.0

RESOURCE_FIELDS = (
    "id", "resource_set_id", "location_type", "location_value", "uri", "length", "md5",
    "sha256", "mime", "lastmod", "ln", "timestamp",
)  # fmt: skip
CHANGE_FIELDS = (
    *RESOURCE_FIELDS, "resource_key", "change", "datetime",
)  # fmt: skip


def elasticsearch_enabled() -> bool:
    return bool(settings.ELASTICSEARCH_URL)


def client() -> Elasticsearch:
    return connections.get_connection()


def ensure_indices() -> None:
    """Create both indices with their mappings if they are missing."""
    for index in (resources_index, changes_index):
        if not index.exists():
            index.create()


def refresh() -> None:
    client().indices.refresh(index=f"{resources_index._name},{changes_index._name}")


# Documents, built from plain rows: the same `_source` as the Documents'
# prepare() (tests/integration/test_elasticsearch_mirror.py compares them),
# at a fraction of the cost per row.


def _isoformat(value) -> str | None:
    return value.isoformat() if value is not None else None


def resource_source(row: dict[str, Any], set_path: str) -> dict[str, Any]:
    """A `ResourceDocument` body from a `Resource.values(*RESOURCE_FIELDS)` row."""
    return {
        "key": row["id"],
        "resource_set_id": row["resource_set_id"],
        "resource_set": set_path,
        "location": {"type": row["location_type"], "value": row["location_value"]},
        "uri": row["uri"],
        "length": row["length"],
        "md5": row["md5"],
        "sha256": row["sha256"],
        "mime": row["mime"],
        "lastmod": _isoformat(row["lastmod"]),
        "ln": row["ln"],
        "timestamp": _isoformat(row["timestamp"]),
    }


def change_source(row: dict[str, Any], set_path: str) -> dict[str, Any]:
    """A `ChangeDocument` body from a `Change.values(*CHANGE_FIELDS)` row."""
    source = resource_source(row, set_path)
    source.update(
        resource_key=row["resource_key"],
        change=row["change"],
        datetime=_isoformat(row["datetime"]),
    )
    return source


class _Bulk:
    """One `_bulk` body, serialised with orjson; a delete of a missing document is fine."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def index(self, index: str, key: int, source: dict[str, Any]) -> None:
        self.lines.append(orjson.dumps({"index": {"_index": index, "_id": str(key)}}))
        self.lines.append(orjson.dumps(source))

    def delete(self, index: str, key: int) -> None:
        self.lines.append(orjson.dumps({"delete": {"_index": index, "_id": str(key)}}))

    def send(self) -> int:
        if not self.lines:
            return 0
        body = b"\n".join(self.lines) + b"\n"
        self.lines = []
        response = client().bulk(
            body=body, filter_path=["errors", "items.*.error", "items.*.status"]
        )
        if response.get("errors"):
            for item in response["items"]:
                action, info = next(iter(item.items()))
                if "error" in info and not (action == "delete" and info.get("status") == 404):
                    raise RuntimeError(f"Elasticsearch refused a {action}: {info['error']}")
        return len(response.get("items", ()))


def _set_paths(set_ids: Iterable[int]) -> dict[int, str]:
    sets = ResourceSet.objects.filter(pk__in=set(set_ids)).select_related("provider")
    return {resource_set.pk: resource_set.path for resource_set in sets}


def _index_resources(keys: set[int]) -> None:
    """Index the current rows of these resources; delete the ones gone."""
    index = resources_index._name
    ordered = sorted(keys)
    for start in range(0, len(ordered), BATCH_SIZE):
        chunk = ordered[start : start + BATCH_SIZE]
        rows = list(Resource.objects.filter(pk__in=chunk).values(*RESOURCE_FIELDS))
        paths = _set_paths(row["resource_set_id"] for row in rows)
        bulk = _Bulk()
        for row in rows:
            bulk.index(index, row["id"], resource_source(row, paths[row["resource_set_id"]]))
        for key in set(chunk) - {row["id"] for row in rows}:
            bulk.delete(index, key)
        bulk.send()


def _index_change_rows(change_ids: list[int]) -> list[dict[str, Any]]:
    """Index these changes and the current state of the resources they touched."""
    rows = list(Change.objects.filter(pk__in=change_ids).values(*CHANGE_FIELDS))
    _index_resources({row["resource_key"] for row in rows if row["resource_key"]})
    paths = _set_paths(row["resource_set_id"] for row in rows)
    index = changes_index._name
    bulk = _Bulk()
    for row in rows:
        bulk.index(index, row["id"], change_source(row, paths[row["resource_set_id"]]))
    bulk.send()
    return rows


def _mark_indexed(change_ids: list[int]) -> None:
    """After a refresh: the generator may now read these changes from the mirror."""
    for start in range(0, len(change_ids), 10_000):
        Change.objects.filter(pk__in=change_ids[start : start + 10_000]).update(indexed=True)


def index_changes(change_ids: list[int]) -> int:
    """Mirror these changes (and their resources), refresh, and mark them indexed."""
    if not change_ids:
        return 0
    rows = _index_change_rows(change_ids)
    refresh()
    _mark_indexed(change_ids)
    return len(rows)


def index_pending_changes(resource_set_id: int | None = None) -> int:
    """Index every change not yet mirrored (of one set, or of all sets).

    Batches are sent one after the other; every REFRESH_EVERY_SECONDS, and at
    the end, the indices are refreshed and the sent changes marked indexed,
    so a long backlog becomes visible as it goes without a refresh per batch.
    """
    ensure_indices()
    pending = Change.objects.filter(indexed=False)
    if resource_set_id is not None:
        pending = pending.filter(resource_set_id=resource_set_id)
    done = 0
    last = 0
    sent: list[int] = []
    refreshed = time.monotonic()
    while True:
        batch = list(
            pending.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:BATCH_SIZE]
        )
        if batch:
            _index_change_rows(batch)
            sent += batch
            last = batch[-1]
        if sent and (not batch or time.monotonic() - refreshed >= REFRESH_EVERY_SECONDS):
            refresh()
            _mark_indexed(sent)
            done += len(sent)
            sent = []
            refreshed = time.monotonic()
        if not batch:
            return done


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
    refresh()
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
    refresh()
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
        _index_resources(missing | extra)
        report.resources_indexed += len(missing)
        report.resources_removed += len(extra)
    else:
        ordered = sorted(missing)
        for start in range(0, len(ordered), BATCH_SIZE):
            _index_change_rows(ordered[start : start + BATCH_SIZE])
        bulk = _Bulk()
        for key in extra:
            bulk.delete(index, key)
        bulk.send()
        report.changes_reindexed += len(missing)
        report.changes_removed += len(extra)
