"""`manage.py scan`: a set's folder becomes its change log through the ingestion service."""

from __future__ import annotations

import builtins
import hashlib
import io
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from django.core.management import CommandError, call_command

from sources.generators.filesystem import mtime_datetime
from sources.models import CapabilitySettings, Change, DataProvider, Resource, ResourceSet
from sources.scanning import ScanError, scan_folder
from sources.services import ingest_events
from sources.watching import FolderWatch

from ..support import event

pytestmark = pytest.mark.django_db
PREFIX = "http://data.example.org/acme/files/"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    return folder


@pytest.fixture
def resource_set(root: Path) -> ResourceSet:
    provider = DataProvider.objects.create(slug="acme", name="Acme")
    created = ResourceSet.objects.create(
        provider=provider, slug="files", name="files", url_prefix=PREFIX,
        resource_root_dir=str(root),
    )  # fmt: skip
    CapabilitySettings.objects.create(resource_set=created)
    return created


def md5(data: bytes) -> hashlib._Hash:
    return hashlib.md5(data, usedforsecurity=False)


def write(root: Path, name: str, content: bytes) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def published(resource_set: ResourceSet) -> dict[str, Resource]:
    return {
        r.uri.removeprefix(PREFIX): r for r in Resource.objects.filter(resource_set=resource_set)
    }


def changes(resource_set: ResourceSet) -> list[tuple[str, str]]:
    rows = Change.objects.filter(resource_set=resource_set).order_by("id")
    return [(c.change, c.uri.removeprefix(PREFIX)) for c in rows]


def test_new_files_are_created_with_their_metadata(resource_set, root):
    path = write(root, "a/one.txt", b"hello")
    write(root, "b/read me.html", b"<p>hi</p>")

    report = scan_folder(resource_set=resource_set)

    assert (report.created, report.hashed, report.skipped) == (2, 2, [])
    resources = published(resource_set)
    assert set(resources) == {"a/one.txt", "b/read%20me.html"}
    one = resources["a/one.txt"]
    assert (one.location_type, one.location_value) == ("rel_path", "a/one.txt")
    assert one.length == 5 and one.mime == "text/plain"
    assert one.md5 == md5(b"hello").hexdigest()
    assert one.sha256 == hashlib.sha256(b"hello").hexdigest()
    assert one.lastmod == mtime_datetime(path.stat().st_mtime_ns)
    assert resources["b/read%20me.html"].mime == "text/html"


def test_modify_delete_and_rename_become_updated_deleted_and_created(resource_set, root):
    write(root, "keep.txt", b"same")
    write(root, "edit.txt", b"v1")
    write(root, "gone.txt", b"bye")
    write(root, "old-name.txt", b"moving")
    scan_folder(resource_set=resource_set)
    Change.objects.all().delete()

    edited = write(root, "edit.txt", b"version 2")
    (root / "gone.txt").unlink()
    (root / "old-name.txt").rename(root / "new-name.txt")
    report = scan_folder(resource_set=resource_set)

    assert sorted(changes(resource_set)) == [
        ("created", "new-name.txt"),
        ("deleted", "gone.txt"),
        ("deleted", "old-name.txt"),
        ("updated", "edit.txt"),
    ]
    assert (report.created, report.updated, report.deleted, report.unchanged) == (1, 1, 2, 1)
    assert published(resource_set)["edit.txt"].md5 == md5(b"version 2").hexdigest()
    assert published(resource_set)["edit.txt"].length == edited.stat().st_size


def test_a_touched_file_is_read_and_updated_with_its_new_lastmod(resource_set, root):
    path = write(root, "t.txt", b"same bytes")
    scan_folder(resource_set=resource_set)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 5_000_000_000))

    report = scan_folder(resource_set=resource_set)

    assert (report.hashed, report.updated) == (1, 1)
    assert published(resource_set)["t.txt"].lastmod == mtime_datetime(path.stat().st_mtime_ns)


def test_a_rescan_of_unchanged_files_reads_no_content(resource_set, root):
    for n in range(20):
        write(root, f"d{n % 3}/f{n}.txt", f"file {n}".encode())
    scan_folder(resource_set=resource_set)
    opened: list[str] = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        if str(file).startswith(str(root)):
            opened.append(str(file))
        return real_open(file, *args, **kwargs)

    with (
        mock.patch("builtins.open", counting_open),
        mock.patch("hashlib.md5", side_effect=AssertionError("hashed")),
    ):
        report = scan_folder(resource_set=resource_set)

    assert opened == []
    assert (report.unchanged, report.hashed, report.created + report.updated) == (20, 0, 0)
    assert Change.objects.count() == 20


