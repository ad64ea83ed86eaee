"""Scan a set's folder into its change log: `manage.py scan <provider>/<set> [--watch]`."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sources.management.sets import resource_set_from_path
from sources.scanning import ScanError, ScanReport
from sources.watching import FolderWatch

#: The longest --interval: a day (1e308 was an OverflowError in the timer).
MAX_INTERVAL = 86400


class Command(BaseCommand):
    help = (
        "Compare the set's resource_root_dir with its resources and record what was created, "
        "updated or deleted, as the API would. --watch keeps following the folder."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("set", help="provider/set")
        parser.add_argument(
            "--watch", action="store_true", help="rescan on every change (inotify) until stopped"
        )
        parser.add_argument(
            "--interval",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="with --watch: rescan at least this often (the only trigger without inotify)",
        )

    def handle(self, *args, **options) -> None:
        resource_set = resource_set_from_path(options["set"])
        self.resource_set_path = resource_set.path
        if not 0 < options["interval"] <= MAX_INTERVAL:  # also refuses nan
            raise CommandError(f"--interval must be between 0 and {MAX_INTERVAL} seconds")
        watch = FolderWatch(resource_set, interval=options["interval"], on_scan=self.show)
        try:
            if options["watch"]:
                watch.run()
            else:
                watch.scan()
        except ScanError as error:
            raise CommandError(str(error)) from None
        except KeyboardInterrupt:
            watch.stop()

    def show(self, report: ScanReport) -> None:
        for item in report.skipped:
            self.stderr.write(f"skipped {item.rel_path}: {item.reason}")
        self.stdout.write(f"{self.resource_set_path}: {report}")
