"""The journal records every run, also one that raises, in one insert and one update."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from harvester.config import config_from_mapping
from harvester.report import SyncReport
from harvester.sync import Mode, run_harvest
from harvester.walk import HarvestError
from journal.models import Outcome, Run, RunKind
from journal.recording import record_run
from journal.tasks import prune_journal
from sitemaps import regeneration
from sitemaps.regeneration import regenerate

from ..support import created, make_set, store_documents_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def test_a_regeneration_is_recorded_with_what_it_wrote():
    resource_set = make_set(entries_per_document=10)
    created(resource_set, 25)  # eager Celery: regenerated after ingest
    Run.objects.all().delete()
    created(resource_set, 1, start=100)
    regenerate(resource_set)

    newest, first = Run.objects.all()[:2]
    assert first.kind == RunKind.REGENERATION and first.resource_set == resource_set
    assert first.target == "acme/articles" and first.outcome == Outcome.SUCCEEDED
    assert first.pages >= 3 and first.bytes > 0 and first.finished_at >= first.started_at
    assert first.detail["resource_list_pages"] == [3]
    # The second run had nothing to do: recorded all the same, with nothing written.
    assert newest.outcome == Outcome.SUCCEEDED and newest.pages == 0 and newest.bytes == 0


def test_a_regeneration_that_raises_is_recorded_as_failed(monkeypatch):
    resource_set = make_set()

    def broken(self):
        raise OSError("disk full")

    monkeypatch.setattr(regeneration.RegenerationRun, "run", broken)
    with pytest.raises(OSError):
        regenerate(resource_set)
    run = Run.objects.get()
    assert run.outcome == Outcome.FAILED and run.error == "OSError: disk full"
    assert run.finished_at is not None


def test_recording_costs_one_insert_and_one_update():
    resource_set = make_set()
    with (
        CaptureQueriesContext(connection) as queries,
        record_run(kind=RunKind.EXPORT, resource_set=resource_set) as run,
    ):
        run.count(pages=3, bytes=1000)
    writes = [
        q["sql"].split()[0].upper()
        for q in queries.captured_queries
        if "journal_run" in q["sql"] and not q["sql"].startswith(("SAVEPOINT", "RELEASE"))
    ]
    assert writes == ["INSERT", "UPDATE"]
    run = Run.objects.get()
    assert (run.kind, run.pages, run.bytes, run.outcome) == ("export", 3, 1000, "succeeded")


def test_a_run_goes_on_when_the_journal_cannot_record_it(monkeypatch, caplog):
    def no_table(*args, **kwargs):
        raise DatabaseError("no such table: journal_run")

    monkeypatch.setattr(Run, "save", no_table)
    with record_run(kind=RunKind.SCAN, target="x") as run:
        run.count(events=2)
    assert "could not record a scan run" in caplog.text
    assert not Run.objects.exists()


def test_a_run_can_end_failed_without_raising():
    with record_run(kind=RunKind.DUMP, resource_set=make_set()) as run:
        run.fail("2 packages over the size limit")
    assert Run.objects.get().outcome == Outcome.FAILED


def test_counts_are_checked():
    with (
        pytest.raises(TypeError, match="not rows"),
        record_run(kind=RunKind.SCAN, target="x") as run,
    ):
        run.count(rows=1)


def harvest_config(tmp_path, url="http://127.0.0.1:9/capabilitylist.xml"):
    return config_from_mapping(
        {"capability_list_url": url, "destination": str(tmp_path / "mirror"), "retries": 0},
        base_dir=tmp_path,
    )


def test_a_harvest_that_cannot_reach_its_source_is_recorded_under_its_url(tmp_path):
    with pytest.raises(HarvestError):
        run_harvest(harvest_config(tmp_path), Mode.BASELINE)
    run = Run.objects.get()
    assert run.kind == RunKind.HARVEST and run.resource_set is None
    assert run.target == "http://127.0.0.1:9/capabilitylist.xml"
    assert run.outcome == Outcome.FAILED and "HarvestError" in run.error


def test_a_harvest_is_recorded_with_its_counts(tmp_path, monkeypatch):
    report = SyncReport(mode="baseline", downloaded=3, deleted=1, bytes=300)
    report.fail("http://127.0.0.1:9/a", "404")
    monkeypatch.setattr("harvester.sync._run_harvest", lambda *args, **kwargs: report)
    run_harvest(harvest_config(tmp_path))
    run = Run.objects.get()
    assert (run.events, run.resources, run.bytes) == (4, 3, 300)
    assert run.outcome == Outcome.FAILED and run.error.startswith(
        "1 failed, e.g. http://127.0.0.1:9/a"
    )
    assert run.detail["downloaded"] == 3


def a_run(kind=RunKind.REGENERATION, days_ago=0, **fields):
    started = timezone.now() - timedelta(days=days_ago)
    return Run.objects.create(
        kind=kind, started_at=started, finished_at=started + timedelta(seconds=2), **fields
    )


def test_runs_older_than_the_retention_are_pruned_by_the_periodic_task(settings):
    settings.RESOURCESYNC_JOURNAL_RETENTION_DAYS = 90
    old, recent = a_run(days_ago=91, target="old"), a_run(days_ago=89, target="recent")
    assert prune_journal() == 1
    assert list(Run.objects.values_list("target", flat=True)) == ["recent"]
    assert old.target == "old"
    settings.RESOURCESYNC_JOURNAL_RETENTION_DAYS = 0  # keep every run
    a_run(days_ago=1000)
    assert prune_journal() == 0 and Run.objects.count() == 2
    assert recent.pk


def test_the_journal_is_pruned_on_a_schedule(settings):
    assert settings.CELERY_BEAT_SCHEDULE["prune-journal"]["task"] == "journal.tasks.prune_journal"


def test_runs_command_prints_recent_runs_with_filters():
    articles, images = make_set(), make_set(slug="images")
    a_run(resource_set=articles, target="acme/articles", pages=4, days_ago=2)
    a_run(
        resource_set=images,
        target="acme/images",
        outcome=Outcome.FAILED,
        error="OSError: disk\nfull",
    )
    a_run(kind=RunKind.HARVEST, target="https://example.org/capabilitylist.xml", resources=7)

    out = io.StringIO()
    call_command("runs", stdout=out)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and "harvest" in lines[0] and "7 resources" in lines[0]
    assert "failed" in lines[1] and "error: OSError: disk full" in lines[1]

    out = io.StringIO()
    call_command("runs", "--set", "acme/articles", stdout=out)
    assert out.getvalue().count("\n") == 1 and "4 pages" in out.getvalue()
    out = io.StringIO()
    call_command("runs", "--kind", "harvest", "--limit", "5", stdout=out)
    assert out.getvalue().count("\n") == 1
    with pytest.raises(CommandError, match="--set: no resource set 'acme/nope'"):
        call_command("runs", "--set", "acme/nope")
    with pytest.raises(CommandError, match="--limit must be between 1 and 10000"):
        call_command("runs", "--limit", "99999999999999999999")  # an IntegrityError before


def test_admin_lists_runs_with_filters_and_shows_one(admin_client):
    articles = make_set()
    run = a_run(resource_set=articles, target="acme/articles", error="OSError: disk full",
                outcome=Outcome.FAILED, detail={"full": True})  # fmt: skip
    a_run(kind=RunKind.HARVEST, target="https://example.org/cl.xml")
    listing = admin_client.get(
        reverse("admin:journal_run_changelist"), {"resource_set__id__exact": articles.pk}
    ).content.decode()
    assert 'field-target">acme/articles' in listing and "example.org/cl.xml" not in listing
    by_kind = admin_client.get(reverse("admin:journal_run_changelist"), {"kind__exact": "harvest"})
    assert b'field-target">https://example.org/cl.xml' in by_kind.content
    assert b'field-target">acme/articles' not in by_kind.content
    detail = admin_client.get(reverse("admin:journal_run_change", args=[run.pk])).content.decode()
    assert "OSError: disk full" in detail and "&quot;full&quot;: true" in detail
    assert admin_client.get(reverse("admin:journal_run_add")).status_code == 403
