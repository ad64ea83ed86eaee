"""Resolve sets' stored URIs again with their url_prefix, and rewrite what moved."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sitemaps.tasks import re_resolve_and_regenerate

from .regenerate import Command as RegenerateCommand
from .regenerate import held_by


class Command(BaseCommand):
    help = (
        "Resolve the stored URIs of rel_path and abs_path locations (and links) again with "
        "each set's url_prefix and resource_root_dir, and rewrite every document of the sets "
        "whose URIs moved. Saving a set does this by itself; run it after changing sets "
        "without saving them (a bulk UPDATE), or with --regenerate when the rewrite after a "
        "save failed. Exits non-zero when a live run holds a set."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("sets", nargs="*", help="provider/set paths (default: all sets)")
        parser.add_argument(
            "--regenerate",
            action="store_true",
            help="rewrite every document even when no URI moved",
        )

    def handle(self, *args, sets: list[str], regenerate: bool, **options) -> None:
        busy = []
        for resource_set in RegenerateCommand().selected(sets):
            outcome = re_resolve_and_regenerate(resource_set, regenerate_anyway=regenerate)
            if outcome is None:
                busy.append(resource_set.path)
                self.stderr.write(f"{resource_set.path}: not regenerated: {held_by(resource_set)}")
                continue
            self.stdout.write(f"{resource_set.path}: {outcome}")
        if busy:
            raise CommandError(
                f"{len(busy)} set(s) not regenerated: {', '.join(busy)}; "
                "run this again with --regenerate"
            )
