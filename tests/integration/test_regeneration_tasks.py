"""What the regeneration task does when another run holds the set."""

from __future__ import annotations

from datetime import timedelta
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


@pytest.mark.parametrize(("indexed", "queued_again"), [(True, True), (False, False)])
def test_changes_that_arrived_during_a_run_go_next(settings, indexed, queued_again):
    """A change whose timer found the set busy is picked up as soon as the run ends
    when the generator can show it; one still being indexed comes back with its
    `changes_indexed` (a timer here would hold the slot that signal needs)."""
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
    if queued_again:
        queued.assert_called_once_with(args=(resource_set.pk,), countdown=0)
    else:
        queued.assert_not_called()


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


# After ingest: when the next run starts.


@pytest.fixture
def broker(settings):
    """Tasks queued, not run: what `apply_async` is asked for is what a worker would do."""
    settings.CELERY_TASK_ALWAYS_EAGER = False
    with mock.patch.object(tasks.regenerate_resource_set, "apply_async") as queued:
        yield queued


def last_run_started(resource_set, seconds_ago: float) -> None:
    RegenerationState.objects.update_or_create(
        resource_set=resource_set,
        defaults={"regenerated_at": timezone.now() - timedelta(seconds=seconds_ago)},
    )


def test_a_change_after_a_quiet_spell_is_regenerated_at_once(broker):
    """The T-second timer made every lone change wait T seconds (freshness median 3 s)."""
    resource_set = make_set(regenerate_after_seconds=5)
    last_run_started(resource_set, 60)
    ChangeFactory(resource_set=resource_set)
    tasks.after_ingest(resource_set.pk)
    assert broker.call_args.kwargs["countdown"] == 0


def test_changes_soon_after_a_run_wait_for_the_rest_of_its_period(broker):
    """At most one run per T seconds: a stream of events is not one run per event."""
    resource_set = make_set(regenerate_after_seconds=5)
    last_run_started(resource_set, 2)
    ChangeFactory(resource_set=resource_set)
    tasks.after_ingest(resource_set.pk)
    assert 2.5 < broker.call_args.kwargs["countdown"] <= 3


def test_changes_waiting_for_the_mirror_are_regenerated_once_indexed(broker, settings):
    """Regenerating before indexing shows nothing new; the indexing run asks instead."""
    from sources.signals import changes_indexed

    settings.RESOURCESYNC_GENERATORS = {"default": {"BACKEND": GENERATOR}}
    resource_set = make_set()
    change = ChangeFactory(resource_set=resource_set, indexed=False)
    tasks.after_ingest(resource_set.pk)
    broker.assert_not_called()
    change.indexed = True
    change.save()
    changes_indexed.send(sender=None, resource_set_id=resource_set.pk)
    broker.assert_called_once_with(args=(resource_set.pk,), countdown=0)
