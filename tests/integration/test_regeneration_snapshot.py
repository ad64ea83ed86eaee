"""The snapshot time (`at`) of a regeneration, and what it costs to find."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sitemaps import regeneration
from sitemaps.models import ResourceListPage
from sitemaps.regeneration import regenerate
from sources.models import Change
from sources.services import ingest_events

from ..support import created, event, make_set, store_documents_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def test_an_update_seen_by_the_generator_asks_the_change_log_for_no_earliest_time():
    """SQLite answers that MIN by walking the change log's whole index (0.3 s at 1,000,000)."""
    resource_set = make_set()
    created(resource_set, 3)
    ingest_events(resource_set=resource_set, events=[event("updated", "r/0000001", version=2)])
    with CaptureQueriesContext(connection) as queries:
        report = regenerate(resource_set)
    assert report.resource_pages_written == [1]
    earliest = [q["sql"] for q in queries if 'MIN("sources_change"."datetime")' in q["sql"]]
    assert earliest == []


def test_changes_the_generator_cannot_show_yet_pull_the_snapshot_time_back(monkeypatch):
    resource_set = make_set()
    created(resource_set, 3)
    seen = Change.objects.filter(resource_set=resource_set).latest("id").pk
    ingest_events(resource_set=resource_set, events=[event("updated", "r/0000001", version=2)])
    unseen = Change.objects.filter(resource_set=resource_set).latest("id")
    monkeypatch.setattr(regeneration, "change_watermark", lambda *args: seen)

    regenerate(resource_set, full=True)

    page = ResourceListPage.objects.get(resource_set=resource_set)
    assert page.at == unseen.datetime - timedelta(microseconds=1)
