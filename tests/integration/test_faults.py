"""Regeneration under injected faults: a crash in a page split, kill -9 mid-run.

After each fault the set must publish correct documents again on its own:
within the lease window when a run was killed, at the next run after a crash.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone
from lxml import etree

from resourcesync_portal import processes
from sitemaps import lease
from sitemaps.models import RegenerationState, ResourceListPage
from sitemaps.regeneration import regenerate
from sources.models import Resource
from sources.services import ingest_events

from ..support import (
    NS,
    assert_valid,
    created,
    event,
    in_another_container,
    make_set,
    store_documents_in,
)

REPO = Path(__file__).resolve().parents[2]
BASE = "/resourcesync/acme/articles"


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "test-documents")


def served_entries(client: Client) -> list[str]:
    """Every entry of the served Resource List, page after page."""
    index = b"".join(client.get(f"{BASE}/resourcelist.xml").streaming_content)
    root = assert_valid(index)
    if root.tag.endswith("urlset"):
        return root.xpath("//sm:loc/text()", namespaces=NS)
    entries = []
    for loc in root.xpath("//sm:loc/text()", namespaces=NS):
        response = client.get(loc.removeprefix("http://127.0.0.1:8000"))
        assert response.status_code == 200, loc
        page = b"".join(response.streaming_content)
        entries += etree.fromstring(page).xpath("//sm:loc/text()", namespaces=NS)
    return entries


def names(*numbers: int) -> list[str]:
    return [f"http://data.example.org/r/{n:07d}" for n in numbers]


def ranges() -> list[tuple[int, int | None]]:
    """Page key ranges, keys counted from the set's first resource (1, 2, …), so the
    figures hold on PostgreSQL too, whose sequences no rollback resets."""
    offset = Resource.objects.order_by("pk").values_list("pk", flat=True).first() - 1
    return [
        (p.after_key and p.after_key - offset, p.through_key and p.through_key - offset)
        for p in ResourceListPage.objects.order_by("after_key")
    ]


# A crash inside a page split


class SimulatedCrash(Exception):
    """The process died here."""


@pytest.mark.django_db
def test_a_crash_inside_a_page_split_leaves_ranges_the_next_run_can_use(client, monkeypatch):
    """The split's two range writes are one transaction: a crash between them keeps neither."""
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 3)
    ingest_events(
        resource_set=resource_set, events=[event("created", f"r/{n:07d}") for n in (3, 4, 5)]
    )
    save = ResourceListPage.save

    def crash_on_a_new_range(page, *args, **kwargs):
        # The first save of a stored page with a closed range: the split's second step.
        if page.pk is not None and page.through_key is not None:
            monkeypatch.setattr(ResourceListPage, "save", save)
            raise SimulatedCrash
        return save(page, *args, **kwargs)

    monkeypatch.setattr(ResourceListPage, "save", crash_on_a_new_range)
    with pytest.raises(SimulatedCrash):
        regenerate(resource_set)
    assert ResourceListPage.objects.filter(through_key=None).count() == 1

    assert regenerate(resource_set) is not None
    assert ranges() == [(0, 4), (4, None)]
    assert served_entries(client) == names(0, 1, 2, 3, 4, 5)


@pytest.mark.django_db
def test_a_run_repairs_the_two_open_pages_an_older_crash_left(client):
    """The state today's database may hold: page 1 still open, page 2 committed unwritten."""
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 6)
    assert ranges() == [(0, 4), (4, None)]
    ResourceListPage.objects.filter(number=1).update(through_key=None)
    ResourceListPage.objects.filter(number=2).update(storage_name="", etag="")
    ingest_events(resource_set=resource_set, events=[event("updated", "r/0000001", version=2)])

    report = regenerate(resource_set)

    assert sorted(report.resource_pages_written) == [1, 2]
    assert ranges() == [(0, 4), (4, None)]
    assert served_entries(client) == names(0, 1, 2, 3, 4, 5)
    assert RegenerationState.objects.get(resource_set=resource_set).last_error == ""


# The lease: a run killed with kill -9


