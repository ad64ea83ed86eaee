"""Who hears about ingestion: the `events_ingested` signal and the narrowed model receivers."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models.signals import post_delete, post_save
from django.test import TestCase

from sitemaps.regeneration import pending_changes
from sources import services
from sources.models import CapabilitySettings, Change, DataProvider, Resource, ResourceSet
from sources.services import EventsRejected, ingest_events
from sources.signals import events_ingested, receivers_muted

from ..support import event, make_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def heard() -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def record(sender: object, **kwargs: Any) -> None:
        calls.append(kwargs)

    events_ingested.connect(record, dispatch_uid="test-record")
    yield calls
    events_ingested.disconnect(dispatch_uid="test-record")


def test_events_ingested_is_sent_after_the_commit_with_the_new_changes(heard):
    resource_set = make_set()
    ingest_events(resource_set=resource_set, events=[event("created", "before")])

    with TestCase.captureOnCommitCallbacks() as callbacks:
        ingest_events(
            resource_set=resource_set,
            events=[event("created", "a"), event("created", "b"), event("deleted", "a")],
        )
        assert heard == []  # not before the commit
    for callback in callbacks:
        callback()

    (call,) = heard
    new = list(
        Change.objects.filter(
            id__gt=call["after_change_id"], id__lte=call["last_change_id"]
        ).values_list("uri", flat=True)
    )
    assert call["resource_set_id"] == resource_set.pk
    assert new == [f"http://data.example.org/{name}" for name in ("a", "b", "a")]


def test_nothing_is_sent_when_nothing_was_accepted(heard):
    resource_set = make_set()
    with TestCase.captureOnCommitCallbacks(execute=True):
        ingest_events(resource_set=resource_set, events=[event("created", "a", id="e1")])
    heard.clear()

    with TestCase.captureOnCommitCallbacks(execute=True):
        ingest_events(resource_set=resource_set, events=[event("created", "a", id="e1")])
        with pytest.raises(EventsRejected):
            ingest_events(
                resource_set=resource_set,
                events=[services.EventError(0, "md5", "must be 32 hexadecimal digits.")],
            )

    assert heard == []


def test_regeneration_follows_through_its_receiver_and_can_be_muted():
    resource_set = make_set()

    with receivers_muted(events_ingested), TestCase.captureOnCommitCallbacks(execute=True):
        ingest_events(resource_set=resource_set, events=[event("created", "a")])
    assert pending_changes(resource_set) == 1
    with TestCase.captureOnCommitCallbacks(execute=True):
        ingest_events(resource_set=resource_set, events=[event("created", "b")])
    assert pending_changes(resource_set) == 0  # eager Celery regenerated


def test_no_module_level_hook_list_is_left():
    assert not hasattr(services, "after_ingest_hooks")


@pytest.mark.parametrize("signal", [post_save, post_delete])
def test_the_published_tree_listens_to_the_models_that_decide_access_only(signal):
    """Ingestion saves no model instance through the ORM, but admin edits of
    resources or changes must not reach the tree's receiver either."""
    assert all(signal.has_listeners(model) for model in (DataProvider, ResourceSet))
    assert signal.has_listeners(CapabilitySettings)
    assert not signal.has_listeners(Resource)
    assert not signal.has_listeners(Change)
