"""Reads: resource sets, the current state of a resource, and pages of the change log."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet

from .models import ApiToken, Change, Resource, ResourceSet


def resource_set_get(*, provider_slug: str, set_slug: str) -> ResourceSet | None:
    """A set of an active provider; sets of inactive providers do not exist to the API."""
    return (
        ResourceSet.objects.select_related("provider")
        .filter(provider__slug=provider_slug, provider__active=True, slug=set_slug)
        .first()
    )


def resource_sets_visible_to(*, token: ApiToken) -> QuerySet[ResourceSet]:
    """The sets a token reaches: its provider's, or every set for a staff token."""
    sets = ResourceSet.objects.select_related("provider").filter(provider__active=True)
    if token.revoked:
        return sets.none()
    if token.is_staff:
        return sets
    if token.provider_id is None:
        return sets.none()
    return sets.filter(provider_id=token.provider_id)


def resource_get(*, resource_set: ResourceSet, location: str) -> Resource | None:
    """The resource whose resolved URI or posted location value is `location`.

    The URI is unique within a set; a location value may not be (the same
    path posted as rel_path and as url), so the most recently written wins.
    """
    resources = Resource.objects.filter(resource_set=resource_set)
    return resources.filter(uri=location).first() or (
        resources.filter(location_value=location).order_by("-timestamp", "-id").first()
    )


def resource_get_by_uri(*, resource_set: ResourceSet, uri: str) -> Resource | None:
    """The resource whose resolved URI (its `<loc>`) is exactly `uri`."""
    return Resource.objects.filter(resource_set=resource_set, uri=uri).first()


@dataclass(frozen=True, slots=True)
class ChangePage:
    """Changes in (datetime, id) order; `after` is the key to continue from, if more exist."""

    changes: list[Change]
    after: tuple[datetime, int] | None


def change_page(
    *,
    resource_set: ResourceSet,
    since: datetime | None = None,
    until: datetime | None = None,
    after: tuple[datetime, int] | None = None,
    limit: int,
) -> ChangePage:
    """One keyset page of the change log, `since` <= datetime <= `until`."""
    changes = Change.objects.filter(resource_set=resource_set)
    if since is not None:
        changes = changes.filter(datetime__gte=since)
    if until is not None:
        changes = changes.filter(datetime__lte=until)
    if after is not None:
        moment, key = after
        changes = changes.filter(Q(datetime__gt=moment) | Q(datetime=moment, id__gt=key))
    rows = list(changes.order_by("datetime", "id")[: limit + 1])
    if len(rows) > limit:
        rows = rows[:limit]
        return ChangePage(changes=rows, after=(rows[-1].datetime, rows[-1].pk))
    return ChangePage(changes=rows, after=None)