@pytest.mark.django_db
def test_a_lease_without_a_heartbeat_for_the_window_is_taken_over(settings):
    settings.RESOURCESYNC_REGENERATION_LEASE_SECONDS = 60
    resource_set = make_set()
    now = timezone.now()
    state = RegenerationState.objects.create(
        resource_set=resource_set, running_since=now - timedelta(hours=1), holder="dead"
    )
    RegenerationState.objects.filter(pk=state.pk).update(heartbeat_at=now - timedelta(seconds=30))
    assert lease.acquire(resource_set, now) is None  # beat 30 s ago: alive
    RegenerationState.objects.filter(pk=state.pk).update(heartbeat_at=now - timedelta(seconds=61))
    taken = lease.acquire(resource_set, now)
    assert taken is not None
    # The dead run, were it to wake up, finds it lost the set and stops.
    with pytest.raises(lease.LeaseLost):
        lease.Lease(state_pk=state.pk, holder="dead").beat()
    assert not lease.Lease(state_pk=state.pk, holder="dead").release(last_error="x")
    taken.beat(progress_done=1)


@pytest.mark.django_db
def test_a_lease_whose_process_on_this_host_is_gone_is_taken_over_at_once(settings):
    """A run killed mid-query (SIGTERM to a worker's process group) could not let go:
    the set's next runs answered busy for the whole lease window, its changes unpublished
    meanwhile. A holder on another host, or alive here, still keeps the set."""
    import subprocess
    import sys

    settings.RESOURCESYNC_REGENERATION_LEASE_SECONDS = 60
    resource_set = make_set()
    now = timezone.now()
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()
    state = RegenerationState.objects.create(
        resource_set=resource_set, running_since=now, heartbeat_at=now
    )
    here = processes.this_host()
    for alive in (f"otherhost pid {killed.pid} #0badc0de", f"{here} pid 1 #1"):
        RegenerationState.objects.filter(pk=state.pk).update(holder=alive)
        assert lease.acquire(resource_set, now) is None, alive
    gone = f"{here} pid {killed.pid} #0badc0de"
    RegenerationState.objects.filter(pk=state.pk).update(holder=gone)
    taken = lease.acquire(resource_set, now)
    assert taken is not None
    with pytest.raises(lease.LeaseLost):
        lease.Lease(state_pk=state.pk, holder=gone).beat()


@pytest.mark.django_db
def test_a_holder_in_another_container_with_this_host_name_is_never_taken_for_gone(settings):
    """Containers run with the host's network (`docker run --net=host`) share its host
    name but not its processes: a pid not running here may be running there. Taking its
    lease or indexing claim over would run the set twice at once."""
    from sources.indexing import holder_is_gone

    settings.RESOURCESYNC_REGENERATION_LEASE_SECONDS = 60
    resource_set = make_set()
    now = timezone.now()
    gone_here = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_here.wait()
    host_there = in_another_container(
        "from resourcesync_portal import processes; print(processes.this_host())"
    )
    RegenerationState.objects.create(
        resource_set=resource_set,
        running_since=now,
        heartbeat_at=now,
        holder=f"{host_there} pid {gone_here.pid} #0badc0de",
    )
    assert lease.acquire(resource_set, now) is None
    assert not holder_is_gone(f"{host_there} {gone_here.pid}")


@pytest.mark.django_db
@pytest.mark.parametrize("document", ["resource list page", "change list page"])
def test_a_run_that_lost_its_lease_publishes_nothing_more(monkeypatch, tmp_path, document):
    """A run stalled past its lease (a paused VM, a swap storm) and taken over wrote the
    page it was building over the newer run's when it woke: stale entries stayed served
    until that page changed again."""
    from sitemaps import regeneration
    from sitemaps.models import ChangeListPage

    resource_set = make_set(entries_per_document=2)
    created(resource_set, 5)
    regenerate(resource_set)
    before = {
        "resource list page": lambda: list(ResourceListPage.objects.values_list("storage_name")),
        "change list page": lambda: list(ChangeListPage.objects.values_list("storage_name")),
    }[document]
    published = before()
    owner, name = {
        "resource list page": (regeneration.RegenerationRun, "store_page"),
        "change list page": (regeneration.RegenerationRun, "store_change_page"),
    }[document]
    storing = getattr(owner, name)

    def taken_over_while_storing(*args, **kwargs):
        """Another run takes the set over once this one has built the document."""
        RegenerationState.objects.filter(resource_set=resource_set).update(holder="the next run")
        return storing(*args, **kwargs)

    monkeypatch.setattr(owner, name, taken_over_while_storing)
    ingest_events(resource_set=resource_set, events=[event("updated", "r/0000001", version=2)])

    with pytest.raises(lease.LeaseLost):
        regenerate(resource_set)  # rewrites the pages holding the update

    assert before() == published


