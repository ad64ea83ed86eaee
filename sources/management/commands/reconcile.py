"""Bring the generator's copy (the Elasticsearch indices) back in line with the database."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from sources.generators import get_generator
from sources.models import ResourceSet


class Command(BaseCommand):
    help = "Index every unindexed change and fix missing or stale documents; report what changed."

    def add_arguments(self, parser) -> None:
        parser.add_argument("sets", nargs="*", help="provider/set paths (default: all sets)")
        parser.add_argument(
            "--rebuild",
            action="store_true",
            help="first rebuild the copy with the current mappings (after an upgrade that "
            "changes them), swapping the new indices in without downtime",
        )

    def handle(self, *args, sets: list[str], rebuild: bool, **options) -> None:
        if rebuild:
            if sets:
                raise CommandError("--rebuild rebuilds every set's copy; name no set.")
            self.stdout.write(f"Rebuilt: {get_generator().rebuild()}")
        selected = None
        if sets:
            selected = []
            for path in sets:
                provider, _, slug = path.partition("/")
                found = ResourceSet.objects.filter(provider__slug=provider, slug=slug).first()
                if found is None:
                    raise CommandError(f"Unknown resource set {path!r}.")
                selected.append(found)
        report = get_generator().reconcile(selected)
        self.stdout.write(f"Reconciled {len(report.sets)} set(s): {report}")
