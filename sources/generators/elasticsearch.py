"""Entries from the Elasticsearch mirror, paged with `search_after`.

Sorting on the unique `key` (and on `datetime`, `key` for changes) gives a
stable keyset order, so no page is ever read with `from`/OFFSET. The backend
also keeps the mirror (`sources.indexing.Mirror`): its write hooks index
committed changes and repair what an outage left behind.

Options of its RESOURCESYNC_GENERATORS entry: HOSTS (a list of URLs),
INDEX_PREFIX (of the `<prefix>-resources` and `<prefix>-changes` indices),
TIMEOUT (seconds per request) and OPTIONS (more `Elasticsearch()` arguments).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, ClassVar

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Min
from elasticsearch import Elasticsearch

from sitemaps.protocol.records import ChangeRecord, ResourceRecord
from sources.documents import DEFAULT_INDEX_PREFIX
from sources.indexing import Mirror
from sources.models import Change, ResourceSet

from .base import BaseGenerator, ReconcileReport
from .records import as_datetime, change_record, resource_record

DEFAULT_HOSTS = ["http://127.0.0.1:9200"]
DEFAULT_TIMEOUT = 30
#: What Elasticsearch accepts in an index name, lowercase and without `-_+` first.
INDEX_PREFIX = re.compile(r"[a-z0-9][a-z0-9._+-]*")

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
#: Hits per request. Half the most `index.max_result_window` allows: a builder
#: holds two batches (one prefetched), and 5,000 took 18 MiB less per process
#: and a tenth less client CPU than 10,000 for 200,000 resources.
BATCH_SIZE = 5_000
DATE_FORMAT = "strict_date_optional_time_nanos"
FILTER_PATH = ["hits.hits._source", "hits.hits.sort"]


def _pop(
    params: dict[str, Any], name: str, default: Any, valid: Callable[[Any], bool], expected: str
) -> Any:
    """One option of the settings entry, checked: a bad value is a configuration error."""
    value = params.pop(name, default)
    if not valid(value):
        raise ImproperlyConfigured(f"{name} must be {expected}, not {value!r}.")
    return value


def _is_hosts(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(host, str) and host for host in value)
    )


def _is_index_prefix(value: Any) -> bool:
    return isinstance(value, str) and INDEX_PREFIX.fullmatch(value) is not None


def _is_timeout(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _is_dict(value: Any) -> bool:
    return isinstance(value, dict)


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
    #: What keeps the indices this backend reads.
    mirror_class: ClassVar[type[Mirror]] = Mirror

    def __init__(self, params: dict[str, Any] | None = None) -> None:
        """Read HOSTS, INDEX_PREFIX, TIMEOUT and OPTIONS; nothing else reads them."""
        params = dict(params or {})
        self.mirror = self.mirror_class(
            hosts=list(_pop(params, "HOSTS", DEFAULT_HOSTS, _is_hosts, "a list of URLs")),
            index_prefix=_pop(
                params, "INDEX_PREFIX", DEFAULT_INDEX_PREFIX, _is_index_prefix,
                "a lowercase index name prefix",
            ),
            timeout=_pop(params, "TIMEOUT", DEFAULT_TIMEOUT, _is_timeout, "a number of seconds"),
            options=_pop(params, "OPTIONS", {}, _is_dict, "a dict of Elasticsearch() arguments"),
        )  # fmt: skip
        super().__init__(params)

    @property
    def client(self) -> Elasticsearch:
        return self.mirror.client

    @property
    def resources_index(self) -> str:
        return self.mirror.resources_index

    @property
    def changes_index(self) -> str:
        return self.mirror.changes_index

    # Write side: the mirror.

    def needs_indexing(self, resource_set_id: int) -> bool:
        return Change.objects.filter(resource_set_id=resource_set_id, indexed=False).exists()

    def index_pending(self, resource_set_id: int | None = None) -> int:
        return self.mirror.index_pending(resource_set_id)

    def reconcile(self, resource_sets: Iterable[ResourceSet] | None = None) -> ReconcileReport:
        return self.mirror.reconcile(resource_sets)

    def rebuild(self) -> str:
        """New indices with the current mappings, filled from the database, swapped in."""
        from sources.rebuilding import rebuild_mirror

        return str(rebuild_mirror(self.mirror))

    def check_copy(self, timeout: float) -> bool:
        """The cluster answers within `timeout` seconds and is not red."""
        quick = self.client.options(request_timeout=timeout, max_retries=0)
        if quick.cluster.health()["status"] == "red":
            raise RuntimeError("Elasticsearch cluster status red")
        return True

    def visible_through(self, resource_set: ResourceSet) -> int:
        """Up to the first change not yet indexed: a page never shows a later one without it."""
        newest = super().visible_through(resource_set)
        pending = Change.objects.filter(resource_set=resource_set, indexed=False)
        first_pending = pending.aggregate(first=Min("id"))["first"]
        return newest if first_pending is None else min(newest, first_pending - 1)

    # Read side.

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
