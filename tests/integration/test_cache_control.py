"""Cache-Control per document type, as docs/scaling.md sets out for a CDN in front.

What changes under a URL must be revalidated (indexes, the open Change List,
the capability documents); what an update rewrites in place may be a minute
old (Resource List pages); what is final keeps a long
max-age (closed Change Lists, closed Change Dump packages). Protected sets are
`private`: no shared cache may keep them.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client

from sitemaps.caching import FINAL, PAGE, REVALIDATE
from sitemaps.models import ChangeListPage, ChangePackage
from sources.models import ApiToken

from ..support import created, make_set, store_documents_in
from .test_dumps import BASE as DUMP_BASE
from .test_dumps import FileSet, content

pytestmark = pytest.mark.django_db
BASE = "/resourcesync/acme/articles"


@pytest.fixture(autouse=True)
def storage(settings, tmp_path):
    store_documents_in(settings, tmp_path / "documents")


def cache_control(client: Client, path: str, **headers) -> str:
    response = client.get(path, headers=headers)
    assert response.status_code == 200, (path, response.status_code)
    return response["Cache-Control"]


def test_the_three_rules_for_the_lists_and_their_indexes(client):
    resource_set = make_set(entries_per_document=5, changelist_rotation=timedelta(seconds=0))
    created(resource_set, 12)
    closed = ChangeListPage.objects.filter(final=True).first()
    open_list = ChangeListPage.objects.get(until__isnull=True)
    assert closed is not None
    assert cache_control(client, f"{BASE}/resourcelist.xml") == f"public, {REVALIDATE}"
    assert cache_control(client, f"{BASE}/resourcelist-1.xml") == f"public, {PAGE}"
    assert cache_control(client, f"{BASE}/changelist.xml") == f"public, {REVALIDATE}"
    assert cache_control(client, f"{BASE}/changelist-{closed.number}.xml") == f"public, {FINAL}"
    assert cache_control(client, f"{BASE}/changelist-{open_list.number}.xml") == (
        f"public, {REVALIDATE}"
    )
    assert cache_control(client, f"{BASE}/changelist-open.xml") == f"public, {REVALIDATE}"
    assert cache_control(client, f"{BASE}/capabilitylist.xml") == f"public, {REVALIDATE}"
    assert cache_control(client, "/.well-known/resourcesync") == f"public, {REVALIDATE}"


def test_a_304_says_the_same_as_the_200(client):
    created(make_set(), 3)
    for path in (f"{BASE}/resourcelist.xml", f"{BASE}/changelist.xml"):
        for encoding in ("identity", "gzip"):
            first = client.get(path, headers={"Accept-Encoding": encoding})
            again = client.get(
                path, headers={"Accept-Encoding": encoding, "If-None-Match": first["ETag"]}
            )
            assert again.status_code == 304
            assert again["Cache-Control"] == first["Cache-Control"]
            assert again["ETag"] == first["ETag"]


def test_protected_sets_are_private_and_still_refused_without_a_token(client):
    resource_set = make_set(protected=True)
    created(resource_set, 3)
    _, key = ApiToken.issue(provider=resource_set.provider)
    token = {"Authorization": f"Bearer {key}"}
    for path in (f"{BASE}/resourcelist.xml", f"{BASE}/capabilitylist.xml"):
        refused = client.get(path)
        assert refused.status_code == 401
        assert "public" not in refused.get("Cache-Control", "")
        assert cache_control(client, path, **token) == f"private, {REVALIDATE}"
    other = make_set("other", "open")
    _, stranger = ApiToken.issue(provider=other.provider)
    assert client.get(f"{BASE}/resourcelist.xml", headers={
        "Authorization": f"Bearer {stranger}"
    }).status_code == 403  # fmt: skip
    # The Source Description lists the protected set for this token only.
    assert cache_control(client, "/.well-known/resourcesync", **token) == f"private, {REVALIDATE}"


def test_dump_packages_follow_their_windows(client, tmp_path: Path):
    files = FileSet(tmp_path / "files", changelist_rotation=timedelta(seconds=0))
    files.post([files.write(f"r{n}.txt", content(n)) for n in range(2)])  # closes its window
    capabilities = files.resource_set.capabilities
    capabilities.changelist_rotation = timedelta(days=1)
    capabilities.save()
    files.post([files.write("r5.txt", content(5))])  # in the open window
    final = ChangePackage.objects.filter(final=True).first()
    open_package = ChangePackage.objects.filter(final=False).first()
    assert final is not None and open_package is not None
    rules = {
        "resourcedump.xml": REVALIDATE,
        "changedump.xml": REVALIDATE,
        # Rebuilt in place, and resourcedump.xml lists its length and hashes: a cache
        # keeping it a minute would send a package the dump it came from does not list.
        "resourcedump-package-1.zip": REVALIDATE,
        "resourcedump-manifest-1.xml": REVALIDATE,
        f"changedump-package-{final.number}.zip": FINAL,
        f"changedump-manifest-{final.number}.xml": FINAL,
        f"changedump-package-{open_package.number}.zip": REVALIDATE,
        f"changedump-manifest-{open_package.number}.xml": REVALIDATE,
    }
    for name, rule in rules.items():
        assert cache_control(client, f"{DUMP_BASE}/{name}") == f"public, {rule}", name
