"""The generator behaviour suite: every backend, same data, same answers."""

from __future__ import annotations

import hashlib
import mimetypes
import os
from datetime import UTC, datetime, timedelta
from unittest import mock
from urllib.parse import quote

import pytest
from django.core.management import call_command
from django.db.models.signals import post_save
from django.test import override_settings

from sitemaps import regeneration
from sitemaps.models import ChangeListPage, IndexDocument, RegenerationState, ResourceListPage
from sitemaps.protocol.records import Link
from sitemaps.protocol.writer import resource_url, resource_urls
from sitemaps.regeneration import regenerate
from sitemaps.storage import document_storage
from sources import tasks
from sources.events import Event, LinkData
from sources.generators import get_generator
from sources.models import Change, ResourceSet
from sources.services import ingest_events
from sources.signals import events_ingested, receivers_muted

from ..support import event, make_set, store_documents_in

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DATABASE = {"BACKEND": "sources.generators.database.DatabaseGenerator"}


@pytest.fixture
def backends(elasticsearch_generator) -> dict[str, dict]:
    """Both settings entries, by backend name."""
    return {"database": DATABASE, "elasticsearch": elasticsearch_generator}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def load(resource_set: ResourceSet) -> None:
    """Ten resources, then updates, a delete and a re-create, at known times."""
    ingest_events(
        resource_set=resource_set,
        events=[event("created", f"g/{n:02d}", datetime=at(n)) for n in range(10)],
    )
    ingest_events(
        resource_set=resource_set,
        events=[
            event("updated", "g/03", version=2, datetime=at(20)),
            event("deleted", "g/05", datetime=at(20)),
            event("created", "g/new", datetime=at(21), sha256="ab" * 32),
            event("deleted", "g/missing", datetime=at(22)),
            event("created", "g/05", version=3, datetime=at(23)),
        ],
    )


@pytest.fixture(params=["database", "elasticsearch"])
def backend(request, settings):
    """Each test runs once per backend, with the data visible to it."""
    if request.param == "elasticsearch":
        request.getfixturevalue("use_elasticsearch")
    else:
        settings.RESOURCESYNC_GENERATORS = {"default": DATABASE}
    resource_set = make_set()
    load(resource_set)
    generator = get_generator()
    generator.index_pending()
    return generator, resource_set


def count_changes(generator, resource_set: ResourceSet) -> int:
    return sum(1 for _ in generator.iter_changes(resource_set))


def uris(records) -> list[str]:
    return [record.uri.rsplit("/", 1)[1] for record in records]


def test_resources_come_in_key_order_across_batches(backend):
    generator, resource_set = backend
    records = list(generator.iter_resources(resource_set, batch_size=3))
    assert uris(records) == ["00", "01", "02", "03", "04", "06", "07", "08", "09", "new", "05"]
    keys = [record.key for record in records]
    assert keys == sorted(keys)
    assert generator.count_resources(resource_set) == 11


def test_resources_between_keys(backend):
    generator, resource_set = backend
    keys = [r.key for r in generator.iter_resources(resource_set)]
    window = list(generator.iter_resources(resource_set, after=keys[2], through=keys[5]))
    assert [r.key for r in window] == keys[3:6]


def test_resource_records_carry_the_latest_state(backend):
    generator, resource_set = backend
    records = {r.uri.rsplit("/", 1)[1]: r for r in generator.iter_resources(resource_set)}
    expected = event("updated", "g/03", version=2)
    assert (records["03"].md5, records["03"].length) == (expected.md5, expected.length)
    assert records["new"].sha256 == "ab" * 32
    assert records["00"].lastmod.tzinfo is not None
    assert records["00"].links[0].rel == "describedby"
    assert records["00"].links[0].href.endswith("g/00.xml")