def test_a_rescan_compares_mtimes_to_the_microsecond(resource_set, root):
    """Whole seconds, one microsecond, the end of a second, and nanoseconds the database
    cannot keep."""
    mtimes = {"whole.txt": 1_700_000_000_000_000_000, "micro.txt": 1_700_000_000_000_001_000,
              "nano.txt": 1_700_000_000_123_456_789, "old.txt": 86_400_000_000_000,
              "late.txt": 1_700_000_000_999_999_000}  # fmt: skip
    for name, mtime_ns in mtimes.items():
        os.utime(write(root, name, name.encode()), ns=(mtime_ns, mtime_ns))
    scan_folder(resource_set=resource_set)
    assert published(resource_set)["nano.txt"].lastmod == mtime_datetime(mtimes["nano.txt"])

    assert scan_folder(resource_set=resource_set).unchanged == 5
    os.utime(root / "whole.txt", ns=(0, mtimes["whole.txt"] + 1000))  # one microsecond later
    report = scan_folder(resource_set=resource_set)
    assert (report.updated, report.unchanged, report.hashed) == (1, 4, 1)


def test_a_resource_posted_with_a_url_location_is_compared_by_its_uri(resource_set, root):
    """Under the folder's prefix but not posted as a rel_path: matched by URI, as before."""
    path = write(root, "posted.txt", b"posted v1")
    mtime = mtime_datetime(path.stat().st_mtime_ns)
    posted = event("created", "acme/files/posted.txt", length=9, lastmod=mtime)
    ingest_events(resource_set=resource_set, events=[posted])

    report = scan_folder(resource_set=resource_set)
    assert (report.unchanged, report.created, report.updated) == (1, 0, 0)
    path.write_bytes(b"posted v2!")
    report = scan_folder(resource_set=resource_set)
    assert (report.unchanged, report.created, report.updated) == (0, 0, 1)


def test_a_rescan_records_its_changes_and_deletions_in_one_ingestion(resource_set, root):
    for name in ("a.txt", "b.txt", "c.txt"):
        write(root, name, name.encode())
    scan_folder(resource_set=resource_set)
    write(root, "a.txt", b"a, longer")
    (root / "b.txt").unlink()

    with mock.patch("sources.scanning.ingest_events", wraps=ingest_events) as ingest:
        report = scan_folder(resource_set=resource_set)

    assert (report.updated, report.deleted, report.unchanged) == (1, 1, 1)
    assert ingest.call_count == 1
    assert [e.change for e in ingest.call_args.kwargs["events"]] == ["updated", "deleted"]


def test_symlinks_leaving_the_root_are_skipped_and_reported(resource_set, root, tmp_path):
    outside = write(tmp_path, "secret.txt", b"not for publishing")
    (tmp_path / "elsewhere").mkdir()
    write(root, "real.txt", b"real")
    (root / "leak.txt").symlink_to(outside)
    (root / "leak-dir").symlink_to(tmp_path / "elsewhere")
    (root / "alias.txt").symlink_to(root / "real.txt")  # stays inside: published
    (root / "loop").symlink_to(root)  # a folder inside: not followed
    (root / "broken").symlink_to(root / "nothing")

    report = scan_folder(resource_set=resource_set)

    assert set(published(resource_set)) == {"real.txt", "alias.txt"}
    reasons = {item.rel_path: item.reason for item in report.skipped}
    assert reasons["leak.txt"] == "symlink leads outside the resource root"
    assert reasons["leak-dir"] == "symlink leads outside the resource root"
    assert reasons["loop"] == "symlinked folder not followed"
    assert reasons["broken"] == "broken symlink"


def test_special_and_unreadable_files_are_skipped_and_what_was_published_stays(resource_set, root):
    """Unreadable is simulated: the suite runs as root, for whom chmod stops no read.

    A FIFO (not a regular file) and a PermissionError injected into the read
    of one file stand for what a non-root scanner could not read.
    """
    write(root, "ok.txt", b"fine")
    locked = write(root, "locked.txt", b"v1")
    os.mkfifo(root / "pipe")
    scan_folder(resource_set=resource_set)
    write(root, "locked.txt", b"version 2")
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):
        if str(file) == str(locked):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    with mock.patch("builtins.open", refusing_open):
        report = scan_folder(resource_set=resource_set)

    reasons = {item.rel_path: item.reason for item in report.skipped}
    assert reasons == {
        "pipe": "not a regular file",
        "locked.txt": "cannot be read: Permission denied",
    }
    assert set(published(resource_set)) == {"ok.txt", "locked.txt"}  # kept as it was
    assert published(resource_set)["locked.txt"].md5 == md5(b"v1").hexdigest()
    assert report.deleted == 0


