"""The published tree: what a front server may send without asking Django.

It must always hold exactly the current version of every public document and
nothing Django would refuse; tests/integration/test_front_server.py runs
nginx over it.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test import Client, TestCase
from django.utils import timezone

from sitemaps.cleanup import remove_unreferenced
from sitemaps.models import IndexDocument, ResourceListPage
from sitemaps.regeneration import regenerate
from sources.models import DataProvider

from ..support import created, event, ingest, make_set, store_documents_in

pytestmark = pytest.mark.django_db
BASE = "/resourcesync/acme/articles"


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def tree(published_dir: Path, path: str = "acme/articles") -> dict[str, Path]:
    directory = published_dir / "resourcesync" / path
    if not directory.exists():
        return {}
    entries = sorted(directory.rglob("*"))
    return {
        entry.relative_to(directory).as_posix(): entry for entry in entries if not entry.is_dir()
    }


def served(client: Client, url: str, **headers) -> bytes:
    response = client.get(url, headers=headers)
    assert response.status_code == 200, url
    return b"".join(response.streaming_content) if response.streaming else response.content


def saved(instance) -> None:
    """Save as the admin does: the tree follows after the commit."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        instance.save()


def test_every_public_document_is_linked_to_what_django_serves(client, published_dir):
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 10)  # three Resource List pages under an index
    links = tree(published_dir)
    names = [f"resourcelist-{n}.xml" for n in (1, 2, 3)] + ["resourcelist.xml"]
    # Full Change Lists closed: final, linked where nginx sends them with a long max-age.
    names += ["final/changelist-1.xml", "final/changelist-2.xml", "changelist-3.xml"]
    names += ["changelist.xml"]
    assert sorted(links) == sorted(names + [name + ".gz" for name in names])
    for name in names:
        assert links[name].is_symlink()
        assert not os.path.isabs(os.readlink(links[name])), "links stay valid if the folder moves"
        url = f"{BASE}/{name.removeprefix('final/')}"
        assert links[name].read_bytes() == served(client, url)
        assert gzip.decompress(links[name + ".gz"].read_bytes()) == links[name].read_bytes()


def test_a_rewritten_page_is_relinked_before_its_old_version_goes(client, published_dir):
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 10)
    page = ResourceListPage.objects.get(resource_set=resource_set, number=2)
    old_target = tree(published_dir)["resourcelist-2.xml"].resolve()
    ingest(resource_set, [event("updated", "r/0000005", version=2)])
    link = tree(published_dir)["resourcelist-2.xml"]
    page.refresh_from_db()
    assert link.resolve() != old_target
    assert link.resolve().name == Path(page.storage_name).name
    assert old_target.exists(), "the superseded version stays for the grace period..."
    remove_unreferenced(now=timezone.now() + timedelta(hours=1))
    assert not old_target.exists(), "...and is deleted after it"
    assert link.resolve().exists()
    assert link.read_bytes() == served(client, f"{BASE}/resourcelist-2.xml")
    untouched = tree(published_dir)["resourcelist-1.xml"]
    assert untouched.read_bytes() == served(client, f"{BASE}/resourcelist-1.xml")


def test_an_emptied_page_leaves_the_tree(published_dir):
    resource_set = make_set(entries_per_document=2)
    created(resource_set, 6)
    assert "resourcelist-2.xml" in tree(published_dir)
    ingest(resource_set, [event("deleted", "r/0000002"), event("deleted", "r/0000003")])
    assert not ResourceListPage.objects.filter(resource_set=resource_set, number=2).exists()
    assert "resourcelist-2.xml" not in tree(published_dir)
    assert "resourcelist-2.xml.gz" not in tree(published_dir)


def test_protected_sets_are_never_in_the_tree(published_dir):
    resource_set = make_set(protected=True)
    created(resource_set, 3)
    assert IndexDocument.objects.filter(resource_set=resource_set).count() == 2
    assert tree(published_dir) == {}


def test_a_set_made_protected_leaves_the_tree_at_once(published_dir):
    resource_set = make_set()
    created(resource_set, 3)
    assert tree(published_dir)
    resource_set.protected = True
    saved(resource_set)
    assert tree(published_dir) == {}
    resource_set.protected = False
    saved(resource_set)
    assert "resourcelist.xml" in tree(published_dir)


