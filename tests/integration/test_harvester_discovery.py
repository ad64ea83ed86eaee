"""Discovery: the harvester starts from a Capability List, a Source Description or a site.

A small site on 127.0.0.1 serves each form the spec allows (§12): a Source
Description at the well-known URI, `Sitemap:` lines in robots.txt, a
`Link: <...>; rel="resourcesync"` header and an HTML `<link rel="resourcesync">`.
Its documents are written with resync, the reference library.
"""

from __future__ import annotations

import hashlib
import io
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from resync import CapabilityList, Resource, ResourceList, SourceDescription

from harvester.config import HarvestConfig, config_from_mapping
from harvester.sync import Mode, run_harvest
from harvester.walk import HarvestError

# Every harvest is recorded in the portal's journal.
pytestmark = pytest.mark.django_db

AT = "2024-01-01T00:00:00Z"
HOME = b"<!DOCTYPE html><html><head><title>Data</title></head><body>Hello</body></html>"


class Site:
    """Routes of path -> (status, headers, body), and the paths requested."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.requests: list[str] = []

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def serve(self, path: str, body: bytes | str, status: int = 200, **headers: str) -> str:
        data = body.encode() if isinstance(body, str) else body
        self.routes["/" + path.lstrip("/")] = (status, headers, data)
        return self.url(path)

    def add_set(self, name: str, files: dict[str, bytes]) -> str:
        """A set under /sets/<name>/: its files, Resource List and Capability List."""
        listing = ResourceList()
        listing.md_at = AT
        listing.up = self.url(f"sets/{name}/capabilitylist.xml")
        for path, content in files.items():
            uri = self.serve(f"sets/{name}/files/{path}", content)
            listing.add(
                Resource(
                    uri=uri,
                    length=len(content),
                    md5=hashlib.md5(content, usedforsecurity=False).hexdigest(),
                )
            )
        capabilities = CapabilityList()
        capabilities.up = self.url(".well-known/resourcesync")
        capabilities.add_capability(
            uri=self.serve(f"sets/{name}/resourcelist.xml", listing.as_xml()), name="resourcelist"
        )
        return self.serve(f"sets/{name}/capabilitylist.xml", capabilities.as_xml())

    def source_description(self, *capability_lists: str) -> str:
        description = SourceDescription()
        for url in capability_lists:
            description.add_capability_list(url)
        return self.serve(".well-known/resourcesync", description.as_xml())


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        site = self.server.site
        site.requests.append(self.path)
        status, headers, body = site.routes.get(self.path, (404, {}, b"not found"))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name.replace("_", "-"), value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet."""


class _Server(ThreadingHTTPServer):
    site: Site


@pytest.fixture
def site() -> Iterator[Site]:
    server = _Server(("127.0.0.1", 0), _Handler)
    server.site = Site(server.server_address[1])
    server.site.serve("/", HOME, Content_Type="text/html")
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield server.site
    server.shutdown()
    server.server_close()
    thread.join()


def make_config(destination: Path, **settings: Any) -> HarvestConfig:
    settings = {"destination": str(destination), "retries": 0, "timeout": 5, **settings}
    return config_from_mapping(settings, base_dir=destination.parent)


def tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.name.startswith(".resourcesync")
    }


def test_a_source_url_that_is_a_capability_list_is_harvested_as_one(
    site: Site, tmp_path: Path
) -> None:
    url = site.add_set("a", {"x.txt": b"x"})

    report = run_harvest(make_config(tmp_path / "m", source_url=url), Mode.BASELINE)

    assert (report.downloaded, report.failed) == (1, 0)
    assert tree(tmp_path / "m") == {f"127.0.0.1_{site.port}/sets/a/files/x.txt": b"x"}


def test_a_source_description_harvests_every_set_each_in_its_folder(
    site: Site, tmp_path: Path
) -> None:
    description = site.source_description(
        site.add_set("a", {"x.txt": b"x", "y.txt": b"y"}), site.add_set("b", {"z.txt": b"z"})
    )
    config_file = tmp_path / "harvest.yaml"
    config_file.write_text(f"source_url: {description}\ndestination: m\nretries: 0\n")
    out = io.StringIO()

    call_command("harvest", str(config_file), stdout=out)  # each set's default: a baseline
    call_command("harvest", str(config_file), "--audit", stdout=out)

    host = f"127.0.0.1_{site.port}"
    assert tree(tmp_path / "m") == {
        f"a/{host}/sets/a/files/x.txt": b"x",
        f"a/{host}/sets/a/files/y.txt": b"y",
        f"b/{host}/sets/b/files/z.txt": b"z",
    }
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("a: baseline: downloaded 2, deleted 0, skipped 0, failed 0")
    assert lines[1].startswith("b: baseline: downloaded 1, deleted 0, skipped 0, failed 0")
    assert lines[2].startswith("baseline: downloaded 3, deleted 0, skipped 0, failed 0")
    assert lines[-1].startswith("audit: 3 same, 0 missing, 0 extra, 0 changed, failed 0")


