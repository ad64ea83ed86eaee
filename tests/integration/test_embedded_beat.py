"""With no broker (the embedded default), `runserver` runs the beat schedule itself."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import get_commands

from resourcesync_portal.embedded_beat import EmbeddedBeat
from sitemaps.models import ChangeListPage
from sitemaps.regeneration import pending_changes
from sources.signals import events_ingested, receivers_muted

from ..support import created, make_set, store_documents_in

pytestmark = pytest.mark.django_db

SCHEDULE = {
    "regenerate-due-sets": {
        "task": "sitemaps.tasks.regenerate_due_sets",
        "schedule": timedelta(seconds=30),
    },
}


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def test_changes_whose_run_failed_are_published_without_another_event():
    """Eager tasks and no beat: a run that failed (SQLite busy under a large request) was
    tried again only when the next event came, so the last changes stayed unpublished."""
    resource_set = make_set()
    with receivers_muted(events_ingested):  # as if the run after the commit had failed
        created(resource_set, 3)
    beat = EmbeddedBeat(SCHEDULE, now=0.0)

    assert beat.tick(now=29.0) == []
    assert pending_changes(resource_set) == 3
    assert beat.tick(now=30.0) == ["sitemaps.tasks.regenerate_due_sets"]

    assert pending_changes(resource_set) == 0
    assert beat.tick(now=59.0) == []


def test_a_change_list_rotates_on_time_without_another_event():
    resource_set = make_set()
    created(resource_set, 2)
    settings_row = resource_set.capability_settings
    settings_row.changelist_rotation = timedelta(seconds=0)
    settings_row.save()

    EmbeddedBeat(SCHEDULE, now=0.0).tick(now=30.0)

    assert ChangeListPage.objects.filter(until__isnull=False).exists()


def test_runserver_is_the_portals_own():
    assert get_commands()["runserver"] == "resourcesync_portal"
