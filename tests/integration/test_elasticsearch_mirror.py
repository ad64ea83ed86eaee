"""The mirror: indexed after commit, and nothing lost when Elasticsearch is down."""

from __future__ import annotations

import copy
import multiprocessing
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sources.documents import MAPPING_VERSION, ChangeDocument, ResourceDocument
from sources.generators import get_generator
from sources.indexing import (
    CHANGE_FIELDS,
    RESOURCE_FIELDS,
    change_source,
    read_rows,
    resource_source,
)
from sources.models import Change, Resource, ResourceSet

from ..support import created, event, ingest, make_set

pytestmark = pytest.mark.django_db
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "elasticsearch.sh"


def es_count(mirror, index: str) -> int:
    mirror.client.indices.refresh(index=index)
    return mirror.client.count(index=index)["count"]


def test_fast_sources_equal_what_the_documents_prepare():
    """The indexer builds bodies from plain rows; they must be the Documents' own."""
    resource_set = make_set()
    created(resource_set, 3)
    ingest(
        resource_set,
        [event("updated", "r/0000001", version=2, sha256="a" * 64), event("deleted", "r/0000002")],
    )
    # Fractions PostgreSQL's text trims (.1), none, and an offset other than UTC's.
    ingest(
        resource_set,
        [
            event("created", f"f/{n}", lastmod=datetime.fromisoformat(text))
            for n, text in enumerate(
                ("2026-01-02T03:04:05.100000+00:00", "2026-01-02T03:04:05+00:00",
                 "2026-01-02T03:04:05.000001+02:00", "1999-12-31T23:59:59.999999-05:30")
            )
        ],
    )  # fmt: skip
    for resource in Resource.objects.all():
        (row,) = read_rows(Resource.objects.filter(pk=resource.pk), RESOURCE_FIELDS)
        assert resource_source(row, resource_set.path) == ResourceDocument().prepare(resource)
    changes = list(Change.objects.all())
    assert {change.change for change in changes} == {"created", "updated", "deleted"}
    for change in changes:
        (row,) = read_rows(Change.objects.filter(pk=change.pk), CHANGE_FIELDS)
        assert change_source(row, resource_set.path) == ChangeDocument().prepare(change)


def test_the_mirror_reads_each_datetime_once_as_text():
    """Django's datetime loaders were the mirror's largest cost: the columns come as text only."""
    created(make_set(), 2)
    names = ("lastmod", "timestamp", "datetime")
    quoted = {name: connection.ops.quote_name(name) for name in names}

    with CaptureQueriesContext(connection) as queries:
        rows = read_rows(Change.objects.all(), CHANGE_FIELDS)

    (sql,) = (query["sql"] for query in queries.captured_queries)
    assert {name: sql.count(column) for name, column in quoted.items()} == dict.fromkeys(quoted, 1)
    assert all(isinstance(row[name], str) for row in rows for name in quoted)


def test_changes_are_mirrored_after_commit(use_elasticsearch):
    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    created(resource_set, 5)
    ingest(resource_set, [event("deleted", "r/0000001"), event("updated", "r/0000002", version=2)])
    assert es_count(mirror, mirror.resources_index) == 4
    assert es_count(mirror, mirror.changes_index) == 7
    assert not Change.objects.filter(indexed=False).exists()
    source = mirror.client.get(
        index=mirror.resources_index, id=Resource.objects.get(uri__endswith="r/0000002").pk
    )
    assert source["_source"]["md5"] == event("updated", "r/0000002", version=2).md5
    assert source["_source"]["location"] == {
        "type": "url",
        "value": "http://data.example.org/r/0000002",
    }


def test_reconcile_repairs_missing_and_stale_documents(use_elasticsearch):
    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    created(resource_set, 6)
    keys = list(Resource.objects.values_list("pk", flat=True))
    mirror.client.delete(index=mirror.resources_index, id=keys[0], refresh=True)
    mirror.client.index(
        index=mirror.resources_index,
        id=999_999,
        document={"resource_set_id": resource_set.pk, "key": 999_999},
        refresh=True,
    )
    report = use_elasticsearch.reconcile()
    assert report.resources_indexed == 1 and report.resources_removed == 1
    assert es_count(mirror, mirror.resources_index) == 6


def node_script(elasticsearch_url: str, command: str) -> None:
    """Stop or start the node the tests use (its port from ELASTICSEARCH_TEST_URL)."""
    port = str(urlsplit(elasticsearch_url).port or 9200)
    subprocess.run([SCRIPT, command], check=True, env={**os.environ, "ES_PORT": port})


def test_elasticsearch_outage_loses_nothing(use_elasticsearch, elasticsearch_url, capsys):
    """Stop the real node mid-ingest, keep ingesting, restart, reconcile."""
    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    created(resource_set, 50)
    node_script(elasticsearch_url, "stop")
    try:
        created(resource_set, 50, start=50)
        ingest(resource_set, [event("deleted", f"r/{n:07d}") for n in range(10)])
        ingest(resource_set, [event("updated", f"r/{n:07d}", version=2) for n in range(60, 70)])
        assert Resource.objects.count() == 90
        assert Change.objects.count() == 120
        assert Change.objects.filter(indexed=False).count() == 70
    finally:
        node_script(elasticsearch_url, "start")
    call_command("reconcile")
    assert "indexed 70 pending change(s)" in capsys.readouterr().out
    assert es_count(mirror, mirror.resources_index) == Resource.objects.count() == 90
    assert es_count(mirror, mirror.changes_index) == Change.objects.count() == 120
    assert not Change.objects.filter(indexed=False).exists()
    updated = mirror.client.get(
        index=mirror.resources_index, id=Resource.objects.get(uri__endswith="r/0000065").pk
    )
    assert updated["_source"]["md5"] == event("updated", "r/0000065", version=2).md5


