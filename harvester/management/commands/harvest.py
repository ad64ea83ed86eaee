"""`manage.py harvest CONFIG [--baseline|--incremental|--audit] [--from T] [--until T] [--dry-run]`.

Without a mode flag the run is incremental once a baseline has succeeded,
else a baseline. Exits non-zero when anything failed or an audit differs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from harvester.config import ConfigError, HarvestConfig, load_config
from harvester.follow import run_follow, single_set
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

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("config", help="the harvester's YAML configuration file")
        modes = parser.add_mutually_exclusive_group()
        modes.add_argument(
            "--baseline",
            action="store_const",
            dest="mode",
            const=Mode.BASELINE,
            help="copy everything (from the Resource Dump if any, else the Resource List)",
        )
        modes.add_argument(
            "--incremental",
            action="store_const",
            dest="mode",
            const=Mode.INCREMENTAL,
            help="apply changes (from the Change Dump if any, else the Change List)",
        )
        modes.add_argument(
            "--audit",
            action="store_const",
            dest="mode",
            const=Mode.AUDIT,
            help="compare the destination with the Resource List; change nothing",
        )
        modes.add_argument(
            "--follow",
            action="store_const",
            dest="mode",
            const="follow",
            help="catch up, then apply change notifications as they arrive (WebSub) until Ctrl-C",
        )
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

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config = load_config(options["config"])
            if options["mode"] == "follow":
                report = self._follow(config, options)
            else:
                report = self._harvest(config, options)
        except (ConfigError, HarvestError, StateError, OSError) as error:
            raise CommandError(str(error)) from error
        self._print(report)
        if report.failures:
            raise CommandError(f"{report.failed} failed; see the list above")
        if report.audit is not None and not report.audit.in_sync:
            raise CommandError("the destination differs from the source")

    def _harvest(self, config: HarvestConfig, options: dict[str, Any]) -> SyncReport:
        with TqdmProgress() as progress:
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
        with TqdmProgress() as progress:
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


class TqdmProgress:
    """A tqdm bar per phase on stderr; silent when stderr is not a terminal."""

    def __init__(self) -> None:
        self._bar: tqdm[Any] | None = None

    def __enter__(self) -> TqdmProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._close()

    def start(self, label: str, total: int) -> None:
        """Replace the bar with one for the new phase."""
        self._close()
        self._bar = tqdm(total=total, desc=label, unit="item", file=sys.stderr, disable=None)

    def advance(self, count: int = 1) -> None:
        """Move the bar on."""
        if self._bar is not None:
            self._bar.update(count)

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


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