def test_an_inactive_provider_leaves_the_tree(published_dir):
    resource_set = make_set()
    created(resource_set, 3)
    provider = DataProvider.objects.get(slug="acme")
    provider.active = False
    saved(provider)
    assert tree(published_dir) == {}


def test_a_capability_switched_off_leaves_only_its_documents(published_dir):
    resource_set = make_set()
    created(resource_set, 3)
    settings_row = resource_set.capability_settings
    settings_row.publish_change_list = False
    saved(settings_row)
    assert {name.split(".")[0].split("-")[0] for name in tree(published_dir)} == {"resourcelist"}


def test_renamed_and_deleted_sets_leave_no_links_behind(published_dir):
    resource_set = make_set()
    created(resource_set, 3)
    resource_set.slug = "papers"
    saved(resource_set)
    assert tree(published_dir) == {}
    assert "resourcelist.xml" in tree(published_dir, "acme/papers")
    with TestCase.captureOnCommitCallbacks(execute=True):
        resource_set.delete()
    assert not (published_dir / "resourcesync" / "acme").exists()


def test_publish_command_rebuilds_a_lost_tree(published_dir):
    resource_set = make_set()
    created(resource_set, 3)
    for link in tree(published_dir).values():
        link.unlink()
    call_command("publish")
    assert len(tree(published_dir)) == 8  # two lists, two indexes, their twins


def test_nothing_is_written_when_publishing_is_off(settings, published_dir):
    settings.RESOURCESYNC_PUBLISHED_DIR = ""
    resource_set = make_set()
    created(resource_set, 3)
    report = regenerate(resource_set, full=True)
    assert report is not None and report.pages_written
    assert not published_dir.exists()


def test_nothing_is_published_when_documents_are_not_local_files(settings, published_dir):
    """S3-compatible storage has no paths to link to: the tree stays off, serving works."""
    from django.core.files.storage import InMemoryStorage

    settings.STORAGES = {
        **settings.STORAGES,
        "resourcesync": {"BACKEND": "django.core.files.storage.InMemoryStorage"},
    }
    from sitemaps.storage import document_storage

    assert isinstance(document_storage(), InMemoryStorage)
    resource_set = make_set()
    created(resource_set, 3)
    assert IndexDocument.objects.filter(resource_set=resource_set).count() == 2
    assert not published_dir.exists()


def test_a_slug_that_could_climb_out_is_never_published(published_dir):
    """Slugs are validated by forms; one written around them must not become a path."""
    resource_set = make_set()
    created(resource_set, 2)
    DataProvider.objects.filter(slug="acme").update(slug="..")
    resource_set.refresh_from_db()
    saved(resource_set)  # the tree is rebuilt from the rows, '..' and all
    published = [path.relative_to(published_dir) for path in published_dir.rglob("*")]
    assert all(path.parts[0] == "resourcesync" for path in published), published
    assert not (published_dir / "articles").exists()
    assert not (published_dir / "resourcesync" / "acme").exists(), "the old links are withdrawn"


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor == "sqlite",
    reason="SQLite's in-memory test database: one writer, and threads cannot wait on it",
)
def test_a_tree_rebuild_during_a_run_leaves_no_stale_link(client, published_dir, monkeypatch):
    """A save in the admin rebuilds the tree: it read the rows, a run pointed one at a new
    version (and deleted the old), and the rebuild then linked the old version again. The
    tree served a stale list (or fell through) until the next rebuild."""
    import threading

    from sitemaps import publishing

    resource_set = make_set()
    created(resource_set, 2)
    read, go = threading.Event(), threading.Event()
    documents = publishing._documents

    def read_then_wait(rows_of):
        rows = documents(rows_of)
        read.set()
        go.wait(10)
        return rows

    monkeypatch.setattr(publishing, "_documents", read_then_wait)

    def rebuild() -> None:
        try:
            publishing.rebuild()
        finally:
            connection.close()

    def run() -> None:
        try:
            created(resource_set, 1, start=5)
        finally:
            connection.close()

    rebuilding = threading.Thread(target=rebuild)
    rebuilding.start()
    assert read.wait(10)
    running = threading.Thread(target=run)
    running.start()
    running.join(2)  # blocked by the rebuild, or done
    go.set()
    rebuilding.join(20)
    running.join(20)

    links = tree(published_dir)
    assert links["changelist.xml"].read_bytes() == served(client, f"{BASE}/changelist.xml")
    assert len(etree_locs(links["changelist.xml"].read_bytes())) == 3


