"""Regenerate ResourceSync documents from the shell (or cron)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from sitemaps.models import RegenerationState
from sitemaps.regeneration import regenerate
from sources.generators import get_generator
from sources.models import ResourceSet


class Command(BaseCommand):
    help = (
        "Rewrite the changed pages of each set (every page with --full). Exits non-zero "
        "when a set was not regenerated because a live run holds it, when the dumps "
        "it publishes could not be built (it says why), or when Elasticsearch (with its "
        "generator) does not answer."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("sets", nargs="*", help="provider/set paths (default: all sets)")
        parser.add_argument("--full", action="store_true", help="rewrite every page")

    def handle(self, *args, sets: list[str], full: bool, **options) -> None:
        selected = self.selected(sets)
        generator = get_generator()
        # Every page is built from the copy: with it down, say so once, not per retry.
        down = generator.unavailable()
        if down is not None:
            raise CommandError(
                f"{down}: no set was regenerated (their changes stay in the database); "
                "run this again once it answers."
            )
        busy, no_dumps = [], []
        for resource_set in selected:
            # The mirror first, as a new set's first run does: after an outage it takes
            # what it missed, and on a new cluster it creates the indices pages are read from.
            generator.index_pending(resource_set.pk)
            report = regenerate(resource_set, full=full)
            if report is None:
                busy.append(resource_set.path)
                self.stderr.write(f"{resource_set.path}: not regenerated: {held_by(resource_set)}")
                continue
            self.stdout.write(f"{resource_set.path}: {report}")
            if report.dumps is not None and report.dumps.problem:  # the report leaves it out
                no_dumps.append(resource_set.path)
                self.stderr.write(f"{resource_set.path}: {report.dumps}")
        if busy:
            raise CommandError(f"{len(busy)} set(s) not regenerated: {', '.join(busy)}")
        if no_dumps:
            raise CommandError(f"dumps not built for {len(no_dumps)} set(s): {', '.join(no_dumps)}")

    def selected(self, sets: list[str]) -> list[ResourceSet]:
        selected = list(ResourceSet.objects.select_related("provider"))
        if sets:
            wanted = {tuple(path.split("/", 1)) for path in sets}
            selected = [s for s in selected if (s.provider.slug, s.slug) in wanted]
            if len(selected) != len(wanted):
                raise CommandError("Unknown resource set in " + ", ".join(sets))
        return selected


def held_by(resource_set: ResourceSet) -> str:
    """Who holds the set, and since when it last showed life."""
    state = RegenerationState.objects.filter(resource_set=resource_set).first()
    if state is None or state.running_since is None:
        return "another run held it"
    seen = state.heartbeat_at or state.running_since
    ago = (timezone.now() - seen).total_seconds()
    return f"another run holds it ({state.holder or 'unknown'}, alive {ago:.0f} s ago)"