def test_events_posted_through_the_api_reach_elasticsearch(
    use_elasticsearch, client, django_capture_on_commit_callbacks
):
    import json

    from tests.factories import ApiTokenFactory

    resource_set = make_set()
    token = ApiTokenFactory(provider=resource_set.provider)
    body = "\n".join(
        json.dumps(
            {
                "change": "created",
                "location": {"type": "rel_path", "value": f"api/{n}.txt"},
                "length": n,
                "md5": "9e107d9d372bb6826bd81d3542a419d6",
                "mime": "text/plain",
                "lastmod": "2024-05-01T10:00:00Z",
            }
        )
        for n in range(4)
    )
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/api/v1/sets/acme/articles/events",
            data=body,
            content_type="application/x-ndjson",
            headers={"Authorization": f"Token {token.plain_key}"},
        )
    mirror = use_elasticsearch.mirror
    assert response.status_code == 200 and response.json()["created"] == 4
    assert es_count(mirror, mirror.resources_index) == 4
    assert es_count(mirror, mirror.changes_index) == 4
    hit = search_uri(mirror, "http://data.example.org/acme/articles/api/2.txt")
    assert hit["length"] == 2 and hit["location"] == {"type": "rel_path", "value": "api/2.txt"}


def search_uri(mirror, uri: str) -> dict:
    response = mirror.client.search(index=mirror.resources_index, query={"term": {"uri": uri}})
    return response["hits"]["hits"][0]["_source"]


_inherited: list = []


def _count_in_child(resource_set_pk: int) -> tuple[bool, int]:
    """In a forked child: is the generator's client its own, and does it answer?"""
    from sources.models import ResourceSet

    generator = get_generator()
    own = generator.client is not _inherited[0]
    return own, generator.count_resources(ResourceSet(pk=resource_set_pk))


def test_a_forked_page_builder_gets_its_own_client(use_elasticsearch):
    """Regeneration forks page builders: sharing the parent's pooled sockets mixes replies."""
    resource_set = make_set()
    created(resource_set, 3)
    parent = use_elasticsearch.client
    _inherited[:] = [parent]
    try:
        with multiprocessing.get_context("fork").Pool(2) as pool:
            # A child stuck on the parent's sockets fails the test rather than hanging it.
            answers = pool.map_async(_count_in_child, [resource_set.pk] * 4).get(timeout=60)
    finally:
        _inherited.clear()
    assert answers == [(True, 3)] * 4
    assert use_elasticsearch.client is parent  # the parent keeps its own


def test_a_refused_document_fails_the_batch_but_deleting_an_absent_one_does_not(
    use_elasticsearch,
):
    mirror = use_elasticsearch.mirror
    absent = {"delete": {"_index": mirror.resources_index, "_id": "424242"}}
    index_gone = {"delete": {"_index": f"{mirror.resources_index}-gone", "_id": "1"}}
    mirror.send([(absent, None), (index_gone, None)])
    accepted = {"index": {"_index": mirror.resources_index, "_id": "2"}}
    refused = {"index": {"_index": mirror.resources_index, "_id": "1"}}
    with pytest.raises(RuntimeError, match="Elasticsearch refused a index"):
        mirror.send([(accepted, {"key": 2}), (refused, {"key": "not a number"}), (absent, None)])
    stale = {"delete": {"_index": mirror.resources_index, "_id": "2", "if_seq_no": 99}}
    stale["delete"]["if_primary_term"] = 1
    with pytest.raises(RuntimeError, match=r"refused a delete.*version_conflict"):
        mirror.send([(stale, None)])


# The mapping: the seeds' fields, fewer Lucene documents.


def lucene_documents(mirror, index: str) -> int:
    mirror.client.indices.refresh(index=index)
    stats = mirror.client.indices.stats(index=index, metric="docs")["indices"]
    return sum(figures["primaries"]["docs"]["count"] for figures in stats.values())


def test_a_linked_resource_is_two_lucene_documents_not_four(use_elasticsearch):
    """Only the list of links is nested: a location and an href are single objects."""
    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    created(resource_set, 3)  # one link each
    assert lucene_documents(mirror, mirror.resources_index) == 3 * 2
    assert lucene_documents(mirror, mirror.changes_index) == 3 * 2


def test_queries_on_the_seeds_fields_keep_their_meaning(use_elasticsearch):
    """A location is found by its value; a link by its rel and href together."""
    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    created(resource_set, 3)
    uri = "http://data.example.org/r/0000001"
    by_location = {"term": {"location.value": uri}}
    hits = mirror.client.search(index=mirror.resources_index, query=by_location)["hits"]["hits"]
    assert [hit["_source"]["uri"] for hit in hits] == [uri]
    link = {"bool": {"filter": [
        {"term": {"ln.rel": "describedby"}}, {"term": {"ln.href.value": uri + ".xml"}},
    ]}}  # fmt: skip
    by_link = {"nested": {"path": "ln", "query": link}}
    for index in (mirror.resources_index, mirror.changes_index):
        hits = mirror.client.search(index=index, query=by_link)["hits"]["hits"]
        assert [hit["_source"]["uri"] for hit in hits] == [uri]
    elsewhere = {"nested": {"path": "ln", "query": {"bool": {"filter": [
        {"term": {"ln.rel": "alternate"}}, {"term": {"ln.href.value": uri + ".xml"}},
    ]}}}}  # fmt: skip
    assert not mirror.client.search(index=mirror.resources_index, query=elsewhere)["hits"]["hits"]


def test_the_generator_reads_doc_values_and_no_stored_field(use_elasticsearch, monkeypatch):
    """Nested links break a page's hits apart: reading `_source` cost the node 40 % more."""
    resource_set = make_set()
    created(resource_set, 3)
    searches = []

    def record_searches(client):
        search = client.search

        def recorded(**params):
            searches.append(params)
            return search(**params)

        monkeypatch.setattr(client, "search", recorded)

    record_searches(use_elasticsearch.client)
    record_searches(use_elasticsearch.reader)  # resources: responses read as bytes
    resources = list(use_elasticsearch.iter_resources(resource_set))
    changes = list(use_elasticsearch.iter_changes(resource_set))

    assert [len(resources), len(changes)] == [3, 3]
    assert resources[0].links and changes[0].links
    assert len(searches) == 2
    assert all(
        (params.get("_source"), params.get("stored_fields")) == (False, "_none_")
        for params in searches
    )


