"""The open Change List grows by its new changes, to the bytes a full rewrite writes.

A run reads and renders only the changes after the open list's last entry and
keeps the rest of its previous version; whenever that could differ from
rendering every change (an event dated earlier, a lost or foreign previous
version, moved URIs, a crash between two writes), the list is rewritten.
Every test runs with both generators.
"""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from lxml import etree

from sitemaps import change_list_append
from sitemaps.models import ChangeListPage
from sitemaps.regeneration import RegenerationRun, regenerate
from sitemaps.storage import GZIP_SUFFIX, document_storage
from sources.generators import get_generator
from sources.models import Change
from sources.services import ingest_events
from sources.signals import events_ingested, receivers_muted

from ..support import NS, assert_valid, event, make_set, store_documents_in
from .test_re_resolve import MOVED, FileSet, url_event

pytestmark = pytest.mark.django_db
#: Within the first list's rotation period, which starts at the earliest change.
T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def post(resource_set, minutes: list[float], *, change: str = "created", name: str = "") -> None:
    """One event per minute given (resource `r/<minute>`, or `r/<name>`), mirrored, with
    no run of its own."""
    events = [
        event(change, f"r/{name or m}", version=2 if change == "updated" else 1, datetime=at(m))
        for m in minutes
    ]
    with receivers_muted(events_ingested):
        ingest_events(resource_set=resource_set, events=events)
    get_generator().index_pending()


def open_list() -> tuple[ChangeListPage, bytes]:
    page = ChangeListPage.objects.get(until=None)
    with document_storage().open(page.storage_name, "rb") as handle:
        return page, handle.read()


def locs(content: bytes) -> list[str]:
    return etree.fromstring(content).xpath("sm:url/sm:loc/text()", namespaces=NS)


def rewritten() -> bytes:
    """The open list as a full run writes it, from every change."""
    assert regenerate(ChangeListPage.objects.get(until=None).resource_set, full=True)
    return open_list()[1]


def appending_reads(resource_set) -> list[dict]:
    """Regenerate; the arguments the generator was asked for changes with."""
    generator_class = type(get_generator())
    original = generator_class.iter_changes
    with mock.patch.object(
        generator_class, "iter_changes", autospec=True, side_effect=original
    ) as reads:
        assert regenerate(resource_set)
    return [call.kwargs for call in reads.call_args_list]


def test_new_changes_are_appended_to_the_bytes_of_a_full_rewrite(backend):
    resource_set = make_set(changelist_rotation=timedelta(days=1))
    post(resource_set, [0, 1, 2])
    assert regenerate(resource_set)
    post(resource_set, [3], change="updated", name="1")
    post(resource_set, [4, 4.0])  # the same datetime: in change id order

    reads = appending_reads(resource_set)

    page, appended = open_list()
    # Only the changes after the last entry were read ...
    assert len(reads) == 1 and reads[0]["after"] is not None
    assert page.entries == 6
    assert_valid(appended)
    assert [loc.rsplit("/", 1)[1] for loc in locs(appended)] == ["0", "1", "2", "1", "4", "4.0"]
    # ... and the version, its gzip twin and its ETag are those of a full rewrite.
    with document_storage().open(page.storage_name + GZIP_SUFFIX, "rb") as handle:
        assert gzip.decompress(handle.read()) == appended
    assert rewritten() == appended
    assert ChangeListPage.objects.get(until=None).etag == page.etag


def test_a_change_dated_before_the_last_entry_takes_its_place(backend):
    """Ingestion now dates such a change at its receipt; older versions kept it as sent."""
    resource_set = make_set(changelist_rotation=timedelta(days=1))
    post(resource_set, [0, 1, 2])
    assert regenerate(resource_set)
    with receivers_muted(events_ingested):
        ingest_events(
            resource_set=resource_set, events=[event("created", "r/1.5"), event("created", "r/3")]
        )
    Change.objects.filter(uri__endswith="/r/1.5").update(datetime=at(1.5))
    Change.objects.filter(uri__endswith="/r/3").update(datetime=at(3))
    get_generator().index_pending()

    assert regenerate(resource_set)

    content = open_list()[1]
    assert [loc.rsplit("/", 1)[1] for loc in locs(content)] == ["0", "1", "1.5", "2", "3"]
    assert rewritten() == content


