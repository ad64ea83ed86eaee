"""Delete stored document files no row needs any more (sitemaps/cleanup.py).

Beat runs the same every five minutes; this is for a shell, cron, or to see
what a killed run left.
"""

from __future__ import annotations

from django.core.management.base import BaseCommand

from sitemaps.cleanup import grace_period, remove_unreferenced


class Command(BaseCommand):
    help = (
        "Remove superseded document versions and files left by killed runs, "
        "once older than RESOURCESYNC_SUPERSEDED_GRACE_SECONDS."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="only list what would go")

    def handle(self, *args, dry_run: bool, **options) -> None:
        removed = remove_unreferenced(dry_run=dry_run)
        verb = "Would remove" if dry_run else "Removed"
        seconds = int(grace_period().total_seconds())
        self.stdout.write(
            f"{verb} {len(removed)} file(s) no document needs, older than {seconds}s."
        )
        for name in removed:
            self.stdout.write(f"  {name}")
