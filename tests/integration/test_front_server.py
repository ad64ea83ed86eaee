"""deploy/nginx.conf in front of the portal: nginx sends public documents itself.

A real nginx (Debian's) runs the shipped server block over the published
tree, proxying everything else to the live portal; destinations must see the
same documents and the same refusals as from Django alone.
"""

from __future__ import annotations

import getpass
import gzip
import shutil
import socket
import subprocess
import threading
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from sitemaps import publishing
from sitemaps.models import ChangeListPage
from sitemaps.storage import document_storage
from sources.models import ApiToken

from ..support import created, event, ingest, make_set, store_documents_in

pytestmark = pytest.mark.django_db(transaction=True)
SERVER_BLOCK = Path(__file__).resolve().parents[2] / "deploy" / "nginx.conf"
TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def storage(settings, tmp_path) -> Path:
    return store_documents_in(settings, tmp_path / "documents")


@pytest.fixture
def front(live_server, published_dir, storage, tmp_path) -> str:
    """nginx with the shipped server block, in front of the live portal."""
    binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if binary is None:
        pytest.fail("nginx is not installed: `apt-get install nginx` (make test installs it)")
    port = free_port()
    work = tmp_path / "nginx"
    work.mkdir()
    server = (
        SERVER_BLOCK.read_text()
        .replace("@LISTEN@", f"127.0.0.1:{port}")
        .replace("@PUBLISHED_DIR@", str(published_dir))
        .replace("@PORTAL@", live_server.url.removeprefix("http://"))
    )
    (work / "server.conf").write_text(server)
    temp_paths = "".join(f"    {name}_temp_path {work / name};\n" for name in TEMP_PATHS)
    (work / "nginx.conf").write_text(
        # Workers as this user: pytest's temporary folders are private to it.
        f"user {getpass.getuser()};\nworker_processes 1;\npid {work / 'nginx.pid'};\ndaemon off;\n"
        f"events {{ worker_connections 64; }}\n"
        f"http {{\n    access_log off;\n{temp_paths}    include {work / 'server.conf'};\n}}\n"
    )
    process = subprocess.Popen(
        [binary, "-p", str(work), "-c", str(work / "nginx.conf"), "-e", str(work / "error.log")],
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if process.poll() is not None:
                pytest.fail(f"nginx exited: {process.stderr.read().decode()}")
            try:
                httpx.get(url + "/.well-known/resourcesync", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    pytest.fail("nginx did not answer within 20 s")
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)


class Fetched:
    """Status, headers and the body's bytes as sent (not decompressed)."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        with httpx.stream("GET", url, headers={"Accept-Encoding": "identity", **headers}) as r:
            self.status_code, self.headers = r.status_code, r.headers
            self.content = b"".join(r.iter_raw())


def fetch(url: str, **headers: str) -> Fetched:
    return Fetched(url, headers)


def stored_bytes(storage: Path, link: Path) -> bytes:
    target = link.resolve()
    assert target.is_relative_to(storage.resolve())
    return target.read_bytes()


def test_nginx_sends_public_documents_from_the_tree(front, live_server, published_dir, storage):
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 10)
    tree = published_dir / "resourcesync" / "acme" / "articles"
    for name in ("resourcelist.xml", "resourcelist-2.xml", "changelist.xml"):
        direct = fetch(f"{live_server.url}/resourcesync/acme/articles/{name}")
        response = fetch(f"{front}/resourcesync/acme/articles/{name}")
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/xml"
        assert response.headers["server"].startswith("nginx")
        # nginx's own ETag (mtime-size), not Django's content hash: nginx answered.
        assert response.headers["etag"] != direct.headers["etag"]
        assert response.content == direct.content == stored_bytes(storage, tree / name)
        zipped = fetch(f"{front}/resourcesync/acme/articles/{name}", **{"Accept-Encoding": "gzip"})
        assert zipped.headers["content-encoding"] == "gzip"
        assert gzip.decompress(zipped.content) == response.content
        again = fetch(
            f"{front}/resourcesync/acme/articles/{name}",
            **{"If-None-Match": response.headers["etag"]},
        )
        assert again.status_code == 304


def test_a_change_reaches_the_front_server(front):
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 10)
    url = f"{front}/resourcesync/acme/articles/resourcelist-2.xml"
    before = fetch(url).content
    ingest(resource_set, [event("updated", "r/0000005", version=2)])
    after = fetch(url).content
    assert after != before
    assert b"r/0000005" in after


def test_what_django_refuses_nginx_does_not_send(front, live_server):
    protected = make_set("acme", "private", protected=True)
    created(protected, 3)
    url = f"{front}/resourcesync/acme/private/resourcelist.xml"
    assert fetch(url).status_code == 401
    _, key = ApiToken.issue(provider=protected.provider, name="reader")
    allowed = fetch(url, Authorization=f"Bearer {key}")
    assert allowed.status_code == 200
    assert (
        allowed.content
        == fetch(
            f"{live_server.url}/resourcesync/acme/private/resourcelist.xml",
            Authorization=f"Bearer {key}",
        ).content
    )
    assert fetch(f"{front}/resourcesync/acme/articles/resourcelist.xml").status_code == 404
    assert fetch(f"{front}/resourcesync/acme/private/resourcelist-9.xml").status_code == 401


def test_other_urls_pass_through_to_the_portal(front):
    resource_set = make_set()
    created(resource_set, 2)
    capability_list = fetch(f"{front}/resourcesync/acme/articles/capabilitylist.xml")
    assert capability_list.status_code == 200
    assert b"resourcesync/acme/articles/resourcelist.xml" in capability_list.content
    assert fetch(f"{front}/.well-known/resourcesync").status_code == 200
    assert fetch(f"{front}/resourcesync/acme/articles/resourcelist-1.xml.gz").status_code == 404


def test_nginx_sends_public_dump_packages_with_ranges(front, live_server, published_dir, tmp_path):
    from .test_dumps import FileSet, content

    files = FileSet(tmp_path / "files")
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(5)])
    base = "/resourcesync/acme/files"
    for name in ("resourcedump.xml", "resourcedump-manifest-1.xml", "resourcedump-package-1.zip"):
        direct = fetch(f"{live_server.url}{base}/{name}")
        response = fetch(f"{front}{base}/{name}")
        assert response.status_code == 200
        assert response.headers["etag"] != direct.headers["etag"]  # nginx answered
        assert response.content == direct.content
    package = fetch(f"{front}{base}/resourcedump-package-1.zip")
    assert package.headers["content-type"] == "application/zip"
    part = fetch(f"{front}{base}/resourcedump-package-1.zip", Range="bytes=100-")
    assert part.status_code == 206 and part.content == package.content[100:]

    protected = FileSet(tmp_path / "private", slug="private", protected=True)
    protected.post([protected.write("secret.txt", b"secret")])
    assert fetch(f"{front}/resourcesync/acme/private/resourcedump-package-1.zip").status_code == 401


def test_nginx_sends_the_cache_control_django_sends(front, live_server, published_dir):
    resource_set = make_set(entries_per_document=4, changelist_rotation=timedelta(seconds=0))
    created(resource_set, 10)
    closed = ChangeListPage.objects.filter(final=True).order_by("number").first()
    open_list = ChangeListPage.objects.get(until__isnull=True)
    assert closed is not None
    tree = published_dir / "resourcesync" / "acme" / "articles"
    assert (tree / "final" / f"changelist-{closed.number}.xml").is_symlink()
    assert not (tree / f"changelist-{closed.number}.xml").exists()
    names = [
        "resourcelist.xml",
        "resourcelist-2.xml",
        "changelist.xml",
        f"changelist-{closed.number}.xml",
        f"changelist-{open_list.number}.xml",
    ]
    for name in names:
        for encoding in ("identity", "gzip"):
            headers = {"Accept-Encoding": encoding}
            direct = fetch(f"{live_server.url}/resourcesync/acme/articles/{name}", **headers)
            response = fetch(f"{front}/resourcesync/acme/articles/{name}", **headers)
            assert response.status_code == 200, name
            assert response.headers["etag"] != direct.headers["etag"], name  # nginx answered
            assert response.headers["cache-control"] == direct.headers["cache-control"], name
            assert response.content == direct.content, name
            again = fetch(
                f"{front}/resourcesync/acme/articles/{name}",
                **headers,
                **{"If-None-Match": response.headers["etag"]},
            )
            assert again.status_code == 304
            assert again.headers["cache-control"] == direct.headers["cache-control"]


def test_a_closed_list_moving_to_final_is_never_a_404(front, published_dir):
    """A list that closes has its links moved to final/: the new ones are made before the
    old ones go, yet nginx answered 404 when it found the old link with try_files and
    opened it just after it went (25 times in 3,712 moves, 6 readers). Moved back and
    forth here, as each closed list and Change Dump package moves once."""
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 6)
    closed = ChangeListPage.objects.get(number=1)
    assert closed.final
    version = Path(document_storage().path(closed.storage_name))
    tree = published_dir / "resourcesync" / "acme" / "articles"
    url = f"{front}/resourcesync/acme/articles/changelist-1.xml"
    answers: list[tuple[int, bool]] = []
    stop = threading.Event()

    def read(encoding: str) -> None:
        with httpx.Client(headers={"Accept-Encoding": encoding}) as client:
            while not stop.is_set():
                response = client.get(url)
                answers.append((response.status_code, response.content == version.read_bytes()))

    readers = [threading.Thread(target=read, args=(e,)) for e in ("gzip", "identity") * 3]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline and (404, False) not in answers:
            for final in (False, True):
                publishing._link(
                    tree, "changelist-1.xml", version, final=final, modified=closed.generated_at
                )
    finally:
        stop.set()
        for reader in readers:
            reader.join()

    assert len(answers) > 100
    assert set(answers) == {(200, True)}


def test_nginx_sends_final_change_dump_packages_with_a_long_max_age(front, live_server, tmp_path):
    from .test_dumps import with_a_final_change_package

    final = with_a_final_change_package(tmp_path / "files", 3)
    base = "/resourcesync/acme/files"
    names = [
        f"changedump-package-{final.number}.zip",
        f"changedump-manifest-{final.number}.xml",
        "resourcedump-package-1.zip",
        "changedump.xml",
    ]
    for name in names:
        direct = fetch(f"{live_server.url}{base}/{name}")
        response = fetch(f"{front}{base}/{name}")
        assert response.status_code == 200, name
        assert response.headers["etag"] != direct.headers["etag"], name
        assert response.headers["cache-control"] == direct.headers["cache-control"], name
        assert response.content == direct.content, name