@pytest.mark.parametrize("previous", ["missing", "altered", "written by older code"])
def test_without_a_usable_previous_version_the_list_is_rewritten(backend, previous):
    resource_set = make_set(changelist_rotation=timedelta(days=1))
    post(resource_set, [0, 1, 2])
    assert regenerate(resource_set)
    page, content = open_list()
    path = document_storage().path(page.storage_name)
    if previous == "missing":
        document_storage().delete(page.storage_name)
    elif previous == "altered":
        with open(path, "wb") as handle:
            handle.write(content.replace(b"r/1<", b"r/9<"))
    else:
        ChangeListPage.objects.filter(pk=page.pk).update(last_key=None, max_key=None)
    post(resource_set, [3])

    assert regenerate(resource_set)

    content = open_list()[1]
    assert [loc.rsplit("/", 1)[1] for loc in locs(content)] == ["0", "1", "2", "3"]
    assert rewritten() == content


def test_entries_of_an_older_entry_format_are_rendered_again(backend, monkeypatch):
    resource_set = make_set(changelist_rotation=timedelta(days=1))
    post(resource_set, [0, 1])
    assert regenerate(resource_set)
    monkeypatch.setattr(change_list_append, "ENTRY_FORMAT", "a later one")
    post(resource_set, [2])

    reads = appending_reads(resource_set)

    assert len(reads) == 1 and reads[0].get("after") is None  # every change read again
    assert [loc.rsplit("/", 1)[1] for loc in locs(open_list()[1])] == ["0", "1", "2"]


@pytest.mark.parametrize("crash_in", ["point_at", "write_change_index"])
def test_an_event_after_a_crash_between_two_writes_is_published(backend, crash_in):
    """A run killed after storing the new version (before pointing the row at it, or
    before the rest of its writes): the next run still publishes every change."""
    resource_set = make_set(changelist_rotation=timedelta(days=1))
    post(resource_set, [0, 1])
    assert regenerate(resource_set)
    post(resource_set, [2])
    crash = mock.patch.object(RegenerationRun, crash_in, side_effect=OSError("killed"))
    with crash, pytest.raises(OSError):
        regenerate(resource_set)
    post(resource_set, [3])

    assert regenerate(resource_set)

    content = open_list()[1]
    assert [loc.rsplit("/", 1)[1] for loc in locs(content)] == ["0", "1", "2", "3"]
    assert rewritten() == content


def test_moved_uris_are_rewritten_before_the_full_run_comes(
    backend, tmp_path, django_capture_on_commit_callbacks
):
    """After a url_prefix change the open list's rows hold the new URIs; a run for a new
    event, before the queued full run, must not keep the old ones."""
    files = FileSet(tmp_path / "files")
    files.post([files.write("a.txt"), files.write("b.txt")], django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=False):  # no full run queued
        files.resource_set.url_prefix = MOVED
        files.resource_set.save()
    get_generator().index_pending()

    files.post([files.write("c.txt")], django_capture_on_commit_callbacks)

    content = open_list()[1]
    assert locs(content) == [MOVED + "a.txt", MOVED + "b.txt", MOVED + "c.txt"]
    assert rewritten() == content


def test_a_list_read_while_the_mirror_held_old_uris_is_not_appended_to(
    tmp_path, use_elasticsearch, django_capture_on_commit_callbacks
):
    """A run between a url_prefix change and the mirror's re-indexing reads the moved
    rows' old URIs from the mirror: the runs after it, before the full run comes,
    must not keep them."""
    files = FileSet(tmp_path / "files", changelist_rotation=timedelta(days=1))
    files.post([url_event("http://elsewhere.example.com/a")], django_capture_on_commit_callbacks)
    with receivers_muted(events_ingested):  # published by no run yet
        ingest_events(
            resource_set=files.resource_set,
            events=[
                url_event("http://elsewhere.example.com/a", "deleted"),
                url_event("http://elsewhere.example.com/b"),
                files.write("c.txt"),
            ],
        )
    get_generator().index_pending()
    with django_capture_on_commit_callbacks(execute=False):  # no full run queued
        files.resource_set.url_prefix = MOVED
        files.resource_set.save()
    assert regenerate(files.resource_set)  # the mirror still shows c.txt's old URI
    get_generator().index_pending()

    files.post([url_event("http://elsewhere.example.com/d")], django_capture_on_commit_callbacks)

    content = open_list()[1]
    assert MOVED + "c.txt" in locs(content)
    assert rewritten() == content