def etree_locs(content: bytes) -> list[str]:
    from lxml import etree

    from ..support import NS

    return etree.fromstring(content).xpath("//sm:loc/text()", namespaces=NS)


@pytest.mark.parametrize("failing", ["plain link", "commit"])
def test_links_follow_the_rows_when_a_write_rolls_back(client, published_dir, monkeypatch, failing):
    """A page's row rolled back after its links were switched: the published folder full
    between the gzip twin and the plain link, or the commit refused once both were. nginx
    then sent the new version (to gzip readers, or to all) while Django sent the row's."""
    import errno

    from django.db import DatabaseError

    from sitemaps import publishing

    resource_set = make_set(entries_per_document=4)
    created(resource_set, 10)
    replace_link, publish = publishing._replace_link, publishing.publish

    def full_at_plain_link(link: Path, target: Path | None, *args) -> None:
        if link.name == "resourcelist-2.xml" and target is not None:
            raise OSError(errno.ENOSPC, "No space left on device")
        replace_link(link, target, *args)

    def refused_after_linking(resource_set, document) -> None:
        publish(resource_set, document)
        if document.public_name == "resourcelist-2.xml":
            raise DatabaseError("database or disk is full")

    if failing == "plain link":
        monkeypatch.setattr(publishing, "_replace_link", full_at_plain_link)
    else:
        monkeypatch.setattr(publishing, "publish", refused_after_linking)
    with pytest.raises((OSError, DatabaseError), match=r"No space left|disk is full"):
        regenerate(resource_set, full=True)

    links = tree(published_dir)
    assert "resourcelist-1.xml" in links, "pages written before the failure stay linked"
    for name, link in links.items():
        url = f"{BASE}/{name.removeprefix('final/').removesuffix('.gz')}"
        gzipped = {"accept-encoding": "gzip"} if name.endswith(".gz") else {}
        assert link.read_bytes() == served(client, url, **gzipped), name


FILES = "/resourcesync/acme/files"


@dataclass
class Going:
    """Documents a run removes (under `base`), the run, where it pauses (`pause(monkeypatch,
    paused)`), and the rows (`publishing._documents` or `_packages`) a rebuild reads then."""

    base: str
    names: list[str]
    run: Callable[[], object]
    pause: Callable[[pytest.MonkeyPatch, Callable[[], None]], None]
    rows: str = "_documents"


def _merged_page(published_dir, tmp_path):
    """Page 2 emptied: a run merges it away (RegenerationRun.merge_page)."""
    from sitemaps.regeneration import RegenerationRun

    resource_set = make_set(entries_per_document=2)
    created(resource_set, 6)
    run = partial(ingest, resource_set, [event("deleted", f"r/000000{n}") for n in (2, 3)])
    return Going(BASE, ["resourcelist-2.xml"], run, _before(RegenerationRun, "merge_page"))


def _archive_given_up(published_dir, tmp_path):
    """Lists no longer archived: a run removes the archive (change_list_archive.remove_archive)."""
    from sitemaps import change_list_archive
    from sources.models import CapabilitySettings

    resource_set = make_set(entries_per_document=2, changelist_keep=1)
    created(resource_set, 7)
    assert "changelist-archive.xml" in tree(published_dir)
    CapabilitySettings.objects.filter(resource_set=resource_set).update(changelist_keep=None)
    run = partial(ingest, resource_set, [event("deleted", "r/0000000")])
    pause = _before(change_list_archive, "remove_archive")
    return Going(BASE, ["changelist-archive.xml"], run, pause)


def _dump_shrunk(tmp_path):
    """Five files in three Resource Dump packages, two to a dump part; then two of them
    deleted: package 2 is emptied and the dump fits one document."""
    from .test_dumps import FileSet, content

    files = FileSet(tmp_path / "files", entries_per_document=2)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(5)])
    return partial(files.post, [files.delete("r2.txt"), files.delete("r3.txt")])


def _dump_package_merged(published_dir, tmp_path):
    """A run merges package 2 away (ResourceDump.merge, DumpJob.remove)."""
    from sitemaps.dumps.job import DumpJob

    names = ["resourcedump-package-2.zip", "resourcedump-manifest-2.xml"]
    pause = _before(DumpJob, "remove")
    return Going(FILES, names, _dump_shrunk(tmp_path), pause, rows="_packages")


