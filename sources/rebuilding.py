"""Move the mirror to new mappings: fill new indices from the database, then swap them in.

A mapping cannot change under a live index. `rebuild_mirror` creates two
indices named after MAPPING_VERSION beside the live ones, fills them from the
database (every resource, then every change) while the portal keeps serving
and indexing into the old ones, and then, in one `_aliases` call, removes the
old indices and points their names at the new ones as aliases, so readers
never see an empty or half-filled index. Changes logged during the fill are
indexed again after the swap: the fill may have read their resource before
they were written.

    manage.py reconcile --rebuild
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Max, QuerySet

from .documents import MAPPING_VERSION
from .indexing import (
    BATCH_SIZE,
    CHANGE_FIELDS,
    RESOURCE_FIELDS,
    BulkAction,
    Mirror,
    change_source,
    read_rows,
    resource_source,
    set_paths,
)
from .models import Change, Resource


@dataclass
class RebuildReport:
    """What a rebuild wrote and where its names point now."""

    resources: int = 0
    changes: int = 0
    caught_up: int = 0
    indices: tuple[str, ...] = ()

    def __str__(self) -> str:
        return (
            f"rebuilt {', '.join(self.indices)} (mapping version {MAPPING_VERSION}) with "
            f"{self.resources} resource(s) and {self.changes} change(s); "
            f"{self.caught_up} change(s) logged meanwhile indexed again"
        )


def rebuild_mirror(mirror: Mirror) -> RebuildReport:
    """Rebuild both indices of `mirror` with the current mappings, without downtime."""
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S%f")
    live = (mirror.resources_index, mirror.changes_index)
    fresh = mirror.retargeted(*(f"{name}-v{MAPPING_VERSION}-{stamp}" for name in live))
    fresh.create_indices()
    newest_before = Change.objects.aggregate(newest=Max("id"))["newest"] or 0
    report = RebuildReport(indices=(fresh.resources_index, fresh.changes_index))
    report.resources = _fill(fresh, Resource.objects.all(), RESOURCE_FIELDS, _resource_action)
    report.changes = _fill(fresh, Change.objects.all(), CHANGE_FIELDS, _change_action)
    fresh.refresh()
    # Filled with every change marked indexed: the marks hold for the new indices, from
    # before the swap (a backlog meanwhile would take them for a lost copy).
    mirror.record_copy(also=fresh.identity())
    _swap(mirror, dict(zip(live, (fresh.resources_index, fresh.changes_index), strict=True)))
    mirror.record_copy()
    report.caught_up = _catch_up(mirror, newest_before)
    return report


def _resource_action(mirror: Mirror, row: dict[str, Any], path: str) -> BulkAction:
    header = {"index": {"_index": mirror.resources_index, "_id": str(row["id"])}}
    return header, resource_source(row, path)


def _change_action(mirror: Mirror, row: dict[str, Any], path: str) -> BulkAction:
    header = {"index": {"_index": mirror.changes_index, "_id": str(row["id"])}}
    return header, change_source(row, path)


def _fill(mirror: Mirror, rows: QuerySet[Any], fields: tuple[str, ...], action) -> int:
    """Send every row, by ascending key, as `action` makes it; how many."""
    count = 0

    def actions() -> Iterator[BulkAction]:
        nonlocal count
        last = 0
        while batch := read_rows(rows.filter(pk__gt=last).order_by("pk")[:BATCH_SIZE], fields):
            paths = set_paths(row["resource_set_id"] for row in batch)
            for row in batch:
                yield action(mirror, row, paths[row["resource_set_id"]])
            count += len(batch)
            last = batch[-1]["id"]

    mirror.send(actions())
    return count


def _swap(mirror: Mirror, fresh: dict[str, str]) -> None:
    """In one step, for each name: drop what it stands for, and make it an alias of its
    fresh index (both names at once: no moment holds one new index and one old)."""
    actions: list[dict[str, Any]] = []
    for name, index in fresh.items():
        actions += [{"remove_index": {"index": old}} for old in mirror.concrete_indices(name)]
        actions.append({"add": {"index": index, "alias": name}})
    mirror.client.indices.update_aliases(actions=actions)


def _catch_up(mirror: Mirror, newest_before: int) -> int:
    """Index again the changes logged since the fill began (and their resources)."""
    ids = list(Change.objects.filter(id__gt=newest_before).values_list("id", flat=True))
    for start in range(0, len(ids), BATCH_SIZE):
        mirror.index_changes(ids[start : start + BATCH_SIZE])
    return len(ids)
