"""`manage.py harvest CONFIG [--baseline|--incremental|--audit] [--from T] [--until T]
[--dry-run] [--delete] [--json]`.

Without a mode flag the run is incremental once a baseline has succeeded,
else a baseline. Exits non-zero when anything failed or an audit differs.
Progress goes to stderr: one bar on a terminal, plain lines otherwise (cron);
`-v 0` turns it off.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, TextIO, cast

from django.core.management.base import BaseCommand, CommandError, CommandParser

from harvester import config as harvester_config
from harvester.config import ConfigError, HarvestConfig, load_config
from harvester.follow import interrupted_by_signals, run_follow, single_set
from harvester.progress import BarProgress, LineProgress, QuietProgress, progress_for
from harvester.report import SyncReport
from harvester.state import StateError
from harvester.sync import Mode, run_harvest
from harvester.walk import HarvestError
from sitemaps.protocol.reader import ResourceSyncParseError, parse_datetime

#: Failures and differences listed one per line before the rest are only counted.
MAX_LISTED = 50


class Command(BaseCommand):
    help = "Harvest a ResourceSync source into a local folder: baseline, incremental or audit."
    # Harvesting touches no models or URLs, and runs from cron on destination hosts.
    requires_system_checks: list[str] = []

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        """With the configuration keys under the options (`--help`)."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = config_help()
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "config", help="the harvester's YAML configuration file (see harvest.example.yaml)"
        )
        self._add_modes(parser)
        parser.add_argument(
            "--from",
            dest="range_from",
            type=_timestamp,
            metavar="TIME",
            help="start of the incremental range (default: the last sync point)",
        )
        parser.add_argument(
            "--until",
            dest="range_until",
            type=_timestamp,
            metavar="TIME",
            help="end of the incremental range (default: now)",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="report what would change; write nothing"
        )
        parser.add_argument(
            "--delete",
            action="store_true",
            help="as resync's --delete: a baseline also removes local files the source no "
            "longer lists, and an incremental run removes the copies of deleted resources "
            "even with `delete: false` in the config",
        )
        parser.add_argument(
            "--json", action="store_true", help="print the report as JSON on stdout"
        )

    @staticmethod
    def _add_modes(parser: CommandParser) -> None:
        """One of the modes; none: baseline first, incremental after (run_harvest decides)."""
        modes = parser.add_mutually_exclusive_group()
        for flag, mode, text in (
            ("--baseline", Mode.BASELINE, "copy everything (from the Resource Dump if any, "
             "else the Resource List)"),
            ("--incremental", Mode.INCREMENTAL, "apply changes (from the Change Dump if any, "
             "else the Change List)"),
            ("--audit", Mode.AUDIT, "compare the destination with the Resource List; "
             "change nothing"),
            ("--follow", "follow", "catch up, then apply change notifications as they arrive "
             "(WebSub) until Ctrl-C"),
        ):  # fmt: skip
            modes.add_argument(flag, action="store_const", dest="mode", const=mode, help=text)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config = load_config(options["config"])
            if options["delete"]:
                config = replace(config, delete=True, delete_unlisted=True)
            if options["mode"] == "follow":
                report = self._follow(config, options)
            else:
                report = self._harvest(config, options)
        except (ConfigError, HarvestError, StateError, OSError) as error:
            if options["json"]:
                self.stdout.write(json.dumps({"ok": False, "error": str(error)}))
            raise CommandError(str(error)) from error
        if options["json"]:
            self.stdout.write(json.dumps(report.as_dict(), indent=2))
        else:
            self._print(report)
        if report.failures:
            raise CommandError(f"{report.failed} failed; see the list above")
        if report.audit is not None and not report.audit.in_sync:
            raise CommandError("the destination differs from the source")

    def _progress(self, options: dict[str, Any]) -> BarProgress | LineProgress | QuietProgress:
        stream = cast(TextIO, self.stderr._out)  # the command's own stderr
        return progress_for(stream, quiet=options["verbosity"] == 0)

    def _harvest(self, config: HarvestConfig, options: dict[str, Any]) -> SyncReport:
        with self._progress(options) as progress:
            return run_harvest(
                config,
                options["mode"],
                range_from=options["range_from"],
                range_until=options["range_until"],
                dry_run=options["dry_run"],
                progress=progress,
            )

    def _follow(self, config: HarvestConfig, options: dict[str, Any]) -> SyncReport:
        if options["range_from"] or options["range_until"] or options["dry_run"]:
            raise CommandError("--follow takes no --from, --until or --dry-run")
        config = single_set(config)
        with self._progress(options) as progress, interrupted_by_signals():
            return run_follow(config, notify=self.stdout.write, progress=progress)

    def _print(self, report: SyncReport) -> None:
        for warning in report.warnings:
            self.stderr.write(f"warning: {warning}")
        _write_capped(self.stderr.write, [f"FAILED {f.uri}: {f.reason}" for f in report.failures])
        _write_capped(
            self.stdout.write, [f"{d.action.value} {d.uri}: {d.reason}" for d in report.deferred]
        )
        if report.audit is not None:
            lines = [f"missing {uri}" for uri in report.audit.missing]
            lines += [f"extra {path}" for path in report.audit.extra]
            lines += [f"changed {d.uri}: {d.reason}" for d in report.audit.changed]
            _write_capped(self.stdout.write, lines)
        for folder, part in report.sets.items():
            self.stdout.write(f"{folder}: {part.summary()}")
        self.stdout.write(report.summary())


def _timestamp(value: str) -> dt.datetime:
    try:
        return parse_datetime(value)
    except ResourceSyncParseError as error:
        raise argparse.ArgumentTypeError(f"{error} (use e.g. 2024-05-01T00:00:00Z)") from error


def _write_capped(write: Any, lines: list[str]) -> None:
    for line in lines[:MAX_LISTED]:
        write(line)
    if len(lines) > MAX_LISTED:
        write(f"... and {len(lines) - MAX_LISTED} more")


def config_help() -> str:
    """The configuration keys, as the config module documents them."""
    doc = harvester_config.__doc__ or ""
    keys = doc[doc.index("::") + 2 : doc.index("Unknown keys")].rstrip()
    sample = Path(__file__).resolve().parents[3] / "harvest.example.yaml"
    return (
        f"configuration keys (a sample: {sample.name} in the repository):\n{keys}\n\n"
        "Unknown keys are errors, so a typo never silently falls back to a default."
    )