def test_resource_records_carry_every_link_in_order(backend):
    """No link, one, or several in their order (one without a type)."""
    generator, resource_set = backend
    link = event("created", "l/x").links[0]
    untyped = LinkData(rel="alternate", href_type="url", href_value="http://b/", uri="http://b/")
    ingest_events(
        resource_set=resource_set,
        events=[
            event("created", "l/none", links=()),
            event("created", "l/two", links=(link, untyped)),
        ],
    )
    generator.index_pending()

    records = {r.uri.rsplit("/", 1)[1]: r for r in generator.iter_resources(resource_set)}

    assert records["none"].links == ()
    assert records["two"].links == (
        Link("describedby", "http://data.example.org/l/x.xml", "application/xml"),
        Link("alternate", "http://b/", ""),
    )
    assert records["00"].links == (
        Link("describedby", "http://data.example.org/g/00.xml", "application/xml"),
    )


def test_a_lone_link_without_a_type_has_an_empty_mime(backend):
    """The one-link shape the database generator reads as fields on PostgreSQL."""
    generator, resource_set = backend
    untyped = LinkData(rel="alternate", href_type="url", href_value="http://b/", uri="http://b/")
    ingest_events(resource_set=resource_set, events=[event("created", "l/one", links=(untyped,))])
    generator.index_pending()

    records = {r.uri.rsplit("/", 1)[1]: r for r in generator.iter_resources(resource_set)}

    assert records["one"].links == (Link("alternate", "http://b/", ""),)
    assert type(records["one"].links[0]) is Link


def test_a_resource_with_links_over_32_kb_keeps_them_all(backend):
    """Doc values of a keyword hold at most 32,766 bytes: the links' copy must not."""
    generator, resource_set = backend
    links = tuple(
        LinkData(rel="alternate", href_type="url", href_value=uri, uri=uri, mime="text/html")
        for uri in (f"http://mirror.example.org/{n:03d}/{'x' * 100}" for n in range(300))
    )
    ingest_events(resource_set=resource_set, events=[event("created", "l/many", links=links)])
    generator.index_pending()

    records = {r.uri.rsplit("/", 1)[1]: r for r in generator.iter_resources(resource_set)}
    assert records["many"].links == tuple(Link(link.rel, link.uri, link.mime) for link in links)
    (change,) = [c for c in generator.iter_changes(resource_set) if c.uri.endswith("l/many")]
    assert change.links == records["many"].links


def test_changes_in_a_window_are_inclusive_and_ordered(backend):
    generator, resource_set = backend
    changes = list(generator.iter_changes(resource_set, since=at(3), until=at(20), batch_size=2))
    assert [(c.change, c.uri[-2:]) for c in changes] == [
        ("created", "03"),
        ("created", "04"),
        ("created", "05"),
        ("created", "06"),
        ("created", "07"),
        ("created", "08"),
        ("created", "09"),
        ("updated", "03"),
        ("deleted", "05"),
    ]
    assert [c.datetime for c in changes] == sorted(c.datetime for c in changes)
    assert len(changes) == 9
    assert count_changes(generator, resource_set) == 15


def test_changes_resume_after_a_datetime_and_key(backend):
    generator, resource_set = backend
    everything = list(generator.iter_changes(resource_set))
    resumed = list(
        generator.iter_changes(resource_set, after=(everything[10].datetime, everything[10].key))
    )
    assert resumed == everything[11:]


def test_changes_through_a_key_leave_out_those_committed_after_it(backend):
    """What a run read its watermark at is what it lists from a copy."""
    generator, resource_set = backend
    everything = list(generator.iter_changes(resource_set))
    through = sorted(c.key for c in everything)[7]
    shown = list(generator.iter_changes(resource_set, since=at(3), through=through))
    assert shown == [c for c in everything if c.key <= through and c.datetime >= at(3)]
    assert len(shown) < len([c for c in everything if c.datetime >= at(3)])


def test_deleted_changes_keep_what_the_event_said(backend):
    generator, resource_set = backend
    deleted = [c for c in generator.iter_changes(resource_set) if c.change == "deleted"]
    assert [c.uri.rsplit("/", 1)[1] for c in deleted] == ["05", "missing"]
    assert deleted[0].md5 == "" and deleted[0].length is None and deleted[0].lastmod is None
    assert deleted[1].resource_key == 0


def test_last_changed(backend):
    generator, resource_set = backend
    assert generator.last_changed(resource_set) == at(23)
    assert generator.last_changed(make_set("empty", "set")) is None


# The write side: how far a backend can see, and how it catches up.