def test_a_set_below_another_gets_a_folder_of_its_own(site: Site, tmp_path: Path) -> None:
    """`a` and `a/b` were nested folders: the audit of `a` counted the files of `a/b`."""
    description = site.source_description(
        site.add_set("a", {"x.txt": b"x"}),
        site.add_set("a/b", {"y.txt": b"y"}),
        site.add_set("c", {"z.txt": b"z"}),
    )
    config_file = tmp_path / "harvest.yaml"
    config_file.write_text(f"source_url: {description}\ndestination: m\nretries: 0\n")
    out = io.StringIO()

    call_command("harvest", str(config_file), stdout=out)
    call_command("harvest", str(config_file), "--audit", stdout=out)

    assert out.getvalue().splitlines()[-1].startswith("audit: 3 same, 0 missing, 0 extra")
    folders = sorted(path.name for path in (tmp_path / "m").iterdir() if path.is_dir())
    assert [name.split("-")[0] for name in folders] == ["a", "b", "c"]


def test_a_set_the_source_adds_leaves_every_copy_where_it_was(site: Site, tmp_path: Path) -> None:
    """Folders were named by what the listed sets do not share: a new set under another
    prefix renamed every folder, so each set was copied again beside a stale copy that
    nothing kept in step."""
    first = [site.add_set("x/a", {"a.txt": b"a"}), site.add_set("x/b", {"b.txt": b"b"})]
    site.source_description(*first)
    config = make_config(tmp_path / "m", source_url=site.url(".well-known/resourcesync"))
    run_harvest(config, Mode.BASELINE)
    site.source_description(*first, site.add_set("y/c", {"c.txt": b"c"}))

    report = run_harvest(config, Mode.BASELINE)

    host = f"127.0.0.1_{site.port}"
    assert report.downloaded == 1
    assert tree(tmp_path / "m") == {
        f"a/{host}/sets/x/a/files/a.txt": b"a",
        f"b/{host}/sets/x/b/files/b.txt": b"b",
        f"y/c/{host}/sets/y/c/files/c.txt": b"c",
    }
    assert run_harvest(config, Mode.AUDIT).audit.extra == []


def test_a_source_that_lists_a_second_set_moves_the_first_into_its_folder(
    site: Site, tmp_path: Path
) -> None:
    """One set was copied at the destination's root; once the source listed two, the first
    went to a folder of its own, copied again, and the root copy was left behind."""
    first = site.add_set("a", {"x.txt": b"x"})
    site.source_description(first)
    config = make_config(tmp_path / "m", source_url=site.url(".well-known/resourcesync"))
    run_harvest(config, Mode.BASELINE)
    host = f"127.0.0.1_{site.port}"
    assert tree(tmp_path / "m") == {f"{host}/sets/a/files/x.txt": b"x"}
    site.source_description(first, site.add_set("b", {"z.txt": b"z"}))

    report = run_harvest(config, Mode.BASELINE)

    assert report.downloaded == 1
    assert tree(tmp_path / "m") == {
        f"a/{host}/sets/a/files/x.txt": b"x",
        f"b/{host}/sets/b/files/z.txt": b"z",
    }
    audit = run_harvest(config, Mode.AUDIT).audit
    assert (audit.same, audit.extra) == (2, [])


