"""`/robots.txt` names the Resource List of every set anyone may read (spec §6.3)."""

from __future__ import annotations

import pytest

from sources.models import DataProvider, ResourceSet

from ..support import make_set

pytestmark = pytest.mark.django_db

BASE = "http://127.0.0.1:8000"


def sitemap_lines(client) -> list[str]:
    response = client.get("/robots.txt")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    return [line for line in response.content.decode().splitlines() if line.startswith("Sitemap:")]


def test_robots_txt_lists_public_resource_lists_only(client, settings) -> None:
    settings.PUBLIC_BASE_URL = BASE
    make_set("acme", "articles")
    make_set("acme", "private", protected=True)
    make_set("acme", "changes-only", publish_resource_list=False)
    make_set("beta", "images")
    gone = make_set("gone", "old")
    DataProvider.objects.filter(pk=gone.provider_id).update(active=False)
    ResourceSet.objects.create(  # no capability settings saved: the defaults publish a list
        provider=DataProvider.objects.get(slug="beta"), slug="bare", name="bare",
        url_prefix="http://data.example.org/bare/",
    )  # fmt: skip

    assert sitemap_lines(client) == [
        f"Sitemap: {BASE}/resourcesync/acme/articles/resourcelist.xml",
        f"Sitemap: {BASE}/resourcesync/beta/bare/resourcelist.xml",
        f"Sitemap: {BASE}/resourcesync/beta/images/resourcelist.xml",
    ]


def test_robots_txt_allows_everything_and_answers_head_not_post(client) -> None:
    body = client.get("/robots.txt").content.decode()
    assert body.splitlines()[:2] == ["User-agent: *", "Disallow:"]
    assert sitemap_lines(client) == []
    assert client.head("/robots.txt").status_code == 200
    assert client.post("/robots.txt").status_code == 405
