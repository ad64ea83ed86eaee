"""What the regeneration task does when another run holds the set."""

from __future__ import annotations

from unittest import mock

import pytest
from django.utils import timezone

from sitemaps import tasks
from sitemaps.models import RegenerationState
from sitemaps.regeneration import RegenerationReport

from ..factories import ChangeFactory
from ..support import ELASTICSEARCH_GENERATOR as GENERATOR
from ..support import make_set

pytestmark = pytest.mark.django_db


@pytest.fixture
def held():
    """A set whose lease another run holds."""
    resource_set = make_set()
    RegenerationState.objects.create(resource_set=resource_set, running_since=timezone.now())
    return resource_set


def test_a_busy_set_leaves_new_changes_to_the_running_run(held):
    """The running run looks for newer changes when it ends; a timer here would only
    hold the slot and delay them (it made a change wait 5 s more)."""
    with mock.patch.object(tasks.regenerate_resource_set, "apply_async") as queued:
        assert tasks.regenerate_resource_set.apply(args=(held.pk,)).get() == "busy"
    queued.assert_not_called()
    assert RegenerationState.objects.get(resource_set=held).scheduled_at is None


def test_a_busy_set_still_gets_its_full_regeneration(held):
    """A full run asked for from the admin is not lost because a run was going on."""
    with mock.patch.object(tasks.regenerate_resource_set, "apply_async") as queued:
        result = tasks.regenerate_resource_set.apply(args=(held.pk,), kwargs={"full": True})
        assert result.get() == "busy"
    queued.assert_called_once_with(args=(held.pk,), kwargs={"full": True}, countdown=5)


@pytest.mark.parametrize(("indexed", "delay"), [(True, 0), (False, 1)])
def test_changes_that_arrived_during_a_run_go_next(settings, indexed, delay):
    """A change whose timer found the set busy is picked up as soon as the run ends,
    at once when the generator can show it, else after a second (indexing)."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.RESOURCESYNC_GENERATORS = {"default": {"BACKEND": GENERATOR}}
    resource_set = make_set()
    first = ChangeFactory(resource_set=resource_set, indexed=True)
    ChangeFactory(resource_set=resource_set, indexed=indexed)  # arrived during the run
    report = RegenerationReport(through_change_id=first.pk)
    with (
        mock.patch.object(tasks, "regenerate", return_value=report),
        mock.patch.object(tasks.regenerate_resource_set, "apply_async") as queued,
    ):
        tasks.regenerate_resource_set.apply(args=(resource_set.pk,)).get()
    queued.assert_called_once_with(args=(resource_set.pk,), countdown=delay)


class RanAgain(BaseException):
    """Not an Exception: Celery's autoretry lets it through."""


def test_eager_regeneration_does_not_chase_changes_the_generator_cannot_show(settings):
    """Without a broker (tasks run eagerly) a change not yet indexed cannot become
    visible during the run: going again at once would only recurse, forever while
    Elasticsearch is down. The periodic task and the indexing task pick it up."""
    settings.CELERY_TASK_ALWAYS_EAGER = True
    settings.RESOURCESYNC_GENERATORS = {"default": {"BACKEND": GENERATOR}}
    resource_set = make_set()
    first = ChangeFactory(resource_set=resource_set, indexed=True)
    ChangeFactory(resource_set=resource_set, indexed=False)  # Elasticsearch is down
    report = RegenerationReport(through_change_id=first.pk)
    with mock.patch.object(tasks, "regenerate", side_effect=[report, RanAgain()]) as runs:
        tasks.regenerate_resource_set.apply(args=(resource_set.pk,)).get()
    assert runs.call_count == 1
