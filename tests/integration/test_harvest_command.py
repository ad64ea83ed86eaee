"""The harvester as a command-line tool: progress, JSON, --delete, help, friendly errors."""

# The test site and its mirror are the fixtures of test_harvester_resync, imported here.
# ruff: noqa: F811

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from resync import ResourceList
from resync.mapper import Mapper

from harvester.config import load_config
from harvester.progress import BarProgress, LineProgress

from .test_harvester_resync import AT, Source, copy_of, resource_list, write_config
from .test_harvester_resync import destination as mirror  # noqa: F401
from .test_harvester_resync import source as site  # noqa: F401

pytestmark = pytest.mark.django_db
REPO = Path(__file__).resolve().parents[2]


def an_index_of_five(site: Source) -> None:
    """Five resources in a Resource List Index of three parts."""
    resources = [site.resource(f"res/{n}.txt", f"item {n}".encode()) for n in range(5)]
    listing = ResourceList(mapper=Mapper([site.url(""), str(site.root)]))
    listing.md_at = AT
    listing.up = site.url("capabilitylist.xml")
    listing.add(resources)
    listing.max_sitemap_entries = 2
    listing.write(basename=str(site.root / "resourcelist.xml"))
    site.capability_list(resourcelist=site.url("resourcelist.xml"))


def harvest(config: Path, *flags: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("harvest", str(config), *flags, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def progress_lines(err: str) -> list[tuple[int, int, str]]:
    """(done, total, phase) of each `progress: done/total (p%) phase` line."""
    shown = re.findall(r"^progress: (\d+)/(\d+)(?: \(\d+%\))? (.+)$", err, re.MULTILINE)
    return [(int(done), int(total), phase) for done, total, phase in shown]


def never_back(lines: list[tuple[int, int, str]]) -> None:
    """Within a phase, the count and its share only grow; each phase ends complete."""
    by_phase: dict[str, list[tuple[int, int]]] = {}
    for done, total, phase in lines:
        by_phase.setdefault(phase, []).append((done, total))
    for phase, counts in by_phase.items():
        shares = [done / total for done, total in counts]
        assert shares == sorted(shares), f"{phase} went back: {counts}"
        assert counts[-1][0] == counts[-1][1], f"{phase} ended at {counts[-1]}"


def test_progress_names_each_part_of_an_index_and_never_goes_back(site, mirror, tmp_path):
    an_index_of_five(site)
    _, err = harvest(write_config(tmp_path, site, mirror), "--baseline")
    lines = progress_lines(err)
    never_back(lines)
    assert [line for line in lines if line[0] == line[1]] == [
        (2, 2, "download (part 1 of 3)"),
        (2, 2, "download (part 2 of 3)"),
        (1, 1, "download (part 3 of 3)"),
    ]
    assert "\r" not in err  # no bar drawing in a log
    _, quiet = harvest(write_config(tmp_path, site, mirror), "--baseline", "-v", "0")
    assert "progress:" not in quiet


def test_a_new_phase_counts_from_zero_on_a_terminal_and_in_lines():
    """A dump baseline: packages, then their members. The figure is the phase's own."""
    stream = io.StringIO()
    with BarProgress(stream) as bar:
        bar.start("packages", 2)
        bar.advance(2)
        bar.start("extract", 30)
        bar.advance(3)
        assert (bar._bar.n, bar._bar.total, bar._bar.desc.rstrip(": ")) == (3, 30, "extract")
    log = io.StringIO()
    with LineProgress(log) as lines:
        lines.start("packages", 2)
        lines.advance(2)
        lines.start("extract", 30)
        for _ in range(30):
            lines.advance()
        lines.start("download", 0)
    shown = progress_lines(log.getvalue())
    never_back(shown)
    assert shown[:2] == [(2, 2, "packages"), (3, 30, "extract")]
    assert shown[-1] == (30, 30, "extract")


def test_json_report(site, mirror, tmp_path):
    resources = [site.resource("a", b"a v1")]
    site.capability_list(resourcelist=resource_list(site, resources))
    out, _ = harvest(write_config(tmp_path, site, mirror), "--baseline", "--json")
    report = json.loads(out)
    assert (report["ok"], report["mode"], report["downloaded"], report["failed"]) == (
        True,
        "baseline",
        1,
        0,
    )


def test_json_report_of_a_run_that_cannot_start(site, mirror, tmp_path):
    out = io.StringIO()
    with pytest.raises(CommandError, match="cannot read the Capability List"):
        call_command("harvest", str(write_config(tmp_path, site, mirror)), "--json", stdout=out)
    assert json.loads(out.getvalue())["ok"] is False


def test_no_destination_folder_when_the_first_request_fails(site, mirror, tmp_path):
    with pytest.raises(CommandError, match="cannot read the Capability List"):
        harvest(write_config(tmp_path, site, mirror), "--baseline")
    assert not mirror.exists()


def test_a_source_description_given_as_capability_list_gets_a_friendly_message(
    site, mirror, tmp_path
):
    site.publish(
        "capabilitylist.xml",
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/"><rs:md capability="description"/>'
        f"<url><loc>{site.url('set/capabilitylist.xml')}</loc>"
        '<rs:md capability="capabilitylist"/></url></urlset>',
    )
    with pytest.raises(
        CommandError,
        match="is a Source Description, not a Capability List: give it as `source_url:`",
    ):
        harvest(write_config(tmp_path, site, mirror))
    assert not mirror.exists()


def test_delete_removes_local_files_the_source_no_longer_lists(site, mirror, tmp_path):
    resources = [site.resource("a", b"a"), site.resource("b", b"b")]
    site.capability_list(resourcelist=resource_list(site, resources))
    config = write_config(tmp_path, site, mirror)
    harvest(config, "--baseline")
    stray = copy_of(site, mirror, "stray.txt")
    stray.write_text("left over")
    site.capability_list(resourcelist=resource_list(site, resources[:1]))

    harvest(config, "--baseline")  # without --delete, unlisted files stay
    assert stray.exists() and copy_of(site, mirror, "b").exists()
    out, _ = harvest(config, "--baseline", "--delete")
    assert "deleted 2" in out
    assert not stray.exists() and not copy_of(site, mirror, "b").exists()
    assert copy_of(site, mirror, "a").read_bytes() == b"a"
    assert (mirror / ".resourcesync-state.json").exists()


def test_delete_removes_nothing_when_part_of_the_listing_is_missing(site, mirror, tmp_path):
    an_index_of_five(site)
    config = write_config(tmp_path, site, mirror)
    harvest(config, "--baseline")
    site.planned_errors["resourcelist00001.xml"] = [500, 500, 500]
    with pytest.raises(CommandError, match="failed"):
        harvest(config, "--baseline", "--delete")
    assert all(copy_of(site, mirror, f"res/{n}.txt").exists() for n in range(5))


def test_help_lists_the_config_keys_and_the_sample_config_loads(capsys):
    with pytest.raises(SystemExit):
        call_command("harvest", "--help")
    text = capsys.readouterr().out
    for key in ("capability_list_url", "source_url", "mirror", "concurrency", "allowed_hosts"):
        assert key in text
    assert "harvest.example.yaml" in text
    config = load_config(REPO / "harvest.example.yaml")
    assert config.capability_list_url.endswith("/capabilitylist.xml")