# One indexing run per set at a time.


def unindexed_set() -> tuple[ResourceSet, str]:
    """A set with 4 changes not indexed yet, and the name of its indexing claim."""
    resource_set = make_set()
    with muted_indexing():
        created(resource_set, 4)
    return resource_set, f"resourcesync:mirror-indexing:{resource_set.pk}"


def test_indexing_leaves_a_set_claimed_by_another_run_to_that_run(use_elasticsearch):
    from django.core.cache import cache

    mirror = use_elasticsearch.mirror
    resource_set, claim = unindexed_set()
    assert cache.add(claim, "another run", timeout=60)
    try:
        assert use_elasticsearch.index_pending(resource_set.pk) == 0
        assert es_count(mirror, mirror.changes_index) == 0
    finally:
        cache.delete(claim)
    assert use_elasticsearch.index_pending(resource_set.pk) == 4
    assert es_count(mirror, mirror.changes_index) == 4


def test_a_claim_whose_process_was_killed_is_taken_over(use_elasticsearch):
    """A worker killed mid-backlog never let go: the run Celery delivered again found the
    set claimed and returned, and nothing indexed the set until the claim expired and
    reconcile came (10 minutes on a quiet source), nor published past its changes."""
    from django.core.cache import cache

    from resourcesync_portal.processes import this_host

    mirror = use_elasticsearch.mirror
    resource_set, claim = unindexed_set()
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()
    assert cache.add(claim, f"{this_host()} {killed.pid}", timeout=60)
    try:
        assert use_elasticsearch.index_pending(resource_set.pk) == 4
    finally:
        cache.delete(claim)
    assert es_count(mirror, mirror.changes_index) == 4


def test_a_claim_from_another_host_is_followed_up_once_it_could_have_lapsed(
    use_elasticsearch, settings
):
    """A claim from another host is left to lapse, not taken over: when its worker
    died, nothing indexed the set (nor published its changes) until the next commit
    to it or reconcile (10 minutes). A turned-away run queues one run for after the
    lapse; one at a time, however many runs are turned away meanwhile."""
    from unittest import mock

    from celery import Celery
    from django.core.cache import cache

    from resourcesync_portal.celery import app
    from sources import indexing

    mirror = use_elasticsearch.mirror
    resource_set, claim = unindexed_set()
    assert cache.add(claim, "otherhost 123", timeout=60)
    settings.CELERY_TASK_ALWAYS_EAGER = False  # a broker: tasks are sent, not run here

    def indexing_runs(sent: mock.Mock) -> list[tuple[str, tuple]]:
        """The indexing runs queued (not the documents' regeneration): name, arguments."""
        runs = [call for call in sent.call_args_list if call.args[0].startswith("sources.")]
        assert all(call.kwargs["countdown"] > indexing.CLAIM_SECONDS for call in runs)
        return [(call.args[0], tuple(call.args[1])) for call in runs]

    with mock.patch.object(Celery, "send_task") as sent:
        for _ in range(3):  # every commit's run, while the holder is gone
            assert use_elasticsearch.index_pending(resource_set.pk) == 0
        (queued,) = indexing_runs(sent)
        name, args = queued
        assert args == (resource_set.pk,)

        sent.reset_mock()
        assert app.tasks[name](*args) == 0  # still held (a long backlog): it looks again later
        assert indexing_runs(sent) == [queued]

        sent.reset_mock()
        cache.delete(claim)  # lapsed
        assert app.tasks[name](*args) == 4
        assert app.tasks[name](*args) == 0  # a follow-up finding nothing to do
        assert indexing_runs(sent) == []
    assert es_count(mirror, mirror.changes_index) == 4
    assert not Change.objects.filter(indexed=False).exists()


def test_without_a_broker_a_turned_away_run_queues_no_follow_up(use_elasticsearch, settings):
    """Eagerly, a follow-up would run at once, in the request, against the same claim."""
    from unittest import mock

    from django.core.cache import cache

    from sources import tasks

    resource_set = make_set()
    with muted_indexing():
        created(resource_set, 2)
    assert cache.add(f"resourcesync:mirror-indexing:{resource_set.pk}", "otherhost 123", 60)
    settings.CELERY_TASK_ALWAYS_EAGER = True
    with mock.patch.object(tasks.follow_up_indexing, "apply_async") as queued:
        assert use_elasticsearch.index_pending(resource_set.pk) == 0
    assert not queued.called


def test_changes_committed_while_a_run_held_the_set_are_indexed_by_it(
    use_elasticsearch, monkeypatch
):
    """The run that was turned away returned at once: the holder looks again after letting go."""
    from sources.indexing import Mirror

    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    with muted_indexing():
        created(resource_set, 2)
    original = Mirror._index_backlog
    passes = []

    def backlog_then_more(self, resource_set_id, claim):
        done = original(self, resource_set_id, claim)
        if not passes:  # committed while this run still holds the set
            with muted_indexing():
                created(resource_set, 3, start=2)
        passes.append(done)
        return done

    monkeypatch.setattr(Mirror, "_index_backlog", backlog_then_more)
    assert use_elasticsearch.index_pending(resource_set.pk) == 5
    assert passes == [2, 3]
    assert es_count(mirror, mirror.changes_index) == 5
    assert not Change.objects.filter(indexed=False).exists()