def commit_later(resource_set: ResourceSet) -> int:
    """An update and a create, committed but indexed nowhere yet; the newest change id."""
    ingest_events(
        resource_set=resource_set,
        events=[
            event("updated", "g/01", version=2, datetime=at(30)),
            event("created", "g/later", datetime=at(31)),
        ],
    )
    return Change.objects.filter(resource_set=resource_set).latest("id").pk


def test_visible_through_never_claims_a_change_the_generator_cannot_show(backend):
    generator, resource_set = backend
    loaded = Change.objects.filter(resource_set=resource_set).latest("id").pk
    commit_later(resource_set)
    through = generator.visible_through(resource_set)
    shown = {change.key for change in generator.iter_changes(resource_set)}
    ids = Change.objects.filter(resource_set=resource_set).values_list("id", flat=True)
    assert through >= loaded
    assert {key for key in ids if key <= through} <= shown


def test_index_pending_makes_every_committed_change_visible(backend):
    generator, resource_set = backend
    newest = commit_later(resource_set)
    behind = generator.visible_through(resource_set) < newest
    assert generator.needs_indexing(resource_set.pk) == behind
    generator.index_pending(resource_set.pk)
    assert generator.visible_through(resource_set) == newest
    assert not generator.needs_indexing(resource_set.pk)
    assert count_changes(generator, resource_set) == 17
    assert "later" in uris(generator.iter_resources(resource_set))


#: What `manage.py reconcile` says for each backend after `commit_later`.
RECONCILED = {
    "database": "Reconciled 0 set(s): nothing to do, the database generator keeps no copy",
    "elasticsearch": "Reconciled 1 set(s): indexed 2 pending change(s); re-indexed 0",
}


def test_reconcile_leaves_the_generator_showing_what_the_database_holds(backend, capsys):
    generator, resource_set = backend
    newest = commit_later(resource_set)
    call_command("reconcile", resource_set.path)
    assert capsys.readouterr().out.startswith(RECONCILED[generator.name])
    assert generator.visible_through(resource_set) == newest
    assert (generator.count_resources(resource_set), count_changes(generator, resource_set)) == (
        12,
        17,
    )


#: Whether an ingest's after-commit hook sends an indexing task, by backend.
QUEUES_INDEXING = {"database": False, "elasticsearch": True}


def test_after_commit_indexing_is_queued_only_for_a_backend_with_a_copy(backend, settings):
    generator, resource_set = backend
    settings.CELERY_TASK_ALWAYS_EAGER = False
    commit_later(resource_set)
    with mock.patch.object(tasks.index_pending_changes, "delay") as queued:
        tasks.queue_indexing(resource_set.pk)
    assert queued.called == QUEUES_INDEXING[generator.name]


def test_backends_yield_identical_records(settings, use_elasticsearch, backends):
    resource_set = make_set()
    load(resource_set)
    use_elasticsearch.index_pending()
    records = {}
    for name, entry in backends.items():
        with override_settings(RESOURCESYNC_GENERATORS={"default": entry}):
            generator = get_generator()
            records[name] = (
                list(generator.iter_resources(resource_set)),
                list(generator.iter_changes(resource_set)),
            )
    assert records["database"] == records["elasticsearch"]
    assert len(records["database"][0]) == 11 and len(records["database"][1]) == 15


