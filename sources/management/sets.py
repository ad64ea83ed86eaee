"""The `<provider>/<set>` argument of management commands."""

from __future__ import annotations

from django.core.management.base import CommandError

from sources.models import ResourceSet


def resource_set_from_path(path: str) -> ResourceSet:
    """The set a `provider/set` path names, or a CommandError saying what is wrong."""
    provider, separator, slug = path.partition("/")
    if not separator or not provider or not slug or "/" in slug:
        raise CommandError(f"{path!r}: name the set as <provider>/<set>")
    resource_set = (
        ResourceSet.objects.select_related("provider", "capability_settings")
        .filter(provider__slug=provider, slug=slug)
        .first()
    )
    if resource_set is None:
        raise CommandError(f"no resource set {path}")
    return resource_set
