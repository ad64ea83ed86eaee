"""The harvester against the portal itself, served live: both ends of ResourceSync at once.

Real files are written under a set's resource root, their events go through
the ingestion service and the REST API, eager regeneration writes the
documents after each commit, and the portal serves documents and files over
HTTP (pytest-django's `live_server`). The set pages three entries per
document, so the harvester walks a Resource List Index and a Change List
Index over several lists. A destination synced by a baseline and an
incremental run must hold exactly the source's bytes, and an audit must agree.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.management import CommandError, call_command
from lxml import etree

from harvester.config import config_from_mapping
from harvester.mapping import resource_relpath
from harvester.state import load_state
from harvester.sync import Mode, run_harvest
from sitemaps.regeneration import pending_changes, regenerate
from sources.events import Event
from sources.locations import resolve_location
from sources.models import (
    ApiToken,
    CapabilitySettings,
    Change,
    DataProvider,
    LocationType,
    ResourceSet,
)
from sources.services import ingest_events
from sources.signals import events_ingested, receivers_muted

from ..support import NS, store_documents_in

pytestmark = pytest.mark.django_db(transaction=True)

ENTRIES_PER_DOCUMENT = 3


@pytest.fixture(autouse=True)
def storage(settings, tmp_path: Path) -> None:
    store_documents_in(settings, tmp_path / "documents")


@pytest.fixture
def portal(live_server, settings) -> str:
    """The live portal's base URL, which every document's URLs now start with."""
    settings.PUBLIC_BASE_URL = live_server.url
    return live_server.url


class PublishedSet:
    """A set whose resources are real files under `root`, served by the live portal."""

    def __init__(self, portal: str, root: Path, slug: str, *, protected: bool = False) -> None:
        self.portal = portal
        self.root = root
        root.mkdir()
        provider, _ = DataProvider.objects.get_or_create(slug="acme", defaults={"name": "Acme"})
        self.resource_set = ResourceSet.objects.create(
            provider=provider,
            slug=slug,
            name=slug,
            url_prefix=f"{portal}/files/acme/{slug}/",
            resource_root_dir=str(root),
            protected=protected,
        )
        CapabilitySettings.objects.create(
            resource_set=self.resource_set, entries_per_document=ENTRIES_PER_DOCUMENT
        )

    @property
    def capability_list_url(self) -> str:
        return f"{self.portal}/resourcesync/acme/{self.resource_set.slug}/capabilitylist.xml"

    def document_url(self, name: str) -> str:
        return f"{self.portal}/resourcesync/acme/{self.resource_set.slug}/{name}"

    def write(self, name: str, content: bytes, change: str = "created") -> Event:
        """Write the file and return its event, with the real length and digests."""
        path = self.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        return Event(
            change=change,
            location_type=LocationType.ABS_PATH,
            location_value=str(path),
            uri=self.uri(path),
            length=len(content),
            md5=hashlib.md5(content, usedforsecurity=False).hexdigest(),
            sha256=hashlib.sha256(content).hexdigest(),
            mime="text/plain",
            lastmod=dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.UTC),
        )

    def delete(self, name: str) -> Event:
        path = self.root / name
        path.unlink()
        return Event(
            change="deleted",
            location_type=LocationType.ABS_PATH,
            location_value=str(path),
            uri=self.uri(path),
        )

    def uri(self, path: Path) -> str:
        return resolve_location(
            LocationType.ABS_PATH,
            str(path),
            url_prefix=self.resource_set.url_prefix,
            resource_root_dir=self.resource_set.resource_root_dir,
        )

    def ingest(self, events: list[Event]) -> None:
        """Through the service, committed, so the after-commit hooks regenerate."""
        ingest_events(resource_set=self.resource_set, events=events)
        self.assert_regenerated()

    def post(self, token: str, events: list[Event]) -> dict[str, int]:
        """Through the REST API of the live portal, as the DIT would."""
        response = httpx.post(
            f"{self.portal}/api/v1/sets/acme/{self.resource_set.slug}/events",
            json=[api_body(event) for event in events],
            headers={"Authorization": f"Token {token}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        self.assert_regenerated()
        return response.json()

    def assert_regenerated(self) -> None:
        assert pending_changes(self.resource_set) == 0, "eager regeneration did not run"

    def files(self) -> dict[str, bytes]:
        return tree(self.root)

    def mirror(self, destination: Path) -> Path:
        """Where the harvester keeps this set's files under `destination`."""
        return destination / resource_relpath(self.resource_set.url_prefix + "_").parent


