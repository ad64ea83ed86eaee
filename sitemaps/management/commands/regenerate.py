"""Regenerate ResourceSync documents from the shell (or cron)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sitemaps.regeneration import regenerate
from sources.models import ResourceSet


class Command(BaseCommand):
    help = "Rewrite the changed pages of each set (every page with --full)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("sets", nargs="*", help="provider/set paths (default: all sets)")
        parser.add_argument("--full", action="store_true", help="rewrite every page")

    def handle(self, *args, sets: list[str], full: bool, **options) -> None:
        queryset = ResourceSet.objects.select_related("provider")
        selected = list(queryset)
        if sets:
            wanted = {tuple(path.split("/", 1)) for path in sets}
            selected = [s for s in selected if (s.provider.slug, s.slug) in wanted]
            if len(selected) != len(wanted):
                raise CommandError("Unknown resource set in " + ", ".join(sets))
        for resource_set in selected:
            report = regenerate(resource_set, full=full)
            message = "already running elsewhere" if report is None else str(report)
            self.stdout.write(f"{resource_set.path}: {message}")
