"""A run whose process is gone is not shown as running forever.

A process killed with SIGKILL (or by the OOM killer, a lost worker, a reboot)
cannot record its end; the journal notices it is gone and says so.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from journal import liveness
from journal.models import Outcome, Run, RunKind
from journal.recording import record_run
from journal.tasks import prune_journal

from ..support import in_another_container

REPO = Path(__file__).resolve().parents[2]
GONE = "process ended without recording an outcome"


def runs_listed() -> str:
    out = io.StringIO()
    call_command("runs", stdout=out)
    return out.getvalue()


def test_a_killed_run_is_shown_failed_not_running(database_url, tmp_path):
    env = {**os.environ, "DATABASE_URL": database_url, "DATA_DIR": str(tmp_path)}
    script = REPO / "tests" / "integration" / "open_a_run.py"
    process = subprocess.Popen(
        [sys.executable, str(script), "killed-run"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout.readline().strip() == "open", process.communicate()[0]
        assert Run.objects.get().outcome == Outcome.RUNNING
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    listed = runs_listed()
    assert "killed-run  failed" in listed and GONE in listed
    run = Run.objects.get()
    assert run.outcome == Outcome.FAILED and GONE in run.error
    assert run.finished_at is None  # when it died is not known


def a_running_run(*, minutes_silent: float = 0, **process) -> Run:
    """A run still marked running, last seen `minutes_silent` ago."""
    seen = timezone.now() - timedelta(minutes=minutes_silent)
    return Run.objects.create(
        kind=RunKind.REGENERATION,
        target="acme/articles",
        started_at=seen - timedelta(minutes=1),
        heartbeat_at=seen,
        **process,
    )


def this_process(**changed) -> dict:
    pid = os.getpid()
    found = {"host": liveness.host_name(), "pid": pid, "process_start": liveness.process_start(pid)}
    return {**found, **changed}


@pytest.mark.django_db
def test_a_live_run_of_this_process_stays_running():
    with record_run(kind=RunKind.EXPORT, target="live") as run:
        assert (run.host, run.pid) == (liveness.host_name(), os.getpid())
        assert "live  running" in runs_listed()
    assert Run.objects.get().outcome == Outcome.SUCCEEDED


@pytest.mark.django_db
def test_a_reused_pid_does_not_keep_a_dead_run_running():
    """Same host, a pid that now belongs to another process (here: this one)."""
    reused = a_running_run(**this_process(process_start="another-boot/12345"))
    alive = a_running_run(**this_process())
    assert liveness.close_abandoned_runs() == 1
    reused.refresh_from_db(), alive.refresh_from_db()
    assert reused.outcome == Outcome.FAILED and alive.outcome == Outcome.RUNNING
    assert reused.error == f"{GONE} (pid {os.getpid()} on {liveness.host_name()} is gone)"


@pytest.mark.django_db
def test_a_run_in_another_container_with_this_host_name_stays_running():
    """Its pid means another process there (`--net=host` shares the name, not the pids)."""
    gone_here = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_here.wait()
    host = in_another_container("from journal.liveness import host_name; print(host_name())")
    running = a_running_run(host=host, pid=gone_here.pid, process_start="")
    assert liveness.close_abandoned_runs() == 0
    running.refresh_from_db()
    assert running.outcome == Outcome.RUNNING


@pytest.mark.django_db
def test_a_run_on_another_host_fails_once_silent_longer_than_the_limit(settings):
    settings.RESOURCESYNC_JOURNAL_SILENCE_SECONDS = 600
    elsewhere = {"host": "worker-7.invalid", "pid": 1, "process_start": "x/1"}
    silent = a_running_run(minutes_silent=11, **elsewhere)
    beating = a_running_run(minutes_silent=9, **elsewhere)
    before_the_upgrade = a_running_run(minutes_silent=11)  # no host, no pid
    assert liveness.close_abandoned_runs() == 2
    outcomes = dict(Run.objects.values_list("pk", "outcome"))
    assert outcomes == {
        silent.pk: Outcome.FAILED,
        beating.pk: Outcome.RUNNING,
        before_the_upgrade.pk: Outcome.FAILED,
    }
    silent.refresh_from_db()
    assert silent.error.startswith(f"{GONE} (no sign of life since ")


@pytest.mark.django_db
def test_a_run_that_ends_after_being_marked_keeps_its_real_outcome(settings):
    settings.RESOURCESYNC_JOURNAL_SILENCE_SECONDS = 600
    with record_run(kind=RunKind.SCAN, target="slow") as run:
        Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
        Run.objects.filter(pk=run.pk).update(started_at=timezone.now() - timedelta(hours=1))
        assert liveness.close_abandoned_runs() == 1  # its beats could not be written
        run.count(events=3)
    run.refresh_from_db()
    assert (run.outcome, run.error, run.events) == (Outcome.SUCCEEDED, "", 3)


@pytest.mark.django_db
def test_the_periodic_task_and_the_admin_mark_dead_runs(admin_client):
    gone = {"host": liveness.host_name(), "pid": os.getpid(), "process_start": "gone/1"}
    first, second = a_running_run(**gone), a_running_run(**gone)
    prune_journal()
    first.refresh_from_db()
    assert first.outcome == Outcome.FAILED
    Run.objects.filter(pk=second.pk).update(outcome=Outcome.RUNNING, error="")
    listing = admin_client.get(reverse("admin:journal_run_changelist")).content.decode()
    assert "run-running" not in listing and listing.count('class="run-failed"') == 2
    detail = admin_client.get(reverse("admin:journal_run_change", args=[second.pk]))
    assert GONE in detail.content.decode()


def test_a_long_run_beats_while_it_runs(file_database, settings):
    settings.RESOURCESYNC_JOURNAL_SILENCE_SECONDS = 1  # a beat every 0.1 s
    with record_run(kind=RunKind.HARVEST, target="long") as run:
        deadline = time.monotonic() + 30
        while Run.objects.get(pk=run.pk).heartbeat_at is None:
            assert time.monotonic() < deadline, "no heartbeat was written"
            time.sleep(0.05)
    run.refresh_from_db()
    assert run.outcome == Outcome.SUCCEEDED and run.heartbeat_at <= run.finished_at
