"""Stored documents under faults: a full disk, a version swapped under a reader, orphans.

The disk-full cases run twice: with an OSError(ENOSPC) injected into the write
(everywhere), and on a real, small tmpfs that the test mounts (as root, as in
CI; without root that test fails and says why, it never skips).
"""

from __future__ import annotations

import errno
import gzip
import io
import os
import sqlite3
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import RequestFactory
from django.utils import timezone

from sitemaps import storage as stored
from sitemaps.cleanup import remove_unreferenced
from sitemaps.models import ChangeListPage, IndexDocument, ResourceListPage, RetiredDocument
from sitemaps.regeneration import regenerate
from sitemaps.storage import GZIP_SUFFIX, content_etag, save_document
from sitemaps.views import _send
from sources.generators import get_generator
from sources.services import ingest_events

from ..support import (
    created,
    event,
    fill,
    ingest,
    make_set,
    small_tmpfs,
    store_documents_in,
)

pytestmark = pytest.mark.django_db
CONTENT = b"<urlset>" + b"<url>an entry</url>" * 2000 + b"</urlset>"
HOUR = 3600


@pytest.fixture
def documents(settings, tmp_path) -> Path:
    return store_documents_in(settings, tmp_path / "documents")


def version_path(documents: Path, name: str) -> Path:
    return documents / name


def assert_whole(documents: Path) -> None:
    """Every file under a version name holds that version; no partial file is left.

    Such a file is what a later save of the same content would find and reuse.
    """
    for path in documents.rglob("*"):
        if path.is_dir():
            continue
        assert not path.name.startswith("."), f"partial file left: {path}"
        if path.name.endswith(GZIP_SUFFIX):
            data = gzip.decompress(path.read_bytes())
            etag = path.name.removesuffix(".xml.gz").rsplit(".", 1)[1]
        else:
            data = path.read_bytes()
            etag = path.name.removesuffix(".xml").rsplit(".", 1)[1]
        assert content_etag(data) == etag, f"{path} does not hold its version"


def backdate(path: Path, seconds: int) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


# --- Disk full -------------------------------------------------------------------------


class FullDisk(io.RawIOBase):
    """A file that takes `room` bytes, then fails as a full disk does."""

    def __init__(self, handle, room: int) -> None:
        self.handle, self.room = handle, room

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        taken = bytes(data[: self.room])
        self.room -= len(taken)
        return self.handle.write(taken)

    def fileno(self) -> int:
        return self.handle.fileno()

    def close(self) -> None:
        self.handle.close()
        super().close()


@pytest.mark.parametrize("room", [0, 5000], ids=["twin-fails", "plain-fails"])
def test_a_write_that_fills_the_disk_raises_and_leaves_nothing_to_reuse(
    documents, monkeypatch, room
):
    real_create = stored._create_file
    monkeypatch.setattr(
        stored, "_create_file", lambda path: io.BufferedWriter(FullDisk(real_create(path), room))
    )
    etag = content_etag(CONTENT)
    with pytest.raises(OSError) as failure:
        save_document("acme/articles", "changelist-1.xml", CONTENT)
    assert failure.value.errno == errno.ENOSPC
    assert not (documents / f"acme/articles/changelist-1.{etag}.xml").exists()
    assert_whole(documents)

    monkeypatch.setattr(stored, "_create_file", real_create)
    name, etag = save_document("acme/articles", "changelist-1.xml", CONTENT)
    assert version_path(documents, name).read_bytes() == CONTENT
    assert gzip.decompress(version_path(documents, name + GZIP_SUFFIX).read_bytes()) == CONTENT
    assert etag == content_etag(CONTENT)


