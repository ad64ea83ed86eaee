"""The mirror: indexed after commit, and nothing lost when Elasticsearch is down."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from sources.documents import changes_index, resources_index
from sources.indexing import client, reconcile
from sources.models import Change, Resource

from ..elasticsearch import use_elasticsearch  # noqa: F401
from ..support import created, event, ingest, make_set

pytestmark = pytest.mark.django_db
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "elasticsearch.sh"


def es_count(index) -> int:
    client().indices.refresh(index=index._name)
    return client().count(index=index._name)["count"]


def test_changes_are_mirrored_after_commit(use_elasticsearch):
    resource_set = make_set()
    created(resource_set, 5)
    ingest(resource_set, [event("deleted", "r/0000001"), event("updated", "r/0000002", version=2)])
    assert es_count(resources_index) == 4
    assert es_count(changes_index) == 7
    assert not Change.objects.filter(indexed=False).exists()
    source = client().get(
        index=resources_index._name, id=Resource.objects.get(uri__endswith="r/0000002").pk
    )
    assert source["_source"]["md5"] == event("updated", "r/0000002", version=2).md5
    assert source["_source"]["location"] == {
        "type": "url",
        "value": "http://data.example.org/r/0000002",
    }


def test_reconcile_repairs_missing_and_stale_documents(use_elasticsearch):
    resource_set = make_set()
    created(resource_set, 6)
    keys = list(Resource.objects.values_list("pk", flat=True))
    client().delete(index=resources_index._name, id=keys[0], refresh=True)
    client().index(
        index=resources_index._name,
        id=999_999,
        document={"resource_set_id": resource_set.pk, "key": 999_999},
        refresh=True,
    )
    report = reconcile()
    assert report.resources_indexed == 1 and report.resources_removed == 1
    assert es_count(resources_index) == 6


def test_elasticsearch_outage_loses_nothing(use_elasticsearch, capsys):
    """Stop the real node mid-ingest, keep ingesting, restart, reconcile."""
    resource_set = make_set()
    created(resource_set, 50)
    subprocess.run([SCRIPT, "stop"], check=True)
    try:
        created(resource_set, 50, start=50)
        ingest(resource_set, [event("deleted", f"r/{n:07d}") for n in range(10)])
        ingest(resource_set, [event("updated", f"r/{n:07d}", version=2) for n in range(60, 70)])
        assert Resource.objects.count() == 90
        assert Change.objects.count() == 120
        assert Change.objects.filter(indexed=False).count() == 70
    finally:
        subprocess.run([SCRIPT, "start"], check=True)
    call_command("reconcile")
    assert "indexed 70 pending change(s)" in capsys.readouterr().out
    assert es_count(resources_index) == Resource.objects.count() == 90
    assert es_count(changes_index) == Change.objects.count() == 120
    assert not Change.objects.filter(indexed=False).exists()
    updated = client().get(
        index=resources_index._name, id=Resource.objects.get(uri__endswith="r/0000065").pk
    )
    assert updated["_source"]["md5"] == event("updated", "r/0000065", version=2).md5