def filters_on_indexed(sql: str) -> bool:
    return sql.startswith("SELECT") and '"indexed"' in sql.partition(" WHERE ")[2]


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query planner")
def test_pending_changes_are_searched_in_the_partial_index_not_read_through_the_set(
    use_elasticsearch,
):
    """At a million mirrored changes, walking the set's index to the few pending took ~1 s
    a query: indexing one change, and the watermark of every regeneration after it."""
    resource_set = make_set()
    created(resource_set, 3)
    with muted_indexing():
        ingest(resource_set, [event("updated", "r/0000001", version=2)])
    with CaptureQueriesContext(connection) as queries:
        assert use_elasticsearch.needs_indexing(resource_set.pk)
        assert use_elasticsearch.index_pending(resource_set.pk) == 1
        assert use_elasticsearch.index_pending() == 0
        assert use_elasticsearch.visible_through(resource_set) == Change.objects.latest("pk").pk
    searches = [query["sql"] for query in queries if filters_on_indexed(query["sql"])]
    assert len(searches) >= 5
    with connection.cursor() as cursor:
        for sql in searches:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            plan = " ".join(row[-1] for row in cursor.fetchall())
            assert "USING INDEX change_unindexed" in plan or (
                "USING COVERING INDEX change_unindexed" in plan
            ), f"{sql}\n{plan}"


def muted_indexing():
    from sources.signals import events_ingested, receivers_muted

    return receivers_muted(events_ingested)


# Moving a deployment to new mappings.


def version_1(body: dict) -> dict:
    """The mappings of MAPPING_VERSION 1: the seeds' nested objects, no `record`."""
    body = copy.deepcopy(body)
    properties = body["mappings"]["properties"]
    properties["location"]["type"] = "nested"
    properties["ln"]["properties"]["href"]["type"] = "nested"
    del properties["record"]
    del body["mappings"]["_source"]
    return body


def test_reconcile_rebuild_moves_live_indices_to_the_current_mappings(use_elasticsearch, capsys):
    """Old concrete indices are replaced by aliases of new ones holding the same documents."""
    mirror = use_elasticsearch.mirror
    mirror.delete_indices()
    for name, template in mirror.templates().items():
        mirror.client.indices.create(index=name, **version_1(template.to_dict()))
    resource_set = make_set()
    created(resource_set, 5)
    ingest(resource_set, [event("deleted", "r/0000001"), event("updated", "r/0000002", version=2)])
    before = list(use_elasticsearch.iter_changes(resource_set))
    resources_before = list(use_elasticsearch.iter_resources(resource_set))
    batches = list(use_elasticsearch.iter_resource_batches(resource_set))
    assert [record for batch in batches for record in batch.records()] == resources_before
    assert [batch.columns for batch in batches] == [None]  # read from `_source`
    assert lucene_documents(mirror, mirror.resources_index) == 4 * 4

    call_command("reconcile", "--rebuild")
    assert "with 4 resource(s) and 7 change(s)" in capsys.readouterr().out

    for name in (mirror.resources_index, mirror.changes_index):
        assert mirror.client.indices.exists_alias(name=name)
        (concrete,) = mirror.concrete_indices(name)
        assert concrete.startswith(f"{name}-v{MAPPING_VERSION}-")
        mapping = mirror.client.indices.get_mapping(index=name)[concrete]["mappings"]
        assert mapping["properties"]["location"].get("type", "object") == "object"
    assert lucene_documents(mirror, mirror.resources_index) == 4 * 2
    assert mirror.recorded_identity() == mirror.identity()  # no change is indexed again
    assert list(use_elasticsearch.iter_resources(resource_set)) == resources_before
    assert list(use_elasticsearch.iter_changes(resource_set)) == before
    # Indexing and a second rebuild go on through the aliases.
    created(resource_set, 1, start=10)
    assert es_count(mirror, mirror.changes_index) == 8
    call_command("reconcile", "--rebuild")
    assert es_count(mirror, mirror.changes_index) == 8
    assert len(mirror.concrete_indices(f"{mirror.resources_index}*")) == 1


def test_reconcile_rebuild_names_no_set(use_elasticsearch):
    from django.core.management.base import CommandError

    make_set()
    with pytest.raises(CommandError, match="name no set"):
        call_command("reconcile", "--rebuild", "acme/articles")


def test_a_refused_batch_sent_in_the_background_leaves_its_changes_unindexed(
    use_elasticsearch, monkeypatch
):
    """Batches go out while the next is read: a refusal still fails the run before marking."""
    from sources import indexing

    resource_set = make_set()
    with muted_indexing():
        created(resource_set, 3)
    refused = {"key": "not a number"}
    monkeypatch.setattr(indexing, "change_source", lambda row, path: refused)
    with pytest.raises(RuntimeError, match="Elasticsearch refused a index"):
        use_elasticsearch.index_pending(resource_set.pk)
    assert Change.objects.filter(indexed=False).count() == 3


def test_rows_re_resolved_between_a_send_and_its_mark_are_sent_again(
    use_elasticsearch, monkeypatch
):
    """A run marks only the rows it sent as they still are: a re-resolve that committed
    between its send and its mark leaves them unindexed, so they are sent again (the run
    looks again before it lets go), not left in the mirror with their old URIs."""
    from dataclasses import replace

    from sources.indexing import Mirror
    from sources.models import ResourceSet
    from sources.re_resolve import re_resolve_uris

    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    old, new = resource_set.url_prefix, "https://files.example.net/moved/"
    located = replace(event("created", "x"), location_type="rel_path", location_value="a.txt")
    with muted_indexing():
        ingest(resource_set, [replace(located, uri=old + "a.txt")])
    original = Mirror._index_change_rows
    moved = []

    def send_then_re_resolve(self, change_ids):
        sent = original(self, change_ids)
        if not moved:  # between the send and the mark
            ResourceSet.objects.filter(pk=resource_set.pk).update(url_prefix=new)
            moved.append(re_resolve_uris(resource_set=resource_set))
        return sent

    monkeypatch.setattr(Mirror, "_index_change_rows", send_then_re_resolve)
    use_elasticsearch.index_pending(resource_set.pk)

    assert moved and moved[0].resources == 1
    assert Change.objects.get().uri == new + "a.txt"
    assert not Change.objects.filter(indexed=False).exists()
    mirror.refresh()
    for index in (mirror.resources_index, mirror.changes_index):
        hits = mirror.client.search(index=index, query={"match_all": {}})["hits"]["hits"]
        assert [hit["_source"]["uri"] for hit in hits] == [new + "a.txt"], index


