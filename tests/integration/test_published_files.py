"""Public documents from the published tree in front of Django (sitemaps/published_files.py).

A client must not be able to tell the fast path from Django's view: same
status, headers and bytes, for every kind of public document, plain and gzip,
GET and HEAD, and for conditional requests. Whatever Django alone may answer
(protected sets, inactive providers, odd paths, other methods) falls through.
"""

from __future__ import annotations

import io
import os
from datetime import timedelta
from pathlib import Path
from typing import Any
from wsgiref.util import FileWrapper, setup_testing_defaults

import pytest
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.test import TestCase
from django.utils import timezone
from django.utils.http import http_date

from sitemaps import publishing
from sitemaps.models import ChangeListPage, ResourceListPage
from sitemaps.published_files import PublishedFiles
from sources.models import DataProvider

from ..support import created, event, ingest, make_set, store_documents_in

pytestmark = pytest.mark.django_db
BASE = "/resourcesync/acme/articles"


@pytest.fixture
def storage(settings, tmp_path) -> Path:
    return store_documents_in(settings, tmp_path / "documents")


class Answer:
    def __init__(self, app: Any, environ: dict[str, Any]) -> None:
        started: list[Any] = []
        result = app(environ, lambda status, headers, *_: started.extend([status, headers]))
        try:
            self.body = b"".join(result)
        finally:
            getattr(result, "close", lambda: None)()
        self.status, headers = started
        self.headers = {name.lower(): value for name, value in headers}


class FellThrough(Exception):
    pass


def django_only(environ: dict[str, Any], start_response: Any) -> Any:
    raise FellThrough(environ["PATH_INFO"])


def request(path: str, method: str = "GET", **headers: str) -> dict[str, Any]:
    query = ""
    if "?" in path:
        path, query = path.split("?", 1)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "HTTP_HOST": "testserver",
        "wsgi.input": io.BytesIO(),
        "wsgi.file_wrapper": FileWrapper,
    }
    for name, value in headers.items():
        environ["HTTP_" + name.upper()] = value
    setup_testing_defaults(environ)
    return environ


def layer(published_dir: Path, storage: Path) -> PublishedFiles:
    return PublishedFiles(django_only, published_dir, str(storage))


def both(published_dir: Path, storage: Path, path: str, **options: Any) -> tuple[Answer, Answer]:
    """(the layer's answer, Django's) to the same request."""
    fast = Answer(layer(published_dir, storage), request(path, **options))
    # As Django's test client: the test's database connection stays open across the request.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        return fast, Answer(WSGIHandler(), request(path, **options))
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def assert_same(published_dir: Path, storage: Path, path: str, **options: Any) -> Answer:
    fast, django = both(published_dir, storage, path, **options)
    assert fast.status == django.status, (path, options)
    assert fast.headers == django.headers, (path, options)
    assert fast.body == django.body, (path, options)
    return fast


def assert_falls_through(published_dir: Path, storage: Path, path: str, **options: Any) -> None:
    with pytest.raises(FellThrough):
        Answer(layer(published_dir, storage), request(path, **options))


def assert_same_every_way(published_dir: Path, storage: Path, path: str) -> None:
    """GET and HEAD, plain and gzip, then revalidations with each validator."""
    for encoding in ("identity", "gzip"):
        for method in ("GET", "HEAD"):
            answer = assert_same(
                published_dir, storage, path, method=method, accept_encoding=encoding
            )
            assert answer.status == "200 OK"
        etag, modified = answer.headers["etag"], answer.headers["last-modified"]
        for validator in ({"if_none_match": etag}, {"if_modified_since": modified}):
            again = assert_same(published_dir, storage, path, accept_encoding=encoding, **validator)
            assert again.status.startswith("304")
        other = assert_same(published_dir, storage, path, if_none_match='"other"')
        assert other.status == "200 OK"


def test_lists_and_indexes_are_sent_as_django_sends_them(published_dir, storage):
    resource_set = make_set(entries_per_document=4, changelist_rotation=timedelta(seconds=0))
    created(resource_set, 10)
    closed = ChangeListPage.objects.filter(final=True).order_by("number").first()
    open_list = ChangeListPage.objects.get(until__isnull=True)
    assert closed is not None
    assert (published_dir / f"{BASE[1:]}/final/changelist-{closed.number}.xml").is_symlink()
    names = ["resourcelist.xml", "resourcelist-1.xml", "resourcelist-3.xml", "changelist.xml"]
    names += [f"changelist-{closed.number}.xml", f"changelist-{open_list.number}.xml"]
    for name in names:
        assert_same_every_way(published_dir, storage, f"{BASE}/{name}")
    ingest(resource_set, [event("updated", "r/0000005", version=2)])
    assert_same_every_way(published_dir, storage, f"{BASE}/resourcelist-2.xml")