def _dump_parts_gone(published_dir, tmp_path):
    """A run writes the one dump document and drops the parts (sitemaps.dumps.switch)."""
    from sitemaps.dumps.switch import DumpSwitch

    names = ["resourcedump-1.xml", "resourcedump-2.xml"]
    return Going(FILES, names, _dump_shrunk(tmp_path), _before(DumpSwitch, "apply"))


def _before(owner, step):
    """Pause a run as it comes to `owner.step`."""
    remove = getattr(owner, step)

    def pause(monkeypatch, paused):
        def wait_then_remove(*args):
            paused()
            return remove(*args)

        monkeypatch.setattr(owner, step, wait_then_remove)

    return pause


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(
    connection.vendor == "sqlite",
    reason="SQLite's in-memory test database: one writer, and threads cannot wait on it",
)
@pytest.mark.parametrize(
    "going", [_merged_page, _archive_given_up, _dump_package_merged, _dump_parts_gone]
)
def test_a_tree_rebuild_during_a_run_leaves_no_link_to_a_document_gone(
    client, published_dir, tmp_path, monkeypatch, going
):
    """A rebuild read the rows while a run removed a document (a page merged away, the
    archive given up, a dump package merged away, dump parts no longer needed): the run
    removed its links and its row outside the set's state lock, and the rebuild linked it
    again. The tree sent a document no index listed, then a link to nothing."""
    import threading

    from sitemaps import publishing

    case = going(published_dir, tmp_path)
    folder = case.base.removeprefix("/resourcesync/")
    assert all(name in tree(published_dir, folder) for name in case.names)
    at_step, step_go = threading.Event(), threading.Event()
    read, go = threading.Event(), threading.Event()
    rows = getattr(publishing, case.rows)

    def read_then_wait(rows_of):
        found = rows(rows_of)
        read.set()
        go.wait(10)
        return found

    def paused() -> None:
        at_step.set()
        step_go.wait(10)

    monkeypatch.setattr(publishing, case.rows, read_then_wait)
    case.pause(monkeypatch, paused)

    def in_thread(work) -> None:
        try:
            work()
        finally:
            connection.close()

    running = threading.Thread(target=in_thread, args=(case.run,))
    running.start()
    assert at_step.wait(10)
    rebuilding = threading.Thread(target=in_thread, args=(publishing.rebuild,))
    rebuilding.start()
    assert read.wait(10)
    step_go.set()
    running.join(2)  # blocked by the rebuild, or done
    go.set()
    rebuilding.join(20)
    running.join(20)

    links = tree(published_dir, folder)
    for name in case.names:
        assert name not in links
        assert name + ".gz" not in links
        assert client.get(f"{case.base}/{name}").status_code == 404


@pytest.mark.parametrize("written", ["package", "dump document"])
def test_dump_links_follow_the_rows_when_a_write_rolls_back(
    client, published_dir, tmp_path, monkeypatch, written
):
    """A dump package's (or dump document's) row rolled back after its links were switched,
    the commit refused: nginx sent the new version while Django sent the row's."""
    from django.db import DatabaseError

    from sitemaps import publishing

    from .test_dumps import FileSet, content

    files = FileSet(tmp_path / "files", entries_per_document=2)
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(5)])
    failing = "resourcedump-package-2.zip" if written == "package" else "resourcedump-2.xml"
    publish, publish_package = publishing.publish, publishing.publish_package

    def refused_after_linking(publish_one, resource_set, item) -> None:
        publish_one(resource_set, item)
        if item.public_name == failing:
            raise DatabaseError("database or disk is full")

    monkeypatch.setattr(publishing, "publish", partial(refused_after_linking, publish))
    monkeypatch.setattr(
        publishing, "publish_package", partial(refused_after_linking, publish_package)
    )
    with pytest.raises(DatabaseError, match="disk is full"):
        files.post([files.write("r3.txt", content(3, version=2))])

    links = tree(published_dir, "acme/files")
    assert "resourcedump-package-1.zip" in links, "packages written before stay linked"
    for name, link in links.items():
        url = f"/resourcesync/acme/files/{name.removeprefix('final/').removesuffix('.gz')}"
        gzipped = {"accept-encoding": "gzip"} if name.endswith(".gz") else {}
        assert link.read_bytes() == served(client, url, **gzipped), name
