"""Entries from the Elasticsearch mirror, paged with `search_after`.

Sorting on the unique `key` (and on `datetime`, `key` for changes) gives a
stable keyset order, so no page is ever read with `from`/OFFSET.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from elasticsearch import Elasticsearch
from elasticsearch.dsl.connections import connections

from sources.models import ResourceSet

from .base import DEFAULT_BATCH_SIZE, BaseGenerator, ChangeRecord, ResourceRecord
from .records import as_datetime, change_record, resource_record

RESOURCE_SOURCE = ["key", "uri", "lastmod", "length", "md5", "mime", "sha256", "ln"]
CHANGE_SOURCE = [*RESOURCE_SOURCE, "resource_key", "change", "datetime"]
DATE_FORMAT = "strict_date_optional_time_nanos"
FILTER_PATH = ["hits.hits._source", "hits.hits.sort"]


def _window(since: datetime | None, until: datetime | None) -> list[dict[str, Any]]:
    bounds = {}
    if since is not None:
        bounds["gte"] = since.isoformat()
    if until is not None:
        bounds["lte"] = until.isoformat()
    return [{"range": {"datetime": bounds}}] if bounds else []


class ElasticsearchGenerator(BaseGenerator):
    name = "elasticsearch"
    reads_mirror = True

    @property
    def client(self) -> Elasticsearch:
        return connections.get_connection()

    @property
    def resources_index(self) -> str:
        from sources.documents import resources_index

        return resources_index._name

    @property
    def changes_index(self) -> str:
        from sources.documents import changes_index

        return changes_index._name

    def _scan(
        self,
        index: str,
        query: dict[str, Any],
        sort: list[Any],
        source: list[str],
        search_after: list[Any] | None,
        batch_size: int,
    ) -> Iterator[dict[str, Any]]:
        while True:
            body: dict[str, Any] = {
                "query": query,
                "sort": sort,
                "size": batch_size,
                "source_includes": source,
                "track_total_hits": False,
            }
            if search_after is not None:
                body["search_after"] = search_after
            response = self.client.search(index=index, filter_path=FILTER_PATH, **body)
            hits = response.get("hits", {}).get("hits", [])
            for hit in hits:
                yield hit["_source"]
            if len(hits) < batch_size:
                return
            search_after = hits[-1]["sort"]

    def _filter(self, resource_set: ResourceSet, *clauses: dict[str, Any]) -> dict[str, Any]:
        return {"bool": {"filter": [{"term": {"resource_set_id": resource_set.pk}}, *clauses]}}

    def iter_resources(
        self,
        resource_set: ResourceSet,
        *,
        after: int | None = None,
        through: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ResourceRecord]:
        clauses = [{"range": {"key": {"lte": through}}}] if through is not None else []
        query = self._filter(resource_set, *clauses)
        start = [after] if after is not None else None
        for source in self._scan(
            self.resources_index, query, [{"key": "asc"}], RESOURCE_SOURCE, start, batch_size
        ):
            yield resource_record(source)

    def iter_changes(
        self,
        resource_set: ResourceSet,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        after: tuple[datetime, int] | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Iterator[ChangeRecord]:
        query = self._filter(resource_set, *_window(since, until))
        sort = [{"datetime": {"order": "asc", "format": DATE_FORMAT}}, {"key": "asc"}]
        start = [after[0].isoformat(), after[1]] if after is not None else None
        for source in self._scan(self.changes_index, query, sort, CHANGE_SOURCE, start, batch_size):
            yield change_record(source)

    def count_resources(self, resource_set: ResourceSet) -> int:
        return self.client.count(index=self.resources_index, query=self._filter(resource_set))[
            "count"
        ]

    def count_changes(
        self,
        resource_set: ResourceSet,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        query = self._filter(resource_set, *_window(since, until))
        return self.client.count(index=self.changes_index, query=query)["count"]

    def last_changed(self, resource_set: ResourceSet) -> datetime | None:
        response = self.client.search(
            index=self.changes_index,
            query=self._filter(resource_set),
            sort=[{"datetime": "desc"}, {"key": "desc"}],
            size=1,
            source_includes=["datetime"],
            filter_path=FILTER_PATH,
        )
        hits = response.get("hits", {}).get("hits", [])
        return as_datetime(hits[0]["_source"]["datetime"]) if hits else None
