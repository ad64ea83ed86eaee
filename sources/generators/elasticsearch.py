"""Entries from the Elasticsearch mirror, paged with `search_after`.

Sorting on the unique `key` (and on `datetime`, `key` for changes) gives a
stable keyset order, so no page is ever read with `from`/OFFSET.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from django.conf import settings
from elasticsearch import Elasticsearch
from elasticsearch.dsl.connections import connections

from sitemaps.protocol.records import ChangeRecord, ResourceRecord
from sources.models import ResourceSet

from .base import BaseGenerator
from .records import as_datetime, change_record, resource_record

#: Of the links, what a record keeps: not their nested `href`.
LINK_FIELDS = ["ln.rel", "ln.uri", "ln.mime"]


def _source_paths(*fields: str) -> list[str]:
    names = [name for field in fields for name in (LINK_FIELDS if field == "ln" else [field])]
    return [f"hits.hits._source.{name}" for name in names]


#: What a response keeps: the fields records need, picked with `filter_path`
#: rather than source filtering, which spares the node a parse of every
#: `_source` and the client the decoding of fields it would drop (`ln.href`,
#: `location`...). Resources resume after the last key, changes after the
#: last hit's sort values.
RESOURCE_FIELDS = ("key", "uri", "lastmod", "length", "md5", "mime", "sha256", "ln")
RESOURCE_FILTER_PATH = _source_paths(*RESOURCE_FIELDS)
CHANGE_FILTER_PATH = [
    *_source_paths(*RESOURCE_FIELDS, "resource_key", "change", "datetime"),
    "hits.hits.sort",
]
#: Hits per request: the most the default `index.max_result_window` allows.
BATCH_SIZE = 10_000
DATE_FORMAT = "strict_date_optional_time_nanos"
FILTER_PATH = ["hits.hits._source", "hits.hits.sort"]


def _reconnect_after_fork() -> None:
    """A forked child builds its own clients: sharing the parent's pooled sockets mixes replies.

    Regeneration forks page workers; this is what django_elasticsearch_dsl
    does at start-up, after forgetting the inherited clients.
    """
    # The parent's configuration as it stands (tests and tools may change it), else the settings.
    configured = {**settings.ELASTICSEARCH_DSL, **getattr(connections, "_kwargs", {})}
    connections.configure()
    connections.configure(**configured)


os.register_at_fork(after_in_child=_reconnect_after_fork)


def _window(since: datetime | None, until: datetime | None) -> list[dict[str, Any]]:
    bounds = {}
    if since is not None:
        bounds["gte"] = since.isoformat()
    if until is not None:
        bounds["lte"] = until.isoformat()
    return [{"range": {"datetime": bounds}}] if bounds else []


def _source_key(hit: dict[str, Any]) -> list[Any]:
    return [hit["_source"]["key"]]


def _sort_values(hit: dict[str, Any]) -> list[Any]:
    return hit["sort"]


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
        filter_path: list[str],
        search_after: list[Any] | None,
        batch_size: int,
        resume: Callable[[dict[str, Any]], list[Any]],
    ) -> Iterator[dict[str, Any]]:
        """The hits' `_source`, a batch per request; `resume(hit)` gives the next search_after.

        The next batch is requested in a thread while this one is consumed, so
        the node searches while the caller renders.
        """

        def search(after: list[Any] | None) -> list[dict[str, Any]]:
            body: dict[str, Any] = {"query": query, "sort": sort, "size": batch_size}
            if after is not None:
                body["search_after"] = after
            response = self.client.search(
                index=index, filter_path=filter_path, track_total_hits=False, **body
            )
            return response.get("hits", {}).get("hits", [])

        with ThreadPoolExecutor(max_workers=1) as prefetch:
            hits = search(search_after)
            while True:
                full = len(hits) == batch_size
                following = prefetch.submit(search, resume(hits[-1])) if full else None
                for hit in hits:
                    yield hit["_source"]
                if following is None:
                    return
                hits = following.result()

    def _filter(self, resource_set: ResourceSet, *clauses: dict[str, Any]) -> dict[str, Any]:
        return {"bool": {"filter": [{"term": {"resource_set_id": resource_set.pk}}, *clauses]}}

    def iter_resources(
        self,
        resource_set: ResourceSet,
        *,
        after: int | None = None,
        through: int | None = None,
        batch_size: int = BATCH_SIZE,
    ) -> Iterator[ResourceRecord]:
        clauses = [{"range": {"key": {"lte": through}}}] if through is not None else []
        query = self._filter(resource_set, *clauses)
        start = [after] if after is not None else None
        sources = self._scan(
            self.resources_index,
            query,
            [{"key": "asc"}],
            RESOURCE_FILTER_PATH,
            start,
            batch_size,
            _source_key,
        )
        return map(resource_record, sources)

    def iter_changes(
        self,
        resource_set: ResourceSet,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        after: tuple[datetime, int] | None = None,
        batch_size: int = BATCH_SIZE,
    ) -> Iterator[ChangeRecord]:
        query = self._filter(resource_set, *_window(since, until))
        sort = [{"datetime": {"order": "asc", "format": DATE_FORMAT}}, {"key": "asc"}]
        start = [after[0].isoformat(), after[1]] if after is not None else None
        sources = self._scan(
            self.changes_index, query, sort, CHANGE_FILTER_PATH, start, batch_size, _sort_values
        )
        return map(change_record, sources)

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
