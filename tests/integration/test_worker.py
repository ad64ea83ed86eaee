"""A real Celery worker, through Redis, regenerates when the admin asks."""

from __future__ import annotations

import time

import pytest
from django.urls import reverse

from sitemaps.models import IndexDocument
from sources.models import ResourceSet
from sources.services import ingest_events

from ..support import event, make_set, store_documents_in


@pytest.fixture
def celery_worker_env(tmp_path) -> dict[str, str]:
    return {"DATA_DIR": str(tmp_path / "worker")}


@pytest.fixture
def shared_storage(settings, tmp_path):
    """The worker writes documents where this process serves them from."""
    store_documents_in(settings, tmp_path / "worker" / "test-documents")


def test_admin_regenerate_now_runs_on_the_worker(celery_worker, shared_storage, admin_client):
    # A long threshold: only the admin action can make the documents now.
    resource_set = make_set(regenerate_after_seconds=3600, regenerate_after_changes=10**6)
    ingest_events(resource_set=resource_set, events=[event("created", f"w/{n}") for n in range(7)])
    # A new set's documents exist from its creation, empty until a regeneration.
    resource_list = IndexDocument.objects.filter(resource_set=resource_set, kind="resourcelist")
    assert resource_list.get().entries == 0

    response = admin_client.post(
        reverse("admin:sources_resourceset_changelist"),
        {"action": "regenerate_now", "_selected_action": [resource_set.pk]},
        follow=True,
    )
    assert "Regeneration of acme/articles queued" in response.content.decode()

    deadline = time.monotonic() + 30
    while resource_list.get().entries == 0:
        assert time.monotonic() < deadline, celery_worker.log()[-3000:]
        time.sleep(0.2)
    celery_worker.wait_for_log("succeeded")
    assert "regenerate_resource_set" in celery_worker.log()
    body = b"".join(
        admin_client.get("/resourcesync/acme/articles/resourcelist.xml").streaming_content
    )
    assert body.count(b"<url>") == 7
    newest = resource_set.changes.order_by("-id").first()
    assert ResourceSet.objects.get(pk=resource_set.pk).regeneration_state.through_change_id == (
        newest.pk
    )