@pytest.mark.parametrize(
    "name", ["database", pytest.param("elasticsearch", marks=pytest.mark.elasticsearch)]
)
def test_batches_hold_the_records_and_write_the_entries_they_do(
    request, settings, monkeypatch, name
):
    """Every stored shape, in batches of every size: the columns a generator reads for
    the writer's one-pass path give the bytes of its records, or none."""
    if name == "elasticsearch":
        request.getfixturevalue("use_elasticsearch")
        # A response's hits are written a few at a time: split here too.
        monkeypatch.setattr("sources.generators.elasticsearch.WRITTEN_BATCH_SIZE", 4)
    else:
        settings.RESOURCESYNC_GENERATORS = {"default": DATABASE}
    resource_set = make_set()
    link = event("created", "b/x").links[0]
    untyped = LinkData(rel="alternate", href_type="url", href_value="http://b/", uri="http://b/")
    micros = [0, 500_000, 500, 123_456, 1, 999_999]
    ingest_events(
        resource_set=resource_set,
        events=[
            *(
                event("created", f"b/{n}", lastmod=T0.replace(microsecond=micro))
                for n, micro in enumerate(micros)
            ),
            event("created", "b/none-1", links=()),
            event("created", "b/none-2", links=()),
            event("created", "b/untyped", links=(untyped,)),
            event("created", "b/two", links=(link, untyped)),
            event("created", "b/sha", sha256="ab" * 32),
            event("created", "b/q", uri='http://data.example.org/a&b<c>"d'),
            event("created", "b/é", uri="http://data.example.org/é"),
            event("created", "b/last"),
        ],
    )
    generator = get_generator()
    generator.index_pending()
    records = list(generator.iter_resources(resource_set))
    assert len(records) == 14

    for size in (1, 2, 3, 6, 100):
        batches = list(generator.iter_resource_batches(resource_set, batch_size=size))
        assert [r for batch in batches for r in batch.records()] == records
        assert [batch.last for batch in batches] == [batch.records()[-1] for batch in batches]
        for batch in batches:
            written = resource_urls(batch.columns) if batch.columns is not None else None
            if written is not None:
                assert written == b"".join(map(resource_url, batch.records()))
        if size == 6:  # the usual ones, with every kind of fraction, go in one pass
            assert batches[0].columns is not None
            assert resource_urls(batches[0].columns) is not None
        if size == 2:  # and so do usual ones without links
            assert batches[3].columns is not None and batches[3].columns.rels is None
            assert resource_urls(batches[3].columns) is not None


@pytest.mark.parametrize("fetched", [3, 4, 5, 11])
def test_database_batches_split_each_query_s_rows_in_order(settings, monkeypatch, fetched):
    """A query's rows reach the writer in smaller batches: none is lost, repeated or
    reordered, and each batch's last record is where a page ending with it stops."""
    settings.RESOURCESYNC_GENERATORS = {"default": DATABASE}
    monkeypatch.setattr("sources.generators.database.WRITTEN_ROWS", 4)
    resource_set = make_set()
    ingest_events(resource_set=resource_set, events=[event("created", f"s/{n}") for n in range(10)])
    generator = get_generator()
    records = list(generator.iter_resources(resource_set))

    batches = list(generator.iter_resource_batches(resource_set, batch_size=fetched))

    assert [r for batch in batches for r in batch.records()] == records
    assert all(0 < batch.size <= 4 for batch in batches)
    assert [batch.last for batch in batches] == [batch.records()[-1] for batch in batches]
    assert all(batch.columns is not None for batch in batches)


def _documents(resource_set: ResourceSet) -> dict[str, bytes]:
    storage = document_storage()
    stored = [
        *ResourceListPage.objects.filter(resource_set=resource_set),
        *ChangeListPage.objects.filter(resource_set=resource_set),
        *IndexDocument.objects.filter(resource_set=resource_set),
    ]
    documents = {}
    for document in stored:
        with storage.open(document.storage_name, "rb") as handle:
            documents[f"{type(document).__name__}-{document.number}-{document}"] = handle.read()
    return documents


def test_backends_write_byte_identical_documents(settings, tmp_path, use_elasticsearch, backends):
    resource_set = make_set(entries_per_document=4)
    load(resource_set)
    use_elasticsearch.index_pending()
    documents = {}
    for name, entry in backends.items():
        store_documents_in(settings, tmp_path / name)
        settings.RESOURCESYNC_GENERATORS = {"default": entry}
        ResourceListPage.objects.all().delete()
        ChangeListPage.objects.all().delete()
        IndexDocument.objects.all().delete()
        RegenerationState.objects.all().delete()
        with mock.patch("django.utils.timezone.now", return_value=at(60)):
            assert regenerate(resource_set) is not None
        documents[name] = _documents(resource_set)
    # 11 resources in 3 pages, 15 changes in 4 lists, and the two indexes.
    assert len(documents["database"]) == 3 + 4 + 2
    assert documents["database"] == documents["elasticsearch"]