def test_names_no_url_can_carry_are_skipped(resource_set, root):
    write(root, "fine.txt", b"ok")
    write(root, "bell\x07.txt", b"control character")
    with open(os.path.join(os.fsencode(root), b"latin-\xe9.txt"), "wb") as handle:
        handle.write(b"not UTF-8")

    report = scan_folder(resource_set=resource_set)

    assert set(published(resource_set)) == {"fine.txt"}
    reasons = {item.rel_path: item.reason for item in report.skipped}
    assert reasons == {
        "bell\\x07.txt": "name no URL can carry: must not contain control characters.",
        "latin-\ufffd.txt": "name no URL can carry: is not UTF-8.",
    }


def test_a_name_too_short_for_a_loc_under_a_short_prefix_is_skipped(resource_set, root):
    # `b` under `http://a/` is `http://a/b`, 10 characters where a `<loc>` needs 12: the
    # API refuses such an event, the scan published it and the Resource List was invalid.
    ResourceSet.objects.filter(pk=resource_set.pk).update(url_prefix="http://a/")
    resource_set.refresh_from_db()
    write(root, "b", b"short")
    write(root, "long-name.txt", b"long")

    report = scan_folder(resource_set=resource_set)

    assert set(published(resource_set)) == {"http://a/long-name.txt"}
    ((name, reason),) = [(item.rel_path, item.reason) for item in report.skipped]
    assert name == "b" and reason.startswith("name no URL can carry:") and "12" in reason


@pytest.fixture
def tmpfs_root(resource_set, tmp_path) -> Iterator[Path]:
    """The set's root on tmpfs, which keeps any mtime (ext4 keeps 1901 to 2446); Debian
    always mounts /dev/shm, so its absence is an error here, not a skip."""
    folder = Path(tempfile.mkdtemp(dir="/dev/shm"))
    ResourceSet.objects.filter(pk=resource_set.pk).update(resource_root_dir=str(folder))
    resource_set.refresh_from_db()
    yield folder
    shutil.rmtree(folder)


@pytest.mark.parametrize("seconds", [253402300800, -62135596801])  # year 10000, year 0
def test_a_file_dated_outside_the_years_1_to_9999_is_skipped(resource_set, tmpfs_root, seconds):
    """Its lastmod could not be kept: the whole scan failed with an OverflowError, every
    time, and the folder's other files went unpublished."""
    write(tmpfs_root, "ok.txt", b"fine")
    os.utime(write(tmpfs_root, "odd.txt", b"odd"), ns=(0, seconds * 10**9))

    report = scan_folder(resource_set=resource_set)

    assert set(published(resource_set)) == {"ok.txt"}
    reasons = {item.rel_path: item.reason for item in report.skipped}
    assert reasons == {"odd.txt": "modified outside the years 1 to 9999"}


def test_a_folder_deeper_than_python_recurses_is_walked(resource_set, root):
    """1,100 folders deep: the scan failed with a RecursionError, every time, and nothing
    new under the root was published. (So deep a file's URI is past the 2,048 characters
    a URI may have: it is reported, as any name no URL can carry.)"""
    folders = [root / ("d/" * depth) for depth in range(1, 1101)]
    for folder in folders:  # pathlib's and os's own makedirs recurse too, as rmtree does
        folder.mkdir()
    (folders[-1] / "bottom.txt").write_bytes(b"deep")
    write(root, "top.txt", b"top")
    try:
        report = scan_folder(resource_set=resource_set)
    finally:
        (folders[-1] / "bottom.txt").unlink()
        for folder in reversed(folders):
            folder.rmdir()

    assert set(published(resource_set)) == {"top.txt"}
    (skipped,) = report.skipped
    assert skipped.rel_path == "d/" * 1100 + "bottom.txt"
    assert "2048" in skipped.reason


def test_resources_posted_outside_the_folder_prefix_are_left_alone(resource_set, root):
    ingest_events(resource_set=resource_set, events=[event("created", "elsewhere/x")])
    write(root, "a.txt", b"a")

    report = scan_folder(resource_set=resource_set)

    assert report.deleted == 0
    assert Resource.objects.filter(uri="http://data.example.org/elsewhere/x").exists()