# Refreshing a long backlog.


def test_a_slow_refresh_spaces_out_the_next_ones_but_every_change_is_indexed(
    use_elasticsearch, monkeypatch
):
    """Refreshing and marking stop the batches: when they are slow, a backlog does fewer."""
    import time

    from sources import indexing

    resource_set = make_set()
    with muted_indexing():
        created(resource_set, 50)
    monkeypatch.setattr(indexing, "BATCH_SIZE", 10)
    monkeypatch.setattr(indexing, "REFRESH_EVERY_SECONDS", 0)
    original = indexing.Mirror._publish
    published = []

    def slow_publish(self, sent, resource_set_id, claim):
        time.sleep(0.5)  # a busy node: the next refresh waits about 2 s
        published.append(len(sent))
        original(self, sent, resource_set_id, claim)

    monkeypatch.setattr(indexing.Mirror, "_publish", slow_publish)
    assert use_elasticsearch.index_pending(resource_set.pk) == 50
    assert published == [10, 40]
    assert es_count(use_elasticsearch.mirror, use_elasticsearch.mirror.changes_index) == 50
    assert not Change.objects.filter(indexed=False).exists()


def test_a_slow_refresh_never_lets_the_claim_lapse(use_elasticsearch, monkeypatch):
    """Spaced-out refreshes still renew the set's claim before it lapses."""
    import itertools
    import time

    from sources import indexing

    resource_set = make_set()
    with muted_indexing():
        created(resource_set, 100)
    monkeypatch.setattr(indexing, "BATCH_SIZE", 5)
    # Capped, a renewal comes every ~2 + 0.5 + 2.5 s; uncapped, only after the
    # whole 10 s backlog (4 x 2.5 s spacing).
    monkeypatch.setattr(indexing, "CLAIM_SECONDS", 8)
    original_publish, original_rows = indexing.Mirror._publish, indexing.Mirror._index_change_rows
    renewed = []

    def slow_publish(self, sent, resource_set_id, claim):
        time.sleep(2.5)  # spaced out 4x, the next renewal would come after the claim lapsed
        original_publish(self, sent, resource_set_id, claim)
        renewed.append(time.monotonic())

    def slow_rows(self, change_ids):
        time.sleep(0.5)
        return original_rows(self, change_ids)

    monkeypatch.setattr(indexing.Mirror, "_publish", slow_publish)
    monkeypatch.setattr(indexing.Mirror, "_index_change_rows", slow_rows)
    assert use_elasticsearch.index_pending(resource_set.pk) == 100
    gaps = [later - earlier for earlier, later in itertools.pairwise(renewed)]
    assert max(gaps) < indexing.CLAIM_SECONDS, gaps


def served_locs(client, path: str = "/resourcesync/acme/articles/resourcelist.xml") -> set[str]:
    """Every <loc> of the set's Resource List, through its index when it has one."""
    from lxml import etree

    from ..support import NS

    root = etree.fromstring(b"".join(client.get(path).streaming_content))
    locs = {loc.text for loc in root.iterfind("sm:url/sm:loc", NS)}
    for part in root.iterfind("sm:sitemap/sm:loc", NS):
        locs |= served_locs(client, part.text.split("8000", 1)[1])
    return locs


def test_an_index_lost_and_recreated_publishes_no_page_from_the_empty_copy(
    use_elasticsearch, client, settings, tmp_path
):
    """A node back without its data volume: the next indexing recreated empty indices and
    the database still called every older change indexed, so the pages the next change
    touched were rebuilt from the empty copy, their other entries gone."""
    from ..support import store_documents_in

    store_documents_in(settings, tmp_path / "documents")
    mirror = use_elasticsearch.mirror
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 12)
    every = served_locs(client)
    assert len(every) == 12
    mirror.delete_indices()

    ingest(resource_set, [event("updated", "r/0000001", version=2)])

    assert served_locs(client) == every
    assert es_count(mirror, mirror.resources_index) == 12


def test_reconcile_rewrites_pages_built_from_a_stale_copy(
    use_elasticsearch, client, settings, tmp_path
):
    """A node restored from an older snapshot: pages rebuilt meanwhile lost entries, and
    reconcile mended the copy but not the pages built from it."""
    from ..support import store_documents_in

    store_documents_in(settings, tmp_path / "documents")
    mirror = use_elasticsearch.mirror
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 12)
    every = served_locs(client)
    for key in Resource.objects.order_by("pk").values_list("pk", flat=True)[:3]:
        mirror.client.delete(index=mirror.resources_index, id=key, refresh=True)
    ingest(resource_set, [event("updated", "r/0000001", version=2)])
    assert served_locs(client) != every  # the page of r/0000001 was built from the stale copy

    call_command("reconcile")

    assert served_locs(client) == every


def test_a_run_while_changes_wait_for_the_copy_says_so(use_elasticsearch):
    """It said "every document was up to date" while accepted changes were unpublished
    (their indexing lost with a Redis restart, say)."""
    from sitemaps.regeneration import regenerate
    from sources.services import ingest_events

    resource_set = make_set()
    created(resource_set, 2)
    ingest_events(resource_set=resource_set, events=[event("created", "r/late")])  # not indexed

    assert str(regenerate(resource_set)) == (
        "nothing to rewrite yet: newer changes wait for the generator's copy"
    )


