"""Mirror database rows into Elasticsearch, after commit and idempotently.

The database is the record. Indexing reads the current rows, so running it
twice, late, or out of order converges to the same state; `reconcile`
repairs whatever an outage left behind. The Elasticsearch generator owns one
`Mirror` (its client and its two indices) and calls it from its write hooks.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import chain, islice
from typing import Any

import orjson
from django.core.cache import cache
from django.db import transaction
from django.db.models import Count, DateTimeField, Q, QuerySet, Sum, TextField
from django.db.models.functions import Cast
from django_elasticsearch_dsl import Index
from elasticsearch import AuthorizationException, BadRequestError, Elasticsearch
from elasticsearch.serializer import OrjsonSerializer

from resourcesync_portal import processes

from .documents import (
    CHANGE_RECORD_FIELDS,
    LASTMOD,
    RESOURCE_RECORD_FIELDS,
    changes_index,
    index_names,
    record_value,
    resources_index,
)
from .expressions import AnyOf, UtcText
from .generators.base import ReconcileReport
from .models import Change, MirrorCopy, Resource, ResourceSet
from .services import resource_set_lock
from .signals import changes_indexed, copy_repaired, indexing_turned_away

logger = logging.getLogger(__name__)

#: Changes read from the database per batch.
BATCH_SIZE = 2000
#: Actions per `_bulk` request: a batch's resources and changes together.
BULK_ACTIONS = 2 * BATCH_SIZE
#: How long a set's indexing claim outlives its last batch (a killed worker's lapses).
CLAIM_SECONDS = 120
#: How often a long indexing run makes its work searchable and marks it done.
REFRESH_EVERY_SECONDS = 1.0
#: ... or this many times as long as the last refresh and marking took, if longer
#: (at most a quarter of CLAIM_SECONDS: each refresh renews the claim).
REFRESH_COST_MULTIPLE = 4
#: Keys read per search when reconcile compares the mirror with the database.
KEYS_PER_SEARCH = 10_000
#: Changes marked indexed per transaction (the keys go as one parameter: `AnyOf`).
MARK_BATCH_SIZE = 10_000
#: Of a `_bulk` response, the refused actions only, `{}` when none: each action's
#: status cost the worker more to parse than the rest of its reply.
BULK_FILTER_PATH = ["items.*.error"]

#: Of the index templates that give an index Elasticsearch creates by itself (for a
#: write after the index was deleted) the mirror's mapping: above Elasticsearch's own.
TEMPLATE_PRIORITY = 500

BulkAction = tuple[dict[str, Any], dict[str, Any] | None]


class CopyReplaced(Exception):
    """An index was replaced while changes were sent into it: they are not marked."""


RESOURCE_FIELDS = (
    "id", "resource_set_id", "location_type", "location_value", "uri", "length", "md5",
    "sha256", "mime", "lastmod", "ln", "timestamp",
)  # fmt: skip
CHANGE_FIELDS = (
    *RESOURCE_FIELDS, "resource_key", "change", "datetime",
)  # fmt: skip


# Documents, built from plain rows: the same `_source` as the Documents'
# prepare() (tests/integration/test_elasticsearch_mirror.py compares them),
# at a fraction of the cost per row.


def _snapshot(row: dict[str, Any], set_path: str) -> dict[str, Any]:
    """The fields both documents share, but `record` (datetimes as `read_rows` gives them)."""
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
        "lastmod": row["lastmod"],
        "ln": row["ln"],
        "timestamp": row["timestamp"],
    }


def resource_source(row: dict[str, Any], set_path: str) -> dict[str, Any]:
    """A `ResourceDocument` body from a `read_rows(resources, RESOURCE_FIELDS)` row."""
    source = _snapshot(row, set_path)
    source["record"] = record_value(source, RESOURCE_RECORD_FIELDS)
    return source


def change_source(row: dict[str, Any], set_path: str) -> dict[str, Any]:
    """A `ChangeDocument` body from a `read_rows(changes, CHANGE_FIELDS)` row."""
    source = _snapshot(row, set_path)
    source.update(
        resource_key=row["resource_key"],
        change=row["change"],
        datetime=row["datetime"],
    )
    source["record"] = record_value(source, CHANGE_RECORD_FIELDS)
    return source


def set_paths(set_ids: Iterable[int]) -> dict[int, str]:
    sets = ResourceSet.objects.filter(pk__in=set(set_ids)).select_related("provider")
    return {resource_set.pk: resource_set.path for resource_set in sets}


def _bulk_body(actions: list[BulkAction]) -> bytes:
    lines = []
    for header, source in actions:
        lines.append(orjson.dumps(header))
        if source is not None:
            lines.append(orjson.dumps(source))
    return b"\n".join(lines) + b"\n"


ORJSON = OrjsonSerializer()


def _raise_refusals(response: Any) -> None:
    """Fail on any refused action but a delete from an index gone (its document is gone too).

    Deleting a document already gone is no refusal: Elasticsearch answers 404
    without an error.
    """
    for item in response.get("items", ()):
        action, info = next(iter(item.items()))
        error = info.get("error")
        if error and not (action == "delete" and error.get("type") == "index_not_found_exception"):
            raise RuntimeError(f"Elasticsearch refused a {action}: {error}")


#: Not mirrored yet, said twice so that SQLite searches the partial index
#: `change_unindexed` (Django writes `indexed=False` as `NOT indexed`, its
#: condition, but an index is searched by equalities). With the condition
#: alone SQLite took the set's index and read every change of the set to find
#: the few pending at its end: about 1 s a query at a million mirrored changes.
UNINDEXED = Q(indexed=False, indexed__in=[False])


#: Keys per `IN (…)` when checking what reconcile found missing (SQLite's limit is 32766).
KEYS_PER_QUERY = 1000


def _changes_lost(missing: set[int]) -> bool:
    """Whether the copy lacks changes it had been given (marked indexed), not ones still
    on their way: only a loss makes the documents built from it suspect."""
    keys = sorted(missing)
    return any(
        Change.objects.filter(pk__in=keys[start : start + KEYS_PER_QUERY], indexed=True).exists()
        for start in range(0, len(keys), KEYS_PER_QUERY)
    )


def _resources_lost(missing: set[int]) -> bool:
    """`_changes_lost` for resources: one missing while none of its changes is on its way."""
    keys = sorted(missing)
    for start in range(0, len(keys), KEYS_PER_QUERY):
        chunk = keys[start : start + KEYS_PER_QUERY]
        on_the_way = Change.objects.filter(resource_key__in=chunk, indexed=False)
        if (
            Resource.objects.filter(pk__in=chunk)
            .exclude(pk__in=on_the_way.values("resource_key"))
            .exists()
        ):
            return True
    return False


def unindexed_changes(resource_set_id: int | None) -> QuerySet[Change]:
    """Changes not mirrored yet, of one set or of all."""
    pending = Change.objects.filter(UNINDEXED)
    if resource_set_id is not None:
        pending = pending.filter(resource_set_id=resource_set_id)
    return pending


#: A row as a run sent it: its URI and links as stored JSON text (what `sources.re_resolve`
#: rewrites).
RowState = tuple[str, str | None]


def _with_ln_text(rows: QuerySet[Any]) -> QuerySet[Any]:
    """The rows with `ln_text`, their links' stored JSON as text (no JSONField decoding)."""
    return rows.annotate(ln_text=Cast("ln", output_field=TextField()))


