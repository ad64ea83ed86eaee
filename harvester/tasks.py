"""Celery task: the `harvest` command for workers and beat schedules.

Safe to run twice: copies that are already right are skipped, and the state
file's lock keeps two runs off one destination.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from harvester.config import load_config
from harvester.sync import Mode, run_harvest
from sitemaps.protocol.reader import parse_datetime


class HarvestIncomplete(Exception):
    """The run finished with failures (or an audit found differences)."""


@shared_task(name="harvester.tasks.harvest")
def harvest(
    config_path: str,
    mode: str | None = None,
    range_from: str | None = None,
    range_until: str | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Run one harvest from a config file; returns the report as a dict."""
    config = load_config(config_path)
    report = run_harvest(
        config,
        Mode(mode) if mode else None,
        range_from=parse_datetime(range_from) if range_from else None,
        range_until=parse_datetime(range_until) if range_until else None,
        dry_run=dry_run,
    )
    if not report.ok:
        raise HarvestIncomplete(report.summary())
    return report.as_dict()
