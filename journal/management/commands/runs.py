"""`manage.py runs [--set PROVIDER/SET] [--kind KIND] [--limit N]`: the journal's newest runs."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from journal.models import Run, RunKind, run_counts
from journal.selectors import runs_recent
from sources.models import ResourceSet

#: A long error is cut to this in the listing; the admin shows it whole.
ERROR_WIDTH = 100


#: The most runs one listing shows (a limit past a database integer was an error).
MAX_LIMIT = 10_000


class Command(BaseCommand):
    help = (
        "Print the newest runs from the journal (regenerations, scans, exports, dumps, harvests)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--set", dest="set_path", metavar="PROVIDER/SET", help="one set only")
        parser.add_argument("--kind", choices=RunKind.values, help="one kind of run only")
        parser.add_argument("--limit", type=int, default=20, help="how many runs (default 20)")

    def handle(self, *args: Any, **options: Any) -> None:
        if not 1 <= options["limit"] <= MAX_LIMIT:
            raise CommandError(f"--limit must be between 1 and {MAX_LIMIT}")
        resource_set = _resource_set(options["set_path"]) if options["set_path"] else None
        runs = runs_recent(resource_set=resource_set, kind=options["kind"], limit=options["limit"])
        if not runs:
            self.stdout.write("No runs recorded.")
            return
        for run in runs:
            self.stdout.write(run_line(run))


def _resource_set(path: str) -> ResourceSet:
    provider, _, slug = path.partition("/")
    found = ResourceSet.objects.filter(provider__slug=provider, slug=slug).first()
    if found is None:
        raise CommandError(f"--set: no resource set {path!r} (write it as provider/set)")
    return found


def run_line(run: Run) -> str:
    """One line per run: when, what, how it ended, what it wrote, and why it failed."""
    took = f"{run.duration.total_seconds():.1f}s" if run.duration is not None else "-"
    line = (
        f"{run.started_at:%Y-%m-%d %H:%M:%S}  {run.kind:<12}  {run.target}  "
        f"{run.outcome}  {took}  {run_counts(run)}"
    )
    if run.error:
        error = " ".join(run.error.split())
        line += f"  error: {error[:ERROR_WIDTH]}{'…' if len(error) > ERROR_WIDTH else ''}"
    return line