def test_a_short_or_corrupt_file_under_the_version_name_is_replaced(documents):
    """What a write cut short by an older release (or a crash) left is never adopted."""
    etag = content_etag(CONTENT)
    plain = documents / f"acme/articles/changelist-1.{etag}.xml"
    plain.parent.mkdir(parents=True)
    plain.write_bytes(CONTENT[:4096])
    twin = plain.with_name(plain.name + GZIP_SUFFIX)
    twin.write_bytes(gzip.compress(CONTENT)[:100])

    name, _ = save_document("acme/articles", "changelist-1.xml", CONTENT)
    assert version_path(documents, name) == plain
    assert plain.read_bytes() == CONTENT
    assert gzip.decompress(twin.read_bytes()) == CONTENT

    twin.write_bytes(gzip.compress(CONTENT + b"more"))  # whole gzip, other content
    save_document("acme/articles", "changelist-1.xml", CONTENT)
    assert gzip.decompress(twin.read_bytes()) == CONTENT


def test_a_whole_version_is_reused_as_it_is(documents):
    name, _ = save_document("acme/articles", "changelist-1.xml", CONTENT)
    before = version_path(documents, name).stat().st_ino
    assert save_document("acme/articles", "changelist-1.xml", CONTENT)[0] == name
    assert version_path(documents, name).stat().st_ino == before


def test_the_gzip_twin_is_plain_gzip_and_the_same_bytes_each_time(documents):
    """Any client's gzip reads it; with no name or time in its header, a rebuilt page
    gets the very same twin (what the `.gz` a cache or `gzip_static` serves depends on)."""
    name, _ = save_document("acme/articles", "resourcelist-1.xml", CONTENT)
    twin = version_path(documents, name + GZIP_SUFFIX).read_bytes()

    assert gzip.decompress(twin) == CONTENT
    assert twin[:2] == b"\x1f\x8b" and twin[3] & 0x08 == 0  # gzip, no file name
    assert twin[4:8] == b"\0\0\0\0"  # mtime 0
    assert stored.gzip_twin(CONTENT) == twin
    assert len(twin) < len(CONTENT) // 20


def test_stored_files_follow_the_umask_so_a_web_server_can_read_them(documents):
    name, _ = save_document("acme/articles", "changelist-1.xml", CONTENT)
    for path in (version_path(documents, name), version_path(documents, name + GZIP_SUFFIX)):
        assert path.stat().st_mode & 0o044 == 0o044, oct(path.stat().st_mode)


@pytest.fixture
def small_disk(settings, tmp_path):
    """Documents on a 1 MB tmpfs of their own; as root, or the test fails saying why."""
    with small_tmpfs(tmp_path / "disk") as mount_point:
        yield store_documents_in(settings, mount_point / "documents")


def test_a_full_disk_never_leaves_a_truncated_change_list_to_serve(small_disk, client):
    resource_set = make_set(entries_per_document=1000, publish_resource_list=False)
    events = [event("created", f"r/{n:07d}") for n in range(400)]
    ingest_events(resource_set=resource_set, events=events)  # no regeneration yet
    small_disk.mkdir()
    filler = fill(small_disk, leave=48 * 1024)  # the gzip twin fits, the plain list does not

    with pytest.raises(OSError) as failure:
        regenerate(resource_set)
    assert failure.value.errno == errno.ENOSPC
    assert_whole(small_disk)

    filler.unlink()
    assert regenerate(resource_set) is not None
    assert_whole(small_disk)
    url = "/resourcesync/acme/articles/changelist-1.xml"
    body = b"".join(client.get(url).streaming_content)
    page = ChangeListPage.objects.get(resource_set=resource_set, number=1)
    assert len(body) == page.size and body.endswith(b"</urlset>")
    assert content_etag(body) == page.etag
    zipped = client.get(url, headers={"accept-encoding": "gzip"})
    assert gzip.decompress(b"".join(zipped.streaming_content)) == body
    assert client.head(url)["Content-Length"] == str(len(body))


def scratch_files(disk: Path) -> list[Path]:
    return [path for path in disk.rglob(".*") if path.is_file()]


def test_a_package_scratch_file_is_removed_when_the_disk_fills(small_disk):
    """Closing a scratch file whose buffer cannot be flushed raises ENOSPC again; the
    file must go all the same, or it holds the room a full disk needs back."""
    from sitemaps.dumps.storage import package_file

    small_disk.mkdir()
    fill(small_disk, leave=64 * 1024)
    with pytest.raises(OSError) as failure, package_file("acme/articles") as handle:
        for _ in range(10_000):
            handle.write(b"a zip member " * 8)
    assert failure.value.errno == errno.ENOSPC
    assert scratch_files(small_disk) == []


