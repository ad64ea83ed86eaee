"""`manage.py export`: a static copy of a set that a plain file server serves to resync.

The set's resources are real files; its documents are regenerated with three
entries a page, so the copy holds a Resource List Index and a Change List
Index over several lists. The exported folder is served by
`python -m http.server` (a separate process knowing nothing of the portal),
mirrored by `resync-sync --baseline` and checked by `manage.py validate_source`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import socket
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from sitemaps.export_targets import STATE_FILE
from sitemaps.protocol.reader import parse_document
from sitemaps.regeneration import regenerate
from sources.events import Event
from sources.locations import resolve_location
from sources.models import CapabilitySettings, DataProvider, LocationType, ResourceSet
from sources.services import ingest_events

from ..support import assert_valid, fill, small_tmpfs, store_documents_in

pytestmark = pytest.mark.django_db

RESYNC_SYNC = Path(sys.executable).with_name("resync-sync")
NAMES = ["a/one.txt", "a/two.txt", "b/three.txt", "notes/read me.txt", "café & co.txt"]


@pytest.fixture(autouse=True)
def storage(settings, tmp_path: Path) -> None:
    store_documents_in(settings, tmp_path / "documents")
    settings.PUBLIC_BASE_URL = "http://portal.example.org"


class FileSet:
    """A set whose resources are files under `root`, posted through the ingestion service."""

    def __init__(self, root: Path, *, protected: bool = False) -> None:
        root.mkdir()
        self.root = root
        provider, _ = DataProvider.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
        self.resource_set = ResourceSet.objects.create(
            provider=provider,
            slug="articles",
            name="articles",
            url_prefix="http://data.example.org/acme/articles/",
            resource_root_dir=str(root),
            protected=protected,
        )
        CapabilitySettings.objects.create(resource_set=self.resource_set, entries_per_document=3)

    def write(self, name: str, content: bytes, change: str = "created") -> Event:
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        return Event(
            change=change,
            location_type=LocationType.REL_PATH,
            location_value=name,
            uri=self.uri(name),
            length=len(content),
            md5=hashlib.md5(content, usedforsecurity=False).hexdigest(),
            mime="text/plain",
            lastmod=dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.UTC),
        )

    def uri(self, name: str) -> str:
        return resolve_location(
            LocationType.REL_PATH,
            name,
            url_prefix=self.resource_set.url_prefix,
            resource_root_dir=str(self.root),
        )

    def ingest(self, events: list[Event]) -> None:
        ingest_events(resource_set=self.resource_set, events=events)
        assert regenerate(self.resource_set) is not None


def tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def file_server(tmp_path: Path):
    """`python -m http.server` on a folder; yields (folder, base URL)."""
    folder, port = tmp_path / "www", free_port()
    folder.mkdir()
    command = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    server = subprocess.Popen(
        [*command, "--directory", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while True:
        try:
            httpx.get(base + "/", timeout=1)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, "http.server did not start"
            time.sleep(0.1)
    yield folder, base
    server.terminate()
    server.wait(timeout=10)


def export(*args: str) -> str:
    out = io.StringIO()
    call_command("export", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def article(n: int, version: int = 1) -> bytes:
    return f"Article {n}, version {version}.\n".encode() + b"Lorem ipsum. " * (n + version)


def loaded(tmp_path: Path) -> FileSet:
    files = FileSet(tmp_path / "root")
    files.ingest([files.write(name, article(n)) for n, name in enumerate(NAMES)])
    files.ingest([files.write("a/two.txt", article(1, 2), change="updated")])
    return files


def test_a_plain_file_server_serves_the_export_to_resync_and_the_validator(
    tmp_path: Path, file_server
) -> None:
    folder, base = file_server
    files = loaded(tmp_path)

    export("acme/articles", "--to", str(folder), "--base-url", base, "--with-resources")

    capability_list = f"{base}/resourcesync/acme/articles/capabilitylist.xml"
    copy = tmp_path / "copy"
    done = subprocess.run(
        [str(RESYNC_SYNC), "--baseline", "--delete", "--capabilitylist", capability_list,
         f"{base}/files/acme/articles/={copy}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "FatalError" not in done.stderr, done.stderr
    assert "Status:          SYNCED" in done.stderr, done.stderr
    # resync names its copies by the URL path as it is, percent-escapes and all.
    assert tree(copy) == {quote(name, safe="/&"): data for name, data in tree(files.root).items()}
    call_command("validate_source", capability_list, stdout=io.StringIO())
    description = parse_document(httpx.get(f"{base}/.well-known/resourcesync").content)
    assert [entry.loc for entry in description.entries] == [capability_list]


def test_every_url_is_rewritten_and_every_document_stays_valid(tmp_path: Path) -> None:
    loaded(tmp_path)
    folder = tmp_path / "www"

    export("acme/articles", "--to", str(folder), "--base-url", "https://static.example.net/rs/")

    documents = {
        path: content
        for path, content in tree(folder).items()
        if path.startswith(("resourcesync/", ".well-known/"))
    }
    assert {"resourcesync/acme/articles/resourcelist.xml", ".well-known/resourcesync"} <= set(
        documents
    )
    assert "resourcesync/acme/articles/changelist-2.xml" in documents  # several lists, an index
    for path, content in documents.items():
        assert b"portal.example.org" not in content, path
        assert_valid(content)
        root_up = parse_document(content).link("up")
        assert root_up is None or root_up.href.startswith("https://static.example.net/rs/")
    # Without --with-resources the resources stay where they are, and no file is copied.
    listing = parse_document(documents["resourcesync/acme/articles/resourcelist-1.xml"])
    assert all(e.loc.startswith("http://data.example.org/acme/") for e in listing.entries)
    assert not (folder / "files").exists()


def test_a_second_export_writes_only_what_changed(tmp_path: Path) -> None:
    files = loaded(tmp_path)
    folder = tmp_path / "www"
    base = "http://static.example.net"
    export("acme/articles", "--to", str(folder), "--base-url", base, "--with-resources")
    first = tree(folder)
    before = {path: (folder / path).stat().st_mtime_ns for path in first}

    assert "wrote 0 file(s)" in export(
        "acme/articles", "--to", str(folder), "--base-url", base, "--with-resources"
    )
    files.ingest([files.write("b/three.txt", article(2, 2), change="updated")])
    output = export("acme/articles", "--to", str(folder), "--base-url", base, "--with-resources")

    second = tree(folder)
    rewritten = {p for p in first if (folder / p).stat().st_mtime_ns != before[p]} - {STATE_FILE}
    changed = {p for p in first if first[p] != second[p]} - {STATE_FILE}
    assert rewritten == changed  # nothing rewritten with the same bytes
    assert "files/acme/articles/b/three.txt" in changed
    assert "files/acme/articles/a/one.txt" not in changed
    assert "resourcesync/acme/articles/capabilitylist.xml" not in changed
    assert f"wrote {len(changed | (set(second) - set(first)) - {STATE_FILE})} file(s)" in output


def test_files_the_set_no_longer_has_are_removed(tmp_path: Path) -> None:
    files = loaded(tmp_path)
    folder = tmp_path / "www"
    export("acme/articles", "--to", str(folder), "--with-resources")
    (files.root / "a/one.txt").unlink()
    files.ingest([Event("deleted", LocationType.REL_PATH, "a/one.txt", files.uri("a/one.txt"))])

    output = export("acme/articles", "--to", str(folder), "--with-resources")

    assert not (folder / "files/acme/articles/a/one.txt").exists()
    assert "1 removed" in output


def test_a_zip_holds_the_same_files_as_a_folder(tmp_path: Path) -> None:
    loaded(tmp_path)
    export("acme/articles", "--to", str(tmp_path / "www"), "--with-resources")
    export("acme/articles", "--zip", str(tmp_path / "set.zip"), "--with-resources")

    with zipfile.ZipFile(tmp_path / "set.zip") as archive:
        packed = {name: archive.read(name) for name in archive.namelist()}
    folder = tree(tmp_path / "www")
    del folder[STATE_FILE]
    assert packed == folder


def test_refusals_name_the_problem(tmp_path: Path) -> None:
    FileSet(tmp_path / "root", protected=True)
    with pytest.raises(CommandError, match="protected"):
        export("acme/articles", "--to", str(tmp_path / "www"))
    with pytest.raises(CommandError, match="no resource set acme/other"):
        export("acme/other", "--to", str(tmp_path / "www"))
    with pytest.raises(CommandError, match="--base-url"):
        export("acme/articles", "--to", str(tmp_path / "www"), "--base-url", "ftp://x")
    # A file where the folder goes, a folder where the ZIP goes: tracebacks before.
    (tmp_path / "a-file").write_bytes(b"")
    with pytest.raises(CommandError, match=r"--to: .*a-file is not a folder"):
        export("acme/articles", "--to", str(tmp_path / "a-file"))
    with pytest.raises(CommandError, match=r"--zip: .*root is a folder"):
        export("acme/articles", "--zip", str(tmp_path / "root"))


def test_notification_topics_are_left_out_of_the_copy(tmp_path: Path) -> None:
    """A static copy answers no subscription: it listed the topics at its own address with
    the portal's hub, which refuses topics that are not its own."""
    files = FileSet(tmp_path / "root")
    CapabilitySettings.objects.filter(resource_set=files.resource_set).update(
        publish_notifications=True
    )
    files.ingest([files.write("one.txt", article(1))])
    folder = tmp_path / "www"

    export("acme/articles", "--to", str(folder))

    response = Client().get("/resourcesync/acme/articles/capabilitylist.xml")
    served = parse_document(response.content)
    copied = (folder / "resourcesync/acme/articles/capabilitylist.xml").read_bytes()
    notifications = {"change-notification", "framework-notification"}
    assert notifications <= {entry.capability for entry in served.entries}
    assert not notifications & {entry.capability for entry in parse_document(copied).entries}
    assert b"/hub" not in copied