def test_the_command_reports_and_refuses(resource_set, root):
    write(root, "a.txt", b"a")
    os.mkfifo(root / "pipe")
    out, err = io.StringIO(), io.StringIO()
    call_command("scan", "acme/files", stdout=out, stderr=err)
    assert "acme/files: 1 created, 0 updated, 0 deleted" in out.getvalue()
    assert "skipped pipe: not a regular file" in err.getvalue()
    ResourceSet.objects.filter(pk=resource_set.pk).update(resource_root_dir="")
    with pytest.raises(CommandError, match="is not a folder"):
        call_command("scan", "acme/files", stdout=out)
    with pytest.raises(CommandError, match="<provider>/<set>"):
        call_command("scan", "acme", stdout=out)
    for interval in ("0", "nan", "1e308"):  # nan passed, 1e308 an OverflowError
        with pytest.raises(CommandError, match="--interval must be between 0 and 86400"):
            call_command("scan", "acme/files", "--watch", "--interval", interval, stdout=out)


def watch_until_created(resource_set, root, name: str, **options) -> float:
    """Run a watch; write `name` once the first scan is done; seconds until it is recorded."""
    written_at: list[float] = []
    seen_at: list[float] = []

    def on_scan(report):
        if not written_at:
            threading.Timer(0.3, lambda: (written_at.append(time.monotonic()),
                                          write(root, name, b"new"))).start()  # fmt: skip
        elif report.created:
            seen_at.append(time.monotonic())
            watch.stop()

    watch = FolderWatch(resource_set, on_scan=on_scan, **options)
    killer = threading.Timer(15, watch.stop)
    killer.start()
    watch.run()
    killer.cancel()
    assert seen_at, "the change was never recorded"
    assert name in published(resource_set)
    return seen_at[0] - written_at[0]


@pytest.mark.django_db(transaction=True)
def test_watch_records_a_change_within_two_seconds(resource_set, root):
    write(root, "first.txt", b"1")
    assert watch_until_created(resource_set, root, "sub/second.txt", interval=60) < 2


@pytest.mark.django_db(transaction=True)
def test_watch_falls_back_to_periodic_rescans_without_inotify(resource_set, root):
    with mock.patch("sources.watching.start_observer", return_value=None):
        elapsed = watch_until_created(resource_set, root, "late.txt", interval=0.5)
    assert elapsed < 2


def test_beat_rescans_the_listed_sets_one_scan_at_a_time(resource_set, root, settings):
    from django.core.cache import cache

    from sources.tasks import scan_folders

    assert settings.CELERY_BEAT_SCHEDULE["scan-folders"]["task"] == "sources.tasks.scan_folders"
    settings.RESOURCESYNC_SCAN_SETS = ["acme/files", "acme/none"]
    write(root, "a.txt", b"a")

    first, missing = scan_folders().splitlines()

    assert first.startswith("acme/files: 1 created, 0 updated, 0 deleted")
    assert missing == "acme/none: no such set"
    cache.add(f"resourcesync:scan:{resource_set.pk}", "held")  # a scan still running
    write(root, "b.txt", b"b")
    assert scan_folders().splitlines()[0] == "acme/files: a scan is still running"
    cache.delete(f"resourcesync:scan:{resource_set.pk}")
    assert "b.txt" not in published(resource_set)


def test_every_scan_is_in_the_journal(resource_set: ResourceSet, root: Path) -> None:
    from journal.models import Run

    write(root, "a.txt", b"a")
    write(root, "b.txt", b"b")
    scan_folder(resource_set=resource_set)

    run = Run.objects.get(kind="scan", resource_set=resource_set)
    assert (run.outcome, run.events) == ("succeeded", 2)
    assert run.finished_at is not None


def test_a_prefix_changed_during_a_scan_fails_it_with_a_retry_later_error(
    resource_set: ResourceSet, root: Path
) -> None:
    from journal.models import Run

    write(root, "a.txt", b"a")
    ResourceSet.objects.filter(pk=resource_set.pk).update(url_prefix="https://moved.example/")

    with pytest.raises(ScanError, match=r"url_prefix or resource_root_dir changed.*scan again"):
        scan_folder(resource_set=resource_set)

    assert not Resource.objects.exists()
    run = Run.objects.get(kind="scan", resource_set=resource_set)
    assert run.outcome == "failed" and "scan again" in run.error
