"""The harvester baselines from the portal's own Resource Dump and follows its Change Dump.

The live portal serves no resource files here (SERVE_RESOURCE_FILES off), so
every byte the mirror gets comes out of dump packages, each checked against
its manifest; the audit must then find the mirror identical to the portal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harvester.state import load_state
from sitemaps.models import ChangePackage, ResourcePackage
from sources.models import CapabilitySettings, Change

from ..support import store_documents_in
from .test_harvester_portal import PublishedSet, article, harvest, tree, write_config

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def storage(settings, tmp_path: Path) -> None:
    store_documents_in(settings, tmp_path / "documents")


@pytest.fixture
def portal(live_server, settings) -> str:
    settings.PUBLIC_BASE_URL = live_server.url
    return live_server.url


@pytest.fixture(autouse=True)
def no_files(settings) -> None:
    """Only dumps can deliver bytes: a list-based harvest would fail on every resource."""
    settings.SERVE_RESOURCE_FILES = False


def with_dumps(published: PublishedSet) -> PublishedSet:
    CapabilitySettings.objects.filter(resource_set=published.resource_set).update(
        publish_resource_dump=True, publish_change_dump=True
    )
    published.resource_set.refresh_from_db()
    return published


def test_dump_baseline_and_change_dump_incremental_audit_clean(portal: str, tmp_path: Path):
    published = with_dumps(PublishedSet(portal, tmp_path / "articles", "articles"))
    names = [f"a/article-{n:02d}.txt" for n in range(8)] + ["notes/read me.txt", "café & co.txt"]
    published.ingest([published.write(name, article(n)) for n, name in enumerate(names)])
    assert ResourcePackage.objects.count() == 4  # 10 resources at 3 bitstreams a package
    config = write_config(tmp_path, published)
    mirror = published.mirror(tmp_path / "mirror")

    out = harvest(config, "--baseline")

    assert out.startswith("baseline: downloaded 10, deleted 0, skipped 0, failed 0"), out
    assert tree(mirror) == published.files()

    published.ingest([published.write("a/article-01.txt", article(1, 2), change="updated")])
    published.ingest(
        [
            published.write("a/article-01.txt", article(1, 3), change="updated"),
            published.write("notes/read me.txt", b"Read me, version 2.\n", change="updated"),
            published.delete("a/article-03.txt"),
            published.write("c/new.txt", article(20)),
        ]
    )
    assert ChangePackage.objects.count() >= 2

    out = harvest(config, "--incremental")

    assert "downloaded 3, deleted 1" in out and "failed 0" in out, out
    assert tree(mirror) == published.files()
    newest = Change.objects.filter(resource_set=published.resource_set).latest("datetime")
    state = load_state(tmp_path / "mirror", published.capability_list_url)
    assert state.synced_until == newest.datetime
    harvest(config, "--audit")  # raises CommandError on any difference

    again = harvest(config, "--incremental")
    assert "downloaded 0, deleted 0" in again, again


def test_a_protected_sets_packages_need_the_token(portal: str, tmp_path: Path) -> None:
    from sources.models import ApiToken

    published = with_dumps(PublishedSet(portal, tmp_path / "private", "private", protected=True))
    published.ingest([published.write(f"s{n}.txt", article(n)) for n in range(4)])
    _, key = ApiToken.issue(provider=published.resource_set.provider, name="mirror")

    out = harvest(write_config(tmp_path, published, bearer_token=key), "--baseline")

    assert out.startswith("baseline: downloaded 4, deleted 0, skipped 0, failed 0"), out
    assert tree(published.mirror(tmp_path / "mirror")) == published.files()


def test_a_resource_the_dump_leaves_out_is_fetched_from_the_list(
    portal: str, tmp_path: Path, settings
) -> None:
    """A Resource Dump may leave a listed resource out (the portal does what it cannot
    package: a URL with a query names no file it can read). The baseline took the dump
    for the whole set and reported nothing failed; only an audit found it missing."""
    from dataclasses import replace

    from sources.models import LocationType

    settings.SERVE_RESOURCE_FILES = True
    published = with_dumps(PublishedSet(portal, tmp_path / "articles", "articles"))
    packaged = published.write("a.txt", article(1))
    listed = published.write("q.txt", article(2))
    query = replace(listed, location_type=LocationType.URL, location_value=listed.uri + "?x=1",
                    uri=listed.uri + "?x=1")  # fmt: skip
    published.ingest([packaged, query])
    config = write_config(tmp_path, published)

    out = harvest(config, "--baseline")

    assert out.startswith("baseline: downloaded 2, deleted 0, skipped 0, failed 0"), out
    harvest(config, "--audit")  # raises CommandError on any difference