def test_a_new_set_exports_its_empty_lists(
    tmp_path: Path, django_capture_on_commit_callbacks
) -> None:
    """A set gets its (empty) documents when it is created, so it can be exported at once."""
    with django_capture_on_commit_callbacks(execute=True):
        FileSet(tmp_path / "root")
    folder = tmp_path / "www"

    export("acme/articles", "--to", str(folder))

    base = folder / "resourcesync/acme/articles"
    capability_list = parse_document((base / "capabilitylist.xml").read_bytes())
    assert {entry.capability for entry in capability_list.entries} == {
        "resourcelist",
        "changelist",
    }
    for name in ("resourcelist.xml", "changelist.xml"):
        assert parse_document((base / name).read_bytes()).entries == ()


def test_the_change_list_archive_and_the_lists_in_it_are_exported(tmp_path: Path) -> None:
    files = loaded(tmp_path)
    capabilities = files.resource_set.capabilities
    capabilities.changelist_keep = 1
    capabilities.save()
    files.ingest([files.write("a/one.txt", article(0, 2), change="updated")])
    folder = tmp_path / "www"

    export("acme/articles", "--to", str(folder), "--base-url", "http://static.example.net")

    archive = parse_document(
        (folder / "resourcesync/acme/articles/changelist-archive.xml").read_bytes()
    )
    assert archive.entries
    for entry in archive.entries:
        path = entry.loc.removeprefix("http://static.example.net/")
        assert_valid((folder / path).read_bytes())


