"""`manage.py validate_source` against the live portal and against a resync-written source.

The portal must pass with every capability on: Source Description, Capability
Lists, Resource List Indexes over several lists, Change List Indexes over
closed and open lists, all over real HTTP (pytest-django's `live_server`).
A source written with the resync library's own classes must be reported for
what resync leaves out (no `up` links, no `at`, no `from`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from resync import CapabilityList, ChangeList, Resource, ResourceList, SourceDescription

from sources.events import Event
from sources.models import ApiToken, CapabilitySettings, DataProvider, LocationType, ResourceSet
from validator import validate_source

from ..support import ingest, store_documents_in

pytestmark = pytest.mark.django_db(transaction=True)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def storage(settings, tmp_path: Path) -> None:
    store_documents_in(settings, tmp_path / "documents")


@pytest.fixture
def portal(live_server, settings) -> str:
    settings.PUBLIC_BASE_URL = live_server.url
    return live_server.url


def portal_set(portal: str, slug: str, *, protected: bool = False) -> ResourceSet:
    """A set with every capability on, 3 entries a page and a Change List per batch."""
    provider, _ = DataProvider.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
    resource_set = ResourceSet.objects.create(
        provider=provider,
        slug=slug,
        name=slug,
        url_prefix=f"{portal}/files/acme/{slug}/",
        protected=protected,
    )
    CapabilitySettings.objects.create(
        resource_set=resource_set,
        publish_resource_list=True,
        publish_change_list=True,
        publish_resource_dump=True,
        publish_change_dump=True,
        publish_notifications=True,
        entries_per_document=3,
        changelist_rotation=dt.timedelta(seconds=0),
    )
    return resource_set


def change(resource_set: ResourceSet, kind: str, name: str, version: int = 1) -> Event:
    uri = resource_set.url_prefix + name
    if kind == "deleted":
        return Event(change=kind, location_type=LocationType.URL, location_value=uri, uri=uri)
    content = f"{name} v{version}".encode()
    return Event(
        change=kind,
        location_type=LocationType.URL,
        location_value=uri,
        uri=uri,
        length=len(content),
        md5=hashlib.md5(content, usedforsecurity=False).hexdigest(),
        sha256=hashlib.sha256(content).hexdigest(),
        mime="text/plain",
        lastmod=dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
    )


def fill(resource_set: ResourceSet) -> None:
    """Several Resource Lists under an index; closed and open Change Lists under an index."""
    ingest(resource_set, [change(resource_set, "created", f"r{n}.txt") for n in range(8)])
    ingest(resource_set, [change(resource_set, "updated", "r1.txt", version=2)])
    ingest(resource_set, [change(resource_set, "deleted", "r2.txt")])
    ingest(resource_set, [change(resource_set, "created", "r9.txt")])


def run(url: str, *args: str) -> tuple[str, CommandError | None]:
    out = io.StringIO()
    try:
        call_command("validate_source", url, *args, stdout=out)
    except CommandError as error:
        return out.getvalue(), error
    return out.getvalue(), None


def test_the_portal_with_every_capability_has_no_problem(portal: str) -> None:
    fill(portal_set(portal, "articles"))
    fill(portal_set(portal, "images"))

    out, error = run(f"{portal}/.well-known/resourcesync")

    assert error is None, out
    # Source Description, 2 x (Capability List, Resource List Index + 3 lists, Change List
    # Index + 6 closed lists and the open one, still empty): the first run's 8 changes fill
    # three lists of 3, and each run closes the open list by time (rotation 0).
    assert out.strip().endswith("27 document(s) checked, 0 problems"), out


def test_starting_from_a_capability_list_checks_only_that_set(portal: str) -> None:
    fill(portal_set(portal, "articles"))
    fill(portal_set(portal, "images"))

    report = validate_source(f"{portal}/resourcesync/acme/articles/capabilitylist.xml")

    assert report.ok, report.problems
    assert len(report.documents) == 13
    assert all("/articles/" in url for url in report.documents)


def test_the_site_s_base_url_leads_to_its_source_description(portal: str) -> None:
    """An HTML landing page is no document: the source is found as the harvester finds it."""
    fill(portal_set(portal, "articles"))

    out, error = run(f"{portal}/")

    assert error is None, out
    assert out.splitlines()[0] == (
        f"{portal}/ is a web page; checking the source it leads to: "
        f"{portal}/.well-known/resourcesync"
    )
    assert out.strip().endswith("14 document(s) checked, 0 problems"), out


def test_a_protected_set_needs_its_token(portal: str) -> None:
    private = portal_set(portal, "private", protected=True)
    fill(private)
    _, key = ApiToken.issue(provider=private.provider, name="validator")
    url = f"{portal}/resourcesync/acme/private/capabilitylist.xml"

    out, error = run(url)
    assert error is not None
    assert f"{url}: HTTP 401 (protected: pass --token)" in out.splitlines()
    assert out.strip().endswith("1 document(s) checked, 1 problem")

    out, error = run(url, f"--token={key}")  # a key may start with "-"
    assert error is None, out
    assert out.strip().endswith("13 document(s) checked, 0 problems")


def test_the_command_exits_non_zero_on_a_problem(portal: str) -> None:
    """As a user runs it: a process, its output and its exit status."""
    missing = f"{portal}/resourcesync/acme/nothing/capabilitylist.xml"
    command = [sys.executable, "manage.py", "validate_source", missing]

    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)

    assert result.returncode == 1
    assert f"{missing}: HTTP 404" in result.stdout
    assert "1 problem(s) found" in result.stderr


@pytest.mark.parametrize(
    "url", ["tests/data/ex_1.xml", "file:///tmp/ex_1.xml", "http:///x", "http://[::1/x"]
)
def test_a_url_that_is_no_http_url_is_refused_by_name(url: str) -> None:
    """It said "outside the source's authority (://:0)" and counted one document checked."""
    out, error = run(url)

    assert error is not None and out == ""
    assert str(error) == (
        f"{url!r} is not an http:// or https:// URL: sources are checked over HTTP "
        "(to check files, serve their folder, e.g. with python3 -m http.server)"
    )


# --- A source written by resync ------------------------------------------------------


@pytest.fixture
def static_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Python's own file server over a folder: Last-Modified and 304, no ETag, no gzip."""
    root = tmp_path / "site"
    root.mkdir()
    handler = partial(QuietHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def write_resync_source(base: str, root: Path) -> None:
    """A Source Description, Capability List, Resource List and Change List by resync."""
    resource_list = ResourceList()
    change_list = ChangeList()
    for n in range(3):
        content = f"resource {n}".encode()
        resource_list.add(
            Resource(
                f"{base}/files/r{n}.txt",
                lastmod="2026-01-02T03:04:05Z",
                length=len(content),
                md5=hashlib.md5(content, usedforsecurity=False).hexdigest(),
            )
        )
        change_list.add(
            Resource(
                f"{base}/files/r{n}.txt", lastmod=f"2026-01-0{n + 2}T00:00:00Z", change="created"
            )
        )
    capability_list = CapabilityList()
    capability_list.add_capability(resource_list, f"{base}/resourcelist.xml")
    capability_list.add_capability(change_list, f"{base}/changelist.xml")
    description = SourceDescription()
    description.add_capability_list(f"{base}/capabilitylist.xml")
    (root / ".well-known").mkdir()
    (root / ".well-known" / "resourcesync.xml").write_text(description.as_xml())
    for name, document in (
        ("capabilitylist.xml", capability_list),
        ("resourcelist.xml", resource_list),
        ("changelist.xml", change_list),
    ):
        (root / name).write_text(document.as_xml())


def test_a_resync_source_is_reported_for_what_resync_leaves_out(static_server) -> None:
    base, root = static_server
    write_resync_source(base, root)

    report = validate_source(f"{base}/.well-known/resourcesync.xml")

    assert len(report.documents) == 4
    capability_list, resource_list, change_list = (
        f"{base}/{name}.xml" for name in ("capabilitylist", "resourcelist", "changelist")
    )
    assert report.messages(f"{base}/.well-known/resourcesync.xml") == []
    assert report.messages(capability_list) == [
        f'no root <rs:ln rel="up"> (it must point to {base}/.well-known/resourcesync.xml)'
    ]
    assert report.messages(resource_list) == [
        f'no root <rs:ln rel="up"> (it must point to {capability_list})',
        "the root <rs:md> of a resourcelist needs 'at'",
    ]
    assert report.messages(change_list) == [
        f'no root <rs:ln rel="up"> (it must point to {capability_list})',
        "the root <rs:md> of a changelist needs 'from'",
    ]