@pytest.mark.django_db(transaction=True)
def test_pages_built_in_forked_workers_equal_pages_built_in_process(
    settings, tmp_path, use_elasticsearch, backends, monkeypatch
):
    """Outside a transaction, several dirty pages are built by forked workers
    (with their own Elasticsearch clients); the documents must not change."""
    # Committed for real here: no regeneration after each ingest, only ours below, and
    # no first documents at creation (its first Change List would start after T0).
    with receivers_muted(events_ingested), receivers_muted(post_save):
        resource_set = make_set(entries_per_document=4)
        load(resource_set)
    use_elasticsearch.index_pending()
    build = regeneration.build_resource_list
    backend_now = [""]

    def recording_build(*args, **kwargs):
        with (tmp_path / f"builders-{backend_now[0]}").open("a") as log:
            log.write(f"{os.getpid()}\n")
        return build(*args, **kwargs)

    monkeypatch.setattr(regeneration, "build_resource_list", recording_build)
    documents = {}
    for name, entry in backends.items():
        store_documents_in(settings, tmp_path / name)
        settings.RESOURCESYNC_GENERATORS = {"default": entry}
        ResourceListPage.objects.all().delete()
        RegenerationState.objects.all().delete()
        backend_now[0] = name
        with mock.patch("django.utils.timezone.now", return_value=at(60)):
            assert regenerate(resource_set) is not None  # pages exist: a full run has several
            for cpus in (1, 2):
                monkeypatch.setattr(os, "cpu_count", lambda cpus=cpus: cpus)
                assert regenerate(resource_set, full=True) is not None
                documents[name, cpus] = _documents(resource_set)
    for name in backends:
        pids = set((tmp_path / f"builders-{name}").read_text().split())
        # At least one worker: a fast pool may hand every page to the same one.
        assert pids - {str(os.getpid())}, f"{name}: no page was built in a worker"
    assert len(documents["database", 1]) == 3 + 4 + 2
    for key, found in documents.items():
        assert found == documents["database", 1], key


def unregenerated_set(settings, tmp_path, prefix: str, count: int, *, entries_per_document: int):
    """A database-generator set of `count` resources, committed with no run after them."""
    settings.RESOURCESYNC_GENERATORS = {"default": DATABASE}
    store_documents_in(settings, tmp_path / "documents")
    with receivers_muted(events_ingested), receivers_muted(post_save):
        resource_set = make_set(entries_per_document=entries_per_document)
        ingest_events(
            resource_set=resource_set,
            events=[event("created", f"{prefix}/{n:02d}", datetime=at(n)) for n in range(count)],
        )
    return resource_set


@pytest.mark.django_db(transaction=True)
def test_a_lone_page_built_in_halves_equals_the_page_built_whole(settings, tmp_path, monkeypatch):
    """One dirty page is built by two forked builders, half its key range each;
    the document is the one a single build writes, byte for byte."""
    resource_set = unregenerated_set(settings, tmp_path, "h", 25, entries_per_document=10)
    monkeypatch.setattr(regeneration, "HALVE_FROM_ENTRIES", 2)
    build = regeneration.build_resource_entries

    def recording_build(*args, **kwargs):
        with (tmp_path / "halves").open("a") as log:
            log.write(f"{os.getpid()}\n")
        return build(*args, **kwargs)

    monkeypatch.setattr(regeneration, "build_resource_entries", recording_build)
    documents = {}
    with mock.patch("django.utils.timezone.now", return_value=at(60)):
        assert regenerate(resource_set) is not None  # pages of 10, 10 and 5
        (tmp_path / "halves").write_text("")
        for cpus in (2, 1):
            monkeypatch.setattr(os, "cpu_count", lambda cpus=cpus: cpus)
            with receivers_muted(events_ingested):
                ingest_events(
                    resource_set=resource_set,
                    events=[event("updated", "h/13", version=cpus, datetime=at(30))],
                )
            report = regenerate(resource_set)
            assert report is not None and report.resource_pages_written == [2]
            documents[cpus] = _documents(resource_set)
    halves = (tmp_path / "halves").read_text().split()
    assert len(halves) == 2 and str(os.getpid()) not in halves
    # The same update both times but for its version, so its hash.
    two, one = event("updated", "h/13", version=2), event("updated", "h/13", version=1)
    pages = [name for name in documents[1] if name.startswith("ResourceListPage")]
    assert len(pages) == 3
    for name in pages:
        content = documents[2][name]
        assert content.replace(two.md5.encode(), one.md5.encode()) == documents[1][name], name


