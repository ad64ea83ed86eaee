"""The served document's lookup gives what the ORM's select_related gives, in one query."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection

from sitemaps.document_lookup import find_document
from sitemaps.models import ChangeListPage, IndexDocument, ResourceListPage
from sources.models import CapabilitySettings, DataProvider

from ..support import created, make_set, store_documents_in

pytestmark = pytest.mark.django_db
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def fields(instance) -> dict:
    return {k: v for k, v in vars(instance).items() if not k.startswith("_")}


def test_the_same_instances_as_select_related(django_assert_num_queries):
    resource_set = make_set(entries_per_document=2)
    created(resource_set, 5)
    expected = ResourceListPage.objects.select_related(
        "resource_set__provider", "resource_set__capability_settings"
    ).get(number=2)
    with django_assert_num_queries(1):
        found = find_document(
            ResourceListPage, provider="acme", set_slug="articles", where={"number": 2}
        )
        assert found is not None
        assert fields(found) == fields(expected)
        assert fields(found.resource_set) == fields(expected.resource_set)
        assert fields(found.resource_set.provider) == fields(expected.resource_set.provider)
        assert fields(found.resource_set.capabilities) == fields(expected.resource_set.capabilities)
    assert found.generated_at is not None and found.generated_at.tzinfo is not None


def test_the_open_change_list_an_index_and_what_is_not_there():
    resource_set = make_set(changelist_rotation=timedelta(seconds=0))
    created(resource_set, 2)
    created(resource_set, 2, start=10)
    open_list = ChangeListPage.objects.get(until__isnull=True)
    latest = find_document(
        ChangeListPage, provider="acme", set_slug="articles", where={"until": None}, latest=True
    )
    assert latest is not None and latest.pk == open_list.pk
    index = find_document(
        IndexDocument, provider="acme", set_slug="articles", where={"kind": "resourcelist"}
    )
    assert index is not None and index.public_name == "resourcelist.xml"
    assert (
        find_document(IndexDocument, provider="acme", set_slug="nope", where={"kind": "x"}) is None
    )
    DataProvider.objects.update(active=False)
    assert (
        find_document(ResourceListPage, provider="acme", set_slug="articles", where={"number": 1})
        is None
    )


def test_a_set_without_saved_settings_gets_the_defaults(django_assert_num_queries):
    resource_set = make_set()
    created(resource_set, 1)
    CapabilitySettings.objects.all().delete()
    with django_assert_num_queries(1):
        found = find_document(
            ResourceListPage, provider="acme", set_slug="articles", where={"number": 1}
        )
        assert found is not None
        assert found.resource_set.capabilities.publish_resource_list


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's prepared statements")
def test_a_kept_connection_plans_the_lookup_once(settings):
    """PostgreSQL planned the four-table join on every request, five times as long as running
    it; on a kept connection psycopg prepares it after `prepare_threshold` uses."""
    created(make_set(), 1)
    threshold = settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"]
    for _ in range(threshold + 1):
        found = find_document(
            ResourceListPage, provider="acme", set_slug="articles", where={"number": 1}
        )
        assert found is not None and found.number == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [statement for (statement,) in cursor.fetchall()]
    table = ResourceListPage._meta.db_table
    assert [statement for statement in prepared if table in statement]


def settings_in_subprocess(**environ: str) -> subprocess.CompletedProcess[str]:
    code = (
        "from resourcesync_portal import settings; "
        "print(settings.DATABASES['default']['OPTIONS'].get('prepare_threshold'))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={
            **os.environ,
            "DEBUG": "1",
            "DATABASE_URL": "postgres://portal@127.0.0.1:1/portal",
            **environ,
        },
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(("value", "threshold"), [(None, "5"), ("2", "2"), ("off", "None")])
def test_prepared_statements_can_be_turned_off_for_a_pooler(value, threshold):
    environ = {} if value is None else {"DATABASE_PREPARE_THRESHOLD": value}
    done = settings_in_subprocess(**environ)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == threshold


def test_a_bad_prepare_threshold_is_a_configuration_error():
    done = settings_in_subprocess(DATABASE_PREPARE_THRESHOLD="often")
    assert done.returncode != 0
    assert "DATABASE_PREPARE_THRESHOLD must be a number of uses or 'off'" in done.stderr