def test_last_modified_is_the_rows_generated_at_not_the_links_age(published_dir, storage):
    resource_set = make_set(entries_per_document=4)
    created(resource_set, 10)
    page = ResourceListPage.objects.get(resource_set=resource_set, number=2)
    page.generated_at = timezone.now() - timedelta(days=3)
    page.save()
    publishing.publish(resource_set, page)  # the same version: only its date moved
    answer = assert_same(published_dir, storage, f"{BASE}/resourcelist-2.xml")
    assert answer.headers["last-modified"] == http_date(int(page.generated_at.timestamp()))
    publishing.rebuild()
    assert_same(published_dir, storage, f"{BASE}/resourcelist-2.xml", accept_encoding="gzip")


def test_dumps_are_sent_as_django_sends_them(published_dir, storage, tmp_path):
    from .test_dumps import with_a_final_change_package

    final = with_a_final_change_package(tmp_path / "files", 5)
    base = "/resourcesync/acme/files"
    names = ["resourcedump.xml", "resourcedump-manifest-1.xml", "changedump.xml"]
    names += [f"changedump-manifest-{final.number}.xml"]
    for name in names:
        assert_same_every_way(published_dir, storage, f"{base}/{name}")
    for name in ("resourcedump-package-1.zip", f"changedump-package-{final.number}.zip"):
        answer = assert_same(published_dir, storage, f"{base}/{name}")
        assert answer.headers["content-type"] == "application/zip"
        revalidated = assert_same(
            published_dir, storage, f"{base}/{name}", if_none_match=answer.headers["etag"]
        )
        assert revalidated.status.startswith("304")
        # Byte ranges stay Django's (206, If-Range).
        assert_falls_through(published_dir, storage, f"{base}/{name}", range="bytes=10-")


def test_https_headers_and_redirects_stay_as_django_sends_them(published_dir, storage, settings):
    settings.SECURE_HSTS_SECONDS = 3600
    settings.SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    created(make_set(), 3)
    answer = assert_same(
        published_dir, storage, f"{BASE}/resourcelist.xml", x_forwarded_proto="https"
    )
    assert answer.headers["strict-transport-security"] == "max-age=3600; includeSubDomains"
    assert_falls_through(published_dir, storage, f"{BASE}/resourcelist.xml")  # Django redirects


def test_what_the_tree_does_not_hold_falls_through_to_django(published_dir, storage):
    created(make_set(), 3)
    created(make_set("acme", "private", protected=True), 3)
    created(make_set("idle", "articles"), 3)
    idle = DataProvider.objects.get(slug="idle")
    idle.active = False
    with TestCase.captureOnCommitCallbacks(execute=True):
        idle.save()  # as the admin does: the tree follows after the commit
    created(make_set("acme", "nodump"), 3)
    for path in (
        "/resourcesync/acme/private/resourcelist.xml",
        "/resourcesync/idle/articles/resourcelist.xml",
        "/resourcesync/acme/nodump/resourcedump.xml",
        f"{BASE}/resourcelist-9.xml",
        f"{BASE}/capabilitylist.xml",
        f"{BASE}/changelist-open.xml",
        f"{BASE}/resourcelist.xml.gz",
        f"{BASE}/final/resourcelist.xml",
        "/resourcesync/acme/x/../articles/resourcelist.xml",
        "/resourcesync/acme/%2e%2e/acme/articles/resourcelist.xml",
        "/resourcesync/acme/articles/..%2fresourcelist.xml",
        f"{BASE}/resourcelist.xml\n",
        f"{BASE}/resourcelist.xml?fresh",
    ):
        assert_falls_through(published_dir, storage, path)
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        assert_falls_through(published_dir, storage, f"{BASE}/resourcelist.xml", method=method)
    assert_falls_through(published_dir, storage, f"{BASE}/resourcelist.xml", host="evil.example")
    assert_falls_through(published_dir, storage, f"{BASE}/resourcelist.xml", if_match='"x"')
    # The layer alone still answers the public document itself.
    assert_same(published_dir, storage, f"{BASE}/resourcelist.xml")


def test_links_out_of_the_document_storage_are_never_followed(published_dir, storage, tmp_path):
    created(make_set(entries_per_document=4), 10)
    secret = tmp_path / "secret.xml"
    secret.write_bytes(b"<secret/>")
    folder = published_dir / BASE[1:]
    (folder / "resourcelist-1.xml").unlink()
    os.symlink(secret, folder / "resourcelist-1.xml")
    (folder / "resourcelist-2.xml").unlink()
    (folder / "resourcelist-2.xml").write_bytes(b"<planted/>")  # not a link: not ours
    (folder / "resourcelist-3.xml").unlink()
    os.symlink(published_dir, folder / "resourcelist-3.xml")
    for number in (1, 2, 3):
        assert_falls_through(published_dir, storage, f"{BASE}/resourcelist-{number}.xml")


def test_the_layer_is_off_without_the_published_tree(settings, storage):
    settings.RESOURCESYNC_PUBLISHED_DIR = ""
    assert PublishedFiles.wrap(django_only) is django_only
