"""Resolve a set's stored URIs again after its url_prefix (or resource_root_dir) changed.

Ingestion stores each row's URI as `sources.locations` resolved it then, so
rows located by `rel_path` or `abs_path` (and links whose href is one) name
the old prefix until they are resolved again; `url` locations keep their URI
(older code stored them as posted: they are written in their URI form).
Resource keys do not change, so pages and packages keep their key ranges.

Resources are resolved again, and the changes of the open Change List; the
changes of closed lists keep the URIs they were published with. A closed
list is a record of what was published, and its Change Dump packages are
final ZIPs that no run rebuilds: re-resolving its rows would only make a
full run rewrite the list so that it disagrees with its own packages. (A
full run still rewrites closed lists from their rows, as always, so their
entries stay as published.) Changed Change rows, and the newest change of
each moved resource, are marked unindexed: the mirror re-indexes them and
the resources they touched before the Elasticsearch generator reads them.

`Resource.uri` is unique per set, and a moved URI may be another row's old
one (a prefix moved into its own subfolder): moving rows first take a
placeholder, then their new URI. Where a new URI is already another row's
(an explicit `url`, or a row ingested under the new prefix before this ran),
the row written last wins, as an event for that URI would have updated it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import CharField, Max, QuerySet, Value
from django.db.models.functions import Cast, Concat

from sitemaps.protocol.uris import loc_problem, uri_problem

from .locations import LocationError, resolve_location
from .models import Change, LocationType, Resource, ResourceSet
from .services import open_change_list_start, resource_set_lock

logger = logging.getLogger(__name__)

#: Rows read per query, and written per UPDATE.
BATCH_SIZE = 2000
WRITE_BATCH_SIZE = 500
#: What a moving resource is named between its two updates (never an http URL).
PLACEHOLDER = "re-resolving:"
#: Locations that no longer resolve are logged this many times per run, then only counted.
LOGGED_FAILURES = 10


@dataclass
class ReResolveReport:
    """What re-resolving a set changed."""

    resources: int = 0
    changes: int = 0
    #: Resources that left the snapshot: their new URI was another row's, written later.
    merged: int = 0
    #: Locations that no longer resolve (e.g. an abs_path outside a new root): left as they were.
    unresolvable: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.resources or self.changes or self.merged)

    def __str__(self) -> str:
        if not self.changed:
            text = "every stored URI is up to date"
        else:
            text = f"re-resolved {self.resources} resource(s) and {self.changes} change(s)"
            if self.merged:
                text += f"; {self.merged} resource(s) merged into the row holding their new URI"
        if self.unresolvable:
            text += (
                f"; {self.unresolvable} location(s) no longer resolve and were left as they were"
            )
        return text


class Resolver:
    """Resolves locations and links with a set's current url_prefix and resource_root_dir."""

    def __init__(self, resource_set: ResourceSet) -> None:
        self.url_prefix = resource_set.url_prefix
        self.root = resource_set.resource_root_dir
        self.unresolvable = 0

    def uri(self, location_type: str, value: str, *, link: bool = False) -> str | None:
        """The location's URI now; None for one that no longer resolves, or resolves to
        what ingestion would refuse in its place (a `<loc>`, a link's `href`). Every type:
        a `url` does not depend on the prefix, but one stored as posted by older code (a
        raw IRI, lower-case escapes) is written in its URI form."""
        # A rel_path's URI never depends on the root (it is only checked against it at ingest).
        root = self.root if location_type == LocationType.ABS_PATH else ""
        try:
            uri = resolve_location(
                location_type, value, url_prefix=self.url_prefix, resource_root_dir=root
            )
            problem = (uri_problem if link else loc_problem)(uri)
            if problem is not None:
                raise LocationError(f"resolves to {uri!r}, which {problem}")
        except LocationError as error:
            self.unresolvable += 1
            if self.unresolvable <= LOGGED_FAILURES:
                logger.warning("Left as it was: %s %r %s", location_type, value, error)
            return None
        return uri

    def moved(self, location_type: str, value: str, uri: str, *, link: bool = False) -> str | None:
        """The new URI when it differs from `uri`, else None."""
        new = self.uri(location_type, value, link=link)
        return new if new is not None and new != uri else None

    def links(self, ln: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """The links with their hrefs resolved again, or None when none moved."""
        result, moved = [], False
        for link in ln:
            href = link.get("href") or {}
            new = self.moved(
                href.get("type", ""), href.get("value", ""), link.get("uri", ""), link=True
            )
            if new is not None:
                link, moved = {**link, "uri": new}, True
            result.append(link)
        return result if moved else None


def re_resolve_uris(*, resource_set: ResourceSet) -> ReResolveReport:
    """Resolve the set's stored URIs with its current url_prefix; one transaction.

    It holds the set's lock, so no event is applied meanwhile (ingestion
    refuses events resolved with the settings it replaced: `LocationsChanged`).
    """
    with transaction.atomic():
        resource_set_lock(resource_set=resource_set)
        current = ResourceSet.objects.only("url_prefix", "resource_root_dir").get(
            pk=resource_set.pk
        )
        resolver = Resolver(current)
        report = ReResolveReport()
        _move_resources(resource_set, resolver, report)
        open_changes = Change.objects.filter(resource_set=resource_set)
        if (start := open_change_list_start(resource_set=resource_set)) is not None:
            open_changes = open_changes.filter(datetime__gte=start)
        _move_changes(open_changes, resolver, report)
    report.unresolvable = resolver.unresolvable
    if report.changed:
        logger.info("%s now under %s: %s", resource_set, current.url_prefix, report)
    return report


def _batches(rows: QuerySet[Any], *fields: str) -> Iterator[list[tuple[Any, ...]]]:
    """The rows' `fields` (pk first) in pk order, BATCH_SIZE at a time (keyset)."""
    last = 0
    while batch := list(
        rows.filter(pk__gt=last).order_by("pk").values_list("pk", *fields)[:BATCH_SIZE]
    ):
        yield batch
        last = batch[-1][0]


# Resources: placeholders first, then the new URIs.

RESOURCE_FIELDS = ("location_type", "location_value", "uri", "ln")


def _move_resources(resource_set: ResourceSet, resolver: Resolver, report: ReResolveReport) -> None:
    rows = Resource.objects.filter(resource_set=resource_set)
    for batch in _batches(rows, *RESOURCE_FIELDS):
        moving, relinked = [], []
        for pk, location_type, value, uri, ln in batch:
            if resolver.moved(location_type, value, uri) is not None:
                moving.append(pk)
            elif (links := resolver.links(ln)) is not None:
                relinked.append(Resource(pk=pk, ln=links))
        placeholder = Concat(Value(PLACEHOLDER), Cast("pk", CharField()))
        Resource.objects.filter(pk__in=moving).update(uri=placeholder)
        Resource.objects.bulk_update(relinked, ["ln"], batch_size=WRITE_BATCH_SIZE)
        report.resources += len(relinked)
    placeholders = rows.filter(uri__startswith=PLACEHOLDER)
    for batch in _batches(placeholders, *RESOURCE_FIELDS, "timestamp"):
        _settle(resource_set, resolver, batch, report)
    if report.resources:
        _mark_for_mirror(resource_set)


def _settle(
    resource_set: ResourceSet,
    resolver: Resolver,
    batch: list[tuple[Any, ...]],
    report: ReResolveReport,
) -> None:
    """Give placeholder rows their new URIs; where one is taken, the row written last keeps it."""
    wanted = {row[0]: resolver.uri(row[1], row[2]) or "" for row in batch}
    holders = Resource.objects.filter(resource_set=resource_set, uri__in=set(wanted.values()))
    claims: dict[str, tuple[datetime, int]] = {
        uri: (timestamp, pk) for uri, timestamp, pk in holders.values_list("uri", "timestamp", "pk")
    }
    settled: dict[int, Resource] = {}
    losers: list[int] = []
    for pk, _type, _value, _uri, ln, timestamp in batch:
        uri, mine = wanted[pk], (timestamp, pk)
        holder = claims.get(uri)
        if holder is not None and holder > mine:
            losers.append(pk)
            continue
        if holder is not None:
            losers.append(holder[1])
            settled.pop(holder[1], None)
        claims[uri] = mine
        settled[pk] = Resource(pk=pk, uri=uri, ln=resolver.links(ln) or ln)
    _drop(resource_set, losers, report)
    Resource.objects.bulk_update(settled.values(), ["uri", "ln"], batch_size=WRITE_BATCH_SIZE)
    report.resources += len(settled)


def _mark_for_mirror(resource_set: ResourceSet) -> None:
    """Mark each resource's newest change unindexed: indexing it mirrors the resource anew
    (its change may lie in a closed list, whose rows are not resolved again). One
    statement for the whole set: a moved prefix moves nearly every resource."""
    present = Resource.objects.filter(resource_set=resource_set).values("pk")
    changes = Change.objects.filter(resource_set=resource_set, resource_key__in=present)
    newest = changes.values("resource_key").annotate(newest=Max("pk")).values("newest")
    Change.objects.filter(pk__in=newest).update(indexed=False)


def _drop(resource_set: ResourceSet, keys: list[int], report: ReResolveReport) -> None:
    """Resources whose URI another row now holds leave the snapshot (and, once their
    changes are indexed again, the mirror)."""
    if not keys:
        return
    logger.warning(
        "%s: %d resource(s) merged into rows holding their new URI", resource_set, len(keys)
    )
    Resource.objects.filter(pk__in=keys).delete()
    Change.objects.filter(resource_set=resource_set, resource_key__in=keys).update(indexed=False)
    report.merged += len(keys)


# Changes of the open Change List: no unique URI, one pass.


def _move_changes(rows: QuerySet[Change], resolver: Resolver, report: ReResolveReport) -> None:
    for batch in _batches(rows, *RESOURCE_FIELDS):
        moved = []
        for pk, location_type, value, uri, ln in batch:
            new_uri = resolver.moved(location_type, value, uri)
            links = resolver.links(ln)
            if new_uri is not None or links is not None:
                moved.append(Change(pk=pk, uri=new_uri or uri, ln=links or ln, indexed=False))
        Change.objects.bulk_update(moved, ["uri", "ln", "indexed"], batch_size=WRITE_BATCH_SIZE)
        report.changes += len(moved)