def read_rows(rows: QuerySet[Any], fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """`rows.values(*fields)`, with `ln` decoded by orjson and its text kept as `ln_text`,
    and datetimes as the text of their `isoformat()`.

    Django's JSONField converter cost about as much as building the rest of a
    document; the text also lets `_mark_unchanged` compare links without decoding them.
    Its datetime loaders cost more again: the datetimes are read as UTC text.
    """
    meta = rows.model._meta
    dates = [name for name in fields if isinstance(meta.get_field(name), DateTimeField)]
    texts = {f"{name}_utc": UtcText(name) for name in dates}
    names = [name for name in fields if name != "ln" and name not in dates]
    found = list(_with_ln_text(rows).annotate(**texts).values(*names, "ln_text", *texts))
    for row in found:
        text = row["ln_text"]
        row["ln"] = None if text is None else orjson.loads(text)
        for name in dates:
            text = row.pop(f"{name}_utc")
            row[name] = None if text is None else UtcText.isoformat(text)
    return found


def _refresh_interval(cost: float) -> float:
    """Seconds to the next refresh of a backlog, given what the last one cost."""
    spaced = max(REFRESH_EVERY_SECONDS, REFRESH_COST_MULTIPLE * cost)
    return min(spaced, CLAIM_SECONDS / 4)


class Sent:
    """What a run sent of each change: its set, its state and its resource's (None: gone)."""

    def __init__(self) -> None:
        self.changes: dict[int, tuple[int, RowState, int | None]] = {}
        self.resources: dict[int, RowState | None] = {}

    def __len__(self) -> int:
        return len(self.changes)

    def add(self, other: Sent) -> None:
        self.changes.update(other.changes)
        self.resources.update(other.resources)


def _mark_indexed(sent: Sent) -> None:
    """After a refresh: the generator may now read these changes from the mirror."""
    ids = sorted(sent.changes)
    for start in range(0, len(ids), MARK_BATCH_SIZE):
        _mark_unchanged(sent, ids[start : start + MARK_BATCH_SIZE])


def _mark_unchanged(sent: Sent, ids: list[int]) -> None:
    """Mark the changes whose row, and resource's row, are still as they were sent.

    A row re-resolved since (a new url_prefix) was sent with its old URI: it
    stays unindexed, and the next run sends it anew. Under the sets' locks,
    which re-resolving holds for its whole transaction.
    """
    with transaction.atomic():
        for set_id in sorted({sent.changes[pk][0] for pk in ids}):
            resource_set_lock(resource_set=ResourceSet(pk=set_id))
        rows = _with_ln_text(Change.objects.filter(AnyOf("pk", ids)))
        rows = rows.values_list("pk", "uri", "ln_text", "resource_key")
        changes = {pk: ((uri, ln), key) for pk, uri, ln, key in rows}
        keys = {key for pk in ids if (key := sent.changes[pk][2]) is not None}
        current = _with_ln_text(Resource.objects.filter(AnyOf("pk", keys)))
        resources = {pk: (uri, ln) for pk, uri, ln in current.values_list("pk", "uri", "ln_text")}
        unchanged = [
            pk
            for pk in ids
            if changes.get(pk, (None, None))[0] == sent.changes[pk][1]
            and _same_resource(sent, sent.changes[pk][2], resources)
        ]
        Change.objects.filter(AnyOf("pk", unchanged)).update(indexed=True)


def _same_resource(sent: Sent, key: int | None, now: dict[int, RowState]) -> bool:
    return key is None or sent.resources.get(key) == now.get(key)


def claim_holder() -> str:
    """Who holds an indexing claim: this host and process."""
    return f"{processes.this_host()} {os.getpid()}"


def take_claim(claim: str) -> bool:
    """Claim a set's indexing; also when the holder was a process of this host that is
    gone: a worker killed mid-backlog never lets go, and the run Celery delivers again
    would otherwise leave the set unindexed (and unpublished past it) until the claim
    lapses and reconcile comes."""
    if cache.add(claim, claim_holder(), timeout=CLAIM_SECONDS):
        return True
    held = cache.get(claim)
    if held is not None and not holder_is_gone(str(held)):
        return False
    cache.delete(claim)
    return cache.add(claim, claim_holder(), timeout=CLAIM_SECONDS)


def holder_is_gone(holder: str) -> bool:
    """Whether `holder` (host and pid) names a process of this host that no longer runs;
    another host's is left to lapse."""
    host, _, pid = holder.rpartition(" ")
    return processes.is_gone(host, pid)


class Mirror:
    """One Elasticsearch copy of the rows: its client, its two indices, and their writes."""

    def __init__(
        self,
        *,
        hosts: list[str],
        index_prefix: str,
        timeout: float,
        options: dict[str, Any],
    ) -> None:
        self.hosts = hosts
        self.timeout = timeout
        self.options = options
        self.resources_index, self.changes_index = index_names(index_prefix)
        self._clients: dict[str, tuple[int, Elasticsearch]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._local = threading.local()
        self._templates_put = 0

    @property
    def client(self) -> Elasticsearch:
        """This process's client, its JSON read and written by orjson."""
        return self.process_client("json", serializer=ORJSON)

    def process_client(self, name: str, **settings: Any) -> Elasticsearch:
        """The client `name` of this process, made with `settings` at first use.

        One per process: a forked child (page builders) must not share sockets.
        """
        pid = os.getpid()
        made = self._clients.get(name)
        if made is None or made[0] != pid:
            client = Elasticsearch(
                self.hosts, request_timeout=self.timeout, **settings, **self.options
            )
            made = self._clients[name] = (pid, client)
        return made[1]

    def ensure_indices(self) -> bool:
        """Create both indices, with the Documents' mappings, if they are missing; True if
        one was (whatever it held is gone)."""
        self._put_templates()
        created = False
        for name, template in self.templates().items():
            if not self.client.indices.exists(index=name):
                self.client.indices.create(index=name, **template.to_dict())
                created = True
        return created

    def _put_templates(self) -> None:
        """Once per process: an index Elasticsearch creates again by itself, for a write
        after it was deleted, takes the mirror's mapping rather than a guessed one; and
        indices made before take `lastmod`'s."""
        if self._templates_put == os.getpid():
            return
        try:
            for name, template in self.templates().items():
                self.client.indices.put_index_template(
                    name=name,
                    index_patterns=[name],
                    template=template.to_dict(),
                    priority=TEMPLATE_PRIORITY,
                )
        except AuthorizationException as error:
            # A user allowed only its own indices: such an index then needs a rebuild.
            logger.warning(
                "No index templates (%s): after an index is deleted, an index "
                "Elasticsearch creates by itself needs `reconcile --rebuild`",
                error,
            )
        self._take_any_lastmod()
        self._templates_put = os.getpid()

    def _take_any_lastmod(self) -> None:
        """Indices made before `lastmod` took `ignore_malformed` refuse a year `date_nanos`
        cannot hold, and with it its change, for good (documents.LASTMOD)."""
        try:
            self.client.indices.put_mapping(
                index=self._names,
                properties={"lastmod": LASTMOD},
                ignore_unavailable=True,
                allow_no_indices=True,
            )
        except (AuthorizationException, BadRequestError) as error:
            logger.warning(
                "%s refuse a lastmod before 1970 or after 2262 (%s): `reconcile --rebuild`",
                self._names,
                error,
            )

    def identity(self) -> str:
        """Each index behind the two names, with its UUID: it changes when one is replaced."""
        found = self.client.indices.get_settings(
            index=self._names,
            name="index.uuid",
            ignore_unavailable=True,
            filter_path="*.settings.index.uuid",  # the whole reply took 1.6 times as long
        )
        return ",".join(
            f"{index}:{body['settings']['index']['uuid']}"
            for index, body in sorted(found.body.items())
        )

    def recorded_identity(self) -> str | None:
        """The identity the changes' `indexed` marks refer to; None before the first."""
        copies = MirrorCopy.objects.filter(names=self._names)
        return copies.values_list("identity", flat=True).first()

    def record_copy(self, *, also: str = "") -> None:
        """Make the indices as they are now the ones the `indexed` marks refer to (and
        `also` those of that identity: a rebuild's, while it swaps them in)."""
        identity = "|".join(filter(None, (self.identity(), also)))
        MirrorCopy.objects.update_or_create(names=self._names, defaults={"identity": identity})

    def is_recorded_copy(self) -> bool:
        """The indices are the ones the marks refer to (or none is recorded yet)."""
        return self._is_identity(self.recorded_identity())

    def _is_identity(self, recorded: str | None) -> bool:
        """The indices are the ones `recorded` names (any of them), or none is recorded
        and the marks refer to no other indices."""
        if recorded is None:
            return not self._marked_elsewhere()
        return self.identity() in recorded.split("|")

    def _marked_elsewhere(self) -> bool:
        """Changes are marked indexed into indices of other names (another
        ELASTICSEARCH_INDEX_PREFIX): under these names they may hold none of them."""
        others = MirrorCopy.objects.exclude(names=self._names)
        return others.exists() and Change.objects.filter(indexed=True).exists()

    def copy_replaced(self) -> bool:
        """Create missing indices; True if the indices are not the ones the `indexed` marks
        refer to (whatever they held is gone). The first look records them, unless the
        marks refer to indices of other names."""
        if self.ensure_indices() or not self._is_identity(recorded := self.recorded_identity()):
            return True
        if recorded is None:
            self.record_copy()
        return False

    def _check_copy(self) -> None:
        """Raise CopyReplaced unless the indices are the ones the marks refer to."""
        if not self.is_recorded_copy():
            raise CopyReplaced(f"{self._names} were replaced while changes were sent")

    @property
    def _names(self) -> str:
        return f"{self.resources_index},{self.changes_index}"

    def create_indices(self) -> None:
        """Create both indices with the Documents' mappings; fail if one exists."""
        for name, template in self.templates().items():
            self.client.indices.create(index=name, **template.to_dict())

    def templates(self) -> dict[str, Index]:
        """Each index this mirror writes, and the registered index giving its mappings."""
        return {self.resources_index: resources_index, self.changes_index: changes_index}

    def retargeted(self, resources: str, changes: str) -> Mirror:
        """The same cluster and client, writing to two other indices (a rebuild fills them)."""
        other = copy.copy(self)
        other.resources_index, other.changes_index = resources, changes
        other._local = threading.local()
        return other

    def concrete_indices(self, name: str) -> list[str]:
        """The indices a name stands for: itself, or an alias's targets (after a rebuild)."""
        found = self.client.indices.get(index=name, ignore_unavailable=True)
        return sorted(found)

    def delete_indices(self) -> None:
        """Drop both indices, their templates and their record (tests and benchmarks start
        from nothing)."""
        names = [
            index
            for name in (self.resources_index, self.changes_index)
            for index in self.concrete_indices(name)
        ]
        if names:
            self.client.indices.delete(index=",".join(names), ignore_unavailable=True)
        for name in self.templates():
            self.client.options(ignore_status=404).indices.delete_index_template(name=name)
        self._templates_put = 0
        MirrorCopy.objects.filter(names=self._names).delete()  # nothing is recorded either

    def refresh(self) -> None:
        """Make every write sent so far searchable (the one in flight included)."""
        self.flush()
        self.client.indices.refresh(index=f"{self.resources_index},{self.changes_index}")

    def send(self, actions: Iterable[BulkAction], *, wait: bool = True) -> None:
        """Send index and delete actions, BULK_ACTIONS per `_bulk` request.

        The body is orjson lines joined by hand: for the same 50,000 documents,
        `elasticsearch.helpers.streaming_bulk` took 2.3 times the client CPU and
        8% longer (bench figures in the issue notes). With `wait=False` the
        last request may still be in flight on return; `flush` and `refresh`
        wait for it.
        """
        pending = iter(actions)
        while chunk := list(islice(pending, BULK_ACTIONS)):
            self._post(_bulk_body(chunk))
        if wait:
            self.flush()

    def _post(self, body: bytes) -> None:
        """Send one body from a background thread, once the one before it is done.

        So a backlog reads and builds its next batch while Elasticsearch
        indexes the previous one, rather than each waiting for the other.
        """
        sender = self._sender()
        self.flush()
        # The client sends bytes as they are; its types only know lists of dicts.
        self._in_flight = sender.submit(
            self.client.bulk,
            body=body,  # type: ignore[arg-type]
            filter_path=BULK_FILTER_PATH,
        )

    @property
    def _in_flight(self) -> Future[Any] | None:
        """The calling thread's request in flight: the generator is one per process, and
        request threads (gunicorn's gthread, eager tasks) each wait for their own."""
        return getattr(self._local, "in_flight", None)

    @_in_flight.setter
    def _in_flight(self, future: Future[Any] | None) -> None:
        self._local.in_flight = future

    def _sender(self) -> ThreadPoolExecutor:
        """One sending thread per process (a forked child has none of its parent's)."""
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool, self._pool_pid = ThreadPoolExecutor(max_workers=1), os.getpid()
            self._in_flight = None
        return self._pool

    def flush(self) -> None:
        """Wait for the `_bulk` request in flight, if any; raise if it refused an action."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None and self._pool_pid == os.getpid():
            _raise_refusals(in_flight.result())

    def _resource_actions(self, keys: set[int], sent: Sent | None = None) -> Iterator[BulkAction]:
        """Index the current rows of these resources; delete the ones gone (noted in `sent`)."""
        sent = sent or Sent()
        ordered = sorted(keys)
        for start in range(0, len(ordered), BATCH_SIZE):
            chunk = ordered[start : start + BATCH_SIZE]
            rows = read_rows(Resource.objects.filter(AnyOf("pk", chunk)), RESOURCE_FIELDS)
            paths = set_paths(row["resource_set_id"] for row in rows)
            for row in rows:
                sent.resources[row["id"]] = (row["uri"], row["ln_text"])
                source = resource_source(row, paths[row["resource_set_id"]])
                yield {"index": {"_index": self.resources_index, "_id": str(row["id"])}}, source
            for key in set(chunk) - {row["id"] for row in rows}:
                sent.resources[key] = None
                yield {"delete": {"_index": self.resources_index, "_id": str(key)}}, None

    def _index_change_rows(self, change_ids: list[int]) -> Sent:
        """Index these changes and the current state of the resources they touched."""
        rows = read_rows(Change.objects.filter(AnyOf("pk", change_ids)), CHANGE_FIELDS)
        paths = set_paths(row["resource_set_id"] for row in rows)
        touched = {row["resource_key"] for row in rows if row["resource_key"]}
        sent = Sent()
        for row in rows:
            state = (row["uri"], row["ln_text"])
            sent.changes[row["id"]] = (row["resource_set_id"], state, row["resource_key"] or None)
        changes = (
            ({"index": {"_index": self.changes_index, "_id": str(row["id"])}},
             change_source(row, paths[row["resource_set_id"]]))
            for row in rows
        )  # fmt: skip
        # One request for both: resources first, so a change never shows before its resource.
        self.send(chain(self._resource_actions(touched, sent), changes), wait=False)
        return sent

    def index_changes(self, change_ids: list[int]) -> int:
        """Mirror these changes (and their resources), refresh, and mark them indexed."""
        if not change_ids:
            return 0
        sent = self._index_change_rows(change_ids)
        self.refresh()
        self._check_copy()
        _mark_indexed(sent)
        return len(sent)

    def index_pending(self, resource_set_id: int | None = None) -> int:
        """Index every change not yet mirrored (of one set, or of all sets).

        One run per set at a time: every commit queues a run, and two at once
        would send the same unmarked changes twice. A run that finds the set
        claimed leaves its changes to the holder, which looks again once it
        has let go, so none is left behind; it says so (`indexing_turned_away`),
        since a holder that died on another host never looks again.
        """
        claim = f"resourcesync:mirror-indexing:{resource_set_id or 'all'}"
        done = 0
        while take_claim(claim):
            try:
                done += self._index_backlog(resource_set_id, claim)
            except CopyReplaced:
                # What was sent is not marked: the next backlog finds the new indices.
                logger.warning("An Elasticsearch index was replaced: indexing again")
            finally:
                cache.delete(claim)
            if not unindexed_changes(resource_set_id).exists():
                return done
        if resource_set_id is not None:  # all sets: reconcile's, which comes again anyway
            indexing_turned_away.send_robust(sender=Mirror, resource_set_id=resource_set_id)
        return done

    def _index_backlog(self, resource_set_id: int | None, claim: str) -> int:
        """Send the pending changes in batches, refreshing as they go.

        Every REFRESH_EVERY_SECONDS, and at the end, the indices are refreshed
        and the sent changes marked indexed (and the claim renewed), so a long
        backlog becomes visible as it goes without a refresh per batch. A
        refresh and its marking stop the batches; when they take long (a busy
        node, a large set) the next one waits REFRESH_COST_MULTIPLE times as
        long, so they never take more than a small share of a backlog's time.
        """
        if self.copy_replaced():
            # A node back without its data, an index deleted: every change is pending again,
            # so no page is built from the empty copy, and every set is indexed anew, here.
            lost = Change.objects.filter(indexed=True).update(indexed=False)
            # The marks now refer to these indices only: indices of other names (a prefix
            # the portal ran on before, and may come back to) miss what is marked from now.
            MirrorCopy.objects.exclude(names=self._names).delete()
            self.record_copy()
            if lost:
                logger.warning("An Elasticsearch index was replaced: every change is indexed again")
                return self._index_all_again(claim)
        pending = unindexed_changes(resource_set_id)
        done, last = 0, 0
        sent = Sent()
        refreshed, interval = time.monotonic(), REFRESH_EVERY_SECONDS
        while True:
            keys = pending.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)
            batch = list(keys[:BATCH_SIZE])
            if batch:
                sent.add(self._index_change_rows(batch))
                last = batch[-1]
            if sent and (not batch or time.monotonic() - refreshed >= interval):
                started = time.monotonic()
                self._publish(sent, resource_set_id, claim)
                done += len(sent)
                sent = Sent()
                refreshed = time.monotonic()
                interval = _refresh_interval(refreshed - started)
            if not batch:
                return done

    def _index_all_again(self, claim: str) -> int:
        """Every set's changes, each set's listeners told once it is whole again."""
        done = 0
        for set_id in unindexed_changes(None).values_list("resource_set_id", flat=True).distinct():
            done += self._index_backlog(set_id, claim)
        return done

    def _publish(self, sent: Sent, resource_set_id: int | None, claim: str) -> None:
        """Refresh, mark the sent changes indexed, renew the claim, tell the set's listeners."""
        self.refresh()
        self._check_copy()
        _mark_indexed(sent)
        cache.touch(claim, CLAIM_SECONDS)
        if resource_set_id is not None:
            changes_indexed.send_robust(sender=Mirror, resource_set_id=resource_set_id)

    def reconcile(self, resource_sets: Iterable[ResourceSet] | None = None) -> ReconcileReport:
        """Bring both indices in line with the database and say what was fixed."""
        report = ReconcileReport(changes_indexed=self.index_pending())
        self.refresh()
        if resource_sets is None:
            resource_sets = ResourceSet.objects.select_related("provider")
        repaired = []
        for resource_set in resource_sets:
            report.sets.append(resource_set.path)
            resources = Resource.objects.filter(resource_set=resource_set)
            missing, extra = self._differences(self.resources_index, resource_set, resources)
            self.send(self._resource_actions(missing | extra))
            report.resources_indexed += len(missing)
            report.resources_removed += len(extra)
            lost = _resources_lost(missing)
            changes = Change.objects.filter(resource_set=resource_set)
            missing, extra = self._differences(self.changes_index, resource_set, changes)
            lost = lost or _changes_lost(missing)
            self._repair_changes(missing, extra)
            report.changes_reindexed += len(missing)
            report.changes_removed += len(extra)
            if lost:
                repaired.append(resource_set.pk)
        self.refresh()
        for resource_set_id in repaired:  # once the repairs are visible
            copy_repaired.send(sender=type(self), resource_set_id=resource_set_id)
        return report

    def _repair_changes(self, missing: set[int], extra: set[int]) -> None:
        ordered = sorted(missing)
        for start in range(0, len(ordered), BATCH_SIZE):
            self._index_change_rows(ordered[start : start + BATCH_SIZE])
        self.send(
            ({"delete": {"_index": self.changes_index, "_id": str(key)}}, None) for key in extra
        )

    def _differences(
        self, index: str, resource_set: ResourceSet, rows: QuerySet[Any]
    ) -> tuple[set[int], set[int]]:
        """Keys the mirror lacks, and keys it holds that the database does not."""
        expected = rows.aggregate(count=Count("pk"), total=Sum("pk"))
        if self._fingerprint(index, resource_set) == (expected["count"], expected["total"] or 0):
            return set(), set()
        # The mirror differs: compare keys.
        db_keys = set(rows.values_list("pk", flat=True).iterator(chunk_size=KEYS_PER_SEARCH))
        es_keys = set(self._keys(index, resource_set))
        return db_keys - es_keys, es_keys - db_keys

    def _fingerprint(self, index: str, resource_set: ResourceSet) -> tuple[int, int]:
        """Count and sum of the mirrored keys: cheap, and unequal after any loss."""
        response = self.client.search(
            index=index,
            query={"term": {"resource_set_id": resource_set.pk}},
            size=0,
            aggs={"keys": {"sum": {"field": "key"}}},
            track_total_hits=True,
        )
        return response["hits"]["total"]["value"], int(response["aggregations"]["keys"]["value"])

    def _keys(self, index: str, resource_set: ResourceSet) -> Iterator[int]:
        search_after = None
        while True:
            body: dict[str, Any] = {
                "query": {"term": {"resource_set_id": resource_set.pk}},
                "sort": [{"key": "asc"}],
                "size": KEYS_PER_SEARCH,
                "_source": False,
                "track_total_hits": False,
                "docvalue_fields": ["key"],
            }
            if search_after:
                body["search_after"] = search_after
            response = self.client.search(index=index, filter_path=["hits.hits.sort"], **body)
            hits = response.get("hits", {}).get("hits", [])
            for hit in hits:
                yield hit["sort"][0]
            if len(hits) < KEYS_PER_SEARCH:
                return
            search_after = hits[-1]["sort"]
