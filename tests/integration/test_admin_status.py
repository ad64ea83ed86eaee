"""The sets' list in the admin shows regeneration status by reading, never writing."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from sitemaps.models import RegenerationState
from sources.services import ingest_events

from ..support import created, event, make_set, store_documents_in

pytestmark = pytest.mark.django_db
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def a_set_with_pending_changes(slug: str):
    """4 pages of 10; one update on page 2 and one create on the tail are pending."""
    resource_set = make_set(slug=slug, entries_per_document=10)
    created(resource_set, 35)
    ingest_events(
        resource_set=resource_set,
        events=[event("updated", "r/0000012", version=2), event("created", f"{slug}/new")],
    )
    return resource_set


def list_page(admin_client) -> tuple[str, list[str]]:
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(reverse("admin:sources_resourceset_changelist"))
    assert response.status_code == 200
    return response.content.decode(), [query["sql"] for query in queries.captured_queries]


def test_the_list_page_writes_nothing_and_its_queries_do_not_grow_with_sets(admin_client):
    first = a_set_with_pending_changes("one")
    # A set whose state row is gone: the old column created it on every GET.
    RegenerationState.objects.filter(resource_set=first).delete()
    _, one_set = list_page(admin_client)

    for slug in ("two", "three", "four"):
        a_set_with_pending_changes(slug)
    html, four_sets = list_page(admin_client)

    assert [sql for sql in four_sets if sql.lstrip().upper().startswith(WRITES)] == []
    assert not RegenerationState.objects.filter(resource_set=first).exists()
    assert len(four_sets) == len(one_set)
    assert html.count("4 resource list, 4 change list") == 4
    # The set without a state row: every change is pending (37), pages 1-4 hold them.
    assert "4 (37 pending changes)" in html
    assert html.count("2 (2 pending changes)") == 3


def test_the_set_page_lists_its_dirty_pages_without_writing(admin_client):
    resource_set = a_set_with_pending_changes("one")
    RegenerationState.objects.filter(resource_set=resource_set).delete()
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(
            reverse("admin:sources_resourceset_change", args=[resource_set.pk])
        ).content.decode()
    assert "dirty resource list pages: 1, 2, 3, 4" in page
    assert [q["sql"] for q in queries.captured_queries if q["sql"].upper().startswith(WRITES)] == []


def test_a_run_that_stopped_beating_shows_as_stopped(admin_client, settings):
    settings.RESOURCESYNC_REGENERATION_LEASE_SECONDS = 60
    resource_set = make_set()
    seen = timezone.now() - timedelta(minutes=5)
    RegenerationState.objects.create(
        resource_set=resource_set, running_since=seen, heartbeat_at=seen, holder="web1 pid 42 #ab"
    )
    html, _ = list_page(admin_client)
    assert "stopped without finishing (web1 pid 42 #ab); the next run takes over" in html
