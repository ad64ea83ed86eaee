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
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from functools import partial
from itertools import chain
from typing import Any, ClassVar, NamedTuple
from urllib.parse import urlsplit

import orjson
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Min
from elasticsearch import Elasticsearch
from elasticsearch.serializer import OrjsonSerializer

from sitemaps.protocol.records import ChangeRecord, ResourceBatch, ResourceRecord, record_batches
from sources.documents import DEFAULT_INDEX_PREFIX, RESOURCE_RECORD_FIELDS
from sources.indexing import Mirror, unindexed_changes
from sources.models import ResourceSet

from .base import BaseGenerator, ReconcileReport
from .records import (
    as_datetime,
    change_record,
    change_record_from_value,
    resource_batch_from_values,
    resource_record,
    resource_record_from_value,
)

DEFAULT_HOSTS = ["http://127.0.0.1:9200"]
DEFAULT_TIMEOUT = 30
#: What Elasticsearch accepts in an index name, lowercase and without `-_+` first.
INDEX_PREFIX = re.compile(r"[a-z0-9][a-z0-9._+-]*")

DATE_FORMAT = "strict_date_optional_time_nanos"
#: What the generator reads of a document, in doc values (sources.documents):
#: only indices of mapping version 3 and later have it.
RECORD = "record"
RECORD_MAPPING = {"type": "binary", "doc_values": True}
#: Of the links in `_source` (older indices), what a record keeps: not their `href`.
LINK_FIELDS = ["ln.rel", "ln.uri", "ln.mime"]


def _without_userinfo(url: str) -> str:
    """A host's URL fit for a message: a password in it is no one's to read."""
    parts = urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _root_cause(error: BaseException) -> str:
    """`[Errno 111] Connection refused` rather than the client's wrappers around it."""
    while error.__cause__ is not None:
        error = error.__cause__
    return str(error) or type(error).__name__


def _source_paths(*fields: str) -> list[str]:
    names = [name for field in fields for name in (LINK_FIELDS if field == "ln" else [field])]
    return [*(f"hits.hits._source.{name}" for name in names), "hits.hits.sort"]


def _sort_values(hit: dict[str, Any]) -> list[Any]:
    return hit["sort"]


