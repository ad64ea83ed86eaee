"""Check a ResourceSync source, ours or anyone's, against the 1.1 spec and its schemas.

A thin wrapper around the `validator` package, which needs no database:
it prints one `URL: problem` line per problem and a summary, and exits 1
when there was any problem.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from validator import Report, validate_source
from validator.authority import is_absolute_http


class Command(BaseCommand):
    help = (
        "Crawl a source from its Source Description or Capability List URL and check every "
        "document it reaches; exit 1 on any problem."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "url", help="Source Description or Capability List URL, or a web page leading to one"
        )
        parser.add_argument("--token", help="sent as 'Authorization: Bearer <token>'")
        parser.add_argument(
            "--allow-host",
            action="append",
            default=[],
            metavar="HOST",
            help="also accept resources on this host (an aggregator's origins); repeatable",
        )
        parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")

    def handle(self, *args, **options) -> None:
        url = options["url"]
        if not is_absolute_http(url):
            raise CommandError(
                f"{url!r} is not an http:// or https:// URL: sources are checked over HTTP "
                "(to check files, serve their folder, e.g. with python3 -m http.server)"
            )
        report = Report(emit=self.stdout.write)
        validate_source(
            url,
            token=options["token"],
            extra_hosts=tuple(options["allow_host"]),
            report=report,
            timeout=options["timeout"],
        )
        self.stdout.write(report.summary())
        if not report.ok:
            raise CommandError(f"{len(report.problems)} problem(s) found", returncode=1)