def test_a_streamed_document_leaves_no_partial_file_when_the_disk_fills(small_disk):
    small_disk.mkdir()
    fill(small_disk, leave=64 * 1024)
    document = stored.StreamedDocument("acme/articles", "resourcelist-1.xml")
    with pytest.raises(OSError) as failure, document:
        for _ in range(10_000):
            document.write(b"<url><loc>an entry</loc></url>" * 4)
    assert failure.value.errno == errno.ENOSPC
    assert scratch_files(small_disk) == []


# --- Pages streamed to storage as they are rendered ----------------------------------------


def test_a_streamed_document_is_stored_as_save_document_stores_it(documents):
    """Same name, ETag and twin bytes; until saved, only a hidden partial file exists."""
    with stored.StreamedDocument("acme/articles", "resourcelist-1.xml") as document:
        for start in range(0, len(CONTENT), 1000):
            document.write(CONTENT[start : start + 1000])
        hidden = [path.name for path in documents.rglob("*") if path.is_file()]
        assert hidden and all(n.startswith(".") and n.endswith(".partial") for n in hidden)
        name, etag = document.save()
    assert [path for path in documents.rglob(".*") if path.is_file()] == []

    plain = version_path(documents, name).read_bytes()
    twin = version_path(documents, name + GZIP_SUFFIX).read_bytes()
    for path in (version_path(documents, name), version_path(documents, name + GZIP_SUFFIX)):
        path.unlink()
    assert save_document("acme/articles", "resourcelist-1.xml", CONTENT) == (name, etag)
    assert version_path(documents, name).read_bytes() == plain == CONTENT
    assert version_path(documents, name + GZIP_SUFFIX).read_bytes() == twin


def test_a_page_failing_mid_write_leaves_no_file_and_the_old_version_served(
    documents, monkeypatch, client
):
    """A builder that fails after writing part of a page (a lost node, a full disk)
    leaves nothing beside the versions, and the page keeps its previous version."""
    resource_set = make_set(entries_per_document=400)
    created(resource_set, 1000)
    before = sorted(p for p in documents.rglob("*") if p.is_file())
    url = "/resourcesync/acme/articles/resourcelist-2.xml"
    served = b"".join(client.get(url).streaming_content)
    monkeypatch.setattr("sitemaps.protocol.builders.STREAM_CHUNK_BYTES", 1000)
    generator_class = type(get_generator())
    real_batches = generator_class.iter_resource_batches
    partial_sizes = []

    def failing(self, resource_set, *, after=None, through=None):
        given = 0
        for batch in real_batches(self, resource_set, after=after, through=through):
            if given and after:  # a later page, part of it written
                partial_sizes.extend(p.stat().st_size for p in documents.rglob(".*.partial"))
                raise ConnectionError("the node went away")
            given += batch.size
            yield batch

    monkeypatch.setattr(generator_class, "iter_resource_batches", failing)
    with pytest.raises(ConnectionError):
        regenerate(resource_set, full=True)

    assert partial_sizes and max(partial_sizes) > 0  # the page was being written out
    assert [p for p in documents.rglob(".*") if p.is_file()] == []
    assert_whole(documents)
    page = ResourceListPage.objects.get(resource_set=resource_set, number=2)
    assert version_path(documents, page.storage_name) in before
    assert b"".join(client.get(url).streaming_content) == served


def test_a_page_reaches_storage_in_chunks_not_whole(documents, monkeypatch):
    """A builder holds one chunk of a page and one batch of entries, not the page: what
    bounds its memory."""
    resource_set = make_set(entries_per_document=400)
    monkeypatch.setattr("sitemaps.protocol.builders.STREAM_CHUNK_BYTES", 2048)
    monkeypatch.setattr("sources.generators.database.WRITTEN_ROWS", 4)  # about 1 KB a batch
    chunks: list[int] = []
    real_write = stored.StreamedDocument.write

    def write(self, chunk: bytes) -> None:
        chunks.append(len(chunk))
        real_write(self, chunk)

    monkeypatch.setattr(stored.StreamedDocument, "write", write)
    created(resource_set, 1000)

    pages = list(ResourceListPage.objects.filter(resource_set=resource_set))
    assert len(pages) == 3 and sum(chunks) >= sum(page.size for page in pages)
    assert max(chunks) < 2048 + 2048 < min(page.size for page in pages) // 10
    for page in pages:
        content = version_path(documents, page.storage_name).read_bytes()
        assert content_etag(content) == page.etag and len(content) == page.size
    assert_whole(documents)