def test_no_page_is_built_from_a_copy_that_shows_less_than_the_documents(
    use_elasticsearch, client, settings, tmp_path
):
    """After an index was lost, another set's changes were all pending again: a full run
    of that set ("Regenerate every page", a url_prefix move) published it empty, closed
    Change Lists included. Now the set is indexed anew along with the set that found the
    loss, and a run writes nothing while its copy shows less than its documents."""
    from sitemaps.regeneration import regenerate

    from ..support import store_documents_in

    store_documents_in(settings, tmp_path / "documents")
    mirror = use_elasticsearch.mirror
    first, other = make_set(entries_per_document=4), make_set(slug="other", entries_per_document=4)
    created(first, 3)
    created(other, 6)
    path = "/resourcesync/acme/other/resourcelist.xml"
    every = served_locs(client, path)
    mirror.delete_indices()

    ingest(first, [event("updated", "r/0000001", version=2)])

    assert served_locs(client, path) == every
    assert not Change.objects.filter(resource_set=other, indexed=False).exists()
    # And were its changes still waiting, a full run would leave its documents alone.
    Change.objects.filter(resource_set=other).update(indexed=False)
    report = regenerate(other, full=True)
    assert str(report) == "nothing to rewrite yet: newer changes wait for the generator's copy"
    assert served_locs(client, path) == every


def test_changes_on_their_way_into_the_copy_are_no_repair(use_elasticsearch, monkeypatch):
    """Reconcile found the changes committed while it ran "missing", indexed them, and
    rewrote a busy set in full every ten minutes: only rows the copy had been given
    and lost are a repair."""
    from sources.services import ingest_events
    from sources.signals import copy_repaired

    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    created(resource_set, 3)
    ingest_events(resource_set=resource_set, events=[event("created", "r/late")])  # in flight
    monkeypatch.setattr(mirror, "index_pending", lambda *args: 0)  # committed as it ran
    repaired: list[int] = []

    def record(sender, *, resource_set_id, **kwargs):
        repaired.append(resource_set_id)

    copy_repaired.connect(record)
    try:
        report = mirror.reconcile()
        assert report.changes_reindexed == 1 and repaired == []
        mirror.client.delete(index=mirror.changes_index, id=Change.objects.first().pk, refresh=True)
        mirror.reconcile()
        assert repaired == [resource_set.pk]
    finally:
        copy_repaired.disconnect(record)


def test_an_index_replaced_during_a_backlog_is_not_taken_for_the_copy(
    use_elasticsearch, client, settings, tmp_path, monkeypatch
):
    """An index deleted while a backlog was being sent: Elasticsearch created it again
    for the next `_bulk` (with a dynamic mapping), the changes sent into that hollow copy
    were marked indexed, and the pages built from it lost every other entry (a Change List
    closed then kept the loss for good)."""
    from sources.indexing import Mirror

    from ..support import store_documents_in

    store_documents_in(settings, tmp_path / "documents")
    mirror = use_elasticsearch.mirror
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 12)
    every = served_locs(client)
    mapping = live_mapping(mirror)
    send = Mirror.send

    def delete_first(self, actions, **kwargs):
        monkeypatch.setattr(Mirror, "send", send)
        self.client.indices.delete(index=self.concrete_indices(self.resources_index))
        return send(self, actions, **kwargs)

    monkeypatch.setattr(Mirror, "send", delete_first)
    ingest(resource_set, [event("updated", "r/0000001", version=2)])

    assert served_locs(client) == every
    assert es_count(mirror, mirror.resources_index) == 12
    assert live_mapping(mirror) == mapping  # not one Elasticsearch guessed


def live_mapping(mirror) -> dict:
    found = mirror.client.indices.get_mapping(index=mirror.resources_index)
    (mapping,) = (index["mappings"] for index in found.body.values())
    return mapping


def test_no_page_is_built_from_an_index_that_replaced_the_copy(
    use_elasticsearch, client, settings, tmp_path
):
    """Every change marked indexed, and the index behind them replaced by another (deleted,
    then created again by any write): a full run published the set from the new one."""
    from sitemaps.regeneration import regenerate

    from ..support import store_documents_in

    store_documents_in(settings, tmp_path / "documents")
    mirror = use_elasticsearch.mirror
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 12)
    every = served_locs(client)
    mirror.client.indices.delete(index=mirror.concrete_indices(mirror.resources_index))
    mirror.ensure_indices()

    report = regenerate(resource_set, full=True)

    assert str(report) == "nothing to rewrite yet: newer changes wait for the generator's copy"
    assert served_locs(client) == every
    call_command("reconcile")
    assert served_locs(client) == every
    assert es_count(mirror, mirror.resources_index) == 12


def test_a_cluster_that_refuses_index_templates_still_indexes(use_elasticsearch, monkeypatch):
    """Templates need a cluster privilege (`manage_index_templates`) an index-scoped user
    lacks: indexing must go on without them, not fail every backlog."""
    from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
    from elasticsearch import AuthorizationException

    mirror = use_elasticsearch.mirror
    mirror.delete_indices()
    meta = ApiResponseMeta(403, "1.1", HttpHeaders(), 0.0, NodeConfig("http", "localhost", 9200))

    def refuse(**kwargs):
        raise AuthorizationException(
            "action [indices:admin/index_template/put] is unauthorized", meta, {}
        )

    monkeypatch.setattr(mirror.client.indices, "put_index_template", refuse)
    resource_set = make_set()

    created(resource_set, 3)

    assert es_count(mirror, mirror.resources_index) == 3
    assert not Change.objects.filter(indexed=False).exists()


