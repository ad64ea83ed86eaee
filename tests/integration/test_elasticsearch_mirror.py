"""The mirror: indexed after commit, and nothing lost when Elasticsearch is down."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command

from sources.documents import ChangeDocument, ResourceDocument
from sources.generators import get_generator
from sources.indexing import CHANGE_FIELDS, RESOURCE_FIELDS, change_source, resource_source
from sources.models import Change, Resource

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
    for resource in Resource.objects.all():
        row = Resource.objects.filter(pk=resource.pk).values(*RESOURCE_FIELDS).get()
        assert resource_source(row, resource_set.path) == ResourceDocument().prepare(resource)
    changes = list(Change.objects.all())
    assert {change.change for change in changes} == {"created", "updated", "deleted"}
    for change in changes:
        row = Change.objects.filter(pk=change.pk).values(*CHANGE_FIELDS).get()
        assert change_source(row, resource_set.path) == ChangeDocument().prepare(change)


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
    mirror.send([(absent, None)])
    refused = {"index": {"_index": mirror.resources_index, "_id": "1"}}
    with pytest.raises(RuntimeError, match="Elasticsearch refused a index"):
        mirror.send([(refused, {"key": "not a number"})])
