"""Small helpers to make sets and post events through the real service."""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.test import TestCase
from lxml import etree

from sources.events import Event, LinkData
from sources.models import CapabilitySettings, DataProvider, ResourceSet
from sources.services import IngestResult, ingest_events
from validator.schema import XSD_DIR as SHIPPED_XSD_DIR

ELASTICSEARCH_GENERATOR = "sources.generators.elasticsearch.ElasticsearchGenerator"
XSD_DIR = SHIPPED_XSD_DIR  # the schemas the validator ships
LASTMOD = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
NS = {
    "sm": "http://www.sitemaps.org/schemas/sitemap/0.9",
    "rs": "http://www.openarchives.org/rs/terms/",
}


def make_set(
    provider: str = "acme", slug: str = "articles", *, protected: bool = False, **capabilities
) -> ResourceSet:
    owner, _ = DataProvider.objects.get_or_create(slug=provider, defaults={"name": provider})
    resource_set = ResourceSet.objects.create(
        provider=owner,
        slug=slug,
        name=slug,
        url_prefix=f"http://data.example.org/{provider}/{slug}/",
        protected=protected,
    )
    CapabilitySettings.objects.create(resource_set=resource_set, **capabilities)
    return resource_set


def store_documents_in(settings, location: Path) -> Path:
    """Write and serve the generated documents from local files under `location`."""
    settings.STORAGES = {
        **settings.STORAGES,
        "resourcesync": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(location)},
        },
    }
    return location


def event(change: str, name: str, *, version: int = 1, **fields) -> Event:
    """An event for `http://data.example.org/<name>` whose hash depends on the version."""
    uri = f"http://data.example.org/{name}"
    content = f"{name} v{version}".encode()
    data = {
        "change": change,
        "location_type": "url",
        "location_value": uri,
        "uri": uri,
        "length": len(content),
        "md5": hashlib.md5(content, usedforsecurity=False).hexdigest(),
        "mime": "text/plain",
        "lastmod": LASTMOD,
        "links": (
            LinkData(
                rel="describedby",
                href_type="url",
                href_value=uri + ".xml",
                mime="application/xml",
                uri=uri + ".xml",
            ),
        ),
    }
    if change == "deleted":
        data.update(length=None, md5="", mime="", lastmod=None, links=())
    data.update(fields)
    return Event(**data)


def ingest(resource_set: ResourceSet, events: list[Event]) -> IngestResult:
    """Ingest and run the after-commit hooks (indexing, regeneration) as a commit would."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        return ingest_events(resource_set=resource_set, events=events)


def created(resource_set: ResourceSet, count: int, start: int = 0) -> IngestResult:
    return ingest(
        resource_set, [event("created", f"r/{n:07d}") for n in range(start, start + count)]
    )


_schemas: dict[str, etree.XMLSchema] = {}


def assert_valid(content: bytes) -> etree._Element:
    """Parse without entities and validate against the official schemas."""
    parser = etree.XMLParser(resolve_entities=False, no_network=True)
    root = etree.fromstring(content, parser)
    name = "rs-sitemapindex.xsd" if root.tag.endswith("sitemapindex") else "rs-urlset.xsd"
    if name not in _schemas:
        _schemas[name] = etree.XMLSchema(etree.parse(f"{XSD_DIR}/{name}"))
    _schemas[name].assertValid(root)
    return root


def accept_forever(talk: Callable[[socket.socket], None]) -> socket.socket:
    """A listener on 127.0.0.1 whose every connection `talk` handles in a thread of its own.

    For servers that misbehave on purpose (trickling, counting connections);
    closing the listener ends the accepting thread.
    """
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=talk, args=(sock,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return listener


@contextmanager
def small_tmpfs(mount_point: Path, size: str = "1m") -> Iterator[Path]:
    """A small tmpfs of its own at `mount_point`, to fill; as root, or the test fails saying why."""
    mount_point.mkdir()
    command = ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mount_point)]
    mounted = subprocess.run(command, capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.fail(
            f"This test mounts a small tmpfs to fill it, which needs root "
            f"(uid {os.getuid()} here): {mounted.stderr.strip()}",
            pytrace=False,
        )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


def fill(disk: Path, leave: int) -> Path:
    """Take all but about `leave` bytes of the file system `disk` lies on."""
    filler = disk.parent / "filler"
    status = os.statvfs(disk.parent)
    filler.write_bytes(b"\0" * max(status.f_bavail * status.f_frsize - leave, 0))
    return filler


def in_another_container(code: str) -> str:
    """What Python `code` prints from a pid namespace of its own, with Django set up: a
    container sharing this host's name (`--net=host`) but not its processes."""
    setup = "import django; django.setup(); "
    answer = subprocess.run(
        [
            "unshare",
            "--user",
            "--map-root-user",
            "--pid",
            "--fork",
            sys.executable,
            "-c",
            setup + code,
        ],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "resourcesync_portal.settings"},
        check=False,
    )
    if answer.returncode != 0:
        pytest.fail(f"unshare (user and pid namespaces) failed: {answer.stderr}", pytrace=False)
    return answer.stdout.strip()