def test_no_change_is_listed_behind_one_a_destination_has_passed(use_elasticsearch, client):
    """A request's undated events (dated at receipt) before events it dates earlier: the
    copy held the first ones and the open list showed them; the earlier-dated ones came
    later, behind them, where a destination resuming from the newest datetime it applied
    (resync, the portal's harvester) never looks."""
    import time
    from datetime import timedelta

    from lxml import etree

    from sitemaps.regeneration import regenerate
    from sources.services import ingest_events
    from sources.signals import events_ingested, receivers_muted

    from ..support import NS

    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    created(resource_set, 2)
    earlier = Change.objects.latest("datetime").datetime + timedelta(milliseconds=1)
    time.sleep(0.01)
    sent = [event("created", f"now/{n}") for n in range(3)]
    sent += [event("created", f"dated/{n}", datetime=earlier) for n in range(3)]
    with receivers_muted(events_ingested):
        ingest_events(resource_set=resource_set, events=sent)
    ids = list(Change.objects.order_by("pk").values_list("pk", flat=True))
    mirror.index_changes(ids[:-3])  # the copy has the undated ones so far

    def listed() -> list[tuple[str, str]]:
        content = b"".join(
            client.get("/resourcesync/acme/articles/changelist.xml").streaming_content
        )
        entries = etree.fromstring(content).iterfind("sm:url", NS)
        return [
            (e.findtext("sm:loc", namespaces=NS), e.find("rs:md", NS).get("datetime"))
            for e in entries
        ]

    regenerate(resource_set)
    first = listed()
    passed = max(datetime for _, datetime in first)  # where a destination resumes
    mirror.index_changes(ids[-3:])
    regenerate(resource_set)

    later = [entry for entry in listed() if entry not in first]
    assert len(first) + len(later) == 8
    assert all(datetime > passed for _, datetime in later)


def test_a_rebuild_swapping_its_indices_in_is_no_replaced_copy(use_elasticsearch, monkeypatch):
    """Between the swap and the record of the new indices, an indexing backlog (any commit
    queues one) took the rebuilt indices for a lost copy and indexed every change again,
    and runs published nothing: what a rebuild exists to avoid."""
    from sources import rebuilding

    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    created(resource_set, 2)
    seen = []
    update_aliases = mirror.client.indices.update_aliases

    def swap_and_look(**kwargs):
        update_aliases(**kwargs)
        seen.append((mirror.copy_replaced(), use_elasticsearch.visible_through(resource_set)))

    monkeypatch.setattr(mirror.client.indices, "update_aliases", swap_and_look)

    rebuilding.rebuild_mirror(mirror)

    newest = Change.objects.latest("pk").pk
    assert seen and all(found == (False, newest) for found in seen)
    assert not Change.objects.filter(indexed=False).exists()


def published_changes(client) -> list[tuple[str, str]]:
    """(loc, datetime) of every entry of every published Change List, oldest list first."""
    from lxml import etree

    from ..support import NS

    def read(path: str):
        return etree.fromstring(b"".join(client.get(path).streaming_content))

    top = read("/resourcesync/acme/articles/changelist.xml")
    lists = [top]
    if top.tag == f"{{{NS['sm']}}}sitemapindex":
        locs = top.xpath("sm:sitemap/sm:loc/text()", namespaces=NS)
        lists = [read(urlsplit(loc).path) for loc in locs]
    return [
        (entry.findtext("sm:loc", namespaces=NS), entry.find("rs:md", NS).get("datetime"))
        for root in lists
        for entry in root.iterfind("sm:url", NS)
    ]


def ingest_muted(resource_set, names: list[str]) -> list[int]:
    """Commit `created` events without the after-commit hooks; the ids of their changes."""
    from sources.services import ingest_events
    from sources.signals import events_ingested, receivers_muted

    newest = Change.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    with receivers_muted(events_ingested):
        ingest_events(resource_set=resource_set, events=[event("created", n) for n in names])
    return list(Change.objects.filter(pk__gt=newest).order_by("pk").values_list("pk", flat=True))


def test_a_list_closed_while_changes_wait_for_the_copy_lists_nothing_past_them(
    use_elasticsearch, client
):
    """A rotation closed a list whose window held changes not yet in the copy (a large
    request committed last). The closed list showed the later changes the copy held, and
    its successor the changes after it; the waiting ones came later, behind both, where a
    destination resuming from the newest datetime it applied never looks."""
    from datetime import timedelta

    from sitemaps.regeneration import regenerate

    from .test_change_list_documents import rotate_after

    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    created(resource_set, 2)
    waiting = ingest_muted(resource_set, [f"late/{n}" for n in range(3)])
    mirror.index_changes(ingest_muted(resource_set, [f"seen/{n}" for n in range(3)]))
    rotate_after(resource_set, timedelta(0))
    regenerate(resource_set)
    rotate_after(resource_set, timedelta(days=1))
    mirror.index_changes(ingest_muted(resource_set, [f"next/{n}" for n in range(2)]))
    regenerate(resource_set)
    first = published_changes(client)
    passed = max(datetime for _, datetime in first)  # where a destination resumes

    mirror.index_changes(waiting)
    regenerate(resource_set)

    later = [entry for entry in published_changes(client) if entry not in first]
    assert len(first) + len(later) == 10
    assert all(datetime > passed for _, datetime in later)


def test_changes_committed_once_a_run_began_are_left_to_the_next_run(
    use_elasticsearch, client, monkeypatch
):
    """A large request in flight when a run began commits after it, and a small one
    after that; the copy took the small one's changes first. The run listed them, and
    the large one's earlier-dated changes came later, behind them."""
    from sitemaps.regeneration import RegenerationRun, regenerate

    mirror = use_elasticsearch.mirror
    resource_set = make_set()
    created(resource_set, 2)
    mirror.index_changes(ingest_muted(resource_set, ["before/0"]))  # for the run to list
    snapshot_time = RegenerationRun.snapshot_time
    waiting: list[int] = []

    def commits_meanwhile(run: RegenerationRun):
        at = snapshot_time(run)
        waiting.extend(ingest_muted(resource_set, [f"large/{n}" for n in range(3)]))
        mirror.index_changes(ingest_muted(resource_set, [f"small/{n}" for n in range(2)]))
        return at

    monkeypatch.setattr(RegenerationRun, "snapshot_time", commits_meanwhile)
    regenerate(resource_set)
    monkeypatch.setattr(RegenerationRun, "snapshot_time", snapshot_time)
    first = published_changes(client)
    passed = max(datetime for _, datetime in first)

    mirror.index_changes(waiting)
    regenerate(resource_set)

    later = [entry for entry in published_changes(client) if entry not in first]
    assert len(first) + len(later) == 8
    assert all(datetime > passed for _, datetime in later)