def test_a_move_into_the_folder_stopped_half_way_is_finished(site: Site, tmp_path: Path) -> None:
    """A run stopped while it moved the root copy into its folder: the next run moves the
    rest (the state file goes last), and fetches nothing again."""
    from harvester.layout import LAYOUT_FILE

    first = site.add_set("a", {"x.txt": b"x"})
    site.source_description(first)
    config = make_config(tmp_path / "m", source_url=site.url(".well-known/resourcesync"))
    run_harvest(config, Mode.BASELINE)
    second = site.add_set("b", {"z.txt": b"z"})
    site.source_description(first, second)
    host = f"127.0.0.1_{site.port}"
    (tmp_path / "m" / LAYOUT_FILE).write_text(f'{{"folders": {{"{first}": "a", "{second}": "b"}}}}')
    (tmp_path / "m" / "a").mkdir()
    (tmp_path / "m" / host).rename(tmp_path / "m" / "a" / host)

    report = run_harvest(config, Mode.BASELINE)

    assert report.downloaded == 1
    assert tree(tmp_path / "m") == {
        f"a/{host}/sets/a/files/x.txt": b"x",
        f"b/{host}/sets/b/files/z.txt": b"z",
    }
    assert run_harvest(config, Mode.AUDIT).audit.extra == []


def test_set_picks_one_set_of_a_source_description(site: Site, tmp_path: Path) -> None:
    description = site.source_description(
        site.add_set("a", {"x.txt": b"x"}), site.add_set("b", {"z.txt": b"z"})
    )

    report = run_harvest(
        make_config(tmp_path / "m", source_url=description, set="b"), Mode.BASELINE
    )

    assert (report.downloaded, report.failed) == (1, 0)
    assert tree(tmp_path / "m") == {f"127.0.0.1_{site.port}/sets/b/files/z.txt": b"z"}
    with pytest.raises(HarvestError, match=r"config key 'set': 'c' matches no set.*sets/a/"):
        run_harvest(make_config(tmp_path / "n", source_url=description, set="c"), Mode.BASELINE)


def test_set_harvests_into_the_folder_the_sets_were_given(site: Site, tmp_path: Path) -> None:
    """`set:` copied its set at the destination's root even where a harvest of every set
    had given it a folder: a second copy, which an audit took the other sets for extra."""
    site.source_description(site.add_set("a", {"x.txt": b"x"}), site.add_set("b", {"z.txt": b"z"}))
    every = make_config(tmp_path / "m", source_url=site.url(".well-known/resourcesync"))
    run_harvest(every, Mode.BASELINE)
    before = tree(tmp_path / "m")
    one = make_config(tmp_path / "m", source_url=site.url(".well-known/resourcesync"), set="b")

    report = run_harvest(one, Mode.BASELINE)

    assert (report.downloaded, report.skipped, report.failed) == (0, 1, 0)
    assert tree(tmp_path / "m") == before
    audit = run_harvest(one, Mode.AUDIT).audit
    assert (audit.same, audit.extra) == (1, [])


def test_switching_between_set_and_every_set_copies_nothing_twice(
    site: Site, tmp_path: Path
) -> None:
    urls = [site.add_set("a", {"x.txt": b"x"}), site.add_set("b", {"z.txt": b"z"})]
    source = site.source_description(*urls)
    only_b = make_config(tmp_path / "m", source_url=source, set="b")
    host = f"127.0.0.1_{site.port}"
    run_harvest(only_b, Mode.BASELINE)
    assert tree(tmp_path / "m") == {f"{host}/sets/b/files/z.txt": b"z"}  # one set: the root

    every = run_harvest(make_config(tmp_path / "m", source_url=source), Mode.BASELINE)
    again = run_harvest(only_b, Mode.BASELINE)
    other = run_harvest(make_config(tmp_path / "m", source_url=source, set="a"), Mode.BASELINE)

    assert [r.downloaded for r in (every, again, other)] == [1, 0, 0]
    assert tree(tmp_path / "m") == {
        f"a/{host}/sets/a/files/x.txt": b"x",
        f"b/{host}/sets/b/files/z.txt": b"z",
    }


def test_follow_with_set_follows_the_copy_in_its_folder(site: Site, tmp_path: Path) -> None:
    """`--follow` with `set:` kept its copy at the root too, beside the sets' folders."""
    from harvester.follow import single_set

    source = site.source_description(
        site.add_set("a", {"x.txt": b"x"}), site.add_set("b", {"z.txt": b"z"})
    )
    run_harvest(make_config(tmp_path / "m", source_url=source), Mode.BASELINE)

    followed = single_set(make_config(tmp_path / "m", source_url=source, set="b"))

    assert followed.capability_list_url == site.url("sets/b/capabilitylist.xml")
    assert followed.destination == tmp_path / "m" / "b"


