"""Export a set as a static copy: a folder for any web server, or a ZIP (seed 004 "ISend")."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sitemaps.export import ExportError, export_set
from sitemaps.export_targets import DirectoryTarget, ExportTarget, ZipTarget
from sources.locations import LocationError, check_url
from sources.management.sets import resource_set_from_path


class Command(BaseCommand):
    help = (
        "Write a set's Source Description, Capability List, lists, indexes and dumps (and with "
        "--with-resources its files) with every URL under --base-url, to a folder (incremental: "
        "only changed files are written) or a ZIP."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("set", help="provider/set")
        where = parser.add_mutually_exclusive_group(required=True)
        where.add_argument("--to", type=Path, metavar="DIR", help="folder a web server serves")
        where.add_argument("--zip", type=Path, metavar="FILE", help="one ZIP file")
        parser.add_argument(
            "--base-url",
            metavar="URL",
            help="where the copy will be served (default: PUBLIC_BASE_URL)",
        )
        parser.add_argument(
            "--with-resources",
            action="store_true",
            help="copy the files from the set's resource_root_dir and point the <loc>s at them",
        )

    def handle(self, *args, **options) -> None:
        resource_set = resource_set_from_path(options["set"])
        base_url = options["base_url"] or settings.PUBLIC_BASE_URL
        try:
            check_url(base_url)
        except LocationError as error:
            raise CommandError(f"--base-url {error}") from None
        if options["to"] and options["to"].exists() and not options["to"].is_dir():
            raise CommandError(f"--to: {options['to']} is not a folder")
        if options["zip"] and options["zip"].is_dir():
            raise CommandError(f"--zip: {options['zip']} is a folder")
        target: ExportTarget = (
            DirectoryTarget(options["to"]) if options["to"] else ZipTarget(options["zip"])
        )
        try:
            report = export_set(
                resource_set,
                target,
                base_url=base_url,
                with_resources=options["with_resources"],
            )
        except ExportError as error:
            raise CommandError(str(error)) from None
        except OSError as error:  # a full or read-only destination: nothing half-written is left
            raise CommandError(f"the export stopped: {error}") from error
        for line in report.skipped:
            self.stderr.write(f"skipped {line}")
        self.stdout.write(f"{resource_set.path}: {report}")