def test_every_export_is_in_the_journal(tmp_path: Path, django_capture_on_commit_callbacks) -> None:
    from journal.models import Run

    with django_capture_on_commit_callbacks(execute=True):
        files = FileSet(tmp_path / "root")
    export("acme/articles", "--to", str(tmp_path / "www"))

    run = Run.objects.get(kind="export", resource_set=files.resource_set)
    assert run.outcome == "succeeded"
    assert run.pages >= 3  # the Capability List, the Resource List and the Change List


def test_a_full_disk_fails_the_export_clearly_and_leaves_no_partial_file(tmp_path: Path) -> None:
    """A traceback (the abort's own ENOSPC over the first), a half-written file beside
    each place and a `.partial` ZIP were left; the next export after freeing space works."""
    loaded(tmp_path)
    with small_tmpfs(tmp_path / "disk") as disk:
        folder, archive = disk / "www", disk / "set.zip"
        folder.mkdir()
        filler = fill(folder, leave=0)
        for target in (["--to", str(folder)], ["--zip", str(archive)]):
            with pytest.raises(CommandError, match="No space left on device"):
                export("acme/articles", *target, "--with-resources")
        assert [path for path in disk.rglob("*") if path.is_file()] == [filler]

        filler.unlink()
        export("acme/articles", "--to", str(folder), "--with-resources")
        export("acme/articles", "--zip", str(archive), "--with-resources")
        written = tree(folder)
        del written[STATE_FILE]
        with zipfile.ZipFile(archive) as packed:
            assert {name: packed.read(name) for name in packed.namelist()} == written
        hidden = [path.name for path in disk.rglob(".*") if path.is_file()]
        assert hidden == [STATE_FILE]