def advertise(site: Site, form: str, capability_list: str) -> None:
    """Make the site lead to `capability_list` in one of the ways the spec allows."""
    relative = capability_list.removeprefix(site.url())
    if form == "well-known":
        site.source_description(capability_list)
    elif form == "robots.txt":
        resource_list = capability_list.replace("capabilitylist", "resourcelist")
        site.serve("robots.txt", f"User-agent: *\nDisallow:\nSitemap: {resource_list}\n")
    elif form == "link-header":
        site.serve("/", HOME, Content_Type="text/html", Link=f'</{relative}>; rel="resourcesync"')
    else:
        page = HOME.replace(
            b"</head>", f'<link rel="resourcesync" href="/{relative}"></head>'.encode()
        )
        site.serve("/", page, Content_Type="text/html")


@pytest.mark.parametrize("form", ["well-known", "robots.txt", "link-header", "html-link"])
def test_a_base_url_leads_to_the_capability_list(site: Site, tmp_path: Path, form: str) -> None:
    advertise(site, form, site.add_set("a", {"x.txt": b"x"}))

    report = run_harvest(make_config(tmp_path / "m", source_url=site.url()), Mode.BASELINE)

    assert (report.downloaded, report.failed) == (1, 0)
    assert tree(tmp_path / "m") == {f"127.0.0.1_{site.port}/sets/a/files/x.txt": b"x"}


def test_the_well_known_uri_comes_first(site: Site, tmp_path: Path) -> None:
    first, other = site.add_set("a", {"x.txt": b"x"}), site.add_set("b", {"z.txt": b"z"})
    advertise(site, "well-known", first)
    advertise(site, "robots.txt", other)
    advertise(site, "link-header", other)

    report = run_harvest(make_config(tmp_path / "m", source_url=site.url()), Mode.BASELINE)

    assert report.downloaded == 1
    assert "/robots.txt" not in site.requests
    assert tree(tmp_path / "m") == {f"127.0.0.1_{site.port}/sets/a/files/x.txt": b"x"}


def test_a_site_without_resourcesync_says_where_it_looked(site: Site, tmp_path: Path) -> None:
    site.serve("robots.txt", "Sitemap: /sitemap.xml\n")
    site.serve("sitemap.xml", '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"/>')

    with pytest.raises(HarvestError) as raised:
        run_harvest(make_config(tmp_path / "m", source_url=site.url()), Mode.BASELINE)

    message = str(raised.value)
    assert message.startswith(f"found no ResourceSync source from {site.url()}; tried: ")
    for place in (".well-known/resourcesync failed: HTTP 404", "sitemap.xml: not a ResourceSync"):
        assert place in message


def test_discovery_follows_no_link_off_the_allowed_hosts(site: Site, tmp_path: Path) -> None:
    site.serve("/", HOME, Link='<http://127.0.0.2:9/capabilitylist.xml>; rel="resourcesync"')

    with pytest.raises(
        HarvestError, match=r"capabilitylist\.xml failed: the URL is not on an allowed"
    ):
        run_harvest(make_config(tmp_path / "m", source_url=site.url()), Mode.BASELINE)


def test_a_source_description_without_sets_is_said_so(site: Site, tmp_path: Path) -> None:
    description = site.source_description()

    with pytest.raises(HarvestError, match="a Source Description that lists no set"):
        run_harvest(make_config(tmp_path / "m", source_url=description), Mode.BASELINE)


def test_a_destination_an_older_version_laid_out_keeps_its_folders(
    site: Site, tmp_path: Path
) -> None:
    """Without the layout file (a destination harvested by an older version), the sets'
    folders were taken for names already at the root: every set got a new folder and
    was copied again beside its old copy."""
    from dataclasses import replace

    from harvester.sets import set_folders

    urls = [site.add_set("a", {"x.txt": b"x"}), site.add_set("b", {"z.txt": b"z"})]
    site.source_description(*urls)
    config = make_config(tmp_path / "m", source_url=site.url(".well-known/resourcesync"))
    for url, folder in set_folders(urls).items():  # what the older version did
        one = replace(config, source_url=None, capability_list_url=url)
        run_harvest(replace(one, destination=config.destination / folder), Mode.BASELINE)
    before = tree(tmp_path / "m")

    report = run_harvest(config, Mode.INCREMENTAL)

    assert report.downloaded == 0
    assert tree(tmp_path / "m") == before
    assert sorted(p.name for p in (tmp_path / "m").iterdir() if p.is_dir()) == ["a", "b"]