# --- A version swapped under a reader ------------------------------------------------------


def test_a_superseded_version_stays_readable_for_the_grace_period(documents, settings):
    settings.RESOURCESYNC_SUPERSEDED_GRACE_SECONDS = 300
    resource_set = make_set(entries_per_document=3)
    created(resource_set, 7)
    remove_unreferenced(now=timezone.now() + timedelta(hours=1))  # what the first run replaced
    # A reader finds the page's row just before a regeneration swaps its version...
    seen = ResourceListPage.objects.select_related("resource_set").get(number=2)
    ingest(resource_set, [event("updated", "r/0000004", version=2)])
    current = ResourceListPage.objects.get(number=2)
    assert current.storage_name != seen.storage_name

    # ...and still gets the version it found.
    response = _send(RequestFactory().get("/"), seen, cache_control="no-cache")
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == (documents / seen.storage_name).read_bytes()

    assert remove_unreferenced(now=timezone.now() + timedelta(seconds=290)) == []
    assert (documents / seen.storage_name).exists()
    removed = remove_unreferenced(now=timezone.now() + timedelta(seconds=310))
    assert {seen.storage_name, seen.storage_name + GZIP_SUFFIX} <= set(removed)
    assert not (documents / seen.storage_name).exists()
    for document in stored_documents(resource_set):
        assert (documents / document.storage_name).exists()
        assert (documents / (document.storage_name + GZIP_SUFFIX)).exists()