def _folder_set(slug: str, root) -> ResourceSet:
    resource_set = make_set("folder", slug)
    resource_set.url_prefix = "http://data.example.org/folder/"
    resource_set.resource_root_dir = str(root)
    resource_set.save()
    return resource_set


def _api_events(root, names: list[str], change: str) -> list[Event]:
    """What a harvester would post for these files, worked out here independently."""
    events = []
    for name in names:
        uri = "http://data.example.org/folder/" + quote(name)
        if change == "deleted":
            events.append(Event(change, "rel_path", name, uri))
            continue
        data, status = (root / name).read_bytes(), (root / name).stat()
        events.append(
            Event(
                change, "rel_path", name, uri, length=len(data),
                md5=hashlib.md5(data, usedforsecurity=False).hexdigest(),
                sha256=hashlib.sha256(data).hexdigest(),
                mime=mimetypes.guess_type(name)[0],
                lastmod=datetime(1970, 1, 1, tzinfo=UTC)
                + timedelta(microseconds=status.st_mtime_ns // 1000),
            )
        )  # fmt: skip
    return events


def _without_keys(records):
    return [record._replace(key=0, **({"resource_key": 0} if hasattr(record, "change") else {}))
            for record in records]  # fmt: skip


def test_a_folder_scanned_set_gives_the_records_of_the_same_set_filled_through_the_api(
    backend, tmp_path
):
    """The folder generator is one more way in: `scan` and the API must leave identical data."""
    from sources.scanning import scan_folder

    root = tmp_path / "root"
    for n in range(6):
        (root / f"d{n % 2}").mkdir(parents=True, exist_ok=True)
        (root / f"d{n % 2}/file {n}.txt").write_bytes(f"content {n}".encode())
    (root / "page.html").write_bytes(b"<p>x</p>")
    scanned, posted = _folder_set("scanned", root), _folder_set("posted", root)
    first = ["d0/file 0.txt", "d0/file 2.txt", "d0/file 4.txt", "d1/file 1.txt",
             "d1/file 3.txt", "d1/file 5.txt", "page.html"]  # fmt: skip

    with mock.patch("django.utils.timezone.now", return_value=at(0)):
        scan_folder(resource_set=scanned)
        ingest_events(resource_set=posted, events=_api_events(root, first, "created"))
    (root / "d1/file 3.txt").write_bytes(b"changed")
    (root / "page.html").unlink()
    with mock.patch("django.utils.timezone.now", return_value=at(10)):
        scan_folder(resource_set=scanned)
        # A scan posts what it found, then what is gone, in one request.
        ingest_events(
            resource_set=posted,
            events=[
                *_api_events(root, ["d1/file 3.txt"], "updated"),
                *_api_events(root, ["page.html"], "deleted"),
            ],
        )
    generator = get_generator()
    generator.index_pending()
    for method in ("iter_resources", "iter_changes"):
        got = _without_keys(getattr(generator, method)(scanned))
        assert got == _without_keys(getattr(generator, method)(posted)), method
    assert len(list(generator.iter_changes(scanned))) == 9


@pytest.mark.django_db(transaction=True)
def test_a_forked_page_builder_that_fills_the_disk_says_so(settings, tmp_path, monkeypatch):
    """The run failed with "RuntimeError: page 1 could not be built", which the journal
    and `manage.py regenerate` showed alone: nothing said that the disk was full."""
    import errno

    from journal.models import Run

    resource_set = unregenerated_set(settings, tmp_path, "d", 12, entries_per_document=4)
    with mock.patch("django.utils.timezone.now", return_value=at(60)):
        assert regenerate(resource_set) is not None  # pages exist: a full run has several

        def full_disk(*args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(regeneration, "build_resource_list", full_disk)
        monkeypatch.setattr(os, "cpu_count", lambda: 2)
        with pytest.raises(Exception, match="No space left on device"):
            regenerate(resource_set, full=True)
    assert "No space left on device" in Run.objects.latest("started_at").error