def api_body(event: Event) -> dict[str, Any]:
    body: dict[str, Any] = {
        "change": event.change,
        "location": {"type": event.location_type, "value": event.location_value},
    }
    if event.change != "deleted":
        assert event.lastmod is not None
        body.update(
            length=event.length,
            md5=event.md5,
            sha256=event.sha256,
            mime=event.mime,
            lastmod=event.lastmod.isoformat(),
        )
    return body


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` by relative path, with its bytes."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def write_config(tmp_path: Path, published: PublishedSet, **extra: Any) -> Path:
    path = tmp_path / f"harvest-{published.resource_set.slug}.yaml"
    lines = [
        f"capability_list_url: {published.capability_list_url}",
        "destination: mirror",
        "retries: 1",
        "backoff: 0.001",
        "timeout: 10",
        *(f"{key}: {value}" for key, value in extra.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def harvest(config: Path, *flags: str) -> str:
    """Run the command; its summary line. No warning is expected from the portal's documents."""
    out, err = io.StringIO(), io.StringIO()
    call_command("harvest", str(config), *flags, stdout=out, stderr=err)
    said = [line for line in err.getvalue().splitlines() if not line.startswith("progress: ")]
    assert said == [], err.getvalue()
    return out.getvalue()


def index_parts(url: str) -> list[dict[str, str]]:
    """The `rs:md` of each part of the index at `url` (fails if it is not an index)."""
    response = httpx.get(url, timeout=10)
    assert response.status_code == 200, response.text
    root = etree.fromstring(response.content)
    assert root.tag == f"{{{NS['sm']}}}sitemapindex", f"{url} is not an index"
    return [dict(part.find("rs:md", NS).attrib) for part in root.findall("sm:sitemap", NS)]


def article(n: int, version: int = 1) -> bytes:
    return f"Article {n}, version {version}.\n".encode() + b"Lorem ipsum. " * (n + version)


def test_baseline_incremental_and_audit_keep_a_mirror_identical_to_the_portal(
    portal: str, tmp_path: Path
) -> None:
    published = PublishedSet(portal, tmp_path / "articles", "articles")
    _, key = ApiToken.issue(provider=published.resource_set.provider, name="dit")
    names = [f"a/article-{n:02d}.txt" for n in range(6)] + ["notes/read me.txt", "café & co.txt"]
    published.ingest([published.write(name, article(n)) for n, name in enumerate(names)])
    counts = published.post(
        key, [published.write(f"b/article-{n:02d}.txt", article(n)) for n in range(7, 10)]
    )
    assert counts["created"] == 3
    source = published.files()
    assert len(source) == 11
    # 11 resources at 3 a page: a Resource List Index over 4 lists; 11 changes: split lists.
    assert len(index_parts(published.document_url("resourcelist.xml"))) == 4
    assert len(index_parts(published.document_url("changelist.xml"))) >= 4
    config = write_config(tmp_path, published)
    mirror = published.mirror(tmp_path / "mirror")

    out = harvest(config, "--baseline")

    assert out.startswith("baseline: downloaded 11, deleted 0, skipped 0, failed 0"), out
    assert tree(mirror) == source

    events = [
        published.write("a/article-01.txt", article(1, version=2), change="updated"),
        published.write("notes/read me.txt", b"Read me, version 2.\n", change="updated"),
        published.write("b/article-08.txt", article(8, version=2), change="updated"),
        published.delete("a/article-03.txt"),
        published.delete("b/article-09.txt"),
        published.write("c/article-10.txt", article(10)),
        published.write("c/article-11.txt", article(11)),
    ]
    counts = published.post(key, events)
    assert (counts["updated"], counts["deleted"], counts["created"]) == (3, 2, 2)
    assert tree(mirror) != published.files()

    out = harvest(config, "--incremental")

    assert "downloaded 5, deleted 2" in out and "failed 0" in out, out
    assert tree(mirror) == published.files()
    # The next run starts at the newest change applied, in the portal's clock.
    newest = Change.objects.filter(resource_set=published.resource_set).latest("datetime")
    assert load_state(tmp_path / "mirror", published.capability_list_url).synced_until == (
        newest.datetime
    )

    harvest(config, "--audit")  # raises CommandError on any difference
    report = run_harvest(
        config_from_mapping(
            {"capability_list_url": published.capability_list_url, "destination": "mirror"},
            base_dir=tmp_path,
        ),
        Mode.AUDIT,
    )
    assert report.audit is not None and report.audit.in_sync
    assert report.audit.same == len(published.files()) == 11


def test_incremental_after_more_changes_is_idempotent(portal: str, tmp_path: Path) -> None:
    published = PublishedSet(portal, tmp_path / "log", "log")
    published.ingest([published.write(f"r{n}.txt", article(n)) for n in range(4)])
    config = write_config(tmp_path, published)
    mirror = published.mirror(tmp_path / "mirror")
    harvest(config, "--baseline")

    # The same resource changes several times between runs: only its last state counts.
    published.ingest([published.write("r0.txt", article(0, version=2), change="updated")])
    published.ingest([published.write("r0.txt", article(0, version=3), change="updated")])
    published.ingest([published.delete("r1.txt")])
    published.ingest([published.write("r1.txt", article(1, version=2))])
    published.ingest([published.delete("r2.txt")])
    first = harvest(config, "--incremental")
    second = harvest(config, "--incremental")

    assert "downloaded 2, deleted 1" in first, first
    assert "downloaded 0, deleted 0" in second, second
    assert tree(mirror) == published.files()


def test_protected_set_is_harvested_with_its_bearer_token_only(portal: str, tmp_path: Path) -> None:
    published = PublishedSet(portal, tmp_path / "private", "private", protected=True)
    published.ingest([published.write(f"secret-{n}.txt", article(n)) for n in range(5)])
    _, key = ApiToken.issue(provider=published.resource_set.provider, name="mirror")
    stranger = DataProvider.objects.create(slug="other", name="Other")
    _, foreign_key = ApiToken.issue(provider=stranger, name="other")
    mirror = published.mirror(tmp_path / "mirror")

    with pytest.raises(CommandError, match=r"cannot read the Capability List.*HTTP 401"):
        harvest(write_config(tmp_path, published), "--baseline")
    with pytest.raises(CommandError, match=r"cannot read the Capability List.*HTTP 403"):
        harvest(write_config(tmp_path, published, bearer_token=foreign_key), "--baseline")
    assert not mirror.exists()

    out = harvest(write_config(tmp_path, published, bearer_token=key), "--baseline")

    assert out.startswith("baseline: downloaded 5, deleted 0, skipped 0, failed 0"), out
    assert tree(mirror) == published.files()


def test_a_change_published_after_an_incremental_run_is_still_harvested(
    portal: str, tmp_path: Path
) -> None:
    """With a broker, regeneration follows a change by seconds (more with Elasticsearch).

    A run in between must not move its sync point past the change's `datetime`.
    """
    published = PublishedSet(portal, tmp_path / "late", "late")
    published.ingest([published.write(f"r{n}.txt", article(n)) for n in range(2)])
    config = write_config(tmp_path, published)
    mirror = published.mirror(tmp_path / "mirror")
    harvest(config, "--baseline")
    with receivers_muted(events_ingested):  # regeneration is pending
        ingest_events(
            resource_set=published.resource_set,
            events=[published.write("r0.txt", article(0, version=2), change="updated")],
        )

    early = harvest(config, "--incremental")
    regenerate(published.resource_set)
    late = harvest(config, "--incremental")

    assert "downloaded 0" in early, early
    assert "downloaded 1" in late, late
    assert tree(mirror) == published.files()


def test_harvest_from_the_portals_base_url_finds_every_public_set(
    portal: str, tmp_path: Path
) -> None:
    """Discovery through the portal's well-known Source Description: a folder per set."""
    articles = PublishedSet(portal, tmp_path / "articles", "articles")
    log = PublishedSet(portal, tmp_path / "log", "log")
    articles.ingest([articles.write(f"a{n}.txt", article(n)) for n in range(4)])
    log.ingest([log.write("entry.txt", article(9))])
    config = tmp_path / "harvest.yaml"
    config.write_text(f"source_url: {portal}/\ndestination: mirror\nretries: 1\ntimeout: 10\n")

    out = harvest(config)

    assert out.splitlines()[-1].startswith("baseline: downloaded 5, deleted 0, skipped 0, failed 0")
    assert tree(articles.mirror(tmp_path / "mirror" / "articles")) == articles.files()
    assert tree(log.mirror(tmp_path / "mirror" / "log")) == log.files()

    one_set = tmp_path / "one.yaml"
    one_set.write_text(f"source_url: {portal}/\nset: log\ndestination: one\nretries: 1\n")
    out = harvest(one_set)

    assert out.startswith("baseline: downloaded 1, deleted 0, skipped 0, failed 0"), out
    assert tree(log.mirror(tmp_path / "one")) == log.files()