def test_indices_under_a_new_prefix_are_not_taken_for_the_copy(
    use_elasticsearch, client, settings, tmp_path, elasticsearch_generator
):
    """Every change marked indexed under one ELASTICSEARCH_INDEX_PREFIX, then the portal
    started on another whose indices `search_index --create` made (empty): the marks do
    not refer to them, so no page may be built from them until they are filled."""
    from sitemaps.regeneration import regenerate
    from sources.generators import get_generator

    from ..support import store_documents_in

    store_documents_in(settings, tmp_path / "documents")
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 12)
    every = served_locs(client)
    assert not Change.objects.filter(indexed=False).exists()
    entry = {
        **elasticsearch_generator,
        "INDEX_PREFIX": f"{elasticsearch_generator['INDEX_PREFIX']}-b",
    }
    settings.RESOURCESYNC_GENERATORS = {"default": entry}
    renamed = get_generator()
    renamed.mirror.delete_indices()
    renamed.mirror.create_indices()  # `manage.py search_index --create`
    try:
        regenerate(resource_set, full=True)
        assert served_locs(client) == every
        created(resource_set, 1, start=20)  # the next request indexes into the new indices
        regenerate(resource_set, full=True)
        assert len(served_locs(client)) == 13
        assert es_count(renamed.mirror, renamed.mirror.resources_index) == 13
    finally:
        renamed.mirror.delete_indices()


def test_indices_of_a_prefix_left_earlier_are_not_taken_for_the_copy(
    use_elasticsearch, client, settings, tmp_path, elasticsearch_generator
):
    """The portal moved to another ELASTICSEARCH_INDEX_PREFIX (every change indexed into
    its indices), then back: the first prefix's indices still exist and are still the ones
    recorded for it, but they miss every change since, and the marks refer to the others."""
    from sitemaps.regeneration import regenerate
    from sources.generators import get_generator

    from ..support import store_documents_in

    store_documents_in(settings, tmp_path / "documents")
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 6)
    first = dict(elasticsearch_generator)
    other = {**first, "INDEX_PREFIX": f"{first['INDEX_PREFIX']}-b"}
    settings.RESOURCESYNC_GENERATORS = {"default": other}
    moved = get_generator()
    moved.mirror.delete_indices()
    try:
        created(resource_set, 6, start=6)
        ingest(resource_set, [event("deleted", "r/0000001"), event("deleted", "r/0000002")])
        regenerate(resource_set)
        every = served_locs(client)
        assert len(every) == 10
        settings.RESOURCESYNC_GENERATORS = {"default": first}  # back to the first prefix
        back = get_generator()
        assert not back.mirror.is_recorded_copy()
        regenerate(resource_set, full=True)
        assert served_locs(client) == every
        created(resource_set, 1, start=20)
        regenerate(resource_set, full=True)
        assert served_locs(client) == every | {"http://data.example.org/r/0000020"}
        assert es_count(back.mirror, back.mirror.resources_index) == 11
    finally:
        moved.mirror.delete_indices()


def test_a_lastmod_date_nanos_cannot_hold_is_mirrored_and_published(use_elasticsearch, client):
    """The API takes a `lastmod` from year 1 to 9999; `date_nanos` holds 1970 to 2262 only.
    Elasticsearch refused such a document, so its change was never indexed and every page
    built from the copy waited for it: the set published nothing more (found by the input
    probe)."""
    from lxml import etree

    from sitemaps.regeneration import regenerate

    from ..support import NS

    resource_set = make_set()
    lastmods = {
        "old": "0001-01-01T00:00:00Z",
        "before-epoch": "1969-12-31T23:59:59.999999Z",
        "far": "9999-12-31T23:59:59.999999Z",
    }
    ingest(
        resource_set,
        [
            event("created", name, lastmod=datetime.fromisoformat(text))
            for name, text in lastmods.items()
        ],
    )

    assert not Change.objects.filter(indexed=False).exists()
    regenerate(resource_set)
    content = b"".join(client.get("/resourcesync/acme/articles/resourcelist.xml").streaming_content)
    listed = {
        entry.findtext("sm:loc", namespaces=NS): entry.findtext("sm:lastmod", namespaces=NS)
        for entry in etree.fromstring(content).iterfind("sm:url", NS)
    }
    assert listed == {f"http://data.example.org/{name}": text for name, text in lastmods.items()}


def test_indices_made_before_take_any_lastmod_once_a_process_starts(use_elasticsearch):
    """Indices a deployment made before `lastmod` took `ignore_malformed` still refused a
    year the copy cannot hold; a process's first look at them puts the field's mapping."""
    mirror = use_elasticsearch.mirror
    mirror.delete_indices()
    for name, template in mirror.templates().items():
        body = copy.deepcopy(template.to_dict())
        del body["mappings"]["properties"]["lastmod"]["ignore_malformed"]
        mirror.client.indices.create(index=name, **body)
    mirror._templates_put = None  # a process starting
    resource_set = make_set()

    ingest(
        resource_set, [event("created", "old", lastmod=datetime.fromisoformat("0001-01-01T00:00Z"))]
    )

    assert not Change.objects.filter(indexed=False).exists()


def test_the_earliest_datetime_the_api_takes_is_mirrored(use_elasticsearch):
    """A change's `datetime` orders and selects the Change Lists, so it cannot be kept
    unsearchable as `lastmod` is: the API takes none `date_nanos` cannot hold."""
    from sources.api.validation import EARLIEST_DATETIME

    ingest(make_set(), [event("created", "epoch", datetime=EARLIEST_DATETIME)])

    assert list(Change.objects.values_list("datetime", "indexed")) == [(EARLIEST_DATETIME, True)]
