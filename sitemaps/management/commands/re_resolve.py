"""Resolve sets' stored URIs again with their url_prefix, and rewrite what moved."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from sitemaps.tasks import re_resolve_and_regenerate
from sources.models import ResourceSet

from .regenerate import Command as RegenerateCommand
from .regenerate import held_by


class Command(BaseCommand):
    help = (
        "Resolve the stored URIs of rel_path and abs_path locations (and links) again with "
        "each set's url_prefix and resource_root_dir, and rewrite every document of the sets "
        "whose URIs moved. Saving a set does this by itself; run it after changing sets "
        "without saving them (a bulk UPDATE), with --regenerate when the rewrite after a "
        "save failed, or with --from-base-url after PUBLIC_BASE_URL changed. Exits non-zero "
        "when a live run holds a set."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("sets", nargs="*", help="provider/set paths (default: all sets)")
        parser.add_argument(
            "--regenerate",
            action="store_true",
            help="rewrite every document even when no URI moved",
        )
        parser.add_argument(
            "--from-base-url",
            metavar="URL",
            help="the PUBLIC_BASE_URL the documents were written with: a url_prefix under it "
            "moves under the current PUBLIC_BASE_URL, and every document is rewritten (their "
            "links name it too)",
        )

    def handle(self, *args, sets: list[str], regenerate: bool, **options) -> None:
        old_base = (options["from_base_url"] or "").rstrip("/")
        busy = []
        for resource_set in RegenerateCommand().selected(sets):
            if old_base:
                self.move_under_public_base_url(resource_set, old_base)
            outcome = re_resolve_and_regenerate(
                resource_set, regenerate_anyway=regenerate or bool(old_base)
            )
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

    def move_under_public_base_url(self, resource_set: ResourceSet, old_base: str) -> None:
        """A url_prefix under `old_base` takes the current PUBLIC_BASE_URL instead (no
        save signal: this command re-resolves and rewrites the set itself)."""
        already = resource_set.url_prefix.startswith(settings.PUBLIC_BASE_URL + "/")
        if already or not resource_set.url_prefix.startswith(old_base + "/"):
            return  # under the new base already (it may lie under the old one too)
        new_prefix = settings.PUBLIC_BASE_URL + resource_set.url_prefix[len(old_base) :]
        ResourceSet.objects.filter(pk=resource_set.pk).update(url_prefix=new_prefix)
        self.stdout.write(
            f"{resource_set.path}: url_prefix {resource_set.url_prefix} -> {new_prefix}"
        )
        resource_set.url_prefix = new_prefix
