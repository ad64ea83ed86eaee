"""Discovery's pure parts: robots.txt and HTML links, choosing a set, naming set folders."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from harvester.client import Page
from harvester.discovery import choose_set, html_links, page_links, sitemap_lines
from harvester.sets import set_folders
from harvester.walk import HarvestError

BASE = "https://data.example.org"


def test_sitemap_lines_of_robots_txt_are_made_absolute() -> None:
    robots = Page(
        url=f"{BASE}/robots.txt",
        body=b"User-agent: *\nDisallow: /private\nSITEMAP: /rs/resourcelist.xml\n"
        b"Sitemap:https://cdn.example.org/rl.xml\r\n# Sitemap: /commented.xml\nSitemap:\n",
        links={},
    )

    assert sitemap_lines(robots) == [
        f"{BASE}/rs/resourcelist.xml",
        "https://cdn.example.org/rl.xml",
    ]


def test_html_links_with_the_resourcesync_relation() -> None:
    page = Page(
        url=f"{BASE}/about/",
        body=b"""<html><head>
        <link rel="stylesheet" href="/site.css">
        <LINK REL="ResourceSync" HREF="../rs/capabilitylist.xml">
        <link rel="alternate resourcesync" href="https://data.example.org/rs/other.xml">
        </head><body><a rel="resourcesync" href="/not-a-link-element.xml">x</a></body></html>""",
        links={"resourcesync": f"{BASE}/rs/from-header.xml"},
    )

    assert list(html_links(page)) == [f"{BASE}/rs/capabilitylist.xml", f"{BASE}/rs/other.xml"]
    assert page_links(page)[0] == f"{BASE}/rs/from-header.xml"
    assert list(html_links(Page(url=BASE, body=b"", links={}))) == []


def test_choose_set_by_url_or_folder() -> None:
    sets = [f"{BASE}/rs/acme/articles/capabilitylist.xml", f"{BASE}/rs/acme/log/capabilitylist.xml"]

    assert choose_set(sets, "articles") == sets[0]
    assert choose_set(sets, "acme/log/") == sets[1]
    assert choose_set(sets, sets[1]) == sets[1]
    with pytest.raises(HarvestError, match="'acme' matches no set"):
        choose_set(sets, "acme")
    with pytest.raises(HarvestError, match="matches several sets"):
        choose_set([*sets, f"{BASE}/other/log/capabilitylist.xml"], "log")


@pytest.mark.parametrize(
    ("urls", "folders"),
    [
        (
            [
                f"{BASE}/rs/acme/articles/capabilitylist.xml",
                f"{BASE}/rs/acme/log/capabilitylist.xml",
            ],
            ["articles", "log"],
        ),
        ([f"{BASE}/rs/cl-a.xml", f"{BASE}/rs/cl-b.xml"], ["cl-a.xml", "cl-b.xml"]),
        (
            [
                f"{BASE}/rs/capabilitylist.xml",
                "http://mirror.example.net:8080/rs/capabilitylist.xml",
            ],
            ["data.example.org/rs", "mirror.example.net_8080/rs"],
        ),
    ],
)
def test_each_set_gets_the_folder_its_url_does_not_share(
    urls: list[str], folders: list[str]
) -> None:
    assert list(set_folders(urls).values()) == [PurePosixPath(folder) for folder in folders]


def apart(folders: list[PurePosixPath]) -> bool:
    """No folder equal to, inside or above another (case aside), none a name kept for state."""
    keys = [folder.as_posix().casefold() for folder in folders]
    return not any(
        a == b or b.startswith(a.rstrip("/") + "/") or a == "."
        for i, a in enumerate(keys)
        for j, b in enumerate(keys)
        if i != j
    ) and not any(part.startswith(".resourcesync") for f in folders for part in f.parts)


@pytest.mark.parametrize(
    "urls",
    [
        # The common file name dropped: `a` holds `a/b`.
        [f"{BASE}/a/cl.xml", f"{BASE}/a/b/cl.xml", f"{BASE}/c/cl.xml"],
        # One Capability List's path is the other's folder: the first would be the destination.
        [f"{BASE}/x/capabilitylist.xml", f"{BASE}/x/capabilitylist.xml/y.xml"],
        # The same path once mapped: scheme, default port, host case, percent-encoding.
        [f"{BASE}/x/cl.xml", "http://data.example.org/x/cl.xml"],
        [f"{BASE}/x/cl.xml", "https://DATA.example.org:443/x/%63l.xml"],
        [f"{BASE}/x/cl.xml", f"{BASE}/x/cl.xml"],
        # The same folder on a case-insensitive file system.
        [f"{BASE}/a/cl.xml", f"{BASE}/A/cl.xml"],
        # A folder named as the harvester's own files.
        [f"{BASE}/.resourcesync-state.json", f"{BASE}/.resourcesync.lock", f"{BASE}/b.xml"],
    ],
)
def test_no_set_folder_is_inside_another_or_the_harvesters(urls: list[str]) -> None:
    folders = set_folders(urls)

    assert list(folders) == list(dict.fromkeys(urls))
    assert apart(list(folders.values()))
    assert set_folders(list(reversed(urls))) == folders  # the order listed does not matter


def test_only_the_sets_that_clash_get_a_digest() -> None:
    urls = [f"{BASE}/a/cl.xml", f"{BASE}/a/b/cl.xml", f"{BASE}/c/cl.xml"]

    folders = [str(folder) for folder in set_folders(urls).values()]

    assert folders[0].startswith("a-") and folders[1].startswith("b-")
    assert folders[2] == "c"
    assert len(folders[0]) == len("a-") + 8


def test_sets_that_cannot_be_kept_apart_are_refused_naming_them() -> None:
    nested = [f"{BASE}/a/cl.xml", f"{BASE}/a/b/cl.xml"]
    taken = str(set_folders([*nested, f"{BASE}/z/cl.xml"])[nested[0]])  # what `a` falls back to
    crafted = f"{BASE}/{taken}/cl.xml"

    with pytest.raises(HarvestError, match=f"{nested[0]}.*{crafted}"):
        set_folders([*nested, crafted])