WINDOW = 2.0  # seconds without a heartbeat before a lease is presumed dead


@pytest.fixture
def big_set(settings, database_url, tmp_path):
    """A set of 8 pages on a database and storage a subprocess shares."""
    settings.RESOURCESYNC_REGENERATION_LEASE_SECONDS = WINDOW
    resource_set = make_set(entries_per_document=5)
    ingest_events(
        resource_set=resource_set, events=[event("created", f"r/{n:07d}") for n in range(40)]
    )
    if ResourceListPage.objects.count() != 8:  # no after-commit regeneration in this setup
        assert regenerate(resource_set) is not None
    assert ResourceListPage.objects.count() == 8
    return resource_set


def environment(database_url: str, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": os.environ["DJANGO_SETTINGS_MODULE"],
        "DATABASE_URL": database_url,
        "DATA_DIR": str(tmp_path),  # test settings store documents in DATA_DIR/test-documents
        "RESOURCESYNC_REGENERATION_LEASE_SECONDS": str(WINDOW),
        **extra,
    }


def start_slow_run(database_url: str, tmp_path: Path, delay: float) -> subprocess.Popen:
    """`regenerate --full` with slow page builds, once it holds the set's lease."""
    env = environment(database_url, tmp_path, PAGE_DELAY=str(delay), CPU_COUNT="2")
    script = REPO / "tests" / "integration" / "regenerate_slowly.py"
    process = subprocess.Popen(
        [sys.executable, str(script), "acme/articles", "--full"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while not RegenerationState.objects.filter(holder__contains=f"pid {process.pid} ").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the slow run never took the lease:\n{process.communicate()[0]!r}")
        time.sleep(0.05)
    return process


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite's database-wide write lock: any paused writer"
)
def test_a_run_paused_while_it_writes_lets_go_of_the_set_within_its_lease(
    big_set, database_url, tmp_path
):
    """A run stopped inside its lease-checked write (a paused VM) held the lease row: every
    task that touched the row (scheduling any set's runs, taking the set over) waited for
    it, so no set was published until it woke."""
    script = REPO / "tests" / "integration" / "hold_lease.py"
    process = subprocess.Popen(
        [sys.executable, str(script), "acme/articles"],
        cwd=REPO,
        env=environment(database_url, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == b"holding\n"
        started = time.monotonic()
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '20s'")
            RegenerationState.objects.filter(resource_set=big_set).update(scheduled_at=None)
        assert time.monotonic() - started < WINDOW + 5
    finally:
        process.kill()
        process.wait()


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def kill_9(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def test_a_killed_run_is_taken_over_at_once(big_set, database_url, tmp_path, client):
    """While the run beats, `regenerate` says the set is held and exits 1; once it was
    killed, a new run on the same host takes the set over at once (its process is gone:
    another host's would be taken over once its lease window passed, see above) and
    publishes every entry."""
    slow = start_slow_run(database_url, tmp_path, delay=5)
    try:
        # Its own process: the live run's lease must hold for longer than the window.
        held = subprocess.run(
            [sys.executable, "manage.py", "regenerate", "acme/articles"],
            cwd=REPO,
            env=environment(database_url, tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert slow.poll() is None, "the slow run ended before the test could kill it"
    finally:
        kill_9(slow)
    killed_at = time.monotonic()
    assert held.returncode == 1, held
    assert "acme/articles: not regenerated: another run holds it" in held.stderr
    assert f"pid {slow.pid} " in held.stderr

    call_command("regenerate", "acme/articles", "--full")
    assert time.monotonic() - killed_at < WINDOW, "the dead run's lease was waited out"
    assert served_entries(client) == names(*range(40))
    state = RegenerationState.objects.get(resource_set=big_set)
    assert state.running_since is None and state.holder == ""


def test_forked_page_builders_die_with_a_killed_run(big_set, database_url, tmp_path):
    slow = start_slow_run(database_url, tmp_path, delay=30)
    try:
        deadline = time.monotonic() + 30
        while len(builders := children(slow.pid)) < 2:
            assert time.monotonic() < deadline, "the run forked no page builders"
            time.sleep(0.05)
    finally:
        kill_9(slow)
    deadline = time.monotonic() + 5
    while alive := [pid for pid in builders if running(pid)]:
        assert time.monotonic() < deadline, f"builders {alive} outlived their killed run"
        time.sleep(0.05)