def test_a_regeneration_deletes_versions_retired_before_the_grace_period(
    documents, settings, monkeypatch
):
    """Without beat (the embedded default), superseded versions still go."""
    from sitemaps import cleanup

    settings.RESOURCESYNC_SUPERSEDED_GRACE_SECONDS = 300
    resource_set = make_set(entries_per_document=3)
    created(resource_set, 7)
    long_ago = timezone.now() - timedelta(hours=1)
    old = list(RetiredDocument.objects.values_list("name", flat=True))
    assert old, "the first run replaced some versions"
    RetiredDocument.objects.update(retired_at=long_ago)
    for name in old:
        backdate(documents / name, HOUR)
        backdate(documents / (name + GZIP_SUFFIX), HOUR)

    monkeypatch.setattr(cleanup, "_next_expiry", 0.0)
    seen = ResourceListPage.objects.get(number=2).storage_name
    ingest(resource_set, [event("updated", "r/0000004", version=2)])

    assert [name for name in old if (documents / name).exists()] == []
    assert (documents / seen).exists(), "retired just now: kept for the grace period"
    assert set(RetiredDocument.objects.values_list("name", flat=True)).isdisjoint(old)
    for document in stored_documents(resource_set):
        assert (documents / document.storage_name).exists()


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's snapshot upgrade")
def test_retiring_a_version_survives_another_writer_between_statements(file_database):
    """The run's heartbeat commits while a page's old version is retired.

    On SQLite a transaction that read first and then writes fails at once
    ("database is locked") when another connection committed in between; the
    retirement is therefore one statement, with nothing to come between.
    """
    other = sqlite3.connect(connection.settings_dict["NAME"], timeout=0)
    other.execute("CREATE TABLE heartbeat (n INTEGER)")
    other.commit()

    def another_writer_commits(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "retireddocument" in sql.lower():
            try:  # whenever the lock is free between two statements
                other.execute("INSERT INTO heartbeat VALUES (1)")
                other.commit()
            except sqlite3.OperationalError:
                other.rollback()  # the retirement holds the write lock
        return result

    try:
        with connection.execute_wrapper(another_writer_commits):
            stored.delete_document("resourcelist-1.0123.xml")
    finally:
        other.close()
    assert RetiredDocument.objects.filter(name="resourcelist-1.0123.xml").exists()


def stored_documents(resource_set) -> list:
    return [
        *ResourceListPage.objects.filter(resource_set=resource_set),
        *ChangeListPage.objects.filter(resource_set=resource_set),
        *IndexDocument.objects.filter(resource_set=resource_set),
    ]


# --- Orphans --------------------------------------------------------------------------------


def test_cleanup_documents_removes_only_old_unreferenced_versions(documents, tmp_path):
    resource_set = make_set(entries_per_document=3)
    created(resource_set, 5)
    referenced = sorted(p for p in documents.rglob("*") if p.is_file())
    for path in referenced:
        backdate(path, HOUR)  # old, but a row references each
    folder = documents / "acme" / "articles"
    orphan = folder / f"resourcelist-7.{'a' * 32}.xml"
    orphans = [orphan, orphan.with_name(orphan.name + GZIP_SUFFIX)]
    orphans.append(folder / f".changelist-1.{'b' * 32}.xml.{'c' * 32}.partial")
    # A streamed page's, killed mid-write: named before its ETag is known.
    orphans.append(folder / f".resourcelist-2.xml.{'f' * 32}.partial")
    orphans.append(folder / f".resourcelist-2.xml.gz.{'f' * 32}.partial")
    young = folder / f"resourcelist-8.{'d' * 32}.xml"
    foreign = folder / "notes.txt"  # not a document version: never ours to remove
    outside = tmp_path / f"resourcelist-9.{'e' * 32}.xml"  # outside the storage
    for path in [*orphans, young, foreign, outside]:
        path.write_bytes(b"<urlset/>")
        backdate(path, HOUR)
    os.utime(young)
    (folder / "elsewhere").symlink_to(tmp_path, target_is_directory=True)

    out = io.StringIO()
    call_command("cleanup_documents", stdout=out)

    assert sorted(p for p in documents.rglob("*") if p.is_file()) == sorted(
        [*referenced, young, foreign]
    )
    assert outside.exists()
    report = out.getvalue()
    assert "Removed 5 file(s)" in report
    for path in orphans:
        assert str(path.relative_to(documents)) in report


def test_cleanup_documents_dry_run_removes_nothing(documents):
    orphan = documents / "acme" / "articles" / f"resourcelist-7.{'a' * 32}.xml"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"<urlset/>")
    backdate(orphan, HOUR)
    out = io.StringIO()
    call_command("cleanup_documents", "--dry-run", stdout=out)
    assert orphan.exists()
    assert "Would remove 1 file(s)" in out.getvalue()
    assert "acme/articles/resourcelist-7." in out.getvalue()


def test_a_version_the_published_tree_links_to_is_never_removed(documents, published_dir):
    """A run killed between saving a row and relinking leaves the link on the old version."""
    from sitemaps import publishing

    resource_set = make_set(entries_per_document=3)
    created(resource_set, 2)
    page = ResourceListPage.objects.get(resource_set=resource_set, number=1)
    linked = page.storage_name
    newer, etag = save_document("acme/articles", page.public_name, b"<urlset/>")
    ResourceListPage.objects.filter(pk=page.pk).update(storage_name=newer, etag=etag)
    later = timezone.now() + timedelta(hours=1)

    assert remove_unreferenced(now=later) == []
    link = published_dir / "resourcesync" / "acme" / "articles" / "resourcelist-1.xml"
    assert link.resolve() == (documents / linked).resolve()
    assert link.read_bytes()

    publishing.rebuild()
    assert sorted(remove_unreferenced(now=later)) == [linked, linked + GZIP_SUFFIX]
    assert link.read_bytes() == b"<urlset/>"


def test_cleanup_runs_periodically(documents, settings):
    from sitemaps.tasks import cleanup_documents

    assert any(
        entry["task"] == "sitemaps.tasks.cleanup_documents"
        for entry in settings.CELERY_BEAT_SCHEDULE.values()
    )
    assert cleanup_documents.apply().get() == 0
