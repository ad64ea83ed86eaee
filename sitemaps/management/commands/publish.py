"""Rebuild the published tree (sitemaps/publishing.py) from the database.

Regeneration and admin edits keep it current; run this after turning
RESOURCESYNC_PUBLISHED_DIR on for an existing data folder, or after moving it.
"""

from django.core.management.base import BaseCommand, CommandError

from sitemaps import publishing


class Command(BaseCommand):
    help = "Link every public document under RESOURCESYNC_PUBLISHED_DIR for the front server."

    def handle(self, *args, **options) -> None:
        root = publishing.published_root()
        if root is None:
            raise CommandError("RESOURCESYNC_PUBLISHED_DIR is empty: publishing files is off.")
        publishing.rebuild()
        self.stdout.write(f"Published tree rebuilt in {root}")