def _hits(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body.get("hits", {}).get("hits", [])


#: How Elasticsearch writes the hits of a search whose `filter_path` keeps only
#: their `record` doc values: compact JSON, base64 strings without escapes.
RECORD_VALUES_START = b'{"hits":{"hits":[{"fields":{"record":["'
RECORD_VALUES_BETWEEN = b'"]}},{"fields":{"record":["'
RECORD_VALUES_END = b'"]}}]}}'


def record_values(body: bytes) -> list[bytes]:
    """The `record` doc values of a search response body, in order.

    Split out of the bytes: a quarter of the client CPU of decoding the JSON
    into a dict a hit, and under half the memory (bench/README.md, s5-esfull).
    A body laid out otherwise (no hits, or another writer) is decoded as JSON.
    """
    start, end = len(RECORD_VALUES_START), -len(RECORD_VALUES_END)
    if body.startswith(RECORD_VALUES_START) and body.endswith(RECORD_VALUES_END):
        values = body[start:end].split(RECORD_VALUES_BETWEEN)
        if body.count(b'"record":') == len(values):
            return values
    return [hit["fields"][RECORD][0].encode() for hit in _hits(orjson.loads(body))]


class RawResponses(OrjsonSerializer):
    """Leaves a response's body as its bytes, for `record_values` to read."""

    def loads(self, data: bytes) -> bytes:  # type: ignore[override]
        return data


RAW_RESPONSES = RawResponses()


class Reading(NamedTuple):
    """What a search asks for of its hits, the record of a hit, and what the next resumes after.

    `raw`: the response's body stays bytes, and `hits` reads it (`record_values`).
    """

    params: dict[str, Any]
    record: Callable[[Any], Any]
    resume: Callable[[Any], list[Any]] = _sort_values
    hits: Callable[[Any], Sequence[Any]] = _hits
    raw: bool = False


def _after_resource(value: bytes) -> list[Any]:
    """Resources sort on their key alone, which their record holds: no sort values needed."""
    return [resource_record_from_value(value).key]


def _change_from_doc_values(hit: dict[str, Any]) -> ChangeRecord:
    return change_record_from_value(hit["fields"][RECORD][0])


def _resource_from_source(hit: dict[str, Any]) -> ResourceRecord:
    return resource_record(hit["_source"])


def _change_from_source(hit: dict[str, Any]) -> ChangeRecord:
    return change_record(hit["_source"])


#: One doc value a hit and no stored field. Nested links sit between the
#: documents, so the node could not read `_source` in one sequential pass: it
#: spent 11-14 us a hit where this takes 4-5 (bench/README.md, s3-esflat).
FROM_DOC_VALUES = {
    "_source": False,
    "stored_fields": "_none_",
    "docvalue_fields": [RECORD],
    "filter_path": [f"hits.hits.fields.{RECORD}", "hits.hits.sort"],
}
#: Without the sort values, a tenth less to write and parse a hit; the
#: records are read from the response's bytes.
RESOURCES_FROM_DOC_VALUES = Reading(
    {**FROM_DOC_VALUES, "filter_path": [f"hits.hits.fields.{RECORD}"]},
    resource_record_from_value,
    _after_resource,
    record_values,
    raw=True,
)
CHANGES_FROM_DOC_VALUES = Reading(FROM_DOC_VALUES, _change_from_doc_values)
#: Indices older than mapping version 3 (until `reconcile --rebuild`): the
#: fields records need, picked from `_source` with `filter_path` rather than
#: source filtering, which spares the node a parse of every `_source`.
RESOURCE_FIELDS = (*RESOURCE_RECORD_FIELDS, "ln")
RESOURCES_FROM_SOURCE = Reading(
    {"filter_path": _source_paths(*RESOURCE_FIELDS)}, _resource_from_source
)
CHANGES_FROM_SOURCE = Reading(
    {"filter_path": _source_paths(*RESOURCE_FIELDS, "resource_key", "change", "datetime")},
    _change_from_source,
)
FILTER_PATH = ["hits.hits._source", "hits.hits.sort"]
#: Hits per request: the most `index.max_result_window` allows. The node spends
#: about 10 ms a request besides its hits (a sixth less node CPU than 5,000); a
#: builder holds two batches (one prefetched): 10 MiB more peak for the two.
BATCH_SIZE = 10_000
#: Hits a Resource List writes in one pass. Small, so that a batch's rows, columns and
#: bytes stay in the CPU's cache: at 200,000, 100 took 4.0 us an entry, 500 4.6, 2,000
#: 6.3 (main's records 6.4) for about the same instructions (bench/README.md, s8-esbatch).
WRITTEN_BATCH_SIZE = 100


def _records(batches: Iterable[Sequence[Any]], reading: Reading) -> Iterator[Any]:
    """The records of batches of hits, in order: `map`s, no Python loop a hit."""
    return chain.from_iterable(map(partial(map, reading.record), batches))


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


def _through(key: int | None) -> list[dict[str, Any]]:
    """The filter clause for documents whose key is at most `key` (none: all)."""
    return [{"range": {"key": {"lte": key}}}] if key is not None else []


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
    def reader(self) -> Elasticsearch:
        """This process's client whose responses stay bytes (`RawResponses`), for scans."""
        return self.mirror.process_client("raw", serializers={"application/json": RAW_RESPONSES})

    @property
    def resources_index(self) -> str:
        return self.mirror.resources_index

    @property
    def changes_index(self) -> str:
        return self.mirror.changes_index

    # Write side: the mirror.

    def needs_indexing(self, resource_set_id: int) -> bool:
        return unindexed_changes(resource_set_id).exists()

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

    def unavailable(self, timeout: float = 5.0) -> str | None:
        """The cluster's failure to answer `check_copy`, as one line."""
        try:
            self.check_copy(timeout)
        except Exception as error:
            hosts = ", ".join(_without_userinfo(host) for host in self.mirror.hosts)
            return f"Elasticsearch at {hosts} cannot be used ({_root_cause(error)})"
        return None

    def visible_through(self, resource_set: ResourceSet) -> int:
        """Up to the first change not yet indexed: a page never shows a later one without it.

        None at all while the indices are not the ones the changes were marked in.
        """
        if not self.mirror.is_recorded_copy():
            return 0
        newest = super().visible_through(resource_set)
        pending = unindexed_changes(resource_set.pk)
        first_pending = pending.aggregate(first=Min("id"))["first"]
        return newest if first_pending is None else min(newest, first_pending - 1)

    # Read side.

    def _scan(
        self,
        index: str,
        query: dict[str, Any],
        sort: list[Any],
        reading: Reading,
        search_after: list[Any] | None,
        batch_size: int,
    ) -> Iterator[Sequence[Any]]:
        """The hits, a batch per request, each resuming after the last hit's sort values.

        The next batch is requested in a thread while this one is consumed, so
        the node searches while the caller renders.
        """

        client = self.reader if reading.raw else self.client

        def search(after: list[Any] | None) -> Sequence[Any]:
            body: dict[str, Any] = {"query": query, "sort": sort, "size": batch_size}
            if after is not None:
                body["search_after"] = after
            response = client.search(index=index, track_total_hits=False, **reading.params, **body)
            return reading.hits(response.body)

        with ThreadPoolExecutor(max_workers=1) as prefetch:
            hits = search(search_after)
            while True:
                full = len(hits) == batch_size
                following = prefetch.submit(search, reading.resume(hits[-1])) if full else None
                if hits:
                    yield hits
                if following is None:
                    return
                hits = following.result()

    def _reads_doc_values(self, index: str) -> bool:
        """Whether every index behind `index` maps `record` (mapping version 3 or later).

        An older index the upgraded mirror wrote to has it too, mapped
        dynamically as text: that one is still read from `_source`.
        """
        found = self.client.indices.get_field_mapping(index=index, fields=RECORD)
        return bool(found) and all(
            entry["mappings"].get(RECORD, {}).get("mapping", {}).get(RECORD) == RECORD_MAPPING
            for entry in found.values()
        )

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
        index, query, sort, reading, start = self._resource_scan(resource_set, after, through)
        return _records(self._scan(index, query, sort, reading, start, batch_size), reading)

    def iter_resource_batches(
        self,
        resource_set: ResourceSet,
        *,
        after: int | None = None,
        through: int | None = None,
        batch_size: int = BATCH_SIZE,
    ) -> Iterator[ResourceBatch]:
        """Batches of a request's hits, their columns read from the `record` doc values.

        Indices older than mapping version 3 give batches of records without columns.
        """
        index, query, sort, reading, start = self._resource_scan(resource_set, after, through)
        hits = self._scan(index, query, sort, reading, start, batch_size)
        if not reading.raw:
            yield from record_batches(_records(hits, reading), batch_size)
            return
        for values in hits:
            for first in range(0, len(values), WRITTEN_BATCH_SIZE):
                yield resource_batch_from_values(values[first : first + WRITTEN_BATCH_SIZE])

    def _resource_scan(
        self, resource_set: ResourceSet, after: int | None, through: int | None
    ) -> tuple[str, dict[str, Any], list[Any], Reading, list[Any] | None]:
        """The index, query, sort, reading and start of a scan of resources in (after, through]."""
        query = self._filter(resource_set, *_through(through))
        start = [after] if after is not None else None
        index = self.resources_index
        reading = (
            RESOURCES_FROM_DOC_VALUES if self._reads_doc_values(index) else RESOURCES_FROM_SOURCE
        )
        return index, query, [{"key": "asc"}], reading, start

    def iter_changes(
        self,
        resource_set: ResourceSet,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        after: tuple[datetime, int] | None = None,
        through: int | None = None,
        batch_size: int = BATCH_SIZE,
    ) -> Iterator[ChangeRecord]:
        query = self._filter(resource_set, *_window(since, until), *_through(through))
        sort = [{"datetime": {"order": "asc", "format": DATE_FORMAT}}, {"key": "asc"}]
        start = [after[0].isoformat(), after[1]] if after is not None else None
        index = self.changes_index
        reading = CHANGES_FROM_DOC_VALUES if self._reads_doc_values(index) else CHANGES_FROM_SOURCE
        return _records(self._scan(index, query, sort, reading, start, batch_size), reading)

    def count_resources(self, resource_set: ResourceSet) -> int:
        return self.client.count(index=self.resources_index, query=self._filter(resource_set))[
            "count"
        ]

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
